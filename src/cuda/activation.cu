// src/cuda/activation.cu — bias+GELU (erf and tanh forms) and SiLU-gate on the GPU: each input
// read once, the output written once (locality), f32 arithmetic on f32/bf16/f16 data.
//
// Blocks of kThreads threads are (tx, ty): tx threads cover a row's chunk of tx·V elements, ty
// rows share the block, so short rows still fill it (65536×1024 bf16: 8 rows per block). Grid x
// walks the chunks of a row, grid y the groups of ty rows; each thread strides over R of them
// (rows_per_thread), and beyond 65535 groups.
// V = 16 bytes of elements when every row start of every tensor is 16-byte aligned and n is a
// multiple of V; otherwise one element per thread. (Four vectors per thread, loads first, was
// tried: no gain for the erf form, silu_gate 0.203 -> 0.260 ms; reverted.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "../ops/activation_entries.hpp"
#include "pack.cuh"
#include "sixfold/parallel/cuda.cuh"

namespace sixfold::detail {
namespace {

using parallel::cuda::check_cuda;
constexpr int kThreads = 256;

// 2^x by ex2.approx.ftz (MUFU.EX2: +inf above 128, +0 below −126) and 1/x by rcp.approx.ftz
// (MUFU.RCP: +0 for +inf), each one instruction: __expf and __fdividef add a scaling guard for
// denormals (three more) that no argument here needs.
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_ftz(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

constexpr float kLog2e = 1.44269504088896341f;

// v·sigmoid(a) given m = −a·log2(e): v / (1 + 2^m). For a below about −88, 2^m is +inf and
// the quotient v·0: 0, or NaN for v = ±inf as the formula gives.
__device__ __forceinline__ float times_sigmoid(float v, float m) { return v * rcp_ftz(1.0f + ex2_ftz(m)); }

// u·Φ(u) by the folded erf fit (GeluErfFolded, activation_entries.hpp): 18 instructions an
// element with the bias add; the clamp to [0, 1] is the FFMA's saturation (free), and NaN
// saturates to 0, so u·0 stays NaN.
__device__ __forceinline__ float gelu_erf(float u) {
  constexpr GeluErfFolded c = gelu_erf_folded();
  const float w = fminf(u * u, GeluErfFolded::kWMax);
  float p = fmaf(w, c.p[0], c.p[1]), q = fmaf(w, c.q[0], c.q[1]);
#pragma unroll
  for (int k = 2; k < 6; ++k) {
    p = fmaf(p, w, c.p[k]);
    q = fmaf(q, w, c.q[k]);
  }
  return u * __saturatef(fmaf(u * p, rcp_ftz(q), 0.5f));
}

// u/2·(1 + tanh t) = u·sigmoid(2t), t = √(2/π)·(u + 0.044715u³): m = −2t·log2(e) = u·(c0 + c1·u²).
__device__ __forceinline__ float gelu_tanh(float u) {
  constexpr float c0 = -2.0f * kLog2e * ActivationMath::kSqrt2OverPi, c1 = c0 * 0.044715f;
  return times_sigmoid(u, u * fmaf(c1, u * u, c0));
}

template <ActivationKind K>
__device__ __forceinline__ float apply(float v, float g) {
  if constexpr (K == ActivationKind::gelu_erf) return gelu_erf(v);
  else if constexpr (K == ActivationKind::gelu_tanh) return gelu_tanh(v);
  else return times_sigmoid(v, -kLog2e * v) * g;
}

// One V-element access of a row as f32 (Pack: bf16 widened by a shift or a mask, one
// instruction an element), 16-byte ones read with the L2 policy evict-last (as the norms' rows:
// docs/perf/norm.md, session 18).
template <class T, int V>
__device__ __forceinline__ void load_row(const T* p, std::uint64_t policy, float (&f)[V]) {
  using P = Pack<T, V>;
  if constexpr (sizeof(typename P::Raw) == 16) P::load_hint(p, policy).unpack(f);
  else P::load(p).unpack(f);
}

template <class T, ActivationKind K, int V>
__global__ void __launch_bounds__(kThreads) activation_rows(ActivationArgs a) {
  parallel::cuda::chain_head();  // launched as a programmatic dependent (launch)
  const std::int64_t col = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (col >= a.x.n) return;
  const std::uint64_t policy = parallel::cuda::l2_evict_last();
  float bias[V] = {};
  if constexpr (K != ActivationKind::silu_gate)
    if (a.bias) load_row<T, V>(static_cast<const T*>(a.bias) + col, policy, bias);
  for (std::int64_t r = std::int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < a.x.rows;
       r += std::int64_t(gridDim.y) * blockDim.y) {
    float x[V], g[V];
    load_row<T, V>(static_cast<const T*>(a.x.data) + r * a.x.row_stride + col, policy, x);
    if constexpr (K == ActivationKind::silu_gate)
      load_row<T, V>(static_cast<const T*>(a.b.data) + r * a.b.row_stride + col, policy, g);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if constexpr (K == ActivationKind::silu_gate) x[k] = apply<K>(x[k], g[k]);
      else x[k] = apply<K>(x[k] + bias[k], 0.f);
    }
    Pack<T, V>::pack(x).store(static_cast<T*>(a.out.data) + r * a.out.row_stride + col);
  }
}

// Rows per thread: each thread walks R rows of its column chunk, which spreads its fixed costs
// (indices, the bias, the L2 policy: ~45 instructions against ~20 an element for the erf form).
// Measured best on the H200 (graph replay): 16-bit data, the erf form 4 (16384×8192 bf16 82 ->
// 95% of copy), the tanh form 2 (95.5 -> 99.5%), SiLU-gate 1 (its math is light; 2 and 4 lose up
// to 1%); f32 data (half the elements a byte) half of that: erf 2 (4096×4096 89.1% at 4 -> 91.0%),
// tanh 1. R is lowered until the grid keeps 8·R waves of 8 blocks per SM: with the kernels
// launched as programmatic dependents (chain_head), one row a thread was faster on the smaller
// shapes. H100, bf16, graph replay, % of copy, R = 4 / 2 / 1 (the tanh form 2 / 1): erf 4096×4096
// 85.3–85.9 / 88.0 / 90.2–90.3, 65536×1024 96.2–96.7 / 97.2–97.5 / 98.1–98.3; tanh 4096×4096
// 88.0 / 89.6–89.9; at 16384×8192 R = 4 and 1 within 1.5 (R stays 4 there, as measured on the
// H200 without the chain). Development knob, read on every call: SIXFOLD_ACT_ROWS=R overrides the
// choice (1 to 64).
template <class T, ActivationKind K>
std::int64_t rows_per_thread(std::int64_t blocks_one_row, int device) {
  std::int64_t r = K == ActivationKind::gelu_erf ? 4 : K == ActivationKind::gelu_tanh ? 2 : 1;
  if constexpr (sizeof(T) == 4) r = std::max<std::int64_t>(1, r / 2);
  if (const char* e = std::getenv("SIXFOLD_ACT_ROWS")) {
    const long v = std::strtol(e, nullptr, 10);
    if (v >= 1 && v <= 64) return v;
  }
  const std::int64_t wave = 8 * std::int64_t(parallel::cuda::sm_count(device, "sixfold activation"));
  while (r > 1 && blocks_one_row < 8 * r * wave) r /= 2;
  return r;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <class T, ActivationKind K>
void launch(const ActivationArgs& a, cudaStream_t stream, int device) {
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
  const std::int64_t per_thread = rows_per_thread<T, K>(chunks * ((a.x.rows + ty - 1) / ty), device);
  const std::int64_t groups = (a.x.rows + ty * per_thread - 1) / (ty * per_thread);
  const dim3 grid(unsigned(chunks), unsigned(std::min<std::int64_t>(groups, 65535)));
  const dim3 block(tx, ty);
  parallel::cuda::launch_dependent(vec ? activation_rows<T, K, kV> : activation_rows<T, K, 1>, grid, block, 0,
                                   stream, parallel::cuda::chain_launches(), "sixfold activation", a);
}

template <class T>
void launch_kind(const ActivationArgs& a, cudaStream_t s, int device) {
  switch (a.kind) {
    case ActivationKind::gelu_erf: return launch<T, ActivationKind::gelu_erf>(a, s, device);
    case ActivationKind::gelu_tanh: return launch<T, ActivationKind::gelu_tanh>(a, s, device);
    case ActivationKind::silu_gate: return launch<T, ActivationKind::silu_gate>(a, s, device);
  }
}

}  // namespace

void activation_cuda(const ActivationArgs& a, int device, Stream stream) {
  const parallel::cuda::DeviceGuard guard(device, "sixfold activation");
  const auto s = static_cast<cudaStream_t>(stream.handle);
  if (a.dtype == DType::f32) launch_kind<float>(a, s, device);
  else if (a.dtype == DType::bf16) launch_kind<__nv_bfloat16>(a, s, device);
  else launch_kind<__half>(a, s, device);
}

}  // namespace sixfold::detail
