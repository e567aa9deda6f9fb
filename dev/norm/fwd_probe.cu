// dev/norm/fwd_probe.cu — where the forward norms' time goes on the bench shapes (GPU).
//
// For rms_norm / layer_norm / softmax, bf16, on the five shapes of issue 7, each timed three ways
// on inputs rotating through > 2× the L2 (as `sixfold bench norm`):
//   call   CUDA events around one call from the host (what the CLI bench reports): kernel time
//          plus whatever of the host's call and launch the idle GPU waits for;
//   graph  20 calls captured in one CUDA graph, replayed, time per call: back-to-back kernels,
//          no host in between (BENCH.md method 3);
//   copy   cudaMemcpyAsync of the same bytes (read n·rows, write n·rows), per call and in a graph.
// plus a 1 GiB device copy (the ceiling) and an empty kernel per call. SIXFOLD_NORM_FWD passes
// through to the library (its dev switches). Not part of the build: compiled by hand against a
// build's libsixfold.a (dev/norm/gpu_fwd.sh):
//   nvcc -std=c++20 -O2 -arch=sm_90a -Iinclude dev/norm/fwd_probe.cu BUILD/libsixfold.a -lcublas -lgomp
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "probe_common.cuh"
#include "sixfold/ops/norm.hpp"
#include "sixfold/runtime/tensor.hpp"

using namespace sixfold;

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__global__ void empty_kernel() {}

// ---- Experiment (session 13): rows staged by the bulk-copy engine (cp.async.bulk, "TMA") ----
// A persistent grid; each block takes rows blockIdx.x, +gridDim.x, …; thread 0 keeps `Stages`
// rows in flight into shared memory (an mbarrier each, complete_tx), the block folds Σx² from
// shared memory, rewrites the row in place (bf16), and thread 0 writes it back with a bulk store
// (cp.async.bulk.global.shared::cta). Compute = false: the same pipeline without the norm (the
// bulk engine's copy rate). Weight: bf16, kept in registers.
__device__ __forceinline__ unsigned saddr(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }

