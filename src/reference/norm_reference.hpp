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

// The row statistics rms / layer norm save (NormStats): mean (layer; 0 for rms) and
// rstd = 1/sqrt(var + eps) (rms: var = mean(x²)) of each row.
struct RowStats {
  std::vector<double> mean, rstd;  // rows each
};

inline RowStats norm_stats(NormKind kind, const std::vector<double>& x, std::int64_t rows,
                           std::int64_t n, double eps) {
  RowStats st{std::vector<double>(std::size_t(rows), 0.0), std::vector<double>(std::size_t(rows))};
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * n;
    double mean = 0, ss = 0;
    if (kind == NormKind::layer) {
      for (std::int64_t i = 0; i < n; ++i) mean += xr[i];
      mean /= double(n);
    }
    for (std::int64_t i = 0; i < n; ++i) ss += (xr[i] - mean) * (xr[i] - mean);
    st.mean[std::size_t(r)] = mean;
    st.rstd[std::size_t(r)] = 1.0 / std::sqrt(ss / double(n) + eps);
  }
  return st;
}

// The residual add of add_rms_norm / add_layer_norm: s = x + residual (the caller rounds s to
// the dtype before normalizing it, as the kernels do).
inline std::vector<double> add(const std::vector<double>& x, const std::vector<double>& r) {
  std::vector<double> s(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) s[i] = x[i] + r[i];
  return s;
}

struct NormGrads {
  std::vector<double> dx, dweight, dbias;  // rows × n, n (when w given), n (layer)
};

// Backward of `kind`. xy: the forward input x (rms, layer) or output y (softmax kinds);
// w: n or empty. Plain loops, one pass per quantity (the unfused baseline).
inline NormGrads norm_backward(NormKind kind, const std::vector<double>& xy,
                               const std::vector<double>& dy, std::int64_t rows, std::int64_t n,
                               const std::vector<double>& w, double eps) {
  NormGrads g;
  g.dx.resize(xy.size());
  if (kind == NormKind::rms || kind == NormKind::layer) g.dweight.assign(std::size_t(n), 0.0);
  if (kind == NormKind::layer) g.dbias.assign(std::size_t(n), 0.0);
  std::vector<double> xhat(static_cast<std::size_t>(n)), gw(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* x = xy.data() + r * n;
    const double* d = dy.data() + r * n;
    double* dx = g.dx.data() + r * n;
    switch (kind) {
      case NormKind::rms:
      case NormKind::layer: {
        double mean = 0;
        if (kind == NormKind::layer) {
          for (std::int64_t i = 0; i < n; ++i) mean += x[i];
          mean /= double(n);
        }
        double ss = 0;
        for (std::int64_t i = 0; i < n; ++i) ss += (x[i] - mean) * (x[i] - mean);
        const double rs = 1.0 / std::sqrt(ss / double(n) + eps);
        double mean_g = 0, mean_gx = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          xhat[std::size_t(i)] = (x[i] - mean) * rs;
          gw[std::size_t(i)] = d[i] * (w.empty() ? 1.0 : w[std::size_t(i)]);
          mean_g += gw[std::size_t(i)];
          mean_gx += gw[std::size_t(i)] * xhat[std::size_t(i)];
        }
        mean_g = kind == NormKind::layer ? mean_g / double(n) : 0.0;
        mean_gx /= double(n);
        for (std::int64_t i = 0; i < n; ++i)
          dx[i] = rs * (gw[std::size_t(i)] - mean_g - xhat[std::size_t(i)] * mean_gx);
        for (std::int64_t i = 0; i < n; ++i) {
          g.dweight[std::size_t(i)] += d[i] * xhat[std::size_t(i)];
          if (kind == NormKind::layer) g.dbias[std::size_t(i)] += d[i];
        }
        break;
      }
      case NormKind::softmax: {
        double s = 0;
        for (std::int64_t i = 0; i < n; ++i) s += d[i] * x[i];
        for (std::int64_t i = 0; i < n; ++i) dx[i] = x[i] * (d[i] - s);
        break;
      }
      case NormKind::log_softmax: {
        double s = 0;
        for (std::int64_t i = 0; i < n; ++i) s += d[i];
        for (std::int64_t i = 0; i < n; ++i) dx[i] = d[i] - std::exp(x[i]) * s;
        break;
      }
    }
  }
  return g;
}

}  // namespace sixfold::reference
