// Validation of the norm ops (nothing is written when it fails), then the backend.
#include "sixfold/ops/norm.hpp"

#include <initializer_list>
#include <string>
#include <utility>

#include "norm_entries.hpp"
#include "rows.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold {
namespace {

using detail::absent;
using detail::check_row_param;
using detail::rows_of;


void check_float_dtype(const char* where, const char* arg, const TensorView& t) {
  if (t.dtype != DType::f32 && t.dtype != DType::bf16 && t.dtype != DType::f16)
    throw_argument_error(where, arg, "dtype f32, bf16 or f16", std::string(dtype_name(t.dtype)));
}

// A second input row tensor `t` beside `x`: same shape, dtype and device.
RowsView input_rows(const char* where, const char* arg, const TensorView& t, const char* x_arg,
                    const TensorView& x) {
  check::not_null(where, arg, t);
  check::same_shape(where, arg, t, x_arg, x);
  check::dtype(where, arg, t, x.dtype);
  check::same_device(where, arg, t, x_arg, x);
  return rows_of(where, arg, t);
}

// An output that may alias `other` exactly (same data and row stride) but not overlap it.
void alias_or_disjoint(const char* where, const char* arg, const TensorView& out,
                       const RowsView& outr, const char* other_arg, const TensorView& other,
                       const RowsView& otherr) {
  const bool same = out.data == other.data && outr.row_stride == otherr.row_stride;
  if (!same) {
    if (out.data == other.data && outr.rows > 0)
      throw_argument_error(where, arg, "the same row stride as '" + std::string(other_arg) +
                                           "' when aliasing it",
                           "row stride " + std::to_string(outr.row_stride));
    check::no_overlap(where, arg, out, other_arg, other);
  }
}

// One saved statistic (mean or rstd): absent, or f32, contiguous, one element per row of `x`,
// on x's device. Returns its data (null when absent).
float* stats_of(const char* where, const char* arg, const TensorView& t, const TensorView& x,
                std::int64_t rows) {
  if (absent(t)) return nullptr;
  check::not_null(where, arg, t);
  check::dtype(where, arg, t, DType::f32);
  if (t.numel() != rows)
    throw_argument_error(where, arg,
                         std::to_string(rows) + " elements (one per row of 'x': shape [" +
                             std::to_string(rows) + "] or x's leading dimensions)",
                         "shape " + to_string(t.shape));
  check::same_device(where, arg, t, "x", x);
  check::contiguous(where, arg, t);
  return static_cast<float*>(t.data);
}

// Validates `stats` of `kind` (rms: no mean) and that they overlap none of `others`
// ((name, view) pairs; null or absent views skipped) nor each other.
void check_stats(const char* where, NormKind kind, const NormStats& stats, const TensorView& x,
                 std::int64_t rows,
                 std::initializer_list<std::pair<const char*, const TensorView*>> others,
                 const float*& mean, const float*& rstd) {
  if (kind == NormKind::rms && !absent(stats.mean))
    throw_argument_error(where, "mean", "absent (rms_norm keeps no mean)", "a tensor");
  mean = stats_of(where, "mean", stats.mean, x, rows);
  rstd = stats_of(where, "rstd", stats.rstd, x, rows);
  // no_overlap allows exact aliasing (in-place outputs); statistics may not alias anything.
  auto apart = [&](const char* arg, const TensorView& t, const char* other, const TensorView& o) {
    if (absent(t) || absent(o) || rows == 0 || o.numel() == 0) return;
    if (o.data == t.data)
      throw_argument_error(where, arg, "memory apart from '" + std::string(other) + "'",
                           "the same memory");
    check::no_overlap(where, arg, t, other, o);
  };
  for (auto [arg, t] : {std::pair{"mean", &stats.mean}, std::pair{"rstd", &stats.rstd}})
    for (auto [other, o] : others)
      if (o) apart(arg, *t, other, *o);
  apart("rstd", stats.rstd, "mean", stats.mean);
}

void run(NormKind kind, const char* where, const TensorView& x, const TensorView& weight,
         const TensorView& bias, const TensorView& out, float eps, Stream stream,
         const NormStats& stats, const TensorView* residual = nullptr,
         const TensorView* sum_out = nullptr) {
  NormArgs a;
  a.kind = kind;
  a.x = rows_of(where, "x", x);
  check_float_dtype(where, "x", x);
  a.out = detail::output_rows(where, "out", out, "x", x, a.x);
  if (residual) {
    a.residual = input_rows(where, "residual", *residual, "x", x);
    alias_or_disjoint(where, "out", out, a.out, "residual", *residual, a.residual);
    a.sum_out = detail::output_rows(where, "sum_out", *sum_out, "x", x, a.x);
    alias_or_disjoint(where, "sum_out", *sum_out, a.sum_out, "residual", *residual, a.residual);
    if (sum_out->data == out.data && a.x.rows > 0)
      throw_argument_error(where, "sum_out", "memory apart from 'out'", "the same memory");
    check::no_overlap(where, "sum_out", *sum_out, "out", out);
  }
  check_row_param(where, "weight", weight, x, a.x.n);
  check_row_param(where, "bias", bias, x, a.x.n);
  if (!(eps >= 0.0f))
    throw_argument_error(where, "params.eps", "a non-negative number", std::to_string(eps));
  a.dtype = x.dtype;
  a.weight = absent(weight) ? nullptr : weight.data;
  a.bias = absent(bias) ? nullptr : bias.data;
  a.eps = eps;
  const float *mean = nullptr, *rstd = nullptr;
  check_stats(where, kind, stats, x, a.x.rows,
              {{"x", &x}, {"out", &out}, {"residual", residual}, {"sum_out", sum_out},
               {"weight", &weight}, {"bias", &bias}},
              mean, rstd);
  a.mean = const_cast<float*>(mean);
  a.rstd = const_cast<float*>(rstd);
  if (a.x.rows == 0) return;
  if (x.device.kind == DeviceKind::cuda) detail::norm_cuda(a, x.device.index, stream);
  else detail::norm_cpu(a);
}

void check_grad(const char* where, const char* arg, const TensorView& g, const TensorView& x,
                std::int64_t n, const TensorView& dx) {
  if (absent(g)) return;
  check::not_null(where, arg, g);
  if (g.rank() != 1 || g.size(0) != n)
    throw_argument_error(where, arg, "shape [" + std::to_string(n) + "] (the row length of 'x')",
                         to_string(g.shape));
  if (g.dtype != x.dtype && g.dtype != DType::f32)
    throw_argument_error(where, arg,
                         "dtype " + std::string(dtype_name(x.dtype)) + " (that of 'x') or f32",
                         std::string(dtype_name(g.dtype)));
  check::same_device(where, arg, g, "x", x);
  check::contiguous(where, arg, g);
  check::no_overlap(where, arg, g, "dx", dx);
  if (g.data == dx.data && n > 0)
    throw_argument_error(where, arg, "memory apart from 'dx'", "the same memory");
}

void run_backward(NormKind kind, const char* where, const TensorView& dy, const TensorView& x,
                  const char* x_arg, const TensorView& weight, const TensorView& dx,
                  const TensorView& dweight, const TensorView& dbias, float eps, Stream stream,
                  const NormStats& stats = {}) {
  NormBackwardArgs a;
  a.kind = kind;
  a.dy = rows_of(where, "dy", dy);
  check_float_dtype(where, "dy", dy);
  a.x = input_rows(where, x_arg, x, "dy", dy);
  a.dx = detail::output_rows(where, "dx", dx, "dy", dy, a.dy);
  alias_or_disjoint(where, "dx", dx, a.dx, x_arg, x, a.x);
  const std::int64_t n = a.x.n;
  check_row_param(where, "weight", weight, x, n);
  check_grad(where, "dweight", dweight, x, n, dx);
  check_grad(where, "dbias", dbias, x, n, dx);
  if (!absent(dweight) && absent(weight))
    throw_argument_error(where, "dweight", "absent when 'weight' is absent", "a tensor");
  if (!absent(dweight) && !absent(dbias)) {
    check::dtype(where, "dbias", dbias, dweight.dtype);
    check::no_overlap(where, "dbias", dbias, "dweight", dweight);
    if (dbias.data == dweight.data && n > 0)
      throw_argument_error(where, "dbias", "memory apart from 'dweight'", "the same memory");
  }
  if (!(eps >= 0.0f))
    throw_argument_error(where, "params.eps", "a non-negative number", std::to_string(eps));
  a.dtype = x.dtype;
  a.grad_dtype = !absent(dweight) ? dweight.dtype : !absent(dbias) ? dbias.dtype : x.dtype;
  a.weight = absent(weight) ? nullptr : weight.data;
  a.dweight = absent(dweight) ? nullptr : dweight.data;
  a.dbias = absent(dbias) ? nullptr : dbias.data;
  a.eps = eps;
  check_stats(where, kind, stats, x, a.x.rows,
              {{"dx", &dx}, {"dweight", &dweight}, {"dbias", &dbias}}, a.mean, a.rstd);
  if (kind == NormKind::layer && (a.mean == nullptr) != (a.rstd == nullptr))
    throw_argument_error(where, a.mean ? "rstd" : "mean", "given together with '" +
                             std::string(a.mean ? "mean" : "rstd") + "' (or both absent)",
                         "absent");
  if (n == 0) return;
  if (x.device.kind == DeviceKind::cuda) detail::norm_backward_cuda(a, x.device.index, stream);
  else detail::norm_backward_cpu(a);
}

}  // namespace

