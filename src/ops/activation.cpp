// Validation of the activation ops (nothing is written when it fails), then the backend.
#include "sixfold/ops/activation.hpp"

#include <string>

#include "activation_entries.hpp"
#include "rows.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold {
namespace {

void check_dtype(std::string_view where, std::string_view arg, const TensorView& t) {
  if (t.dtype != DType::f32 && t.dtype != DType::bf16 && t.dtype != DType::f16)
    throw_argument_error(where, arg, "dtype f32, bf16 or f16", std::string(dtype_name(t.dtype)));
}

void run(const ActivationArgs& a, const TensorView& x, Stream stream) {
  if (a.x.rows == 0 || a.x.n == 0) return;
  if (x.device.kind == DeviceKind::cuda) detail::activation_cuda(a, x.device.index, stream);
  else detail::activation_cpu(a);
}

}  // namespace

void bias_gelu(const TensorView& x, const TensorView& bias, const TensorView& out, GeluParams p,
               Stream stream) {
  const char* where = "sixfold::bias_gelu";
  ActivationArgs a;
  a.kind = p.form == GeluForm::tanh ? ActivationKind::gelu_tanh : ActivationKind::gelu_erf;
  if (p.form != GeluForm::erf && p.form != GeluForm::tanh)
    throw_argument_error(where, "params.form", "erf or tanh", std::to_string(int(p.form)));
  a.x = detail::rows_of(where, "x", x);
  check_dtype(where, "x", x);
  a.out = detail::output_rows(where, "out", out, "x", x, a.x);
  detail::check_row_param(where, "bias", bias, x, a.x.n);
  a.dtype = x.dtype;
  a.bias = detail::absent(bias) ? nullptr : bias.data;
  run(a, x, stream);
}

void silu_gate(const TensorView& a_in, const TensorView& b_in, const TensorView& out,
               Stream stream) {
  const char* where = "sixfold::silu_gate";
  ActivationArgs a;
  a.kind = ActivationKind::silu_gate;
  a.x = detail::rows_of(where, "a", a_in);
  check_dtype(where, "a", a_in);
  check::not_null(where, "b", b_in);
  check::same_shape(where, "b", b_in, "a", a_in);
  check::dtype(where, "b", b_in, a_in.dtype);
  check::same_device(where, "b", b_in, "a", a_in);
  a.b = detail::rows_of(where, "b", b_in);
  a.out = detail::output_rows(where, "out", out, "a", a_in, a.x);
  if (!(out.data == b_in.data && a.out.row_stride == a.b.row_stride))
    check::no_overlap(where, "out", out, "b", b_in);
  a.dtype = a_in.dtype;
  run(a, a_in, stream);
}

}  // namespace sixfold