template <int N, int Threads, int Stages, bool Compute>
__global__ void __launch_bounds__(Threads) rms_tma(const std::uint16_t* x, const std::uint16_t* w,
                                                   std::uint16_t* y, std::int64_t rows, float eps) {
  constexpr int E = N / Threads, P = E / 8;
  constexpr unsigned kRowBytes = N * 2;
  extern __shared__ __align__(128) unsigned char stage_mem[];
  __shared__ __align__(8) std::uint64_t full[Stages];
  __shared__ float red[2][Threads / 32];
  const int t = threadIdx.x;
  const std::int64_t first = blockIdx.x, step = gridDim.x;
  const std::int64_t mine = first < rows ? (rows - first + step - 1) / step : 0;
  float wv[E];
  if constexpr (Compute) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const uint4 q = reinterpret_cast<const uint4*>(w)[p * Threads + t];
      const unsigned u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        wv[p * 8 + 2 * h] = __uint_as_float(u[h] << 16);
        wv[p * 8 + 2 * h + 1] = __uint_as_float(u[h] & 0xffff0000u);
      }
    }
  }
  if (t == 0) {
    for (int s = 0; s < Stages; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(&full[s])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const auto issue = [&](std::int64_t k) {
    const int s = int(k % Stages);
    const unsigned bar = saddr(&full[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(kRowBytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     saddr(stage_mem + s * kRowBytes)),
                 "l"(x + (first + k * step) * N), "r"(kRowBytes), "r"(bar)
                 : "memory");
  };
  if (t == 0)
    for (std::int64_t k = 0; k < mine && k < Stages; ++k) issue(k);
  for (std::int64_t k = 0; k < mine; ++k) {
    const int s = int(k % Stages);
    const unsigned parity = unsigned(k / Stages) & 1u;
    unsigned done = 0;
    while (!done)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done)
                   : "r"(saddr(&full[s])), "r"(parity)
                   : "memory");
    uint4* row = reinterpret_cast<uint4*>(stage_mem + s * kRowBytes);
    if constexpr (Compute) {
      float v[E];
      float ss = 0.f;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const uint4 q = row[p * Threads + t];
        const unsigned u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          v[p * 8 + 2 * h] = __uint_as_float(u[h] << 16);
          v[p * 8 + 2 * h + 1] = __uint_as_float(u[h] & 0xffff0000u);
        }
      }
#pragma unroll
      for (int e = 0; e < E; ++e) ss = fmaf(v[e], v[e], ss);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      if ((t & 31) == 0) red[k & 1][t >> 5] = ss;
      __syncthreads();
      float tot = 0.f;
#pragma unroll
      for (int i = 0; i < Threads / 32; ++i) tot += red[k & 1][i];
      const float r = rsqrtf(fmaf(tot, 1.0f / float(N), eps));
#pragma unroll
      for (int p = 0; p < P; ++p) {
        unsigned u[4];
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const __nv_bfloat162 b2 = __floats2bfloat162_rn(v[p * 8 + 2 * h] * r * wv[p * 8 + 2 * h],
                                                          v[p * 8 + 2 * h + 1] * r * wv[p * 8 + 2 * h + 1]);
          u[h] = *reinterpret_cast<const unsigned*>(&b2);
        }
        row[p * Threads + t] = make_uint4(u[0], u[1], u[2], u[3]);
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncthreads();
    }
    if (t == 0) {
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(y + (first + k * step) * N),
                   "r"(saddr(row)), "r"(kRowBytes)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      // The stage of row k − 1 takes row k − 1 + Stages once its store has read it.
      if (k >= 1 && k - 1 + Stages < mine) {
        asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        issue(k - 1 + Stages);
      }
    }
  }
  if (t == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Grid for a persistent kernel: blocks per SM (occupancy) × SMs, at most `rows`.
template <class K>
int persistent_grid(K kernel, int threads, std::size_t smem, std::int64_t rows) {
  cuda_ok(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)), "smem attr");
  int per_sm = 0, sms = 0;
  cuda_ok(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem), "occupancy");
  cuda_ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sms");
  return int(std::min<std::int64_t>(rows, std::int64_t(std::max(per_sm, 1)) * sms));
}

template <int N, int Stages, bool Compute>
void launch_tma(const void* x, const void* w, void* y, std::int64_t rows, cudaStream_t st) {
  constexpr int kThreads = 256;
  const std::size_t smem = std::size_t(Stages) * N * 2;
  static const int grid = persistent_grid(rms_tma<N, kThreads, Stages, Compute>, kThreads, smem, rows);
  rms_tma<N, kThreads, Stages, Compute><<<grid, kThreads, smem, st>>>(
      static_cast<const std::uint16_t*>(x), static_cast<const std::uint16_t*>(w), static_cast<std::uint16_t*>(y),
      rows, 1e-5f);
}

// rms_tma for rows of n (4096 or 8192; else false).
bool tma_rows(int variant, std::int64_t n, const void* x, const void* w, void* y, std::int64_t rows,
              cudaStream_t st) {
  if (n == 8192) {
    if (variant == 0) launch_tma<8192, 2, true>(x, w, y, rows, st);
    else if (variant == 1) launch_tma<8192, 4, true>(x, w, y, rows, st);
    else launch_tma<8192, 4, false>(x, w, y, rows, st);
    return true;
  }
  if (n == 4096) {
    if (variant == 0) launch_tma<4096, 2, true>(x, w, y, rows, st);
    else if (variant == 1) launch_tma<4096, 4, true>(x, w, y, rows, st);
    else launch_tma<4096, 4, false>(x, w, y, rows, st);
    return true;
  }
  return false;
}

}  // namespace

