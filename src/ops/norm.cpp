// Validation of the norm ops (nothing is written when it fails), then the backend.
#include "sixfold/ops/norm.hpp"

#include <string>

#include "norm_entries.hpp"
#include "rows.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold {
namespace {

using detail::absent;
using detail::check_row_param;
using detail::rows_of;


void run(NormKind kind, const char* where, const TensorView& x, const TensorView& weight,
         const TensorView& bias, const TensorView& out, float eps, Stream stream) {
  NormArgs a;
  a.kind = kind;
  a.x = rows_of(where, "x", x);
  if (x.dtype != DType::f32 && x.dtype != DType::bf16 && x.dtype != DType::f16)
    throw_argument_error(where, "x", "dtype f32, bf16 or f16", std::string(dtype_name(x.dtype)));
  a.out = detail::output_rows(where, "out", out, "x", x, a.x);
  check_row_param(where, "weight", weight, x, a.x.n);
  check_row_param(where, "bias", bias, x, a.x.n);
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
