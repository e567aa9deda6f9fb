// Reference top-k: a full stable sort of each row in float64 order (exact for every supported
// dtype: f16, bf16, f32 and i32 values are doubles exactly), the oracle of the tests and the
// naive row of `sixfold bench topk`.
//
// Order: largest first (or smallest first), NaN above +inf, −0.0 == +0.0; the stable sort keeps
// equal values in index order, so the lower index wins ties.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace sixfold::reference {

// True when a is strictly before b in the selection order (indices aside).
inline bool topk_before(double a, double b, bool largest) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (largest) {
    if (na || nb) return na && !nb;
    return a > b;
  }
  if (na || nb) return !na && nb;
  return a < b;
}

// Indices (rows, k) of each row's k best, best first.
inline std::vector<std::int64_t> topk(const std::vector<double>& x, std::int64_t rows,
                                      std::int64_t n, std::int64_t k, bool largest) {
  std::vector<std::int64_t> out(std::size_t(rows * k)), order(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * n;
    std::iota(order.begin(), order.end(), std::int64_t(0));
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
      return topk_before(row[a], row[b], largest);
    });
    std::copy(order.begin(), order.begin() + k, out.begin() + r * k);
  }
  return out;
}

}  // namespace sixfold::reference
