// Validation of the norm ops (nothing is written when it fails), then the backend.
#include "sixfold/ops/norm.hpp"

#include <string>

#include "norm_entries.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold {
namespace {

bool absent(const TensorView& t) { return t.data == nullptr && t.rank() == 0; }

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
  if (t.stride(last) != 1 && n > 1)
    throw_argument_error(where, arg, "unit stride in the last dimension",
                         "stride " + std::to_string(t.stride(last)));
  r.row_stride = last >= 1 ? t.stride(last - 1) : n;
  for (int i = 0; i + 1 < last; ++i)
    if (t.size(i) > 1 && t.stride(i) != t.stride(i + 1) * t.size(i + 1))
      throw_argument_error(where, arg,
                           "leading dimensions that collapse into one row stride",
                           "strides that do not (dimension " + std::to_string(i) + ")");
  if (last >= 1 && t.size(last - 1) == 1) r.row_stride = n;  // a single row per block of rows
  return r;
}

void check_param(std::string_view where, std::string_view arg, const TensorView& p,
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

void run(NormKind kind, const char* where, const TensorView& x, const TensorView& weight,
         const TensorView& bias, const TensorView& out, float eps, Stream stream) {
  NormArgs a;
  a.kind = kind;
  a.x = rows_of(where, "x", x);
  if (x.dtype != DType::f32 && x.dtype != DType::bf16 && x.dtype != DType::f16)
    throw_argument_error(where, "x", "dtype f32, bf16 or f16", std::string(dtype_name(x.dtype)));
  check::not_null(where, "out", out);
  check::same_shape(where, "out", out, "x", x);
  check::dtype(where, "out", out, x.dtype);
  check::same_device(where, "out", out, "x", x);
  a.out = rows_of(where, "out", out);
  if (a.out.rows > 1 && a.out.row_stride < a.out.n)
    throw_argument_error(where, "out", "rows that do not overlap (row stride >= row length " +
                                           std::to_string(a.out.n) + ")",
                         "row stride " + std::to_string(a.out.row_stride));
  const bool in_place = out.data == x.data && a.out.row_stride == a.x.row_stride;
  if (!in_place) check::no_overlap(where, "out", out, "x", x);
  check_param(where, "weight", weight, x, a.x.n);
  check_param(where, "bias", bias, x, a.x.n);
  if (!(eps >= 0.0f))
    throw_argument_error(where, "params.eps", "a non-negative number", std::to_string(eps));
  a.dtype = x.dtype;
  a.weight = absent(weight) ? nullptr : weight.data;
  a.bias = absent(bias) ? nullptr : bias.data;
  a.eps = eps;
  if (a.x.rows == 0) return;
  if (x.device.kind == DeviceKind::cuda) detail::norm_cuda(a, x.device.index, stream);
  else detail::norm_cpu(a);
}

}  // namespace

void rms_norm(const TensorView& x, const TensorView& weight, const TensorView& out,
              NormParams p, Stream stream) {
  run(NormKind::rms, "sixfold::rms_norm", x, weight, TensorView{}, out, p.eps, stream);
}

void layer_norm(const TensorView& x, const TensorView& weight, const TensorView& bias,
                const TensorView& out, NormParams p, Stream stream) {
  run(NormKind::layer, "sixfold::layer_norm", x, weight, bias, out, p.eps, stream);
}

void softmax(const TensorView& x, const TensorView& out, Stream stream) {
  run(NormKind::softmax, "sixfold::softmax", x, TensorView{}, TensorView{}, out, 0.0f, stream);
}

void log_softmax(const TensorView& x, const TensorView& out, Stream stream) {
  run(NormKind::log_softmax, "sixfold::log_softmax", x, TensorView{}, TensorView{}, out, 0.0f,
      stream);
}

}  // namespace sixfold
