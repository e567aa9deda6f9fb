// sixfold/runtime/vec_math.hpp — f32 exp written so the compiler vectorizes it (no libm call,
// no branches): the CPU kernels' exp and the CPU exp ceiling use this one function.
//
// exp(x) = 2^k · exp(r), k = round(x·log2 e), r = x − k·ln 2 (Cody–Waite: ln 2 in two parts),
// exp(r) on |r| ≤ ln2/2 by a degree-6 polynomial (Taylor with minimax-adjusted tail), then k is
// added to the exponent bits. Max error ≈ 2 ulp on [−87, 88]; x < −87.3 gives 0, x > 88.7 +inf,
// NaN stays NaN.
#pragma once

#include <bit>
#include <cstdint>

namespace sixfold {

// exp(x − k·ln 2) for k = round(x·log2 e): the range reduction and polynomial that every f32
// exp of the library shares. T is float or a GCC vector of floats (the CPU attention kernel's
// 16-lane exps), so the coefficients live here once.
template <class T>
inline T exp_reduced(T x, T k) {
  T r = x - k * 0.693359375f;  // ln2 high part (exact in a few bits)
  r = r - k * -2.12194440e-4f;  // ln2 low part
  T p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

inline float exp_f32(float x) {
  const float hi = 88.72283f, lo = -87.33654f;
  const float xc = x > hi ? hi : (x < lo ? lo : x);
  const float k = __builtin_rintf(xc * 1.44269504088896341f);
  const float p = exp_reduced(xc, k);
  // 2^k as exponent bits; k in [-126, 128]: split to stay representable at both ends.
  const std::int32_t ki = std::int32_t(k);
  const std::int32_t k1 = ki >> 1, k2 = ki - k1;
  const float s1 = std::bit_cast<float>((k1 + 127) << 23);
  const float s2 = std::bit_cast<float>((k2 + 127) << 23);
  float y = p * s1 * s2;
  y = x > hi ? __builtin_inff() : y;
  y = x < lo ? 0.0f : y;
  return x != x ? x : y;
}

}  // namespace sixfold
