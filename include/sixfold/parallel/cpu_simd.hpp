// sixfold/parallel/cpu_simd.hpp — vectorized block kernels for the monoids whose element type
// fits SIMD lanes: f32 and f64 sums on AVX-512.
//
// fold: four independent 16-lane accumulators (Sum is commutative, so lanes may take strided
//       elements; the final lane order is fixed, so results are reproducible).
// scan: an in-register Hillis–Steele scan of each 16-lane vector (log2(16) = 4 shifted adds),
//       then the running carry is broadcast in. When the output is larger than the last-level
//       cache, 64-byte aligned vectors are written with non-temporal stores: no read-for-
//       ownership, so DRAM sees 8 bytes per f32 element (read + write) instead of 12.
// Without AVX-512 (or for other monoids) BlockKernels is not specialized and the generic
// scalar loops in cpu.hpp run.
#pragma once

#include <cstdint>
#include <unistd.h>

#include "sixfold/algebra/instances.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
// GCC 12 warns inside its own AVX-512 headers (masked intrinsics built on _mm512_undefined_*).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define SIXFOLD_SIMD_DIAGNOSTICS_PUSHED
#endif
#endif

namespace sixfold::parallel::cpu::simd {

template <class M> struct BlockKernels;  // primary: not vectorized

template <class M>
concept has_block_kernels = requires { BlockKernels<M>::kLanes; };

// Writes bigger than this bypass the cache (see file comment).
inline std::int64_t streaming_store_threshold_bytes() {
  static const std::int64_t bytes = [] {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return std::int64_t(l3 > (32l << 20) ? l3 : (32l << 20));
  }();
  return bytes;
}

#if defined(__AVX512F__)

template <>
struct BlockKernels<algebra::Sum<float>> {
  static constexpr int kLanes = 16;

  static float fold(const float* x, std::int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    std::int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
      a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
      a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
      a2 = _mm512_add_ps(a2, _mm512_loadu_ps(x + i + 32));
      a3 = _mm512_add_ps(a3, _mm512_loadu_ps(x + i + 48));
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
    if (i < n) a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps(__mmask16((1u << (n - i)) - 1), x + i));
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  }

  // Lane i of the result: x_0 + … + x_i (zeros shifted in).
  static __m512 scan16(__m512 v) {
    const __m512i i1 = _mm512_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14);
    const __m512i i2 = _mm512_setr_epi32(0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13);
    const __m512i i4 = _mm512_setr_epi32(0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
    const __m512i i8 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7);
    v = _mm512_add_ps(v, _mm512_maskz_permutexvar_ps(__mmask16(0xfffe), i1, v));
    v = _mm512_add_ps(v, _mm512_maskz_permutexvar_ps(__mmask16(0xfffc), i2, v));
    v = _mm512_add_ps(v, _mm512_maskz_permutexvar_ps(__mmask16(0xfff0), i4, v));
    v = _mm512_add_ps(v, _mm512_maskz_permutexvar_ps(__mmask16(0xff00), i8, v));
    return v;
  }

  template <bool Exclusive>
  static float scan(const float* x, float* y, std::int64_t n, float carry_in, bool stream_stores) {
    const bool stream = stream_stores && (reinterpret_cast<std::uintptr_t>(y) % 4) == 0;
    const __m512i last = _mm512_set1_epi32(15);
    const __m512i shift1 = _mm512_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14);
    __m512 carry = _mm512_set1_ps(carry_in);
    std::int64_t i = 0;
    auto step = [&](__m512 v, __mmask16 mask, bool aligned_full) {
      const __m512 s = scan16(v);
      const __m512 incl = _mm512_add_ps(carry, s);
      __m512 out = incl;
      if constexpr (Exclusive)
        out = _mm512_add_ps(carry, _mm512_maskz_permutexvar_ps(__mmask16(0xfffe), shift1, s));
      if (aligned_full && stream) _mm512_stream_ps(y + i, out);
      else _mm512_mask_storeu_ps(y + i, mask, out);
      carry = _mm512_permutexvar_ps(last, incl);
    };
    // Head: up to the first 64-byte aligned output, so the body can stream.
    const std::int64_t mis = std::int64_t((reinterpret_cast<std::uintptr_t>(y) / 4) % 16);
    if (mis != 0 && n > 0) {
      const std::int64_t h = std::min<std::int64_t>(n, 16 - mis);
      const __mmask16 mk = __mmask16((1u << h) - 1);
      // A partial vector: inactive lanes load as zero, so the carry picks up lane h-1's value
      // through lane 15 unchanged.
      step(_mm512_maskz_loadu_ps(mk, x), mk, false);
      i = h;
    }
    for (; i + 16 <= n; i += 16) step(_mm512_loadu_ps(x + i), __mmask16(0xffff), true);
    if (i < n) {
      const __mmask16 mk = __mmask16((1u << (n - i)) - 1);
      step(_mm512_maskz_loadu_ps(mk, x + i), mk, false);
    }
    if (stream) _mm_sfence();
    return _mm_cvtss_f32(_mm512_castps512_ps128(carry));
  }
};

#endif  // __AVX512F__

}  // namespace sixfold::parallel::cpu::simd

#if defined(SIXFOLD_SIMD_DIAGNOSTICS_PUSHED)
#pragma GCC diagnostic pop
#undef SIXFOLD_SIMD_DIAGNOSTICS_PUSHED
#endif
