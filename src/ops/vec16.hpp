// Internal: the 16-lane vector types of the CPU row kernels (vf16: f32 lanes; vi16 / vu16: 32-bit
// integer lanes; vh16: 16-bit lanes), the operations on them that are not C++ operators
// (vselect, vconvert, vbits, vany, vload_bytes / vstore_bytes, vnarrow16 / vwiden16), and
// exp_f32 on 16 lanes (vexp_f32).
//
// With AVX-512 they are GCC vector types of 64 bytes: one zmm register each. Without it they are
// two 32-byte GCC vectors in a struct (Vec16), with the same lanes, the same operators and the
// same memory layout. The 64-byte vector type itself cannot be used there: GCC 12 keeps a vector
// wider than the target's registers in memory and moves it through general registers at every
// use (a 16-chain FMA loop on an AVX2 Zen 4 ran at 7 GFLOP/s a core with it and at ~100 with
// two 32-byte halves; the norm rows ran at 5–10% of copy). A portable build without AVX2
// (SIXFOLD_NATIVE=OFF) has the same trouble with the 32-byte halves: correct, not fast.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "sixfold/runtime/vec_math.hpp"

// Functions that take or return the vectors: always inlined without AVX-512, where a vector
// passed by value out of line goes through memory (a Vec16 is a 64-byte struct); with AVX-512 it
// is one register and the compiler's own choice stands.
#if defined(__AVX512F__)
#define SIXFOLD_VEC inline
#else
#define SIXFOLD_VEC [[gnu::always_inline]] inline
#endif

