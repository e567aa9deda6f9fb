// Internal: validation shared by the row-wise ops (norm.cpp, activation.cpp).
#pragma once

#include <string_view>

#include "sixfold/ops/rows.hpp"
#include "sixfold/runtime/tensor.hpp"

namespace sixfold::detail {

// An absent optional tensor: an empty TensorView (data == nullptr, rank 0).
inline bool absent(const TensorView& t) { return t.data == nullptr && t.rank() == 0; }

// (rows, n) of `t`; throws unless the last dimension has unit stride and the leading ones
// collapse into one row stride.
RowsView rows_of(std::string_view where, std::string_view arg, const TensorView& t);

// Checks an output `out` against input `x` (same shape, dtype and device; rows that do not
// overlap; exact aliasing of x allowed, any other overlap rejected) and returns its rows.
RowsView output_rows(std::string_view where, std::string_view arg, const TensorView& out,
                     std::string_view x_arg, const TensorView& x, const RowsView& xr);

// A per-row parameter (weight, bias): absent, or rank 1 of length n, x's dtype and device.
void check_row_param(std::string_view where, std::string_view arg, const TensorView& p,
                     const TensorView& x, std::int64_t n);

}  // namespace sixfold::detail
