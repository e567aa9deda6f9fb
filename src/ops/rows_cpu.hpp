// Internal: whole-row conversions between a tensor's dtype and an f32 buffer, for the CPU
// backends of the row-wise ops (written so the compiler vectorizes them; F16C for f16).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__)
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns inside its own AVX-512 headers (conversions built on _mm*_undefined_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

#include "sixfold/runtime/dtype.hpp"
#include "sixfold/runtime/vec_math.hpp"
#include "vec16.hpp"

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
// zmm register with AVX-512, two 32-byte halves elsewhere: vec16.hpp). Elements are loaded from and
// stored to the tensor's dtype directly, so a row is read from memory once (the statistics) and
// rewritten from L1/L2, with no f32 copy of it. Rows are cut into a head (up to the output's
// 16-element alignment), full 16-lane chunks and a tail; head and tail use partial accesses that
// never touch memory past the row. Outputs of calls larger than the cache are written with
// non-temporal stores where built for AVX-512 or AVX2 (a plain store first reads the line it writes:
// one extra transfer per line).
// (vf16, vi16, vu16, vh16: vec16.hpp)

SIXFOLD_VEC vf16 vsplat(float x) { return vf16{} + x; }
SIXFOLD_VEC vf16 vmax16(vf16 a, vf16 b) { return vselect(a > b, a, b); }
// t clamped to [lo, hi] with NaN kept: the min / max instructions return their second operand
// where either is NaN (one instruction each instead of a compare and a blend).
SIXFOLD_VEC vf16 vclamp(vf16 t, float lo, float hi) {
#if defined(__AVX512F__)
  return (vf16)_mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), (__m512)t));
#elif defined(__AVX2__)
  using H = vf16::Half;
  const auto c = [=](H h) { return H(_mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), __m256(h)))); };
  return {c(t.lo), c(t.hi)};
#else
  t = vselect(t > hi, vsplat(hi), t);
  return vselect(t < lo, vsplat(lo), t);
#endif
}
SIXFOLD_VEC float hsum16(vf16 v) {  // fixed pairwise order
  float s8[8], s4[4];
  for (int l = 0; l < 8; ++l) s8[l] = v[l] + v[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}
SIXFOLD_VEC float hmax16(vf16 v) {
  float m = v[0];
  for (int l = 1; l < 16; ++l) m = v[l] > m ? v[l] : m;
  return m;
}

template <DType T>
constexpr int kElemBytes = T == DType::f32 ? 4 : 2;

// f32 → bf16 bits, round to nearest even, NaN kept quiet (the same rule as store_row).
#if defined(__AVX512BF16__)
// The conversion instructions of AVX512_BF16 (vcvtneps2bf16, vcvtne2ps2bf16) follow that rule
// except on f32 denormals, which they flush to ±0; a chunk holding one takes the integer
// rounding below instead. One instruction for 32 lanes in place of 11 (dev box, bf16 stores).
inline __mmask16 denormal_lanes(vf16 v) { return _mm512_fpclass_ps_mask((__m512)v, 0x20); }
#endif
#if defined(__AVX512F__)
// The bf16 rounding of 16 lanes, left in the high half of each 32-bit lane. kNanLowZero: every
// NaN among the lanes is quiet with a zero low half (it came from bf16 values through f32
// arithmetic, which keeps the first NaN operand's payload, or is the hardware's default NaN),
// so the rounding add cannot carry out of it and the NaN select is skipped (3 instructions of
// a pass that is issue-bound on this CPU).
template <bool kNanLowZero = false>
SIXFOLD_VEC __m512i bf16_round_hi(vf16 v) {
  const __m512i u = _mm512_castps_si512((__m512)v);
  const __mmask16 odd = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x10000));
  __m512i t = _mm512_add_epi32(u, _mm512_set1_epi32(0x7fff));
  t = _mm512_mask_add_epi32(t, odd, t, _mm512_set1_epi32(1));
  if constexpr (kNanLowZero) return t;
  const __mmask16 nan = _mm512_cmp_ps_mask((__m512)v, (__m512)v, _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(t, nan, u, _mm512_set1_epi32(0x400000));
}
#endif

#if !defined(__AVX512F__) && defined(__AVX2__)
// AVX2: bf16_round_hi on 8 lanes (the same rule: nearest even in the high half, NaN kept quiet).
template <bool kNanLowZero = false>
SIXFOLD_VEC __m256i bf16_round_hi8(__m256i u) {
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i t = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd);
  if constexpr (kNanLowZero) return t;
  const __m256 v = _mm256_castsi256_ps(u);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(t, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
}
SIXFOLD_VEC __m256i half_bits(vf16::Half h) { return (__m256i)h; }
#endif

SIXFOLD_VEC vh16 to_bf16_bits(vf16 v) {
#if defined(__AVX512BF16__)
  if (denormal_lanes(v) == 0) {
    const __m256i h = (__m256i)_mm512_cvtneps_pbh((__m512)v);
    vh16 out;
    std::memcpy(&out, &h, sizeof out);
    return out;
  }
#endif
#if defined(__AVX512F__)
  const __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(bf16_round_hi(v), 16));
  vh16 out;
  std::memcpy(&out, &h, sizeof out);
  return out;
#elif defined(__AVX2__)
  // Rounded high halves of the two 8-lane halves packed to 16 bits (packus interleaves the
  // 128-bit lanes of its operands; the permute puts them back in order).
  const __m256i lo = _mm256_srli_epi32(bf16_round_hi8(half_bits(v.lo)), 16);
  const __m256i hi = _mm256_srli_epi32(bf16_round_hi8(half_bits(v.hi)), 16);
  return (vh16)_mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
