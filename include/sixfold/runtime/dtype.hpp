// sixfold/runtime/dtype.hpp — element types of tensor views.
//
// i4 is packed: two signed 4-bit values per byte, the element with the even index in the low
// nibble. Its strides still count elements; a view of i4 must start on a byte boundary and have
// an even stride in every dimension but a unit last one.
#pragma once

#include <cstdint>
#include <string_view>

namespace sixfold {

enum class DType : std::uint8_t { f64, f32, f16, bf16, i64, i32, i8, i4 };

// Bits one element occupies (4 for packed i4).
constexpr int dtype_bits(DType t) {
  switch (t) {
    case DType::f64: return 64;
    case DType::f32: return 32;
    case DType::f16: return 16;
    case DType::bf16: return 16;
    case DType::i64: return 64;
    case DType::i32: return 32;
    case DType::i8: return 8;
    case DType::i4: return 4;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::i8: return "i8";
    case DType::i4: return "i4";
  }
  return "?";
}

constexpr bool dtype_is_float(DType t) {
  return t == DType::f64 || t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

// Bytes for n elements of t, rounding a trailing half byte of i4 up.
constexpr std::int64_t dtype_bytes(DType t, std::int64_t n) {
  return (n * dtype_bits(t) + 7) / 8;
}

// The DType of a C++ element type, for the typed accessors of tensor views.
template <class T> struct dtype_of;
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::int8_t> { static constexpr DType value = DType::i8; };
template <class T> inline constexpr DType dtype_of_v = dtype_of<T>::value;

// Storage-only 16-bit float types for host code (conversions to and from float).
// Device code uses cuda_fp16/cuda_bf16; the bit layouts are the same.
struct Half { std::uint16_t bits; };
struct BFloat16 { std::uint16_t bits; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::bf16; };

float to_float(Half h);
float to_float(BFloat16 b);
Half to_half(float f);          // round to nearest even
BFloat16 to_bfloat16(float f);  // round to nearest even, NaN stays NaN

}  // namespace sixfold
