// sixfold._C — the nanobind extension behind the `sixfold` Python package.
//
// Arrays arrive through DLPack or the buffer protocol as nb::ndarray with no constraints, so
// nanobind never converts or copies them: the kernel sees the caller's pointer, dtype, shape
// and strides, and validation (sixfold::Error, raised here as sixfold.Error) decides what is
// acceptable. The GIL is released while a kernel runs. Output allocation and stream defaults
// live in the Python layer (python/sixfold/__init__.py), which knows the caller's framework.
#include "bind_common.hpp"

#include "sixfold/algebra/laws.hpp"
#include "sixfold/ops/activation.hpp"
#include "sixfold/ops/norm.hpp"

using namespace sixfold;
using namespace sixfold::python;

namespace {

void scan(bool exclusive, const In& x, const Out& out, const std::string& op, std::uintptr_t stream) {
  const char* where = exclusive ? "sixfold.exclusive_scan" : "sixfold.inclusive_scan";
  const TensorView vi = view_of(x, where, "x"), vo = view_of(out, where, "out");
  const ScanParams p{op_from(op, where)};
  g_last_in = std::uintptr_t(vi.data);
  g_last_out = std::uintptr_t(vo.data);
  nb::gil_scoped_release release;
  if (exclusive) exclusive_scan(vi, vo, p, Stream{reinterpret_cast<void*>(stream)});
  else inclusive_scan(vi, vo, p, Stream{reinterpret_cast<void*>(stream)});
}

// The saved row statistics of rms / layer norm (absent arrays: not written / not given).
template <class A>
NormStats stats_of(const std::optional<A>& mean, const std::optional<A>& rstd, const char* where) {
  NormStats st;
  if (mean) st.mean = view_of(*mean, where, "mean");
  if (rstd) st.rstd = view_of(*rstd, where, "rstd");
  return st;
}

void norm_op(NormKind kind, const In& x, const std::optional<In>& w, const std::optional<In>& b,
             const Out& out, float eps, std::uintptr_t stream,
             const std::optional<Out>& mean = std::nullopt,
             const std::optional<Out>& rstd = std::nullopt) {
  const char* names[] = {"sixfold.rms_norm", "sixfold.layer_norm", "sixfold.softmax", "sixfold.log_softmax"};
  const char* where = names[int(kind)];
  const TensorView vx = view_of(x, where, "x"), vo = view_of(out, where, "out");
  const TensorView vw = optional_view(w, where, "weight"), vb = optional_view(b, where, "bias");
  const NormStats st = stats_of(mean, rstd, where);
  g_last_in = std::uintptr_t(vx.data);
  g_last_out = std::uintptr_t(vo.data);
  const Stream s{reinterpret_cast<void*>(stream)};
  nb::gil_scoped_release release;
  switch (kind) {
    case NormKind::rms: rms_norm(vx, vw, vo, {eps}, s, st); break;
    case NormKind::layer: layer_norm(vx, vw, vb, vo, {eps}, s, st); break;
    case NormKind::softmax: softmax(vx, vo, s); break;
    case NormKind::log_softmax: log_softmax(vx, vo, s); break;
  }
}

void add_norm_op(NormKind kind, const In& x, const In& residual, const std::optional<In>& w,
                 const std::optional<In>& b, const Out& out, const Out& sum_out, float eps,
                 std::uintptr_t stream, const std::optional<Out>& mean,
                 const std::optional<Out>& rstd) {
  const char* where = kind == NormKind::rms ? "sixfold.add_rms_norm" : "sixfold.add_layer_norm";
  const TensorView vx = view_of(x, where, "x"), vr = view_of(residual, where, "residual");
  const TensorView vo = view_of(out, where, "out"), vs = view_of(sum_out, where, "sum_out");
  const TensorView vw = optional_view(w, where, "weight"), vb = optional_view(b, where, "bias");
  const NormStats st = stats_of(mean, rstd, where);
  g_last_in = std::uintptr_t(vx.data);
  g_last_out = std::uintptr_t(vo.data);
  const Stream s{reinterpret_cast<void*>(stream)};
  nb::gil_scoped_release release;
  if (kind == NormKind::rms) add_rms_norm(vx, vr, vw, vo, vs, {eps}, s, st);
  else add_layer_norm(vx, vr, vw, vb, vo, vs, {eps}, s, st);
}

// Backward of `kind`; x is the forward input (norms) or output y (softmax kinds).
void norm_backward_op(NormKind kind, const In& dy, const In& x, const std::optional<In>& w,
                      const Out& dx, const std::optional<Out>& dw, const std::optional<Out>& db,
                      float eps, std::uintptr_t stream,
                      const std::optional<In>& mean = std::nullopt,
                      const std::optional<In>& rstd = std::nullopt) {
  const char* names[] = {"sixfold.rms_norm_backward", "sixfold.layer_norm_backward",
                         "sixfold.softmax_backward", "sixfold.log_softmax_backward"};
  const char* where = names[int(kind)];
  const char* x_arg = kind == NormKind::rms || kind == NormKind::layer ? "x" : "y";
  const TensorView vd = view_of(dy, where, "dy"), vx = view_of(x, where, x_arg),
                   vdx = view_of(dx, where, "dx");
  const TensorView vw = optional_view(w, where, "weight");
  const TensorView vdw = dw ? view_of(*dw, where, "dweight") : TensorView{};
  const TensorView vdb = db ? view_of(*db, where, "dbias") : TensorView{};
  const NormStats st = stats_of(mean, rstd, where);
  g_last_in = std::uintptr_t(vd.data);
  g_last_out = std::uintptr_t(vdx.data);
  const Stream s{reinterpret_cast<void*>(stream)};
  nb::gil_scoped_release release;
  switch (kind) {
    case NormKind::rms: rms_norm_backward(vd, vx, vw, vdx, vdw, {eps}, s, st); break;
    case NormKind::layer: layer_norm_backward(vd, vx, vw, vdx, vdw, vdb, {eps}, s, st); break;
    case NormKind::softmax: softmax_backward(vd, vx, vdx, s); break;
    case NormKind::log_softmax: log_softmax_backward(vd, vx, vdx, s); break;
  }
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "sixfold native kernels (use the `sixfold` package, not this module)";
  nb::exception<Error>(m, "Error", PyExc_ValueError);

  m.def("inclusive_scan", [](const In& x, const Out& out, const std::string& op, std::uintptr_t s) {
    scan(false, x, out, op, s);
  }, nb::arg("x"), nb::arg("out"), nb::arg("op"), nb::arg("stream"));
  m.def("exclusive_scan", [](const In& x, const Out& out, const std::string& op, std::uintptr_t s) {
    scan(true, x, out, op, s);
  }, nb::arg("x"), nb::arg("out"), nb::arg("op"), nb::arg("stream"));
  m.def("reduce", [](const In& x, const Out& out, const std::string& op, std::uintptr_t s) {
    const char* where = "sixfold.reduce";
    const TensorView vi = view_of(x, where, "x"), vo = view_of(out, where, "out");
    const ScanParams p{op_from(op, where)};
    g_last_in = std::uintptr_t(vi.data);
    g_last_out = std::uintptr_t(vo.data);
    nb::gil_scoped_release release;
    reduce(vi, vo, p, Stream{reinterpret_cast<void*>(s)});
  }, nb::arg("x"), nb::arg("out"), nb::arg("op"), nb::arg("stream"));
  m.def("segmented_reduce", [](const In& x, const In& offsets, const Out& out, const std::string& op,
                               std::uintptr_t s) {
    const char* where = "sixfold.segmented_reduce";
    const TensorView vi = view_of(x, where, "x"), vf = view_of(offsets, where, "offsets"),
                     vo = view_of(out, where, "out");
    const ScanParams p{op_from(op, where)};
    g_last_in = std::uintptr_t(vi.data);
    g_last_out = std::uintptr_t(vo.data);
    nb::gil_scoped_release release;
    segmented_reduce(vi, vf, vo, p, Stream{reinterpret_cast<void*>(s)});
  }, nb::arg("x"), nb::arg("offsets"), nb::arg("out"), nb::arg("op"), nb::arg("stream"));

  // mean / rstd (rms: rstd only): optional f32 arrays, written (forward) or read (backward).
  m.def("rms_norm", [](const In& x, const std::optional<In>& w, const Out& out, float eps, std::uintptr_t s,
                       const std::optional<Out>& rstd) {
    norm_op(NormKind::rms, x, w, std::nullopt, out, eps, s, std::nullopt, rstd);
  }, nb::arg("x"), nb::arg("weight").none(), nb::arg("out"), nb::arg("eps"), nb::arg("stream"),
        nb::arg("rstd").none() = nb::none());
  m.def("layer_norm", [](const In& x, const std::optional<In>& w, const std::optional<In>& b, const Out& out,
                         float eps, std::uintptr_t s, const std::optional<Out>& mean,
                         const std::optional<Out>& rstd) {
    norm_op(NormKind::layer, x, w, b, out, eps, s, mean, rstd);
  }, nb::arg("x"), nb::arg("weight").none(), nb::arg("bias").none(), nb::arg("out"), nb::arg("eps"),
        nb::arg("stream"), nb::arg("mean").none() = nb::none(), nb::arg("rstd").none() = nb::none());
  m.def("softmax", [](const In& x, const Out& out, std::uintptr_t s) {
    norm_op(NormKind::softmax, x, std::nullopt, std::nullopt, out, 0.0f, s);
  }, nb::arg("x"), nb::arg("out"), nb::arg("stream"));
  m.def("log_softmax", [](const In& x, const Out& out, std::uintptr_t s) {
    norm_op(NormKind::log_softmax, x, std::nullopt, std::nullopt, out, 0.0f, s);
  }, nb::arg("x"), nb::arg("out"), nb::arg("stream"));
  m.def("add_rms_norm", [](const In& x, const In& r, const std::optional<In>& w, const Out& out,
                           const Out& sum_out, float eps, std::uintptr_t s, const std::optional<Out>& rstd) {
    add_norm_op(NormKind::rms, x, r, w, std::nullopt, out, sum_out, eps, s, std::nullopt, rstd);
  }, nb::arg("x"), nb::arg("residual"), nb::arg("weight").none(), nb::arg("out"), nb::arg("sum_out"),
        nb::arg("eps"), nb::arg("stream"), nb::arg("rstd").none() = nb::none());
  m.def("add_layer_norm", [](const In& x, const In& r, const std::optional<In>& w, const std::optional<In>& b,
                             const Out& out, const Out& sum_out, float eps, std::uintptr_t s,
                             const std::optional<Out>& mean, const std::optional<Out>& rstd) {
    add_norm_op(NormKind::layer, x, r, w, b, out, sum_out, eps, s, mean, rstd);
  }, nb::arg("x"), nb::arg("residual"), nb::arg("weight").none(), nb::arg("bias").none(), nb::arg("out"),
        nb::arg("sum_out"), nb::arg("eps"), nb::arg("stream"), nb::arg("mean").none() = nb::none(),
        nb::arg("rstd").none() = nb::none());
  m.def("rms_norm_backward", [](const In& dy, const In& x, const std::optional<In>& w, const Out& dx,
                                const std::optional<Out>& dw, float eps, std::uintptr_t s,
                                const std::optional<In>& rstd) {
    norm_backward_op(NormKind::rms, dy, x, w, dx, dw, std::nullopt, eps, s, std::nullopt, rstd);
  }, nb::arg("dy"), nb::arg("x"), nb::arg("weight").none(), nb::arg("dx"), nb::arg("dweight").none(),
        nb::arg("eps"), nb::arg("stream"), nb::arg("rstd").none() = nb::none());
  m.def("layer_norm_backward", [](const In& dy, const In& x, const std::optional<In>& w, const Out& dx,
                                  const std::optional<Out>& dw, const std::optional<Out>& db, float eps,
                                  std::uintptr_t s, const std::optional<In>& mean,
                                  const std::optional<In>& rstd) {
    norm_backward_op(NormKind::layer, dy, x, w, dx, dw, db, eps, s, mean, rstd);
  }, nb::arg("dy"), nb::arg("x"), nb::arg("weight").none(), nb::arg("dx"), nb::arg("dweight").none(),
        nb::arg("dbias").none(), nb::arg("eps"), nb::arg("stream"), nb::arg("mean").none() = nb::none(),
        nb::arg("rstd").none() = nb::none());
  m.def("softmax_backward", [](const In& dy, const In& y, const Out& dx, std::uintptr_t s) {
    norm_backward_op(NormKind::softmax, dy, y, std::nullopt, dx, std::nullopt, std::nullopt, 0.0f, s);
  }, nb::arg("dy"), nb::arg("y"), nb::arg("dx"), nb::arg("stream"));
  m.def("log_softmax_backward", [](const In& dy, const In& y, const Out& dx, std::uintptr_t s) {
    norm_backward_op(NormKind::log_softmax, dy, y, std::nullopt, dx, std::nullopt, std::nullopt, 0.0f, s);
  }, nb::arg("dy"), nb::arg("y"), nb::arg("dx"), nb::arg("stream"));

  m.def("bias_gelu", [](const In& x, const std::optional<In>& bias, const Out& out, const std::string& approximate,
                        std::uintptr_t s) {
    const char* where = "sixfold.bias_gelu";
    if (approximate != "none" && approximate != "tanh")
      throw_argument_error(where, "approximate", "'none' or 'tanh'", "'" + approximate + "'");
    const TensorView vx = view_of(x, where, "x"), vo = view_of(out, where, "out");
    const TensorView vb = optional_view(bias, where, "bias");
    g_last_in = std::uintptr_t(vx.data);
    g_last_out = std::uintptr_t(vo.data);
    nb::gil_scoped_release release;
    bias_gelu(vx, vb, vo, {approximate == "tanh" ? GeluForm::tanh : GeluForm::erf},
              Stream{reinterpret_cast<void*>(s)});
  }, nb::arg("x"), nb::arg("bias").none(), nb::arg("out"), nb::arg("approximate"), nb::arg("stream"));
  m.def("silu_gate", [](const In& a, const In& b, const Out& out, std::uintptr_t s) {
    const char* where = "sixfold.silu_gate";
    const TensorView va = view_of(a, where, "a"), vb = view_of(b, where, "b"), vo = view_of(out, where, "out");
    g_last_in = std::uintptr_t(va.data);
    g_last_out = std::uintptr_t(vo.data);
    nb::gil_scoped_release release;
    silu_gate(va, vb, vo, Stream{reinterpret_cast<void*>(s)});
  }, nb::arg("a"), nb::arg("b"), nb::arg("out"), nb::arg("stream"));

  m.def("last_call_pointers", [] { return std::make_tuple(g_last_in, g_last_out); },
        "(input, output) data pointers the last op handed to its kernel");
  m.def("cuda_available", &cuda_available);
  m.def("check_laws", [](int trials, bool counterexamples) {
    const auto reports = counterexamples ? algebra::check_counterexamples(trials)
                                         : algebra::check_library_monoids(trials);
    std::vector<std::tuple<std::string, bool, std::string>> r;
    for (const auto& rep : reports) r.emplace_back(rep.monoid, rep.passed(), algebra::format_report(rep));
    return r;
  }, nb::arg("trials") = 1000, nb::arg("counterexamples") = false);

  bind_topk(m);
  bind_selective_scan(m);
  bind_attention(m);
}