#else
  const vu16 u = vbits<vu16>(v);
  const vu16 r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const vu16 q = (u >> 16) | 0x40u;
  const vu16 b = vselect((u & 0x7fffffffu) > 0x7f800000u, q, r);
  return vnarrow16(b);
#endif
}
SIXFOLD_VEC vf16 from_bf16_bits(vh16 h) {
#if defined(__AVX512F__)
  __m256i hi;
  std::memcpy(&hi, &h, sizeof hi);
  return (vf16)_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
#elif defined(__AVX2__)
  const __m256i b = (__m256i)h;
  return {(vf16::Half)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(b)), 16),
          (vf16::Half)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(b, 1)), 16)};
#else
  return vbits<vf16>(vwiden16(h) << 16);
#endif
}

// 16 elements at p (element type T) as f32 lanes.
template <DType T>
SIXFOLD_VEC vf16 vload(const void* p) {
  if constexpr (T == DType::f32) {
    return vload_bytes<vf16>(p);
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
#elif defined(__F16C__) && defined(__AVX2__)
      const __m256i b = (__m256i)h;
      return {(vf16::Half)_mm256_cvtph_ps(_mm256_castsi256_si128(b)), (vf16::Half)_mm256_cvtph_ps(_mm256_extracti128_si256(b, 1))};
#else
      vf16 v;
      for (int l = 0; l < 16; ++l) v[l] = to_float(Half{h[l]});
      return v;
#endif
    }
  }
}

