// src/cuda/pack.cuh — elements on the GPU: f32 / bf16 / f16 conversions and W consecutive
// elements moved as one machine word (16-byte vector accesses, optionally with an L2 eviction
// priority), unpacked to f32 and packed back. Shared by the norm and activation kernels.
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

// ---- Elements ------------------------------------------------------------------------------

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <class T> __device__ __forceinline__ T from_f32(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else return __float2half_rn(x);
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

}  // namespace
}  // namespace sixfold::detail
