// GPU ceilings: device-to-device copy, f32 FMA rate, SFU exp rate and cuBLAS bf16 GEMM rate,
// each timed with CUDA events after a warm-up; the best of several repeats is the ceiling.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sixfold/parallel/cuda.cuh"
#include "sixfold/runtime/ceilings.hpp"

namespace sixfold {
namespace {

using parallel::cuda::check_cuda;
constexpr const char* kWhere = "sixfold::measure_gpu_ceilings";

// Milliseconds of the best of `reps` runs of f (after one warm-up).
template <class F>
float best_ms(int reps, F&& f) {
  cudaEvent_t a, b;
  check_cuda(cudaEventCreate(&a), kWhere);
  check_cuda(cudaEventCreate(&b), kWhere);
  f();
  float best = 1e30f;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a);
    f();
    cudaEventRecord(b);
    check_cuda(cudaEventSynchronize(b), kWhere);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    best = std::min(best, ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  check_cuda(cudaGetLastError(), kWhere);
  return best;
}

__global__ void fill_random(float* x, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    x[i] = float(h & 0xffffff) / float(0x1000000) - 0.5f;
  }
}

__global__ void fill_random_bf16(__nv_bfloat16* x, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    x[i] = __float2bfloat16(float(h & 0xffffff) / float(0x1000000) - 0.5f);
  }
}

__global__ void copy_float4(const float4* __restrict__ src, float4* __restrict__ dst, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

constexpr int kChains = 8;

__global__ void fma_loop(float* out, int iters) {
  float a[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) a[c] = float(threadIdx.x + c);
  const float m = 0.999999f, k = 1e-7f;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) a[c] = fmaf(a[c], m, k);
  }
  float s = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s += a[c];
  if (s == 42.0f) out[0] = s;
}

__global__ void exp_loop(float* out, int iters) {
  float a[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) a[c] = -float(threadIdx.x + c) * 1e-3f;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) a[c] = __expf(-a[c]);  // ex2.approx on the SFU
  }
  float s = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s += a[c];
  if (s == 42.0f) out[0] = s;
}

}  // namespace

GpuCeilings measure_gpu_ceilings(int device) {
  check_cuda(cudaSetDevice(device), kWhere);
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, device), kWhere);
  GpuCeilings c;
  c.name = prop.name;
  c.sms = prop.multiProcessorCount;

  {  // copy: 2 GiB each way, far beyond L2
    const std::size_t bytes = std::size_t(2) << 30;
    float *src = nullptr, *dst = nullptr;
    check_cuda(cudaMalloc(&src, bytes), kWhere);
    check_cuda(cudaMalloc(&dst, bytes), kWhere);
    fill_random<<<c.sms * 8, 256>>>(src, bytes / 4, 1u);
    const float memcpy_ms = best_ms(10, [&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice); });
    const float kernel_ms = best_ms(10, [&] {
      copy_float4<<<c.sms * 16, 512>>>(reinterpret_cast<const float4*>(src),
                                       reinterpret_cast<float4*>(dst), bytes / 16);
    });
    c.copy_gbps = 2.0 * double(bytes) / (std::min(memcpy_ms, kernel_ms) * 1e-3) / 1e9;
    cudaFree(src);
    cudaFree(dst);
  }
  float* sink = nullptr;
  check_cuda(cudaMalloc(&sink, 64), kWhere);
  {
    const int blocks = c.sms * 16, threads = 256, iters = 1 << 14;
    const float ms = best_ms(5, [&] { fma_loop<<<blocks, threads>>>(sink, iters); });
    c.fma_tflops = 2.0 * double(blocks) * threads * iters * kChains / (ms * 1e-3) / 1e12;
    const float ems = best_ms(5, [&] { exp_loop<<<blocks, threads>>>(sink, iters / 4); });
    c.exp_gops = double(blocks) * threads * (iters / 4) * kChains / (ems * 1e-3) / 1e9;
  }
  cudaFree(sink);
  {  // cuBLAS bf16 GEMM, 8192³, f32 accumulate, random data
    const int n = 8192;
    const std::size_t elems = std::size_t(n) * n;
    __nv_bfloat16 *a = nullptr, *b = nullptr, *d = nullptr;
    check_cuda(cudaMalloc(&a, elems * 2), kWhere);
    check_cuda(cudaMalloc(&b, elems * 2), kWhere);
    check_cuda(cudaMalloc(&d, elems * 2), kWhere);
    fill_random_bf16<<<c.sms * 8, 256>>>(a, elems, 2u);
    fill_random_bf16<<<c.sms * 8, 256>>>(b, elems, 3u);
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw_error(kWhere, "cublasCreate failed");
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    const float ms = best_ms(10, [&] {
      st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b,
                        CUDA_R_16BF, n, &beta, d, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT);
    });
    cublasDestroy(h);
    if (st != CUBLAS_STATUS_SUCCESS) throw_error(kWhere, "cublasGemmEx failed");
    c.bf16_gemm_tflops = 2.0 * double(n) * n * n / (ms * 1e-3) / 1e12;
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
  }
  return c;
}

}  // namespace sixfold