template <DType T>
SIXFOLD_VEC void vstore(void* p, vf16 v) {
  if constexpr (T == DType::f32) {
    vstore_bytes(p, v);
  } else if constexpr (T == DType::bf16) {
    const vh16 h = to_bf16_bits(v);
    std::memcpy(p, &h, sizeof h);
  } else {
#if defined(__AVX512F__)
    const __m256i h = _mm512_cvtps_ph((__m512)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    std::memcpy(p, &h, sizeof h);
#elif defined(__F16C__) && defined(__AVX2__)
    const __m128i lo = _mm256_cvtps_ph((__m256)v.lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i hi = _mm256_cvtps_ph((__m256)v.hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    std::memcpy(p, &lo, sizeof lo);
    std::memcpy(static_cast<char*>(p) + 16, &hi, sizeof hi);
#else
    vh16 h;
    for (int l = 0; l < 16; ++l) h[l] = to_half(v[l]).bits;
    std::memcpy(p, &h, sizeof h);
#endif
  }
}

// Non-temporal store of 16 elements; p aligned to 16 elements (plain store where not built for
// AVX-512 or AVX2).
template <DType T>
SIXFOLD_VEC void vstream(void* p, vf16 v) {
#if defined(__AVX512F__)
  if constexpr (T == DType::f32) {
    _mm512_stream_ps(static_cast<float*>(p), (__m512)v);
  } else {
    alignas(32) std::uint16_t h[16];
    vstore<T>(h, v);
    _mm256_stream_si256(static_cast<__m256i*>(p), _mm256_load_si256(reinterpret_cast<const __m256i*>(h)));
  }
#elif defined(__AVX2__)
  if constexpr (T == DType::f32) {
    _mm256_stream_ps(static_cast<float*>(p), (__m256)v.lo);
    _mm256_stream_ps(static_cast<float*>(p) + 8, (__m256)v.hi);
  } else {
    alignas(32) std::uint16_t h[16];
    vstore<T>(h, v);
    _mm256_stream_si256(static_cast<__m256i*>(p), _mm256_load_si256(reinterpret_cast<const __m256i*>(h)));
  }
#else
  vstore<T>(p, v);
#endif
}

// 32 elements (a: the first 16, b: the next) at p, plain or non-temporal stores (nt: p aligned
// to 64 bytes).
// kNanLowZero: see bf16_round_hi.
template <DType T, bool kNanLowZero = false>
SIXFOLD_VEC void vstore2(void* p, vf16 a, vf16 b, bool nt) {
#if defined(__AVX512BW__)
  if constexpr (T == DType::bf16) {
    alignas(64) static constexpr std::uint16_t kHigh[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                                            23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                                            45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
    __m512i h;
#if defined(__AVX512BF16__)
    if (!kNanLowZero && _kor_mask16(denormal_lanes(a), denormal_lanes(b)) == 0)
      h = (__m512i)_mm512_cvtne2ps_pbh((__m512)b, (__m512)a);  // a in the low half
    else
#endif
      h = _mm512_permutex2var_epi16(bf16_round_hi<kNanLowZero>(a), _mm512_load_si512(kHigh),
                                    bf16_round_hi<kNanLowZero>(b));
    if (nt) _mm512_stream_si512(static_cast<__m512i*>(p), h);
    else _mm512_storeu_si512(p, h);
    return;
  }
#endif
  char* c = static_cast<char*>(p);
  if (nt) {
    vstream<T>(c, a);
    vstream<T>(c + 16 * kElemBytes<T>, b);
  } else {
    vstore<T>(c, a);
    vstore<T>(c + 16 * kElemBytes<T>, b);
  }
}

// 32 elements at p as two 16-lane vectors in an unspecified (fixed) order, for reductions:
// bf16 as even / odd elements (2 instructions instead of 4), other types in order.
template <DType T>
SIXFOLD_VEC void vload2_unordered(const void* p, vf16& a, vf16& b) {
#if defined(__AVX512F__)
  if constexpr (T == DType::bf16) {
    const __m512i z = _mm512_loadu_si512(p);
    a = (vf16)_mm512_castsi512_ps(_mm512_slli_epi32(z, 16));
    b = (vf16)_mm512_castsi512_ps(_mm512_and_si512(z, _mm512_set1_epi32(int(0xffff0000u))));
    return;
  }
#elif defined(__AVX2__)
  if constexpr (T == DType::bf16) {  // lane k of each half: elements 2k and 2k + 1 of its 16
    const __m256i z0 = _mm256_loadu_si256(static_cast<const __m256i*>(p));
    const __m256i z1 = _mm256_loadu_si256(static_cast<const __m256i*>(p) + 1);
    const __m256i high = _mm256_set1_epi32(int(0xffff0000u));
    a = {(vf16::Half)_mm256_slli_epi32(z0, 16), (vf16::Half)_mm256_slli_epi32(z1, 16)};
    b = {(vf16::Half)_mm256_and_si256(z0, high), (vf16::Half)_mm256_and_si256(z1, high)};
    return;
  }
#endif
  a = vload<T>(p);
  b = vload<T>(static_cast<const char*>(p) + 16 * kElemBytes<T>);
}

// The first m (< 16) elements at p; the other lanes are `pad`.
template <DType T>
SIXFOLD_VEC vf16 vload_part(const void* p, int m, float pad) {
  alignas(64) unsigned char tmp[64];
  constexpr int es = kElemBytes<T>;
  std::memcpy(tmp, p, std::size_t(std::min(m, 16) * es));
  vf16 v = vload<T>(tmp);
  for (int l = m; l < 16; ++l) v[l] = pad;
  return v;
}
template <DType T>
SIXFOLD_VEC void vstore_part(void* p, int m, vf16 v) {
  alignas(64) unsigned char tmp[64];
  vstore<T>(tmp, v);
  std::memcpy(p, tmp, std::size_t(std::min(m, 16) * kElemBytes<T>));
}

// Element i of a row of element type T.
template <DType T>
inline const void* at(const void* p, std::int64_t i) {
  return static_cast<const char*>(p) + i * kElemBytes<T>;
}
template <DType T>
inline void* at(void* p, std::int64_t i) {
  return static_cast<char*>(p) + i * kElemBytes<T>;
}

// The 16-lane chunk at element i of a row (element type T) with m valid lanes (m == 16: a
// full load; else the first m elements, other lanes `pad`).
template <DType T>
SIXFOLD_VEC vf16 ld(const void* row, std::int64_t i, int m, float pad = 0.0f) {
  return m == 16 ? vload<T>(at<T>(row, i)) : vload_part<T>(at<T>(row, i), m, pad);
}

// ---- Pair order: a row's 32-element chunks as two 16-lane vectors ---------------------------
// Row kernels whose arithmetic is lane-wise may load each full 32-element chunk (from column 0)
// in T's pair order and store it back the same way: for bf16 (AVX-512BW or AVX2 builds) the even
// elements in one vector and the odd ones in the other (vload2_unordered: one load and two
// instructions for 32 elements, none of them on the shuffle port, where the in-order widening
// takes four, two of them shuffles), for other types in order. f32 data a kernel keeps per
// column for itself (weights widened once, gradient partials) is kept in the same order
// (to_pair_order / from_pair_order), so it pairs lane for lane with the row. The tail (n mod 32
// elements) is in order, 16 lanes at a time. Split (every helper's last template argument): the
// call's choice; false keeps every chunk in order (for bf16 rows whose streamed output does not
// start on a 64-byte boundary, which the in-order write_rows aligns for its non-temporal stores,
// where that is the faster: output_plan).
#if (defined(__AVX512F__) && defined(__AVX512BW__)) || (!defined(__AVX512F__) && defined(__AVX2__))
inline constexpr bool kPairSplitBuilt = true;
#else
inline constexpr bool kPairSplitBuilt = false;
#endif
template <DType T, bool Split = true>
inline constexpr bool kPairSplit = Split && T == DType::bf16 && kPairSplitBuilt;

template <DType T, bool Split = true>
SIXFOLD_VEC void vload_pair(const void* p, vf16& a, vf16& b) {
  if constexpr (kPairSplit<T, Split>) {
    vload2_unordered<T>(p, a, b);
  } else {
    a = vload<T>(p);
    b = vload<T>(static_cast<const char*>(p) + 16 * kElemBytes<T>);
  }
}

// An f32 row of n columns put in T's pair order, in place (Back: back in column order).
template <DType T, bool Split = true, bool Back = false>
inline void to_pair_order(float* row, std::int64_t n) {
  if constexpr (kPairSplit<T, Split>) {
    for (std::int64_t c = 0; c + 32 <= n; c += 32) {
      float t[32];
      std::memcpy(t, row + c, sizeof t);
      for (int k = 0; k < 32; ++k) {  // pair slot k holds column 2k (k < 16) or 2(k − 16) + 1
        const int col = k < 16 ? 2 * k : 2 * (k - 16) + 1;
        if constexpr (Back) row[c + col] = t[k];
        else row[c + k] = t[col];
      }
    }
  }
}
template <DType T, bool Split = true>
inline void from_pair_order(float* row, std::int64_t n) {
  to_pair_order<T, Split, true>(row, n);
}

// Vectors in a chunk of m lanes (ld_chunk): a pair (m == 32) or one.
constexpr int chunk_vectors(int m) { return m == 32 ? 2 : 1; }

// The chunk of a row (element type T) at column i with m lanes into v: m == 32, the pair at i
// (v[0], v[1]); m <= 16, in order into v[0], lanes past m `pad`.
template <DType T, bool Split = true>
SIXFOLD_VEC void ld_chunk(const void* row, std::int64_t i, int m, vf16 (&v)[2], float pad = 0.0f) {
  if (m == 32) vload_pair<T, Split>(at<T>(row, i), v[0], v[1]);
  else v[0] = ld<T>(row, i, m, pad);
}
// An f32 chunk stored back as ld_chunk<DType::f32> loaded it.
SIXFOLD_VEC void st_chunk(float* row, std::int64_t i, int m, const vf16 (&v)[2]) {
  if (m == 32) {
    vstore<DType::f32>(row + i, v[0]);
    vstore<DType::f32>(row + i + 16, v[1]);
  } else if (m == 16) {
    vstore<DType::f32>(row + i, v[0]);
  } else {
    vstore_part<DType::f32>(row + i, m, v[0]);
  }
}

// 32 elements from two vectors in T's pair order at p, plain or non-temporal stores (nt: p
// aligned to 64 bytes). kNanLowZero: see bf16_round_hi. kExact: every lane already holds a
// value of T (vround_pair), stored without rounding.
template <DType T, bool kNanLowZero = false, bool kExact = false>
SIXFOLD_VEC void vstore_pair(void* p, vf16 a, vf16 b, bool nt) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if constexpr (kPairSplit<T>) {
    // Word 2k from lane k of a, word 2k + 1 from lane k of b (their rounded high halves).
    alignas(64) static constexpr std::uint16_t kInterleave[32] = {
        1,  33, 3,  35, 5,  37, 7,  39, 9,  41, 11, 43, 13, 45, 15, 47,
        17, 49, 19, 51, 21, 53, 23, 55, 25, 57, 27, 59, 29, 61, 31, 63};
    const auto hi = [](vf16 v) {
      if constexpr (kExact) return _mm512_castps_si512((__m512)v);
      else return bf16_round_hi<kNanLowZero>(v);
    };
    const __m512i h = _mm512_permutex2var_epi16(hi(a), _mm512_load_si512(kInterleave), hi(b));
    if (nt) _mm512_stream_si512(static_cast<__m512i*>(p), h);
    else _mm512_storeu_si512(p, h);
    return;
  }
#elif defined(__AVX2__)
  if constexpr (kPairSplit<T>) {
    // Each 32-bit lane: the rounded high half of b's lane (odd word) over a's (even word).
    const auto hi = [](vf16::Half v) {
      if constexpr (kExact) return half_bits(v);
      else return bf16_round_hi8<kNanLowZero>(half_bits(v));
    };
    const __m256i h0 = _mm256_blend_epi16(_mm256_srli_epi32(hi(a.lo), 16), hi(b.lo), 0xaa);
    const __m256i h1 = _mm256_blend_epi16(_mm256_srli_epi32(hi(a.hi), 16), hi(b.hi), 0xaa);
    __m256i* q = static_cast<__m256i*>(p);
    if (nt) _mm256_stream_si256(q, h0), _mm256_stream_si256(q + 1, h1);
    else _mm256_storeu_si256(q, h0), _mm256_storeu_si256(q + 1, h1);
    return;
  }
#endif
  vstore2<T, kNanLowZero>(p, a, b, nt);
}

// Software prefetch `Ahead` bytes past p (a hint: never faults, past the row included), into
// L1 (Level 3, prefetcht0) or L2 (Level 2, prefetcht1).
template <int Ahead = 4096, int Level = 3>
inline void prefetch_ahead(const void* p) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + Ahead), 0, Level);
}

