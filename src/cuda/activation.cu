// src/cuda/activation.cu — bias+GELU (erf and tanh forms) and SiLU-gate on the GPU: each input
// read once, the output written once (locality), f32 arithmetic on f32/bf16/f16 data.
//
// Blocks of kThreads threads are (tx, ty): tx threads cover a row's chunk of tx·V elements, ty
// rows share the block, so short rows still fill it (65536×1024 bf16: 8 rows per block). Grid x
// walks the chunks of a row, grid y the groups of ty rows (striding beyond 65535 groups).
// V = 16 bytes of elements when every row start of every tensor is 16-byte aligned and n is a
// multiple of V; otherwise one element per thread. (Four vectors per thread, loads first, was
// tried: no gain for the erf form, silu_gate 0.203 -> 0.260 ms; reverted.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "../ops/activation_entries.hpp"
#include "sixfold/parallel/cuda.cuh"

namespace sixfold::detail {
namespace {

using parallel::cuda::check_cuda;
constexpr int kThreads = 256;

template <class T> __device__ __forceinline__ float to_f32(T v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return __half2float(v);
}
template <class T> __device__ __forceinline__ T from_f32(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return __float2half_rn(v);
}

// V elements of T moved as one access (16 bytes when V·sizeof(T) == 16).
template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T e[V];
};

// v·sigmoid(a) = v / (1 + e^−a), e^−a by ex2.approx and the quotient by one reciprocal
// (__fdividef: ~2 ulp). Exactly 0 for a < −80, so −inf gives −inf·0 = NaN as the formula does,
// and e^−a ≤ e^80 keeps the divisor finite (below __fdividef's 2^126).
__device__ __forceinline__ float times_sigmoid(float v, float a) {
  const float e = __expf(fminf(-a, 80.0f));
  return a < -80.0f ? v * 0.0f : __fdividef(v, 1.0f + e);
}

// u·Φ(u) = u/2 · (1 + erf(u/√2)) with the CPU's rational fit of erf (|error| <= 4e-7): ~20
// instructions an element where erff took ~35 (SASS of the bf16 kernel: 320 for 8 elements),
// which made the kernel issue-bound at 16384×8192. 1 + erf is kept >= 0, as on the CPU.
__device__ __forceinline__ float gelu_erf(float u) {
  using M = ActivationMath;
  constexpr float kP[6] = {M::kErfP[0], M::kErfP[1], M::kErfP[2], M::kErfP[3], M::kErfP[4], M::kErfP[5]};
  constexpr float kQ[6] = {M::kErfQ[0], M::kErfQ[1], M::kErfQ[2], M::kErfQ[3], M::kErfQ[4], M::kErfQ[5]};
  const float z = fminf(fmaxf(u * M::kSqrtHalf, -M::kErfClamp), M::kErfClamp);
  const float s = z * z;
  float p = fmaf(s, kP[0], kP[1]), q = fmaf(s, kQ[0], kQ[1]);
#pragma unroll
  for (int k = 2; k < 6; ++k) {
    p = fmaf(p, s, kP[k]);
    q = fmaf(q, s, kQ[k]);
  }
  return 0.5f * u * fmaxf(__fdividef(z * p, q) + 1.0f, 0.0f);
}

template <ActivationKind K>
__device__ __forceinline__ float apply(float v, float g) {
  if constexpr (K == ActivationKind::gelu_erf) {
    return gelu_erf(v);
  } else if constexpr (K == ActivationKind::gelu_tanh) {  // u/2·(1 + tanh t) = u·sigmoid(2t)
    const float t = ActivationMath::kSqrt2OverPi * (v + 0.044715f * v * v * v);
    return times_sigmoid(v, 2.0f * t);
  } else {
    return times_sigmoid(v, v) * g;
  }
}

// One V-element access of a row; 16-byte ones read with the L2 policy evict-last (as the norms'
// rows: docs/perf/norm.md, session 18).
template <class T, int V>
__device__ __forceinline__ Vec<T, V> load_row(const T* p, std::uint64_t policy) {
  if constexpr (sizeof(Vec<T, V>) == 16) {
    const uint4 raw = parallel::cuda::load_l2_hint(reinterpret_cast<const uint4*>(p), policy);
    Vec<T, V> v;
    memcpy(&v, &raw, 16);
    return v;
  } else {
    return *reinterpret_cast<const Vec<T, V>*>(p);
  }
}

template <class T, ActivationKind K, int V>
__global__ void __launch_bounds__(kThreads) activation_rows(ActivationArgs a) {
  const std::int64_t col = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= a.x.n) return;
  using W = Vec<T, V>;
  W bias{};
  if constexpr (K != ActivationKind::silu_gate) {
    if (a.bias) bias = *reinterpret_cast<const W*>(static_cast<const T*>(a.bias) + col);
    else
#pragma unroll
      for (int k = 0; k < V; ++k) bias.e[k] = from_f32<T>(0.f);
  }
  const std::uint64_t policy = parallel::cuda::l2_evict_last();
  for (std::int64_t r = std::int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < a.x.rows;
       r += std::int64_t(gridDim.y) * blockDim.y) {
    const W x = load_row<T, V>(static_cast<const T*>(a.x.data) + r * a.x.row_stride + col, policy);
    W g{};
    if constexpr (K == ActivationKind::silu_gate)
      g = load_row<T, V>(static_cast<const T*>(a.b.data) + r * a.b.row_stride + col, policy);
    W y;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if constexpr (K == ActivationKind::silu_gate)
        y.e[k] = from_f32<T>(apply<K>(to_f32(x.e[k]), to_f32(g.e[k])));
      else
        y.e[k] = from_f32<T>(apply<K>(to_f32(x.e[k]) + to_f32(bias.e[k]), 0.f));
    }
    *reinterpret_cast<W*>(static_cast<T*>(a.out.data) + r * a.out.row_stride + col) = y;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <class T, ActivationKind K>
void launch(const ActivationArgs& a, cudaStream_t stream) {
  constexpr int kV = 16 / sizeof(T);
  const bool rows_aligned = a.x.rows == 1 || (a.x.row_stride % kV == 0 && a.out.row_stride % kV == 0 &&
                                              (K != ActivationKind::silu_gate || a.b.row_stride % kV == 0));
  const bool vec = a.x.n % kV == 0 && rows_aligned && aligned16(a.x.data) && aligned16(a.out.data) &&
                   (K != ActivationKind::silu_gate || aligned16(a.b.data)) && (!a.bias || aligned16(a.bias));
  const int v = vec ? kV : 1;
  const std::int64_t vectors = (a.x.n + v - 1) / v;  // per row
  const int tx = int(std::min<std::int64_t>(kThreads, (vectors + 31) / 32 * 32));
  const int ty = kThreads / tx;
  const std::int64_t chunks = (vectors + tx - 1) / tx;
  const std::int64_t groups = (a.x.rows + ty - 1) / ty;
  const dim3 grid(unsigned(chunks), unsigned(std::min<std::int64_t>(groups, 65535)));
  const dim3 block(tx, ty);
  if (vec) activation_rows<T, K, kV><<<grid, block, 0, stream>>>(a);
  else activation_rows<T, K, 1><<<grid, block, 0, stream>>>(a);
  check_cuda(cudaGetLastError(), "sixfold activation");
}

template <class T>
void launch_kind(const ActivationArgs& a, cudaStream_t s) {
  switch (a.kind) {
    case ActivationKind::gelu_erf: return launch<T, ActivationKind::gelu_erf>(a, s);
    case ActivationKind::gelu_tanh: return launch<T, ActivationKind::gelu_tanh>(a, s);
    case ActivationKind::silu_gate: return launch<T, ActivationKind::silu_gate>(a, s);
  }
}

}  // namespace

void activation_cuda(const ActivationArgs& a, int device, Stream stream) {
  int previous = 0;
  check_cuda(cudaGetDevice(&previous), "sixfold activation");
  if (previous != device) check_cuda(cudaSetDevice(device), "sixfold activation");
  const auto s = static_cast<cudaStream_t>(stream.handle);
  try {
    if (a.dtype == DType::f32) launch_kind<float>(a, s);
    else if (a.dtype == DType::bf16) launch_kind<__nv_bfloat16>(a, s);
    else launch_kind<__half>(a, s);
  } catch (...) {
    cudaSetDevice(previous);
    throw;
  }
  if (previous != device) cudaSetDevice(previous);
}

}  // namespace sixfold::detail
