// python/bind_common.hpp — what every binding file of sixfold._C shares: array -> TensorView
// conversion (no copies, dtype/device checked), the last-call pointers the zero-copy tests read.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>

#include "sixfold/parallel/parallel.hpp"
#include "sixfold/runtime/error.hpp"
#include "sixfold/runtime/tensor.hpp"

namespace sixfold::python {

namespace nb = nanobind;

// The pointers of the last call, so tests can prove that no copy was made on the way in.
inline std::uintptr_t g_last_in = 0, g_last_out = 0;

inline DType dtype_from(nb::dlpack::dtype t, const char* where, const char* arg) {
  using nb::dlpack::dtype_code;
  const auto code = dtype_code(t.code);
  if (t.lanes == 1) {
    if (code == dtype_code::Float && t.bits == 64) return DType::f64;
    if (code == dtype_code::Float && t.bits == 32) return DType::f32;
    if (code == dtype_code::Float && t.bits == 16) return DType::f16;
    if (code == dtype_code::Bfloat && t.bits == 16) return DType::bf16;
    if (code == dtype_code::Int && t.bits == 64) return DType::i64;
    if (code == dtype_code::Int && t.bits == 32) return DType::i32;
    if (code == dtype_code::Int && t.bits == 8) return DType::i8;
  }
  throw_argument_error(where, arg, "an array of f64, f32, f16, bf16, i64, i32 or i8",
                       "DLPack dtype (code " + std::to_string(int(t.code)) + ", " +
                           std::to_string(int(t.bits)) + " bits, " + std::to_string(int(t.lanes)) + " lanes)");
}

template <class Array>
TensorView view_of(const Array& a, const char* where, const char* arg) {
  if (a.ndim() > std::size_t(kMaxRank))
    throw_argument_error(where, arg, "at most 8 dimensions", std::to_string(a.ndim()));
  TensorView v;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.dtype = dtype_from(a.dtype(), where, arg);
  v.shape.rank = int(a.ndim());
  for (std::size_t i = 0; i < a.ndim(); ++i) {
    v.shape.dims[i] = std::int64_t(a.shape(i));
    v.strides[i] = std::int64_t(a.stride(i));
  }
  if (a.device_type() == nb::device::cpu::value) v.device = Device::cpu();
  else if (a.device_type() == nb::device::cuda::value) v.device = Device::cuda(int(a.device_id()));
  else
    throw_argument_error(where, arg, "host (CPU) or CUDA device memory",
                         "DLPack device type " + std::to_string(a.device_type()));
  return v;
}

inline MonoidOp op_from(const std::string& op, const char* where) {
  if (op == "sum") return MonoidOp::sum;
  if (op == "max") return MonoidOp::max;
  if (op == "min") return MonoidOp::min;
  throw_argument_error(where, "op", "'sum', 'max' or 'min'", "'" + op + "'");
}

using In = nb::ndarray<nb::ro>;
using Out = nb::ndarray<>;

inline TensorView optional_view(const std::optional<In>& a, const char* where, const char* arg) {
  return a ? view_of(*a, where, arg) : TensorView{};
}

inline Stream stream_of(std::uintptr_t s) { return Stream{reinterpret_cast<void*>(s)}; }

// Per-op binding files (each defines one of these; NB_MODULE in bindings.cpp calls them all).
void bind_topk(nb::module_& m);
void bind_selective_scan(nb::module_& m);
void bind_attention(nb::module_& m);

}  // namespace sixfold::python
