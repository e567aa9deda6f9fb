// python/bind_selective_scan.cpp — Python bindings of sixfold::selective_scan(_varlen) and
// sixfold::selective_state_update (outputs are allocated by the Python layer,
// python/sixfold/__init__.py).
#include "bind_common.hpp"

#include "sixfold/ops/selective_scan.hpp"

namespace sixfold::python {

namespace {

using Opt = std::optional<In>;

SelectiveScanTensors scan_tensors(const char* where, const In& u, const In& delta, const In& A, const In& B,
                                  const In& C, const Opt& D, const Opt& z, const Opt& delta_bias,
                                  const Opt& initial_state) {
  SelectiveScanTensors t;
  t.u = view_of(u, where, "u");
  t.delta = view_of(delta, where, "delta");
  t.A = view_of(A, where, "A");
  t.B = view_of(B, where, "B");
  t.C = view_of(C, where, "C");
  t.D = optional_view(D, where, "D");
  t.z = optional_view(z, where, "z");
  t.delta_bias = optional_view(delta_bias, where, "delta_bias");
  t.initial_state = optional_view(initial_state, where, "initial_state");
  return t;
}

}  // namespace

void bind_selective_scan(nb::module_& m) {
  m.def("selective_scan", [](const In& u, const In& delta, const In& A, const In& B, const In& C, const Opt& D,
                             const Opt& z, const Opt& delta_bias, const Opt& initial_state, const Out& out,
                             const std::optional<Out>& final_state, bool delta_softplus, std::uintptr_t s) {
    const char* where = "sixfold.selective_scan";
    const SelectiveScanTensors t = scan_tensors(where, u, delta, A, B, C, D, z, delta_bias, initial_state);
    const TensorView vo = view_of(out, where, "out");
    const TensorView vf = final_state ? view_of(*final_state, where, "final_state") : TensorView{};
    g_last_in = std::uintptr_t(t.u.data);
    g_last_out = std::uintptr_t(vo.data);
    nb::gil_scoped_release release;
    selective_scan(t, vo, vf, {delta_softplus}, stream_of(s));
  }, nb::arg("u"), nb::arg("delta"), nb::arg("A"), nb::arg("B"), nb::arg("C"), nb::arg("D").none(),
     nb::arg("z").none(), nb::arg("delta_bias").none(), nb::arg("initial_state").none(), nb::arg("out"),
     nb::arg("final_state").none(), nb::arg("delta_softplus"), nb::arg("stream"));

  m.def("selective_scan_varlen", [](const In& u, const In& delta, const In& A, const In& B, const In& C,
                                    const Opt& D, const Opt& z, const Opt& delta_bias, const Opt& initial_state,
                                    const In& cu_seqlens, const Out& out, const std::optional<Out>& final_state,
                                    bool delta_softplus, std::uintptr_t s) {
    const char* where = "sixfold.selective_scan_varlen";
    const SelectiveScanTensors t = scan_tensors(where, u, delta, A, B, C, D, z, delta_bias, initial_state);
    const TensorView vc = view_of(cu_seqlens, where, "cu_seqlens");
    const TensorView vo = view_of(out, where, "out");
    const TensorView vf = final_state ? view_of(*final_state, where, "final_state") : TensorView{};
    g_last_in = std::uintptr_t(t.u.data);
    g_last_out = std::uintptr_t(vo.data);
    nb::gil_scoped_release release;
    selective_scan_varlen(t, vc, vo, vf, {delta_softplus}, stream_of(s));
  }, nb::arg("u"), nb::arg("delta"), nb::arg("A"), nb::arg("B"), nb::arg("C"), nb::arg("D").none(),
     nb::arg("z").none(), nb::arg("delta_bias").none(), nb::arg("initial_state").none(), nb::arg("cu_seqlens"),
     nb::arg("out"), nb::arg("final_state").none(), nb::arg("delta_softplus"), nb::arg("stream"));

  m.def("selective_state_update", [](const Out& state, const In& x, const In& dt, const In& A, const In& B,
                                     const In& C, const Opt& D, const Opt& z, const Opt& dt_bias, const Out& out,
                                     bool dt_softplus, std::uintptr_t s) {
    const char* where = "sixfold.selective_state_update";
    StateUpdateTensors t;
    const TensorView vs = view_of(state, where, "state");
    t.x = view_of(x, where, "x");
    t.dt = view_of(dt, where, "dt");
    t.A = view_of(A, where, "A");
    t.B = view_of(B, where, "B");
    t.C = view_of(C, where, "C");
    t.D = optional_view(D, where, "D");
    t.z = optional_view(z, where, "z");
    t.dt_bias = optional_view(dt_bias, where, "dt_bias");
    const TensorView vo = view_of(out, where, "out");
    g_last_in = std::uintptr_t(t.x.data);
    g_last_out = std::uintptr_t(vo.data);
    nb::gil_scoped_release release;
    selective_state_update(vs, t, vo, {dt_softplus}, stream_of(s));
  }, nb::arg("state"), nb::arg("x"), nb::arg("dt"), nb::arg("A"), nb::arg("B"), nb::arg("C"), nb::arg("D").none(),
     nb::arg("z").none(), nb::arg("dt_bias").none(), nb::arg("out"), nb::arg("dt_softplus"), nb::arg("stream"));
}

}  // namespace sixfold::python
