// src/cuda/norm_common.cuh — pieces shared by the norm kernels (norm.cu: forward,
// norm_backward.cu: backward): order-preserving warp/block reductions of any monoid state and
// small host helpers, over the dtype conversions and element packs of pack.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "pack.cuh"
#include "sixfold/parallel/cuda.cuh"

namespace sixfold::detail {
namespace {

using parallel::cuda::check_cuda;

// Hides a value from the optimizer (an empty asm on each 32-bit word), so that a later pass
// unpacks a raw pack again where it is used instead of keeping the first pass's floats alive
// across the row's reductions (forward register rows, backward SmemGrads).
template <class P>
__device__ __forceinline__ P opaque(P v) {
  if constexpr (sizeof(P) % 4 == 0) {
    unsigned w[sizeof(P) / 4];
    memcpy(w, &v, sizeof(P));
#pragma unroll
    for (int i = 0; i < int(sizeof(P) / 4); ++i) asm("" : "+r"(w[i]));
    memcpy(&v, w, sizeof(P));
  }
  return v;
}

// ---- Combining states across lanes and warps -------------------------------------------------

template <class S>
__device__ __forceinline__ S shfl_xor(const S& s, int mask) {
  static_assert(sizeof(S) % 4 == 0 && std::is_trivially_copyable_v<S>);
  unsigned w[sizeof(S) / 4];
  memcpy(w, &s, sizeof(S));
#pragma unroll
  for (int i = 0; i < int(sizeof(S) / 4); ++i) w[i] = __shfl_xor_sync(0xffffffffu, w[i], mask);
  S r;
  memcpy(&r, w, sizeof(S));
  return r;
}

// Reduces over aligned groups of `width` lanes (a power of two ≤ 32) in lane order. Both lanes
// of a butterfly pair compute combine(lower, upper) from the same operands, so every lane of a
// group ends with the same bits (Welford's merge is commutative only up to rounding). All 32
// lanes must call it.
template <class M>
__device__ __forceinline__ typename M::value_type group_reduce(typename M::value_type s,
                                                               int width, M m) {
  const int lane = threadIdx.x & 31;
  for (int off = 1; off < width; off <<= 1) {
    const auto other = shfl_xor(s, off);
    const bool upper = lane & off;
    s = m.combine(upper ? other : s, upper ? s : other);
  }
  return s;
}

// Whole-block reduction in thread order; blockDim.x a multiple of 32. Every thread gets the
// total. warp_states: (32) states in shared memory, used once per launch.
template <class M>
__device__ __forceinline__ typename M::value_type block_reduce(typename M::value_type s, M m,
                                                               typename M::value_type* warp_states) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  s = group_reduce(s, 32, m);
  if (lane == 0) warp_states[warp] = s;
  __syncthreads();
  return group_reduce(lane < warps ? warp_states[lane] : m.identity(), 32, m);
}


// ---- Rows streamed through shared memory (the long-row backward and forward) -------------------
// cp.async of 16 bytes through L2 only (rows read once); each thread later reads back only what it
// copied itself, so waiting for its own groups is enough.
__device__ __forceinline__ void cp_async16_cg(void* smem, const void* gmem) {
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// The "memory" clobber keeps the compiler from moving the stage's shared-memory reads above it.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// A row's counter of published tile states (global, GPU scope) and a block's ring flags (shared,
// CTA scope): release on the writer's side orders its earlier stores before the flag, acquire on
// the reader's orders its later loads after it.
__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ int load_acquire_cta(const int* p) {
  int v;
  const auto a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ld.acquire.cta.shared::cta.b32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ void store_release_cta(int* p, int v) {
  const auto a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("st.release.cta.shared::cta.b32 [%0], %1;" ::"r"(a), "r"(v) : "memory");
}

// ---- Host helpers ----------------------------------------------------------------------------

using parallel::cuda::DeviceGuard;

constexpr std::int64_t kMaxGrid = 0x7fffffff;  // gridDim.x limit

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; }

}  // namespace
}  // namespace sixfold::detail