int main() {
  cudaStream_t st;
  cuda_ok(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  const Stream stream{st};
  // The ceiling: 1 GiB device copy (read + write counted).
  const std::size_t big = std::size_t(1) << 30;
  void *p, *q;
  cuda_ok(cudaMalloc(&p, big), "malloc");
  cuda_ok(cudaMalloc(&q, big), "malloc");
  cuda_ok(cudaMemset(p, 1, big), "memset");
  const double big_us =
      per_call_us([&](int) { cuda_ok(cudaMemcpyAsync(q, p, big, cudaMemcpyDeviceToDevice, st), "copy"); }, 10, st);
  const double ceil_gbps = 2.0 * double(big) / big_us / 1e3;
  cudaFree(p);
  cudaFree(q);
  const double empty = per_call_us([&](int) { empty_kernel<<<1, 32, 0, st>>>(); }, 200, st);
  std::printf("copy 1 GiB: %.1f us = %.0f GB/s (the ceiling); empty kernel per call: %.2f us\n",
              big_us, ceil_gbps, empty);
  std::printf("%% = floor (bytes / the 1 GiB copy's rate) over the time; copy_*: cudaMemcpyAsync of"
              " x's bytes (read + write = the forward's bytes)\n");
  std::printf("%-11s %-12s %9s %9s %9s %9s %7s %7s %7s\n", "op", "shape", "call_us", "graph_us",
              "copy_call", "copy_grph", "call%", "graph%", "copy%");

  struct Shape { std::int64_t rows, n; };
  const Shape shapes[] = {{16384, 8192}, {4096, 4096}, {65536, 1024}, {256, 262144}, {32, 1048576}};
  std::uint32_t seed = 7;
  for (const Shape sh : shapes) {
    const std::int64_t numel = sh.rows * sh.n;
    const std::size_t bytes = std::size_t(numel) * 2;
    const int slots = int(std::clamp<std::int64_t>((std::int64_t(120) << 20) / std::int64_t(2 * bytes) + 1, 1, 16));
    std::vector<void*> xs(static_cast<std::size_t>(slots));
    for (auto& x : xs) {
      cuda_ok(cudaMalloc(&x, bytes), "malloc");
      fill_random<<<1024, 256>>>(static_cast<std::uint16_t*>(x), numel, seed++);
    }
    void *res, *sum;  // the fused residual add: residual (one buffer) and its sum output
    cuda_ok(cudaMalloc(&res, bytes), "malloc");
    cuda_ok(cudaMalloc(&sum, bytes), "malloc");
    fill_random<<<1024, 256>>>(static_cast<std::uint16_t*>(res), numel, seed++);
    void *y, *w, *b;
    cuda_ok(cudaMalloc(&y, bytes), "malloc");
    cuda_ok(cudaMalloc(&w, std::size_t(sh.n) * 2), "malloc");
    cuda_ok(cudaMalloc(&b, std::size_t(sh.n) * 2), "malloc");
    std::vector<std::uint16_t> ones(std::size_t(sh.n), 0x3f80);
    cuda_ok(cudaMemcpy(w, ones.data(), std::size_t(sh.n) * 2, cudaMemcpyHostToDevice), "h2d");
    cuda_ok(cudaMemset(b, 0, std::size_t(sh.n) * 2), "memset");
    const Device dev = Device::cuda(0);
    const auto view = [&](void* ptr) { return TensorView::contiguous(ptr, DType::bf16, {sh.rows, sh.n}, dev); };
    const TensorView tw = TensorView::contiguous(w, DType::bf16, {sh.n}, dev);
    const TensorView tb = TensorView::contiguous(b, DType::bf16, {sh.n}, dev);
    const TensorView ty = view(y);
    char label[32];
    std::snprintf(label, sizeof label, "%lldx%lld", (long long)sh.rows, (long long)sh.n);
    const auto copy = [&](int i) {
      cuda_ok(cudaMemcpyAsync(y, xs[std::size_t(i % slots)], bytes, cudaMemcpyDeviceToDevice, st), "copy");
    };
    const double copy_call = per_call_us(copy, 40, st), copy_graph = graph_us(copy, 20, st);
    const char* names[] = {"rms_norm", "layer_norm", "softmax", "add_rms", "add_layer"};
    for (int k = 0; k < 5; ++k) {
      const auto op = [&](int i) {
        const TensorView tx = view(xs[std::size_t(i % slots)]);
        if (k == 0) rms_norm(tx, tw, ty, {1e-5f}, stream);
        else if (k == 1) layer_norm(tx, tw, tb, ty, {1e-5f}, stream);
        else if (k == 2) softmax(tx, ty, stream);
        else if (k == 3) add_rms_norm(tx, view(res), tw, ty, view(sum), {1e-5f}, stream);
        else add_layer_norm(tx, view(res), tw, tb, ty, view(sum), {1e-5f}, stream);
      };
      const double call = per_call_us(op, 40, st), graph = graph_us(op, 20, st);
      // bytes: read x, write y (the add: read x and residual, write y and sum)
      const double us_floor = (k < 3 ? 2.0 : 4.0) * double(bytes) / ceil_gbps / 1e3;
      std::printf("%-11s %-12s %9.2f %9.2f %9.2f %9.2f %7.1f %7.1f %7.1f\n", names[k], label, call,
                  graph, copy_call, copy_graph, 100 * us_floor / call, 100 * us_floor / graph,
                  100 * us_floor / copy_call);
    }
    // Session 13: the bulk-copy (TMA) rows against the library's rms_norm on the same inputs.
    if (std::getenv("PROBE_TMA")) {
      const double us_floor = 2.0 * double(bytes) / ceil_gbps / 1e3;
      const auto row = [&](const char* name, const std::function<void(int)>& op) {
        const double call = per_call_us(op, 40, st), graph = graph_us(op, 20, st);
        std::printf("%-11s %-12s %9.2f %9.2f %9.2f %9.2f %7.1f %7.1f %7.1f\n", name, label, call, graph,
                    copy_call, copy_graph, 100 * us_floor / call, 100 * us_floor / graph,
                    100 * us_floor / copy_call);
      };
      row("copy_ldg", [&](int i) {
        copy_ldg<<<132 * 8, 256, 0, st>>>(static_cast<const uint4*>(xs[std::size_t(i % slots)]),
                                         static_cast<uint4*>(y), std::int64_t(bytes / 16));
      });
      if (tma_rows(2, sh.n, xs[0], w, y, sh.rows, st)) {
        row("copy_tma4", [&](int i) { tma_rows(2, sh.n, xs[std::size_t(i % slots)], w, y, sh.rows, st); });
        row("rms_tma2", [&](int i) { tma_rows(0, sh.n, xs[std::size_t(i % slots)], w, y, sh.rows, st); });
        row("rms_tma4", [&](int i) { tma_rows(1, sh.n, xs[std::size_t(i % slots)], w, y, sh.rows, st); });
        row("rms_norm", [&](int i) { rms_norm(view(xs[std::size_t(i % slots)]), tw, ty, {1e-5f}, stream); });
        // Agreement with the library (w = 1): max |difference| over all elements, in bf16 ulps of 1.
        std::vector<std::uint16_t> a(static_cast<std::size_t>(numel)), b2(static_cast<std::size_t>(numel));
        for (int v = 0; v < 2; ++v) {
          rms_norm(view(xs[0]), tw, ty, {1e-5f}, stream);
          cuda_ok(cudaMemcpyAsync(a.data(), y, bytes, cudaMemcpyDeviceToHost, st), "d2h");
          tma_rows(v, sh.n, xs[0], w, y, sh.rows, st);
          cuda_ok(cudaMemcpyAsync(b2.data(), y, bytes, cudaMemcpyDeviceToHost, st), "d2h");
          cuda_ok(cudaStreamSynchronize(st), "sync");
          double worst = 0;
          for (std::size_t e = 0; e < a.size(); ++e) {
            const float fa = bf16_to_float(a[e]);
            const float fb = bf16_to_float(b2[e]);
            worst = std::max(worst, double(std::fabs(fa - fb)) / std::max(1.0, double(std::fabs(fa))));
          }
          std::printf("rms_tma%d %s: max |tma - rms_norm| / max(1, |y|) = %.3g (bf16 eps 0.0078)\n",
                      v ? 4 : 2, label, worst);
        }
      }
    }
    for (auto x : xs) cudaFree(x);
    cudaFree(res);
    cudaFree(sum);
    cudaFree(y);
    cudaFree(w);
    cudaFree(b);
  }
  cuda_ok(cudaGetLastError(), "last error");
  return 0;
}