void add_rms_norm(const TensorView& x, const TensorView& residual, const TensorView& weight,
                  const TensorView& out, const TensorView& sum_out, NormParams p, Stream stream,
                  const NormStats& stats_out) {
  run(NormKind::rms, "sixfold::add_rms_norm", x, weight, TensorView{}, out, p.eps, stream,
      stats_out, &residual, &sum_out);
}

void add_layer_norm(const TensorView& x, const TensorView& residual, const TensorView& weight,
                    const TensorView& bias, const TensorView& out, const TensorView& sum_out,
                    NormParams p, Stream stream, const NormStats& stats_out) {
  run(NormKind::layer, "sixfold::add_layer_norm", x, weight, bias, out, p.eps, stream, stats_out,
      &residual, &sum_out);
}

void rms_norm_backward(const TensorView& dy, const TensorView& x, const TensorView& weight,
                       const TensorView& dx, const TensorView& dweight, NormParams p,
                       Stream stream, const NormStats& stats) {
  run_backward(NormKind::rms, "sixfold::rms_norm_backward", dy, x, "x", weight, dx, dweight,
               TensorView{}, p.eps, stream, stats);
}

void layer_norm_backward(const TensorView& dy, const TensorView& x, const TensorView& weight,
                         const TensorView& dx, const TensorView& dweight,
                         const TensorView& dbias, NormParams p, Stream stream,
                         const NormStats& stats) {
  run_backward(NormKind::layer, "sixfold::layer_norm_backward", dy, x, "x", weight, dx, dweight,
               dbias, p.eps, stream, stats);
}