// Whether every one of `rows` rows of element type T from data (row_stride elements apart)
// starts on a 64-byte boundary: where a call streams its output, pair order streams it only
// then (output_plan).
template <DType T>
inline bool rows_aligned64(const void* data, std::int64_t row_stride, std::int64_t rows) {
  return reinterpret_cast<std::uintptr_t>(data) % 64 == 0 && (rows <= 1 || row_stride * kElemBytes<T> % 64 == 0);
}

// Software prefetch of the pair at i of a row read from memory, Ahead bytes ahead (into L1).
template <DType T, int Ahead = 4096>
inline void prefetch_pair(const void* row, std::int64_t i) {
  prefetch_ahead<Ahead>(at<T>(row, i));
  if constexpr (kElemBytes<T> == 4) prefetch_ahead<Ahead>(at<T>(row, i + 16));
}

// Elements to process before dst (element type T, aligned to the element size) reaches a
// 64-byte boundary.
template <DType T>
inline std::int64_t head_to_align(const void* dst, std::int64_t n) {
  constexpr std::uintptr_t es = kElemBytes<T>;
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(dst);
  return std::min<std::int64_t>(n, std::int64_t(((64 - a % 64) % 64) / es));
}

// Round 16 f32 lanes to T's precision and back (the value a store of T then a load would give).
template <DType T>
SIXFOLD_VEC vf16 vround(vf16 v) {
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

// vround<T> for values whose NaNs have zero low halves (kNanLowZero), lane by lane in any order:
// for bf16 the integer rounding with the low half cleared (4 instructions).
template <DType T>
SIXFOLD_VEC vf16 vround_pair(vf16 v) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if constexpr (kPairSplit<T>)
    return (vf16)_mm512_castsi512_ps(_mm512_and_si512(bf16_round_hi<true>(v), _mm512_set1_epi32(int(0xffff0000u))));
#elif defined(__AVX2__)
  if constexpr (kPairSplit<T>) {  // the same on each half (vround's pack and unpack took 3× the work)
    const __m256i high = _mm256_set1_epi32(int(0xffff0000u));
    return {(vf16::Half)_mm256_and_si256(bf16_round_hi8<true>(half_bits(v.lo)), high),
            (vf16::Half)_mm256_and_si256(bf16_round_hi8<true>(half_bits(v.hi)), high)};
  }
#endif
  return vround<T>(v);
}

