// python/bind_topk.cpp — Python bindings of sixfold::topk and sixfold::TopKStream (outputs are
// allocated by the Python layer, python/sixfold/__init__.py).
#include "bind_common.hpp"

#include "sixfold/ops/topk.hpp"

namespace sixfold::python {

namespace {

DType dtype_named(const std::string& name) {
  if (name == "float32") return DType::f32;
  if (name == "float16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  if (name == "float64") return DType::f64;
  if (name == "int32") return DType::i32;
  throw_argument_error("sixfold.TopKStream", "dtype", "float32, float16, bfloat16, float64 or int32",
                       "'" + name + "'");
}

}  // namespace

void bind_topk(nb::module_& m) {
  m.def("topk", [](const In& x, std::int64_t k, const Out& values, const Out& indices, bool largest,
                   bool sorted, std::uintptr_t s) {
    const char* where = "sixfold.topk";
    const TensorView vx = view_of(x, where, "x"), vv = view_of(values, where, "values"),
                     vi = view_of(indices, where, "indices");
    g_last_in = std::uintptr_t(vx.data);
    g_last_out = std::uintptr_t(vv.data);
    nb::gil_scoped_release release;
    topk(vx, k, vv, vi, {largest, sorted}, stream_of(s));
  }, nb::arg("x"), nb::arg("k"), nb::arg("values"), nb::arg("indices"), nb::arg("largest"),
     nb::arg("sorted"), nb::arg("stream"));

  nb::class_<TopKStream>(m, "TopKStream")
      .def("__init__", [](TopKStream* self, const std::string& dtype, std::int64_t k, bool largest) {
        new (self) TopKStream(dtype_named(dtype), k, {largest, true});
      }, nb::arg("dtype"), nb::arg("k"), nb::arg("largest"))
      .def("push", [](TopKStream& self, const In& chunk, std::optional<std::int64_t> first) {
        const TensorView v = view_of(chunk, "sixfold.TopKStream.push", "chunk");
        nb::gil_scoped_release release;
        if (first) self.push(v, *first);
        else self.push(v);
      }, nb::arg("chunk"), nb::arg("first_index").none() = nb::none())
      .def("merge", [](TopKStream& self, const TopKStream& other) { self.merge(other); })
      .def("copy", [](const TopKStream& self) { return TopKStream(self); })
      .def("result_into", [](const TopKStream& self, const Out& values, const Out& indices) {
        const char* where = "sixfold.TopKStream.result";
        self.result(view_of(values, where, "values"), view_of(indices, where, "indices"));
      })
      .def_prop_ro("k", &TopKStream::k)
      .def_prop_ro("seen", &TopKStream::seen)
      .def_prop_ro("size", &TopKStream::size)
      .def_prop_ro("next_index", &TopKStream::next_index);
}

}  // namespace sixfold::python
