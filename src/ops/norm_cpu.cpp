// CPU backend of the norm ops: rows spread over all cores; each row is converted once into a
// per-thread f32 buffer that stays in L1/L2, its statistics accumulated in f64 (so a 1M-element
// row keeps f32-level accuracy), and the result converted and written once.
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns inside its own AVX-512 headers (conversions built on _mm*_undefined_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

#include "norm_entries.hpp"
#include "sixfold/runtime/dtype.hpp"
#include "sixfold/runtime/vec_math.hpp"

namespace sixfold::detail {
namespace {

// ---- conversions of whole rows (written so the compiler vectorizes them) --------------------
void load_row(DType t, const void* src, float* dst, std::int64_t n) {
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

void store_row(DType t, const float* src, void* dst, std::int64_t n) {
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

// ---- f64 statistics with independent lanes (vectorizable, reproducible) ---------------------
constexpr int kLanes = 8;

double sum(const float* x, std::int64_t n) {
  double acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l];
  for (; i < n; ++i) acc[0] += x[i];
  double s = 0;
  for (double a : acc) s += a;
  return s;
}

double sum_sq_dev(const float* x, std::int64_t n, double mean) {
  double acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const double d = double(x[i + l]) - mean;
      acc[l] += d * d;
    }
  for (; i < n; ++i) acc[0] += (double(x[i]) - mean) * (double(x[i]) - mean);
  double s = 0;
  for (double a : acc) s += a;
  return s;
}

float row_max(const float* x, std::int64_t n) {
  float acc[16];
  for (float& a : acc) a = -INFINITY;
  std::int64_t i = 0;
  bool nan = false;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) {
      acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
      nan |= x[i + l] != x[i + l];
    }
  for (; i < n; ++i) {
    acc[0] = x[i] > acc[0] ? x[i] : acc[0];
    nan |= x[i] != x[i];
  }
  float m = acc[0];
  for (float a : acc) m = a > m ? a : m;
  return nan ? NAN : m;
}

// y[i] = exp(x[i] - m); returns Σ y in f64.
double exp_shift(float* x, std::int64_t n, float m) {
  double acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      x[i + l] = exp_f32(x[i + l] - m);
      acc[l] += x[i + l];
    }
  for (; i < n; ++i) {
    x[i] = exp_f32(x[i] - m);
    acc[0] += x[i];
  }
  double s = 0;
  for (double a : acc) s += a;
  return s;
}

void norm_row(const NormArgs& a, float* buf, const float* w, const float* b, std::int64_t r) {
  const std::int64_t n = a.x.n;
  const std::size_t esize = std::size_t(dtype_bits(a.dtype) / 8);
  const void* src = static_cast<const char*>(a.x.data) + std::size_t(r * a.x.row_stride) * esize;
  void* dst = static_cast<char*>(a.out.data) + std::size_t(r * a.out.row_stride) * esize;
  load_row(a.dtype, src, buf, n);
  switch (a.kind) {
    case NormKind::rms: {
      const float rs = float(1.0 / std::sqrt(sum_sq_dev(buf, n, 0.0) / double(n) + double(a.eps)));
      if (w) for (std::int64_t i = 0; i < n; ++i) buf[i] = buf[i] * rs * w[i];
      else for (std::int64_t i = 0; i < n; ++i) buf[i] *= rs;
      break;
    }
    case NormKind::layer: {
      const double mean = sum(buf, n) / double(n);
      const float rs = float(1.0 / std::sqrt(sum_sq_dev(buf, n, mean) / double(n) + double(a.eps)));
      const float mf = float(mean);
      for (std::int64_t i = 0; i < n; ++i) {
        float y = (buf[i] - mf) * rs;
        if (w) y *= w[i];
        if (b) y += b[i];
        buf[i] = y;
      }
      break;
    }
    case NormKind::softmax: {
      const float m = row_max(buf, n);
      const float inv = float(1.0 / exp_shift(buf, n, m));
      for (std::int64_t i = 0; i < n; ++i) buf[i] *= inv;
      break;
    }
    case NormKind::log_softmax: {
      const float m = row_max(buf, n);
      // Σ exp(x − m) lane-wise, keeping x for the output.
      double acc[kLanes] = {};
      std::int64_t i = 0;
      for (; i + kLanes <= n; i += kLanes)
        for (int l = 0; l < kLanes; ++l) acc[l] += exp_f32(buf[i + l] - m);
      for (; i < n; ++i) acc[0] += exp_f32(buf[i] - m);
      double s = 0;
      for (double v : acc) s += v;
      const float shift = float(double(m) + std::log(s));
      for (std::int64_t k = 0; k < n; ++k) buf[k] -= shift;
      break;
    }
  }
  store_row(a.dtype, buf, dst, n);
}

}  // namespace

void norm_cpu(const NormArgs& a) {
  const std::int64_t n = a.x.n;
  // Weight and bias converted to f32 once per call.
  std::vector<float> w, b;
  if (a.weight) { w.resize(std::size_t(n)); load_row(a.dtype, a.weight, w.data(), n); }
  if (a.bias) { b.resize(std::size_t(n)); load_row(a.dtype, a.bias, b.data(), n); }
  const float* wp = a.weight ? w.data() : nullptr;
  const float* bp = a.bias ? b.data() : nullptr;
  const bool parallel = a.x.rows > 1 && a.x.rows * n >= (1 << 15);
#pragma omp parallel if (parallel)
  {
    std::vector<float> buf(static_cast<std::size_t>(n));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < a.x.rows; ++r) norm_row(a, buf.data(), wp, bp, r);
  }
}

}  // namespace sixfold::detail
