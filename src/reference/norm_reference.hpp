// The float64 reference of the norm ops: plain loops, one pass per step (the unfused baseline
// and the oracle of the tests). Inputs are given as doubles (already upcast from their dtype).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "sixfold/ops/norm.hpp"

namespace sixfold::reference {

// x: rows × n, row-major. w, b: n or empty. Returns rows × n.
inline std::vector<double> norm(NormKind kind, const std::vector<double>& x, std::int64_t rows,
                                std::int64_t n, const std::vector<double>& w,
                                const std::vector<double>& b, double eps) {
  std::vector<double> y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * n;
    double* yr = y.data() + r * n;
    switch (kind) {
      case NormKind::rms: {
        double ss = 0;
        for (std::int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
        const double rs = 1.0 / std::sqrt(ss / double(n) + eps);
        for (std::int64_t i = 0; i < n; ++i) yr[i] = xr[i] * rs * (w.empty() ? 1.0 : w[i]);
        break;
      }
      case NormKind::layer: {
        double mean = 0;
        for (std::int64_t i = 0; i < n; ++i) mean += xr[i];
        mean /= double(n);
        double var = 0;
        for (std::int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        const double rs = 1.0 / std::sqrt(var / double(n) + eps);
        for (std::int64_t i = 0; i < n; ++i)
          yr[i] = (xr[i] - mean) * rs * (w.empty() ? 1.0 : w[i]) + (b.empty() ? 0.0 : b[i]);
        break;
      }
      case NormKind::softmax:
      case NormKind::log_softmax: {
        double m = -std::numeric_limits<double>::infinity();
        bool nan = false;
        for (std::int64_t i = 0; i < n; ++i) { m = std::max(m, xr[i]); nan |= std::isnan(xr[i]); }
        if (nan) m = std::numeric_limits<double>::quiet_NaN();
        double s = 0;
        for (std::int64_t i = 0; i < n; ++i) s += std::exp(xr[i] - m);
        for (std::int64_t i = 0; i < n; ++i)
          yr[i] = kind == NormKind::softmax ? std::exp(xr[i] - m) / s : xr[i] - m - std::log(s);
        break;
      }
    }
  }
  return y;
}

}  // namespace sixfold::reference
