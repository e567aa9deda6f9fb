// Test helpers for row-wise ops: (rows, n) data encoded in f32/bf16/f16 at any row stride,
// held on the CPU or a CUDA device, decoded back to doubles for comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "sixfold/runtime/dtype.hpp"
#include "sixfold/runtime/error.hpp"
#include "sixfold/runtime/tensor.hpp"

namespace sixfold::testing {

// The tests' random engine: fresh inputs on every run (seeded from std::random_device).
inline std::mt19937_64& engine() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}

inline std::uint16_t encode16(DType t, double v) {
  return t == DType::bf16 ? to_bfloat16(float(v)).bits : to_half(float(v)).bits;
}
inline double decode16(DType t, std::uint16_t b) {
  return t == DType::bf16 ? to_float(BFloat16{b}) : to_float(Half{b});
}
inline double round_to(DType t, double v) {
  return t == DType::f32 ? double(float(v)) : decode16(t, encode16(t, v));
}

// Host bytes of `rows` rows of `n` values at `stride` elements per row, padding poisoned.
inline std::vector<std::uint8_t> encode(DType t, const std::vector<double>& v, std::int64_t rows,
                                 std::int64_t n, std::int64_t stride) {
  const std::size_t es = std::size_t(dtype_bits(t) / 8);
  std::vector<std::uint8_t> bytes(std::size_t(rows * stride) * es, 0xff);  // NaN poison
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < n; ++i) {
      const double x = v[std::size_t(r * n + i)];
      void* p = bytes.data() + std::size_t(r * stride + i) * es;
      if (t == DType::f32) { const float f = float(x); std::memcpy(p, &f, 4); }
      else { const std::uint16_t b = encode16(t, x); std::memcpy(p, &b, 2); }
    }
  return bytes;
}

inline std::vector<double> decode(DType t, const std::vector<std::uint8_t>& bytes, std::int64_t rows,
                           std::int64_t n, std::int64_t stride) {
  const std::size_t es = std::size_t(dtype_bits(t) / 8);
  std::vector<double> v(std::size_t(rows * n));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < n; ++i) {
      const void* p = bytes.data() + std::size_t(r * stride + i) * es;
      if (t == DType::f32) { float f; std::memcpy(&f, p, 4); v[std::size_t(r * n + i)] = f; }
      else { std::uint16_t b; std::memcpy(&b, p, 2); v[std::size_t(r * n + i)] = decode16(t, b); }
    }
  return v;
}

// Holds bytes on the chosen device and hands out strided views of them.
struct DeviceBuffer {
  DeviceBuffer(Device d, const std::vector<std::uint8_t>& host) : device(d), bytes(std::int64_t(host.size())) {
    storage = allocate(d, bytes);
    copy_bytes(storage.get(), d, host.data(), Device::cpu(), bytes);
  }
  std::vector<std::uint8_t> host() const {
    std::vector<std::uint8_t> h(static_cast<std::size_t>(bytes));
    copy_bytes(h.data(), Device::cpu(), storage.get(), device, bytes);
    return h;
  }
  TensorView rows_view(DType t, std::int64_t rows, std::int64_t n, std::int64_t stride) const {
    TensorView v = TensorView::contiguous(storage.get(), t, {rows, n}, device);
    v.strides[0] = stride;
    return v;
  }
  Device device;
  std::int64_t bytes;
  std::shared_ptr<void> storage;
};

// Runs f and expects sixfold::Error whose message contains `fragment`.
template <class F>
void expect_error(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no sixfold::Error; expected: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// True when the CUDA cases can run; where SIXFOLD_REQUIRE_GPU is set, false is a test failure.
inline bool gpu_usable() {
  if (cuda_available()) return true;
  if (std::getenv("SIXFOLD_REQUIRE_GPU")) ADD_FAILURE() << "SIXFOLD_REQUIRE_GPU is set but no GPU is usable";
  return false;
}

}  // namespace sixfold::testing