// Whether a call writing `bytes` of output streams it past the caches (non-temporal stores):
// only outputs too large to stay cached, where the line reads of plain stores cost bandwidth.
inline bool stream_output(std::int64_t bytes) {
#if defined(__AVX512F__) || defined(__AVX2__)
  return bytes >= (std::int64_t(8) << 20);
#else
  (void)bytes;
  return false;
#endif
}

// How a row kernel writes its output: nt (non-temporal stores) and split (pair order, rows
// pipelined where the kernel has that form). streams: stream_output of the call; aligned: every
// output row starts on a 64-byte boundary (rows_aligned64). Pair order streams only aligned rows
// (its chunks run from column 0), so for rows off the boundary it writes with plain stores, where
// the in-order path (write_rows) streams from the boundary on. With AVX512_BF16, whose in-order
// conversions are single instructions, the in-order path was the faster (Intel dev box, session
// 22: pair order with plain stores +13–17% time at 65536×1000 bf16). With AVX2, whose in-order
// widening and packing take shuffles, it is pair order by far: AMD EPYC VM, session 34, bf16
// rows 16 bytes off the boundary, 1.2–1.9× faster in pair order with plain stores for the rms /
// layer forward and backward and softmax_backward at 16384×8192, 4096², 65536×1024 and
// 65536×1000 (layer_norm 16384×8192 39 → 61% of copy, against 79 with aligned rows). That is for
// kernels that pipeline their rows (pipelined: the norms' and the backward's, write_row_beside):
// softmax's forward, which does not, was 7% slower that way and keeps the in-order path.
struct OutputPlan {
  bool nt, split;
};
inline OutputPlan output_plan(bool streams, bool aligned, bool pipelined) {
#if defined(__AVX512BF16__)
  constexpr bool kInOrderStreamsMisaligned = true;
#else
  constexpr bool kInOrderStreamsMisaligned = false;
#endif
  if (!streams || aligned) return {streams, true};
  if (pipelined && !kInOrderStreamsMisaligned) return {false, true};
  return {true, false};
}

// Orders this thread's non-temporal stores before its later stores (call before the barrier
// that ends a parallel region which streamed).
inline void stream_fence() {
#if defined(__AVX512F__) || defined(__AVX2__)
  _mm_sfence();
#endif
}

// Software prefetch (into L2) of the rows a thread reads next, for row kernels that read a row
// from memory once and then work on it from cache: without it no read is in flight during the
// passes from cache. The cursor runs `lead` bytes ahead of the rows being worked on and advances
// one row's bytes per row of work (step() is called after each block of up to 1024 elements of
// every pass: `per_row` elements in all), so memory stays busy at the rate rows are consumed.
constexpr std::int64_t kRowStreamLead = 64 << 10, kRowStreamMaxLead = 256 << 10;
struct RowStream {
  const char* base[2] = {nullptr, nullptr};  // up to two inputs (rows of the same length)
  std::int64_t stride[2] = {0, 0};           // bytes between rows
  std::int64_t row_bytes = 0, per_row = 1;
  std::int64_t row = 0, end = 0, off = 0, acc = 0;

  // Rows [lo, hi) of the inputs; the cursor starts one row (at least kRowStreamLead, at most
  // kRowStreamMaxLead bytes) in: a thread's first rows are prefetched by their own pass over memory.
  void start(std::int64_t lo, std::int64_t hi) {
    const std::int64_t lead = std::clamp<std::int64_t>(row_bytes, kRowStreamLead, kRowStreamMaxLead);
    row = lo + lead / row_bytes, off = lead % row_bytes, end = hi;
  }
  void step(std::int64_t elems) {
    acc += elems * row_bytes;
    for (; acc >= 64 * per_row; acc -= 64 * per_row) {
      if (row >= end) return;
      for (int k = 0; k < 2; ++k)
        if (base[k]) __builtin_prefetch(base[k] + row * stride[k] + off, 0, 2);
      off += 64;
      if (off >= row_bytes) off = 0, ++row;
    }
  }
};

// Writes the n elements of each of R rows of the same length at dst[0, R) (element type T) in
// one pass: g(i, m, v) fills v[0, R) with the chunk at i of each row (m lanes; m == 16 in the
// body, which inlining specializes; called once per chunk, in increasing i, so g may keep a
// running position), so per-column data the rows share, such as gradient
// partials, is loaded and stored once per chunk. With nt (every row aligned to the element size
// and at the same offset from a 64-byte boundary) the body is written with non-temporal stores
// from that boundary on; otherwise plainly. The prefetch stream steps R elements per column
// after each block of up to 1024 columns. kNanLowZero (bf16): the body's NaNs have zero low
// halves (see bf16_round_hi).
template <DType T, int R, bool kNanLowZero = false, class G>
inline void write_rows(void* const (&dst)[R], std::int64_t n, bool nt, G&& g, RowStream* next) {
  for (int j = 0; j < R; ++j) nt = nt && reinterpret_cast<std::uintptr_t>(dst[j]) % kElemBytes<T> == 0;
  std::int64_t head = nt ? head_to_align<T>(dst[0], n) : 0;
  for (int j = 1; j < R; ++j) nt = nt && head_to_align<T>(dst[j], n) == head;
  if (!nt) head = 0;
  auto part = [&](std::int64_t i, std::int64_t end) {  // [i, end), plain stores
    for (; i < end; i += 16) {
      const int m = int(std::min<std::int64_t>(16, end - i));
      vf16 v[R];
      g(i, m, v);
      for (int j = 0; j < R; ++j) {
        if (m == 16) vstore<T>(at<T>(dst[j], i), v[j]);
        else vstore_part<T>(at<T>(dst[j], i), m, v[j]);
      }
    }
  };
  part(0, head);
  std::int64_t i = head;
  while (i + 32 <= n) {  // blocks of up to 1024 columns, then the prefetch steps
    const std::int64_t start = i, stop = i + std::min<std::int64_t>(1024, (n - i) / 32 * 32);
    for (; i < stop; i += 32) {
      vf16 a[R], b[R];
      g(i, 16, a);
      g(i + 16, 16, b);
      for (int j = 0; j < R; ++j) vstore2<T, kNanLowZero>(at<T>(dst[j], i), a[j], b[j], nt);
    }
    if (next) next->step((stop - start) * R);
  }
  part(i, n);
}

