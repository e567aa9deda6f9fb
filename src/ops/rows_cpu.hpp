// Internal: whole-row conversions between a tensor's dtype and an f32 buffer, for the CPU
// backends of the row-wise ops (written so the compiler vectorizes them; F16C for f16).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns inside its own AVX-512 headers (conversions built on _mm*_undefined_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

#include "sixfold/runtime/dtype.hpp"
#include "sixfold/runtime/vec_math.hpp"

namespace sixfold::detail {

// ---- row statistics: Σ f(i) for i < n ------------------------------------------------------
// 16 f32 lanes per block of 1024 elements, blocks summed in f64: f32 lanes vectorize at full
// AVX-512 width; flushing every 1024 elements keeps a block's f32 error small (≤ 64 adds per
// lane), and the f64 sum over blocks keeps 1M-element rows at f32-level accuracy. (f64 lanes
// throughout: 0.54 ns/element for rms_norm, 1 thread, in cache.) F must be cheap and inlinable.
template <class F>
double lane_sum(std::int64_t n, F f) {
  constexpr int kLanes = 16;
  constexpr std::int64_t kBlock = 1024;
  double total = 0;
  for (std::int64_t b = 0; b < n; b += kBlock) {
    const std::int64_t m = std::min(kBlock, n - b);
    float acc[kLanes] = {};
    std::int64_t i = 0;
    for (; i + kLanes <= m; i += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += f(b + i + l);
    for (; i < m; ++i) acc[0] += f(b + i);
    float s = 0;
    for (float a : acc) s += a;
    total += s;
  }
  return total;
}

// ---- conversions of whole rows (written so the compiler vectorizes them) --------------------
inline void load_row(DType t, const void* src, float* dst, std::int64_t n) {
  switch (t) {
    case DType::f32:
      std::memcpy(dst, src, std::size_t(n) * 4);
      return;
    case DType::bf16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(std::uint32_t(s[i]) << 16);
      return;
    }
    case DType::f16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      std::int64_t i = 0;
#if defined(__AVX512F__)
      for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))));
#endif
      for (; i < n; ++i) dst[i] = to_float(Half{s[i]});
      return;
    }
    default:
      return;
  }
}

inline void store_row(DType t, const float* src, void* dst, std::int64_t n) {
  switch (t) {
    case DType::f32:
      std::memcpy(dst, src, std::size_t(n) * 4);
      return;
    case DType::bf16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (std::int64_t i = 0; i < n; ++i) {  // round to nearest even; NaN kept quiet
        const std::uint32_t u = std::bit_cast<std::uint32_t>(src[i]);
        const std::uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);
        d[i] = (u & 0x7fffffffu) > 0x7f800000u ? std::uint16_t((u >> 16) | 0x40u) : std::uint16_t(r >> 16);
      }
      return;
    }
    case DType::f16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      std::int64_t i = 0;
#if defined(__AVX512F__)
      for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
      for (; i < n; ++i) d[i] = to_half(src[i]).bits;
      return;
    }
    default:
      return;
  }
}

// ---- 16-lane kernels: element access, streaming stores, exp --------------------------------
// The row kernels of the norms and activations work on 16 f32 lanes (GCC vector types: one
// zmm register with AVX-512, lowered to narrower vectors elsewhere). Elements are loaded from and
// stored to the tensor's dtype directly, so a row is read from memory once (the statistics) and
// rewritten from L1/L2, with no f32 copy of it. Rows are cut into a head (up to the output's
// 16-element alignment), full 16-lane chunks and a tail; head and tail use partial accesses that
// never touch memory past the row. Outputs of calls larger than the cache are written with
// non-temporal stores where built for AVX-512 (a plain store first reads the line it writes:
// one extra transfer per line).
using vf16 = float __attribute__((vector_size(64)));
using vi16 = std::int32_t __attribute__((vector_size(64)));
using vu16 = std::uint32_t __attribute__((vector_size(64)));
using vh16 = std::uint16_t __attribute__((vector_size(32)));

