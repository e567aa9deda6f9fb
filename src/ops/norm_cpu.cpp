// CPU backend of the norm ops: rows spread over all cores; each row is converted once into a
// per-thread f32 buffer that stays in L1/L2, its statistics accumulated in blocked f32 lanes
// (see blocked_sum), and the result converted and written once.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "norm_entries.hpp"
#include "rows_cpu.hpp"
#include "sixfold/runtime/dtype.hpp"
#include "sixfold/runtime/vec_math.hpp"

namespace sixfold::detail {
namespace {

// ---- statistics (lane_sum in rows_cpu.hpp) ------------------------------------------------
constexpr int kLanes = 16;  // the row max's lanes

template <class F>  // F(float) -> float, applied to every element and summed
double blocked_sum(const float* x, std::int64_t n, F f) {
  return lane_sum(n, [&](std::int64_t i) { return f(x[i]); });
}

double sum(const float* x, std::int64_t n) { return blocked_sum(x, n, [](float v) { return v; }); }

double sum_sq_dev(const float* x, std::int64_t n, double mean) {
  const float mf = float(mean);
  return blocked_sum(x, n, [mf](float v) { return (v - mf) * (v - mf); });
}

// max of the row; NaN if any element is NaN (NaN flags kept in integer lanes so the loop
// vectorizes: a bool accumulator kept GCC from vectorizing it, 24% of softmax's time).
float row_max(const float* x, std::int64_t n) {
  float acc[kLanes];
  std::int32_t nan[kLanes] = {};
  for (float& a : acc) a = -INFINITY;
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float v = x[i + l];
      acc[l] = v > acc[l] ? v : acc[l];
      nan[l] |= std::int32_t(v != v);
    }
  for (; i < n; ++i) {
    acc[0] = x[i] > acc[0] ? x[i] : acc[0];
    nan[0] |= std::int32_t(x[i] != x[i]);
  }
  float m = acc[0];
  std::int32_t any = 0;
  for (int l = 0; l < kLanes; ++l) {
    m = acc[l] > m ? acc[l] : m;
    any |= nan[l];
  }
  return any ? NAN : m;
}

// y[i] = exp(x[i] - m); returns Σ y.
double exp_shift(float* x, std::int64_t n, float m) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = exp_f32(x[i] - m);
  return sum(x, n);
}

void norm_row(const NormArgs& a, float* buf, float* res, const float* w, const float* b,
              std::int64_t r) {
  const std::int64_t n = a.x.n;
  const std::size_t esize = std::size_t(dtype_bits(a.dtype) / 8);
  const void* src = static_cast<const char*>(a.x.data) + std::size_t(r * a.x.row_stride) * esize;
  void* dst = static_cast<char*>(a.out.data) + std::size_t(r * a.out.row_stride) * esize;
  load_row(a.dtype, src, buf, n);
  if (a.residual.data) {  // s = x + residual, stored, then normalized as stored (rounded)
    const void* rsrc = static_cast<const char*>(a.residual.data) +
                       std::size_t(r * a.residual.row_stride) * esize;
    void* sdst = static_cast<char*>(a.sum_out.data) + std::size_t(r * a.sum_out.row_stride) * esize;
    load_row(a.dtype, rsrc, res, n);
    for (std::int64_t i = 0; i < n; ++i) buf[i] += res[i];
    store_row(a.dtype, buf, sdst, n);
    if (a.dtype != DType::f32) load_row(a.dtype, sdst, buf, n);
  }
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
      // Σ exp(x − m), keeping x for the output.
      const double s = blocked_sum(buf, n, [m](float v) { return exp_f32(v - m); });
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
    std::vector<float> res(a.residual.data ? static_cast<std::size_t>(n) : 0);
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < a.x.rows; ++r) norm_row(a, buf.data(), res.data(), wp, bp, r);
  }
}

}  // namespace sixfold::detail