// One row: the chunk at i with m lanes is g(i, m).
template <DType T, bool kNanLowZero = false, class G>
inline void write_row(void* dst, std::int64_t n, bool nt, G&& g, RowStream* next) {
  void* const one[1] = {dst};
  write_rows<T, 1, kNanLowZero>(one, n, nt, [&](std::int64_t i, int m, vf16* v) { v[0] = g(i, m); }, next);
}

// write_rows for kernels that work in pair order (ld_chunk): g(i, m, v) fills v[j][0..1] with
// the chunk at column i of row j, m == 32 for the pairs (columns [0, n − n mod 32)), m <= 16
// for the tail in order. Types without a pair split (or !Split) take write_rows (its head to
// the 64-byte boundary included, chunks of 16 in order: m <= 16 always); for bf16 the pairs run
// from column 0, so non-temporal stores (nt) are used for the rows that start on a 64-byte
// boundary and plain stores for the others (output_plan chooses).
template <DType T, int R, bool kNanLowZero = false, bool kExact = false, bool Split = true, class G>
inline void write_rows_pairs(void* const (&dst)[R], std::int64_t n, bool nt, G&& g, RowStream* next) {
  if constexpr (!kPairSplit<T, Split>) {
    write_rows<T, R, kNanLowZero>(dst, n, nt, [&](std::int64_t i, int m, vf16* out) {
      vf16 v[R][2];
      g(i, m, v);
      for (int j = 0; j < R; ++j) out[j] = v[j][0];
    }, next);
  } else {
    bool nt_row[R];
    for (int j = 0; j < R; ++j) nt_row[j] = nt && reinterpret_cast<std::uintptr_t>(dst[j]) % 64 == 0;
    std::int64_t i = 0;
    while (i + 32 <= n) {  // blocks of up to 1024 columns, then the prefetch steps
      const std::int64_t start = i, stop = i + std::min<std::int64_t>(1024, (n - i) / 32 * 32);
      for (; i < stop; i += 32) {
        vf16 v[R][2];
        g(i, 32, v);
        for (int j = 0; j < R; ++j)
          vstore_pair<T, kNanLowZero, kExact>(at<T>(dst[j], i), v[j][0], v[j][1], nt_row[j]);
      }
      if (next) next->step((stop - start) * R);
    }
    for (; i < n; i += 16) {
      const int m = int(std::min<std::int64_t>(16, n - i));
      vf16 v[R][2];
      g(i, m, v);
      for (int j = 0; j < R; ++j) {
        if (m == 16) vstore<T>(at<T>(dst[j], i), v[j][0]);
        else vstore_part<T>(at<T>(dst[j], i), m, v[j][0]);
      }
    }
  }
}

// write_rows_pairs for one row: g(i, m, v) fills v[0..1] with its chunk at column i.
template <DType T, bool kNanLowZero = false, bool Split = true, class G>
inline void write_row_pairs(void* dst, std::int64_t n, bool nt, G&& g, RowStream* next) {
  void* const one[1] = {dst};
  write_rows_pairs<T, 1, kNanLowZero, false, Split>(one, n, nt, [&](std::int64_t i, int m, vf16 (&v)[1][2]) { g(i, m, v[0]); },
                                                    next);
}

// Σ over the row's chunks in pair order (ld_chunk): f(i, m, acc) adds the terms of the chunk
// at i (m == 32: a pair; m <= 16: in order, zero in lanes ≥ m) into acc[h][k] for its vectors
// h < chunk_vectors(m); f32 lanes per block of kSumBlock elements, blocks added in f64. K sums
// at once. write_row_beside makes the same sums, with the same bits, beside another pass.
inline constexpr std::int64_t kSumBlock = 1024;
// The accumulator row acc[acc_row(h)] that vector h of a chunk adds into: its own with
// AVX-512 (two chains hide the adds' latency), row 0 elsewhere, where a 16-lane accumulator is
// two of the 16 ymm registers and a second row of them went to the stack (loaded and stored
// every chunk: layer_norm's pipelined loop on the AVX2 dev host, session 30).
#if defined(__AVX512F__)
constexpr int acc_row(int h) { return h; }
#else
constexpr int acc_row(int) { return 0; }
#endif
template <int K, class F>
void row_sums(std::int64_t n, double (&out)[K], F f, RowStream* next) {
  for (int k = 0; k < K; ++k) out[k] = 0;
  for (std::int64_t b = 0; b < n; b += kSumBlock) {
    const std::int64_t end = b + std::min(kSumBlock, n - b);
    vf16 acc[2][K] = {};
    std::int64_t i = b;
    for (; i + 32 <= end; i += 32) f(i, 32, acc);
    for (; i < end; i += 16) f(i, int(std::min<std::int64_t>(16, end - i)), acc);
    if (next) next->step(end - b);
    for (int k = 0; k < K; ++k) out[k] += double(hsum16(acc[0][k] + acc[1][k]));
  }
}