void softmax_backward(const TensorView& dy, const TensorView& y, const TensorView& dx,
                      Stream stream) {
  run_backward(NormKind::softmax, "sixfold::softmax_backward", dy, y, "y", TensorView{}, dx,
               TensorView{}, TensorView{}, 0.0f, stream);
}

void log_softmax_backward(const TensorView& dy, const TensorView& y, const TensorView& dx,
                          Stream stream) {
  run_backward(NormKind::log_softmax, "sixfold::log_softmax_backward", dy, y, "y", TensorView{},
               dx, TensorView{}, TensorView{}, 0.0f, stream);
}

void rms_norm(const TensorView& x, const TensorView& weight, const TensorView& out,
              NormParams p, Stream stream, const NormStats& stats_out) {
  run(NormKind::rms, "sixfold::rms_norm", x, weight, TensorView{}, out, p.eps, stream, stats_out);
}

void layer_norm(const TensorView& x, const TensorView& weight, const TensorView& bias,
                const TensorView& out, NormParams p, Stream stream, const NormStats& stats_out) {
  run(NormKind::layer, "sixfold::layer_norm", x, weight, bias, out, p.eps, stream, stats_out);
}

void softmax(const TensorView& x, const TensorView& out, Stream stream) {
  run(NormKind::softmax, "sixfold::softmax", x, TensorView{}, TensorView{}, out, 0.0f, stream,
      NormStats{});
}

void log_softmax(const TensorView& x, const TensorView& out, Stream stream) {
  run(NormKind::log_softmax, "sixfold::log_softmax", x, TensorView{}, TensorView{}, out, 0.0f,
      stream, NormStats{});
}

}  // namespace sixfold
