// Test helper of test_norm.cpp / test_norm_backward.cpp: the saved row statistics (NormStats)
// read back from a device and checked against the float64 ones.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "../src/reference/norm_reference.hpp"
#include "row_buffers.hpp"

namespace sixfold::testing {

inline std::vector<float> floats_of(const DeviceBuffer& b) {
  const auto bytes = b.host();
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// mean (layer) and rstd of `x` (rows × n, the values as stored) against float64: rstd within
// rtol, mean within rtol of the row's scale |mean| + σ (σ = 1/rstd up to eps).
inline void expect_stats(NormKind kind, const std::vector<double>& x, std::int64_t rows,
                         std::int64_t n, double eps, const std::vector<float>& mean,
                         const std::vector<float>& rstd, double rtol) {
  const reference::RowStats want = reference::norm_stats(kind, x, rows, n, eps);
  for (std::size_t r = 0; r < std::size_t(rows); ++r) {
    ASSERT_LE(std::fabs(rstd[r] - want.rstd[r]), rtol * want.rstd[r])
        << "rstd row " << r << " got " << rstd[r] << " want " << want.rstd[r];
    if (kind == NormKind::layer) {
      ASSERT_LE(std::fabs(mean[r] - want.mean[r]),
                rtol * (std::fabs(want.mean[r]) + 1.0 / want.rstd[r]))
          << "mean row " << r << " got " << mean[r] << " want " << want.mean[r];
    }
  }
}

}  // namespace sixfold::testing
