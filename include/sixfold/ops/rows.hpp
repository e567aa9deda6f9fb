// sixfold/ops/rows.hpp — a tensor seen as (rows, n): the last dimension is the row (unit
// stride), the leading dimensions collapse into one row stride. The view the row-wise ops
// (norms, softmax, activations) hand to their kernels.
#pragma once

#include <cstdint>

namespace sixfold {

struct RowsView {
  void* data = nullptr;
  std::int64_t rows = 0, n = 0, row_stride = 0;  // row_stride in elements
};

}  // namespace sixfold
