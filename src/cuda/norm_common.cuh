// src/cuda/norm_common.cuh — pieces shared by the norm kernels (norm.cu: forward,
// norm_backward.cu: backward): dtype conversions, 16-byte packs of elements, order-preserving
// warp/block reductions of any monoid state, and small host helpers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "sixfold/parallel/cuda.cuh"

namespace sixfold::detail {
namespace {

using parallel::cuda::check_cuda;

// ---- Elements ------------------------------------------------------------------------------

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <class T> __device__ __forceinline__ T from_f32(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else return __float2half_rn(x);
}

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

using parallel::cuda::l2_evict_first;  // L2 policies for Pack::load_hint / store_hint
using parallel::cuda::l2_evict_last;

template <int Bytes> struct RawWord;
template <> struct RawWord<16> { using type = uint4; };
template <> struct RawWord<8> { using type = uint2; };
template <> struct RawWord<4> { using type = unsigned; };
template <> struct RawWord<2> { using type = unsigned short; };

// W consecutive elements of T moved as one machine word: (W) elements, a 16-byte vector access
// when W · sizeof(T) = 16 (the pointer must then be 16-byte aligned).
template <class T, int W>
struct Pack {
  using Raw = typename RawWord<W * int(sizeof(T))>::type;
  Raw raw;

  __device__ __forceinline__ static Pack load(const T* p) {
    return {*reinterpret_cast<const Raw*>(p)};
  }
  __device__ __forceinline__ static Pack load_read_only(const T* p) {  // weight, bias
    return {__ldg(reinterpret_cast<const Raw*>(p))};
  }
  // With an L2 eviction priority (l2_evict_last() / l2_evict_first()).
  __device__ __forceinline__ static Pack load_hint(const T* p, std::uint64_t policy) {
    return {parallel::cuda::load_l2_hint(reinterpret_cast<const Raw*>(p), policy)};
  }
  __device__ __forceinline__ void store(T* p) const { *reinterpret_cast<Raw*>(p) = raw; }
  __device__ __forceinline__ void store_hint(T* p, std::uint64_t policy) const {
    parallel::cuda::store_l2_hint(reinterpret_cast<Raw*>(p), raw, policy);
  }
  __device__ __forceinline__ void store_streaming(T* p) const {  // evict-first: keeps x in L2
    __stcs(reinterpret_cast<Raw*>(p), raw);
  }
  __device__ __forceinline__ void unpack(float (&f)[W]) const {
    if constexpr (std::is_same_v<T, __nv_bfloat16> && W % 2 == 0) {
      // bf16 is the upper half of an f32: one shift or one mask per element. (Through
      // __bfloat162float nvcc 13 spends PRMT + IMAD on every odd element.)
      unsigned u[W / 2];
      memcpy(u, &raw, sizeof(raw));
#pragma unroll
      for (int k = 0; k < W / 2; ++k) {
        f[2 * k] = __uint_as_float(u[k] << 16);
        f[2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
      }
    } else {
      T e[W];
      memcpy(e, &raw, sizeof(raw));
#pragma unroll
      for (int k = 0; k < W; ++k) f[k] = to_f32(e[k]);
    }
  }
  __device__ __forceinline__ static Pack pack(const float (&f)[W]) {
    T e[W];
    if constexpr (sizeof(T) == 2 && W % 2 == 0) {  // one paired convert (F2FP) per 2 elements
      using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
#pragma unroll
      for (int k = 0; k < W; k += 2) {
        T2 two;
        if constexpr (std::is_same_v<T, __half>) two = __floats2half2_rn(f[k], f[k + 1]);
        else two = __floats2bfloat162_rn(f[k], f[k + 1]);
        memcpy(&e[k], &two, sizeof(two));
      }
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) e[k] = from_f32<T>(f[k]);
    }
    Pack p;
    memcpy(&p.raw, e, sizeof(e));
    return p;
  }
};

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


// ---- Host helpers ----------------------------------------------------------------------------

using parallel::cuda::DeviceGuard;

constexpr std::int64_t kMaxGrid = 0x7fffffff;  // gridDim.x limit

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; }

}  // namespace
}  // namespace sixfold::detail
