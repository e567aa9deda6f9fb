// Conversions between float and the storage-only 16-bit types (round to nearest even).
#include <bit>
#include <cstring>

#include "sixfold/runtime/dtype.hpp"

namespace sixfold {

float to_float(BFloat16 b) { return std::bit_cast<float>(std::uint32_t(b.bits) << 16); }

BFloat16 to_bfloat16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {std::uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return {std::uint16_t(u >> 16)};
}

float to_float(Half h) {
  const std::uint32_t sign = std::uint32_t(h.bits & 0x8000u) << 16;
  std::uint32_t exp = (h.bits >> 10) & 0x1fu, man = h.bits & 0x3ffu;
  std::uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
    u = sign | (std::uint32_t(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(u);
}

Half to_half(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return {std::uint16_t(sign | 0x7e00u)};   // NaN
  if (a >= 0x477ff000u) return {std::uint16_t(sign | 0x7c00u)};  // overflow (after rounding) to inf
  if (a < 0x38800000u) {                                         // subnormal or zero in half
    // value = a as float; half subnormal unit is 2^-24.
    const float v = std::bit_cast<float>(a);
    const float scaled = v * 16777216.0f;  // exact: power of two
    // round to nearest even integer
    float r = scaled;
    std::uint32_t q = std::uint32_t(r);
    const float frac = r - float(q);
    if (frac > 0.5f || (frac == 0.5f && (q & 1u))) ++q;
    return {std::uint16_t(sign | q)};
  }
  std::uint32_t m = a + 0xfffu + ((a >> 13) & 1u);  // round mantissa to 10 bits
  return {std::uint16_t(sign | ((m - 0x38000000u) >> 13))};
}

}  // namespace sixfold
