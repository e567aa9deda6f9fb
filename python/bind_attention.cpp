// python/bind_attention.cpp — Python bindings of sixfold::attention, attention_varlen and
// merge_attention_states (outputs, layouts and stream defaults are handled by the Python layer,
// python/sixfold/__init__.py).
#include "bind_common.hpp"

#include "sixfold/ops/attention.hpp"

namespace sixfold::python {

namespace {

AttentionParams params_of(float scale, bool causal, std::int64_t left, std::int64_t right) {
  AttentionParams p;
  p.scale = scale;
  p.causal = causal;
  p.window_left = left;
  p.window_right = right;
  return p;
}

}  // namespace

void bind_attention(nb::module_& m) {
  m.def("attention", [](const In& q, const In& k, const In& v, const Out& out, const std::optional<Out>& lse,
                        float scale, bool causal, std::int64_t left, std::int64_t right, std::uintptr_t s) {
    const char* where = "sixfold.attention";
    const TensorView vq = view_of(q, where, "q"), vk = view_of(k, where, "k"), vv = view_of(v, where, "v");
    const TensorView vo = view_of(out, where, "out");
    const TensorView vl = lse ? view_of(*lse, where, "lse") : TensorView{};
    g_last_in = std::uintptr_t(vq.data);
    g_last_out = std::uintptr_t(vo.data);
    nb::gil_scoped_release release;
    attention(vq, vk, vv, vo, vl, params_of(scale, causal, left, right), stream_of(s));
  }, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("lse").none(), nb::arg("scale"),
     nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"), nb::arg("stream"));

  m.def("attention_varlen", [](const In& q, const In& k, const In& v, const In& cu_q, const In& cu_k,
                               const Out& out, const std::optional<Out>& lse, float scale, bool causal,
                               std::int64_t left, std::int64_t right, std::uintptr_t s) {
    const char* where = "sixfold.attention_varlen";
    const TensorView vq = view_of(q, where, "q"), vk = view_of(k, where, "k"), vv = view_of(v, where, "v");
    const TensorView vcq = view_of(cu_q, where, "cu_seqlens_q"), vck = view_of(cu_k, where, "cu_seqlens_k");
    const TensorView vo = view_of(out, where, "out");
    const TensorView vl = lse ? view_of(*lse, where, "lse") : TensorView{};
    g_last_in = std::uintptr_t(vq.data);
    g_last_out = std::uintptr_t(vo.data);
    nb::gil_scoped_release release;
    attention_varlen(vq, vk, vv, vcq, vck, vo, vl, params_of(scale, causal, left, right), stream_of(s));
  }, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("cu_seqlens_q"), nb::arg("cu_seqlens_k"),
     nb::arg("out"), nb::arg("lse").none(), nb::arg("scale"), nb::arg("causal"), nb::arg("window_left"),
     nb::arg("window_right"), nb::arg("stream"));

  m.def("merge_attention_states", [](const In& o1, const In& lse1, const In& o2, const In& lse2, const Out& out,
                                     const std::optional<Out>& lse_out, std::uintptr_t s) {
    const char* where = "sixfold.merge_attention_states";
    const TensorView v1 = view_of(o1, where, "o1"), l1 = view_of(lse1, where, "lse1");
    const TensorView v2 = view_of(o2, where, "o2"), l2 = view_of(lse2, where, "lse2");
    const TensorView vo = view_of(out, where, "out");
    const TensorView vl = lse_out ? view_of(*lse_out, where, "lse_out") : TensorView{};
    g_last_in = std::uintptr_t(v1.data);
    g_last_out = std::uintptr_t(vo.data);
    nb::gil_scoped_release release;
    merge_attention_states(v1, l1, v2, l2, vo, vl, stream_of(s));
  }, nb::arg("o1"), nb::arg("lse1"), nb::arg("o2"), nb::arg("lse2"), nb::arg("out"), nb::arg("lse_out").none(),
     nb::arg("stream"));
}

}  // namespace sixfold::python