// An output chunk (write_row_beside's c) stored at column i of dst: m == 32, the pair in
// Split's order, non-temporal where nt (dst on a 64-byte boundary); m <= 16, v[0] in order, plainly.
template <DType T, bool kNanLowZero, bool Split>
SIXFOLD_VEC void st_out_chunk(void* dst, std::int64_t i, int m, const vf16 (&v)[2], bool nt) {
  if (m == 32) {
    if constexpr (kPairSplit<T, Split>) vstore_pair<T, kNanLowZero>(at<T>(dst, i), v[0], v[1], nt);
    else vstore2<T, kNanLowZero>(at<T>(dst, i), v[0], v[1], nt);
  } else if (m == 16) {
    vstore<T>(at<T>(dst, i), v[0]);
  } else {
    vstore_part<T>(at<T>(dst, i), m, v[0]);
  }
}

// One row's last pass (c(i, m, v): the chunk at column i with m lanes into v, as
// write_rows_pairs' g for one row) beside the next row's first pass over memory (a(i, m, acc):
// its chunk at i added into acc), chunk by chunk in row_sums' order (blocks of kSumBlock
// columns: pairs of 32, then the block's tail by 16): the next row's two sums come out in s
// with the bits row_sums gives them, while its loads from memory overlap this row's work and
// stores. Run one after the other, the first pass read with no stores in flight and the last
// stored with no reads: a probe of the two patterns (dev box, bf16 16384×8192, two streams in
// and one out) went from 64 to 81% of copy. nt: dst on a 64-byte boundary (rows_aligned64); c
// and a see Split's pair order (ld_chunk).
template <DType T, bool kNanLowZero, bool Split, class C, class A>
inline void write_row_beside(void* dst, std::int64_t n, bool nt, C&& c, A&& a, double (&s)[2]) {
  s[0] = s[1] = 0;
  for (std::int64_t b = 0; b < n; b += kSumBlock) {
    const std::int64_t end = b + std::min(kSumBlock, n - b);
    vf16 acc[2][2] = {};
    std::int64_t i = b;
    for (; i + 32 <= end; i += 32) {
      a(i, 32, acc);
      vf16 v[2];
      c(i, 32, v);
      st_out_chunk<T, kNanLowZero, Split>(dst, i, 32, v, nt);
    }
    for (; i < end; i += 16) {
      const int m = int(std::min<std::int64_t>(16, end - i));
      a(i, m, acc);
      vf16 v[2];
      c(i, m, v);
      st_out_chunk<T, kNanLowZero, Split>(dst, i, m, v, nt);
    }
    for (int k = 0; k < 2; ++k) s[k] += double(hsum16(acc[0][k] + acc[1][k]));
  }
}

// 1/q on 16 lanes for finite q whose reciprocal is a normal number: vrcp14ps and one
// Newton step (relative error ~2^-28), instead of a divide (vdivps: one per ~10 cycles here).
SIXFOLD_VEC vf16 vrcp(vf16 q) {
#if defined(__AVX512F__)
  const vf16 r = (vf16)_mm512_rcp14_ps((__m512)q);
  return r * (2.0f - q * r);
#else
  return 1.0f / q;
#endif
}

// exp on 16 lanes as 2^t, t = x·log2 e: k = rint(t), 2^(t − k) on [−1/2, 1/2] by a polynomial
// (relative minimax fits with p(0) = 1; evaluated in f32: degree 5: 1.8e-7, 4: 2.9e-6, 3:
// 1.0e-4), times 2^k (vscalefps: exact, overflow to +inf and gradual underflow to 0 included).
// t is clamped to [−160, 160] first, so ±inf give +inf / 0 and NaN stays NaN. The rounding of t
// adds |t|·2^-24 relative error (< 1e-6 for the |x| < 10 that matter in a softmax sum;
// exp_f32 in vec_math.hpp is the 1–2 ulp one). Degree by the precision of the result's dtype:
// exp_degree<T> (f32: 5; f16: 4; bf16: 3, a 40th of a bf16 ulp).
//
// exp2_poly<Deg, S>: the same polynomial times S (a power of two: every coefficient scaled
// exactly, so each step's rounding is the same and the result is exactly S times exp2_poly's
// while it stays a normal number).
template <int Deg, float S = 1.0f>
SIXFOLD_VEC vf16 exp2_poly(vf16 f) {  // 2^0 is exactly 1 (log_softmax of a 1-element row is 0)
  static_assert(Deg >= 3 && Deg <= 5);
  vf16 p;
  if constexpr (Deg == 5) {
    p = f * (S * 1.3264708686619997e-3f) + S * 9.671511128544807e-3f;
    p = p * f + S * 5.550733953714371e-2f;
    p = p * f + S * 2.4022242426872253e-1f;
    p = p * f + S * 6.931470036506653e-1f;
  } else if constexpr (Deg == 4) {
    p = f * (S * 9.582829661667347e-3f) + S * 5.5906400084495544e-2f;
    p = p * f + S * 2.4024099111557007e-1f;
    p = p * f + S * 6.931241750717163e-1f;
  } else {
    p = f * (S * 5.500869080424309e-2f) + S * 2.4221062660217285e-1f;
    p = p * f + S * 6.932829022407532e-1f;
  }
  return p * f + S;
}
// 2^t for t already clamped so that k = rint(t) has k + 127 + Shift in [1, 254] (AVX2: no
// vscalefps): 2^(k + Shift) is read from the low bits of t + 1.5·2^23 + 127 + Shift (rint and
// the bias in one add, no conversion) and the 2^−Shift is folded into the polynomial's
// coefficients (exact), so the product rounds once, into the subnormals too.
template <int Deg, int Shift>
SIXFOLD_VEC vf16 exp2_biased(vf16 t) {
  static_assert(Shift >= 0 && Shift <= 64);
  constexpr float kMagic = 12582912.0f + float(127 + Shift);
  constexpr float kScale = [] { float s = 1.0f; for (int i = 0; i < Shift; ++i) s *= 0.5f; return s; }();
  const vf16 kb = t + kMagic;
  return exp2_poly<Deg, kScale>(t - (kb - kMagic)) * vbits<vf16>(vbits<vi16>(kb) << 23);
}
template <DType T>
constexpr int exp_degree = T == DType::f32 ? 5 : (T == DType::f16 ? 4 : 3);