inline vf16 vsplat(float x) { return vf16{} + x; }
inline vf16 vmax16(vf16 a, vf16 b) { return a > b ? a : b; }
inline float hsum16(vf16 v) {  // fixed pairwise order
  float s8[8], s4[4];
  for (int l = 0; l < 8; ++l) s8[l] = v[l] + v[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}
inline float hmax16(vf16 v) {
  float m = v[0];
  for (int l = 1; l < 16; ++l) m = v[l] > m ? v[l] : m;
  return m;
}

template <DType T>
constexpr int kElemBytes = T == DType::f32 ? 4 : 2;

// f32 → bf16 bits, round to nearest even, NaN kept quiet (the same rule as store_row).
inline vh16 to_bf16_bits(vf16 v) {
#if defined(__AVX512F__)
  const __m512i u = _mm512_castps_si512((__m512)v);
  const __m512i q = _mm512_srli_epi32(u, 16);
  const __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), _mm512_and_si512(q, _mm512_set1_epi32(1))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask((__m512)v, (__m512)v, _CMP_UNORD_Q);
  const __m256i h = _mm512_cvtepi32_epi16(_mm512_mask_or_epi32(r, nan, q, _mm512_set1_epi32(0x40)));
  vh16 out;
  std::memcpy(&out, &h, sizeof out);
  return out;
#else
  vu16 u;
  std::memcpy(&u, &v, sizeof u);
  const vu16 r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const vu16 q = (u >> 16) | 0x40u;
  const vu16 b = (u & 0x7fffffffu) > 0x7f800000u ? q : r;
  return __builtin_convertvector(b, vh16);
#endif
}
inline vf16 from_bf16_bits(vh16 h) {
#if defined(__AVX512F__)
  __m256i hi;
  std::memcpy(&hi, &h, sizeof hi);
  return (vf16)_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
#else
  const vu16 u = __builtin_convertvector(h, vu16) << 16;
  vf16 v;
  std::memcpy(&v, &u, sizeof v);
  return v;
#endif
}

// 16 elements at p (element type T) as f32 lanes.
template <DType T>
inline vf16 vload(const void* p) {
  if constexpr (T == DType::f32) {
    vf16 v;
    std::memcpy(&v, p, sizeof v);
    return v;
  } else {
    vh16 h;
    std::memcpy(&h, p, sizeof h);
    if constexpr (T == DType::bf16) {
      return from_bf16_bits(h);
    } else {
#if defined(__AVX512F__)
      __m256i hi;
      std::memcpy(&hi, &h, sizeof hi);
      return (vf16)_mm512_cvtph_ps(hi);
#else
      vf16 v;
      for (int l = 0; l < 16; ++l) v[l] = to_float(Half{h[l]});
      return v;
#endif
    }
  }
}

template <DType T>
inline void vstore(void* p, vf16 v) {
  if constexpr (T == DType::f32) {
    std::memcpy(p, &v, sizeof v);
  } else if constexpr (T == DType::bf16) {
    const vh16 h = to_bf16_bits(v);
    std::memcpy(p, &h, sizeof h);
  } else {
#if defined(__AVX512F__)
    const __m256i h = _mm512_cvtps_ph((__m512)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    std::memcpy(p, &h, sizeof h);
#else
    vh16 h;
    for (int l = 0; l < 16; ++l) h[l] = to_half(v[l]).bits;
    std::memcpy(p, &h, sizeof h);
#endif
  }
}

// Non-temporal store of 16 elements; p aligned to 16 elements (plain store where not built for
// AVX-512).
template <DType T>
inline void vstream(void* p, vf16 v) {
#if defined(__AVX512F__)
  if constexpr (T == DType::f32) {
    _mm512_stream_ps(static_cast<float*>(p), (__m512)v);
  } else {
    alignas(32) std::uint16_t h[16];
    vstore<T>(h, v);
    _mm256_stream_si256(static_cast<__m256i*>(p), _mm256_load_si256(reinterpret_cast<const __m256i*>(h)));
  }
#else
  vstore<T>(p, v);
#endif
}

// The first m (< 16) elements at p; the other lanes are `pad`.
template <DType T>
inline vf16 vload_part(const void* p, int m, float pad) {
  alignas(64) unsigned char tmp[64];
  constexpr int es = kElemBytes<T>;
  std::memcpy(tmp, p, std::size_t(std::min(m, 16) * es));
  vf16 v = vload<T>(tmp);
  for (int l = m; l < 16; ++l) v[l] = pad;
  return v;
}
template <DType T>
inline void vstore_part(void* p, int m, vf16 v) {
  alignas(64) unsigned char tmp[64];
  vstore<T>(tmp, v);
  std::memcpy(p, tmp, std::size_t(std::min(m, 16) * kElemBytes<T>));
}

// Software prefetch `Ahead` bytes past p (a hint: never faults, past the row included).
template <int Ahead = 4096>
inline void prefetch_ahead(const void* p) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + Ahead), 0, 3);
}