namespace sixfold::detail {

// 16 lanes of 16 bits (bf16 / f16 bits): 32 bytes, a native vector on every x86-64 target we build for.
using vh16 = std::uint16_t __attribute__((vector_size(32)));

#if defined(__AVX512F__)

using vf16 = float __attribute__((vector_size(64)));
using vi16 = std::int32_t __attribute__((vector_size(64)));
using vu16 = std::uint32_t __attribute__((vector_size(64)));

// Lane l of the result: a[l] where m[l] is true (all ones), b[l] where it is false (zero).
template <class V>
SIXFOLD_VEC V vselect(vi16 m, V a, V b) {
  return m ? a : b;
}
// Lane-wise conversion (as static_cast of each lane).
template <class To, class From>
SIXFOLD_VEC To vconvert(From v) {
  return __builtin_convertvector(v, To);
}
// Whether any lane of a mask is set.
SIXFOLD_VEC bool vany(vi16 m) { return _mm512_test_epi32_mask((__m512i)m, (__m512i)m) != 0; }
// The 64 bytes at p as a vector (unaligned), a vector stored there, and one vector type's bits
// as another's.
template <class V>
SIXFOLD_VEC V vload_bytes(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
SIXFOLD_VEC void vstore_bytes(void* p, V v) {
  std::memcpy(p, &v, sizeof v);
}
template <class To, class From>
SIXFOLD_VEC To vbits(From v) {
  return (To)v;
}

#else

// 8 lanes of E: 32 bytes (GCC ignores vector_size on a dependent type, so one per E).
template <class E>
struct Half8;
template <>
struct Half8<float> {
  using type = float __attribute__((vector_size(32)));
};
template <>
struct Half8<std::int32_t> {
  using type = std::int32_t __attribute__((vector_size(32)));
};
template <>
struct Half8<std::uint32_t> {
  using type = std::uint32_t __attribute__((vector_size(32)));
};

template <class E>
struct Vec16 {
  using Half = typename Half8<E>::type;
  using Mask = Vec16<std::int32_t>;
  Half lo, hi;  // lanes 0–7, 8–15

  E operator[](int l) const { return l < 8 ? lo[l] : hi[l - 8]; }
  // GCC vector types alias their element type: a lane is addressed as an E in the struct's storage.
  E& operator[](int l) { return reinterpret_cast<E*>(this)[l]; }

  friend Vec16 operator+(Vec16 a, Vec16 b) { return {a.lo + b.lo, a.hi + b.hi}; }
  friend Vec16 operator-(Vec16 a, Vec16 b) { return {a.lo - b.lo, a.hi - b.hi}; }
  friend Vec16 operator*(Vec16 a, Vec16 b) { return {a.lo * b.lo, a.hi * b.hi}; }
  friend Vec16 operator/(Vec16 a, Vec16 b) { return {a.lo / b.lo, a.hi / b.hi}; }
  friend Vec16 operator+(Vec16 a, E s) { return {a.lo + s, a.hi + s}; }
  friend Vec16 operator-(Vec16 a, E s) { return {a.lo - s, a.hi - s}; }
  friend Vec16 operator*(Vec16 a, E s) { return {a.lo * s, a.hi * s}; }
  friend Vec16 operator/(Vec16 a, E s) { return {a.lo / s, a.hi / s}; }
  friend Vec16 operator+(E s, Vec16 a) { return {s + a.lo, s + a.hi}; }
  friend Vec16 operator-(E s, Vec16 a) { return {s - a.lo, s - a.hi}; }
  friend Vec16 operator*(E s, Vec16 a) { return {s * a.lo, s * a.hi}; }
  friend Vec16 operator/(E s, Vec16 a) { return {s / a.lo, s / a.hi}; }
  Vec16 operator-() const { return {-lo, -hi}; }
  Vec16& operator+=(Vec16 b) { return *this = *this + b; }
  Vec16& operator-=(Vec16 b) { return *this = *this - b; }
  Vec16& operator*=(Vec16 b) { return *this = *this * b; }
  Vec16& operator+=(E s) { return *this = *this + s; }
  Vec16& operator-=(E s) { return *this = *this - s; }
  Vec16& operator*=(E s) { return *this = *this * s; }

  // Comparisons give a mask of 32-bit lanes (all ones where true), as GCC's vector types do.
  friend Mask operator<(Vec16 a, Vec16 b) { return mask(a.lo < b.lo, a.hi < b.hi); }
  friend Mask operator>(Vec16 a, Vec16 b) { return mask(a.lo > b.lo, a.hi > b.hi); }
  friend Mask operator<=(Vec16 a, Vec16 b) { return mask(a.lo <= b.lo, a.hi <= b.hi); }
  friend Mask operator>=(Vec16 a, Vec16 b) { return mask(a.lo >= b.lo, a.hi >= b.hi); }
  friend Mask operator==(Vec16 a, Vec16 b) { return mask(a.lo == b.lo, a.hi == b.hi); }
  friend Mask operator!=(Vec16 a, Vec16 b) { return mask(a.lo != b.lo, a.hi != b.hi); }
  friend Mask operator<(Vec16 a, E s) { return mask(a.lo < s, a.hi < s); }
  friend Mask operator>(Vec16 a, E s) { return mask(a.lo > s, a.hi > s); }
  friend Mask operator<=(Vec16 a, E s) { return mask(a.lo <= s, a.hi <= s); }
  friend Mask operator>=(Vec16 a, E s) { return mask(a.lo >= s, a.hi >= s); }
  friend Mask operator==(Vec16 a, E s) { return mask(a.lo == s, a.hi == s); }
  friend Mask operator!=(Vec16 a, E s) { return mask(a.lo != s, a.hi != s); }

  // Integer lanes: bitwise operations and shifts.
  friend Vec16 operator&(Vec16 a, Vec16 b) requires std::is_integral_v<E> { return {a.lo & b.lo, a.hi & b.hi}; }
  friend Vec16 operator|(Vec16 a, Vec16 b) requires std::is_integral_v<E> { return {a.lo | b.lo, a.hi | b.hi}; }
  friend Vec16 operator&(Vec16 a, E s) requires std::is_integral_v<E> { return {a.lo & s, a.hi & s}; }
  friend Vec16 operator|(Vec16 a, E s) requires std::is_integral_v<E> { return {a.lo | s, a.hi | s}; }
  friend Vec16 operator<<(Vec16 a, int s) requires std::is_integral_v<E> { return {a.lo << s, a.hi << s}; }
  friend Vec16 operator>>(Vec16 a, int s) requires std::is_integral_v<E> { return {a.lo >> s, a.hi >> s}; }

 private:
  template <class M>
  static Mask mask(M l, M h) {
    return {(typename Mask::Half)l, (typename Mask::Half)h};
  }
};

using vf16 = Vec16<float>;
using vi16 = Vec16<std::int32_t>;
using vu16 = Vec16<std::uint32_t>;

template <class V>
SIXFOLD_VEC V vselect(vi16 m, V a, V b) {
  using H = typename V::Half;
  return {H(m.lo ? H(a.lo) : H(b.lo)), H(m.hi ? H(a.hi) : H(b.hi))};
}
template <class To, class From>
SIXFOLD_VEC To vconvert(From v) {
  return {__builtin_convertvector(v.lo, typename To::Half), __builtin_convertvector(v.hi, typename To::Half)};
}
// Each half moved on its own: a copy of the whole struct went through the stack in 16-byte
// pieces, and the 32-byte loads after it stalled on store forwarding.
template <class V>
SIXFOLD_VEC V vload_bytes(const void* p) {
  V v;
  std::memcpy(&v.lo, p, sizeof v.lo);
  std::memcpy(&v.hi, static_cast<const char*>(p) + sizeof v.lo, sizeof v.hi);
  return v;
}
template <class V>
SIXFOLD_VEC void vstore_bytes(void* p, V v) {
  std::memcpy(p, &v.lo, sizeof v.lo);
  std::memcpy(static_cast<char*>(p) + sizeof v.lo, &v.hi, sizeof v.hi);
}
template <class To, class From>
SIXFOLD_VEC To vbits(From v) {
  return {(typename To::Half)v.lo, (typename To::Half)v.hi};
}
SIXFOLD_VEC bool vany(vi16 m) {
#if defined(__AVX2__)
  return _mm256_movemask_ps((__m256)(m.lo | m.hi)) != 0;
#else
  bool any = false;
  for (int l = 0; l < 16; ++l) any = any || m[l] != 0;
  return any;
#endif
}
SIXFOLD_VEC vh16 vnarrow16(vu16 v) {
  using H8 = std::uint16_t __attribute__((vector_size(16)));
  const H8 l = __builtin_convertvector(v.lo, H8), h = __builtin_convertvector(v.hi, H8);
  return __builtin_shufflevector(l, h, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
SIXFOLD_VEC vu16 vwiden16(vh16 h) {
  using H8 = std::uint16_t __attribute__((vector_size(16)));
  const H8 l = __builtin_shufflevector(h, h, 0, 1, 2, 3, 4, 5, 6, 7);
  const H8 u = __builtin_shufflevector(h, h, 8, 9, 10, 11, 12, 13, 14, 15);
  return {__builtin_convertvector(l, vu16::Half), __builtin_convertvector(u, vu16::Half)};
}

#endif

// a·b + c rounded once, in every caller alike. GCC contracts a * b + c on its own where FMA
// instructions exist, but which product of a longer expression it fuses can depend on what was
// inlined around it, and a row's output must not (tests: CpuRowsIndependentOfTheirNeighbours).
SIXFOLD_VEC vf16 vfma(vf16 a, vf16 b, vf16 c) {
#if defined(__AVX512F__)
  return (vf16)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__FMA__)
  return {(vf16::Half)_mm256_fmadd_ps((__m256)a.lo, (__m256)b.lo, (__m256)c.lo),
          (vf16::Half)_mm256_fmadd_ps((__m256)a.hi, (__m256)b.hi, (__m256)c.hi)};
#else
  return a * b + c;  // one expression: fused wherever the target has an FMA, else never
#endif
}
SIXFOLD_VEC vf16 vfma(vf16 a, float b, float c) { return vfma(a, vf16{} + b, vf16{} + c); }

// exp_f32 (sixfold/runtime/vec_math.hpp) on 16 lanes: the same range reduction, polynomial and
// clamping, on the vector types (GCC vectorizes the scalar function in a loop only where it can
// mask: not on AVX2). Round-to-nearest-even by the 1.5·2^23 trick (|x·log2 e| < 2^22 after
// clamping), which equals rint.
SIXFOLD_VEC vf16 vexp_f32(vf16 x) {
  const float hi = 88.72283f, lo = -87.33654f;
  const vf16 vhi = vf16{} + hi, vlo = vf16{} + lo;
  vf16 xc = vselect(x > hi, vhi, x);
  xc = vselect(xc < lo, vlo, xc);
  const vf16 k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const vf16 p = exp_reduced(xc, k);
  const vi16 ki = vconvert<vi16>(k);
  const vi16 k1 = ki >> 1, k2 = ki - k1;
  vf16 y = p * vbits<vf16>((k1 + 127) << 23) * vbits<vf16>((k2 + 127) << 23);
  y = vselect(x > hi, vf16{} + __builtin_inff(), y);
  y = vselect(x < lo, vf16{}, y);
  return vselect(x != x, x, y);
}

}  // namespace sixfold::detail
