// Validation shared by the row-wise ops.
#include "rows.hpp"

#include <string>

#include "sixfold/runtime/error.hpp"

namespace sixfold::detail {

// (rows, n) of a tensor whose last dimension is the row, its leading ones one row stride.
RowsView rows_of(std::string_view where, std::string_view arg, const TensorView& t) {
  check::not_null(where, arg, t);
  if (t.rank() < 1)
    throw_argument_error(where, arg, "at least one dimension (the row)", "a scalar");
  const int last = t.rank() - 1;
  const std::int64_t n = t.size(last);
  RowsView r;
  r.data = t.data;
  r.n = n;
  r.rows = n == 0 ? 0 : t.numel() / n;
  if (t.numel() == 0) {  // nothing is addressed: strides carry no meaning (frameworks report 0)
    r.rows = 0;
    r.row_stride = n;
    return r;
  }
  if (t.stride(last) != 1 && n > 1)
    throw_argument_error(where, arg, "unit stride in the last dimension",
                         "stride " + std::to_string(t.stride(last)));
  // Leading dimensions of size 1 carry no stride information (frameworks set them freely);
  // the others must nest: each one's stride spans the next one's whole extent.
  int inner = -1;
  for (int i = last - 1; i >= 0 && inner < 0; --i)
    if (t.size(i) != 1) inner = i;
  r.row_stride = inner >= 0 ? t.stride(inner) : n;
  for (int i = 0, prev = -1; i < last; ++i) {
    if (t.size(i) == 1) continue;
    if (prev >= 0 && t.stride(prev) != t.stride(i) * t.size(i))
      throw_argument_error(where, arg, "leading dimensions that collapse into one row stride",
                           "strides that do not (dimension " + std::to_string(prev) + ")");
    prev = i;
  }
  return r;
}

void check_row_param(std::string_view where, std::string_view arg, const TensorView& p,
                 const TensorView& x, std::int64_t n) {
  if (absent(p)) return;
  check::not_null(where, arg, p);
  if (p.rank() != 1 || p.size(0) != n)
    throw_argument_error(where, arg, "shape [" + std::to_string(n) + "] (the row length of 'x')",
                         to_string(p.shape));
  check::dtype(where, arg, p, x.dtype);
  check::same_device(where, arg, p, "x", x);
  check::contiguous(where, arg, p);
}

RowsView output_rows(std::string_view where, std::string_view arg, const TensorView& out,
                     std::string_view x_arg, const TensorView& x, const RowsView& xr) {
  check::not_null(where, arg, out);
  check::same_shape(where, arg, out, x_arg, x);
  check::dtype(where, arg, out, x.dtype);
  check::same_device(where, arg, out, x_arg, x);
  const RowsView r = rows_of(where, arg, out);
  if (r.rows > 1 && r.row_stride < r.n)
    throw_argument_error(where, arg, "rows that do not overlap (row stride >= row length " +
                                         std::to_string(r.n) + ")",
                         "row stride " + std::to_string(r.row_stride));
  const bool in_place = out.data == x.data && r.row_stride == xr.row_stride;
  if (!in_place) check::no_overlap(where, arg, out, x_arg, x);
  return r;
}

}  // namespace sixfold::detail