// Elements to process before dst (element type T) is aligned to 16 elements; 0 when it never
// will be (a pointer not aligned to the element size).
template <DType T>
inline std::int64_t head_to_align(const void* dst, std::int64_t n) {
  constexpr std::uintptr_t es = kElemBytes<T>, line = 16 * es;
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(dst);
  if (a % es) return 0;
  return std::min<std::int64_t>(n, std::int64_t(((line - a % line) % line) / es));
}

// Calls f(i, m) on consecutive chunks [i, i + m) covering [0, n): m == 16 except for a head
// chunk of `head` elements and a tail chunk of the rest.
template <class F>
inline void sweep16(std::int64_t n, std::int64_t head, F&& f) {
  std::int64_t i = 0;
  if (head > 0) f(std::int64_t(0), int(head)), i = head;
  for (; i + 16 <= n; i += 16) f(i, 16);
  if (i < n) f(i, int(n - i));
}

// Round 16 f32 lanes to T's precision and back (the value a store of T then a load would give).
template <DType T>
inline vf16 vround(vf16 v) {
  if constexpr (T == DType::f32) {
    return v;
  } else if constexpr (T == DType::bf16) {
    return from_bf16_bits(to_bf16_bits(v));
  } else {
    alignas(32) std::uint16_t h[16];
    vstore<T>(h, v);
    return vload<T>(h);
  }
}

// Whether a call writing `bytes` of output streams it past the caches (non-temporal stores):
// only outputs too large to stay cached, where the line reads of plain stores cost bandwidth.
inline bool stream_output(std::int64_t bytes) {
#if defined(__AVX512F__)
  return bytes >= (std::int64_t(64) << 20);
#else
  (void)bytes;
  return false;
#endif
}

// Orders this thread's non-temporal stores before its later stores (call before the barrier
// that ends a parallel region which streamed).
inline void stream_fence() {
#if defined(__AVX512F__)
  _mm_sfence();
#endif
}

// exp(x) on 16 lanes for x <= 0 or −inf (softmax's exp(x − max)); x < −110 gives 0; NaN gives 0
// (callers that can see NaN handle it per row). exp_reduced's polynomial (vec_math.hpp).
inline vf16 vexp_nonpositive(vf16 x) {
  const vf16 xc = vmax16(x, vsplat(-110.0f));
#if defined(__AVX512F__)
  const vf16 k = (vf16)_mm512_roundscale_ps((__m512)(xc * 1.44269504088896341f),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return (vf16)_mm512_scalef_ps((__m512)exp_reduced(xc, k), (__m512)k);
#else
  const vf16 k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // rint, |k| < 2^22
  const vi16 ki = __builtin_convertvector(k, vi16);
  const vi16 k1 = ki >> 1, k2 = ki - k1;  // 2^k in two factors: k down to −150 stays exact
  vi16 b1 = (k1 + 127) << 23, b2 = (k2 + 127) << 23;
  vf16 s1, s2;
  std::memcpy(&s1, &b1, sizeof s1);
  std::memcpy(&s2, &b2, sizeof s2);
  return exp_reduced(xc, k) * s1 * s2;
#endif
}

// exp(x) on 16 lanes for any x: exp_f32's clamping (x > 88.7: +inf, x < −87.3: 0, NaN stays).
inline vf16 vexp(vf16 x) {
  const float hi = 88.72283f, lo = -87.33654f;
  vf16 xc = x > hi ? vsplat(hi) : x;
  xc = xc < lo ? vsplat(lo) : xc;
  const vf16 k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const vi16 ki = __builtin_convertvector(k, vi16);
  const vi16 k1 = ki >> 1, k2 = ki - k1;
  vi16 b1 = (k1 + 127) << 23, b2 = (k2 + 127) << 23;
  vf16 s1, s2;
  std::memcpy(&s1, &b1, sizeof s1);
  std::memcpy(&s2, &b2, sizeof s2);
  vf16 y = exp_reduced(xc, k) * s1 * s2;
  y = x > hi ? vsplat(__builtin_inff()) : y;
  y = x < lo ? vf16{} : y;
  return x != x ? x : y;
}

}  // namespace sixfold::detail