inline constexpr float kLog2e = 1.44269504088896341f;

// Rows longer than this read weight / bias in their dtype (converted as they are used: the same
// values) instead of an f32 copy, in the forward (norm_cpu.cpp) and the backward
// (norm_backward_cpu.cpp): at n = 8192 the f32 weight and bias are 64 KB, more than L1 beside the
// row, and each row's pass streamed them from L2. Dev box, bf16, same-session A/B, % of the copy
// roofline (f32 copy up to 32768 → up to 2048): 16384x8192 rms 86.9–88.7 → 92.7–93.8, layer
// 76.8–77.7 → 84.5–84.8, add_rms 85.3–87.4 → 88.3–89.8, add_layer 78.4–79.4 → 84.2–85.1,
// rms backward 69.6–71.3 → 75.0–75.4; 4096x4096 add_layer 82.6–83.6 → 89.7–91.5, rms backward
// 73.8–74.5 → 77.6–78.8; rows of 1024 within noise either way (docs/perf/norm.md, session 8).
inline constexpr std::int64_t kF32WeightsMax = 2048;

// 2^t (the same steps as exp from t = x·log2 e on).
template <bool Upper, int Deg>
SIXFOLD_VEC vf16 vexp2_impl(vf16 t) {
#if defined(__AVX512F__)
  // min / max return their second operand where either is NaN: t's NaN survives, in one
  // instruction each instead of a compare and a blend.
  if constexpr (Upper) t = (vf16)_mm512_min_ps(_mm512_set1_ps(160.0f), (__m512)t);
  t = (vf16)_mm512_max_ps(_mm512_set1_ps(-160.0f), (__m512)t);
#elif defined(__AVX2__)
  if constexpr (Upper) {
    t = vselect(t > 160.0f, vsplat(160.0f), t);
  } else {
    // t <= 0: 2^k as 2^−64 times one factor 2^(k + 64) (normal for k in [−160, 63]), which
    // rounds once into the subnormals as the two factors below do (the same values): 11
    // instructions a half instead of 19. vclamp keeps NaN, so NaN stays NaN through p. The
    // bound 63 only keeps the exponent field in range: a t a rounding above 0 (softmax's FMA at
    // x = max) is taken as it is.
    return exp2_biased<Deg, 64>(vclamp(t, -160.0f, 63.0f));
  }
  t = vselect(t < -160.0f, vsplat(-160.0f), t);
#else
  if constexpr (Upper) t = vselect(t > 160.0f, vsplat(160.0f), t);
  t = vselect(t < -160.0f, vsplat(-160.0f), t);
#endif
#if defined(__AVX512F__)
  const vf16 k = (vf16)_mm512_roundscale_ps((__m512)t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return (vf16)_mm512_scalef_ps((__m512)exp2_poly<Deg>(t - k), (__m512)k);
#else
  const vf16 k = (t + 12582912.0f) - 12582912.0f;  // rint for |t| < 2^22
  // 2^k in two factors, each a normal number (k in [−160, 160]: halves in [−80, 80]), so the
  // product under- and overflows only once, at the end (0 / +inf); NaN stays NaN through p. (Three
  // factors by k / 3 before: the same values, but AVX2 has no 32-bit vector multiply-high, and
  // the division by 3 took more instructions than the rest of the exp.)
  const vi16 ki = vconvert<vi16>(k);
  const vi16 k1 = ki >> 1, k2 = ki - k1;
  return exp2_poly<Deg>(t - k) * vbits<vf16>((k1 + 127) << 23) * vbits<vf16>((k2 + 127) << 23);
#endif
}
template <bool Upper, int Deg>
SIXFOLD_VEC vf16 vexp_impl(vf16 x) { return vexp2_impl<Upper, Deg>(x * kLog2e); }
// exp(x), any x (x > 110: +inf, x < −110: 0, NaN: NaN).
template <int Deg = 5>
SIXFOLD_VEC vf16 vexp(vf16 x) { return vexp_impl<true, Deg>(x); }
// exp(x) for x <= 0 or −inf (softmax's exp(x − max)); x < −110 gives 0, NaN stays NaN.
template <int Deg = 5>
SIXFOLD_VEC vf16 vexp_nonpositive(vf16 x) { return vexp_impl<false, Deg>(x); }
// 2^t for t <= 0 or −inf (softmax's exp(x − max) as 2^(x·log2 e − max·log2 e), one FMA).
template <int Deg = 5>
SIXFOLD_VEC vf16 vexp2_nonpositive(vf16 t) { return vexp2_impl<false, Deg>(t); }

// Calls f.template operator()<T>() for the floating dtype T of a validated call (f32, bf16, f16);
// any other dtype was rejected by the entry's validation and does nothing here.
template <class F>
void with_float_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<DType::f32>();
    case DType::bf16: return f.template operator()<DType::bf16>();
    case DType::f16: return f.template operator()<DType::f16>();
    default: return;
  }
}

}  // namespace sixfold::detail
