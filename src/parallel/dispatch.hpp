// Internal: runtime (dtype, op) -> the compile-time Monoid that serves it, shared by the CPU
// and CUDA tensor entries. i32 sums run as u32 sums on the same bits: wrap-around is defined.
#pragma once

#include <cstdint>
#include <string>

#include "sixfold/algebra/instances.hpp"
#include "sixfold/parallel/parallel.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold::detail {

template <class T, class F>
void with_op(MonoidOp op, F&& f) {
  switch (op) {
    case MonoidOp::sum:
      if constexpr (std::is_same_v<T, std::int32_t>) f(algebra::Sum<std::uint32_t>{});
      else f(algebra::Sum<T>{});
      return;
    case MonoidOp::max: f(algebra::Max<T>{}); return;
    case MonoidOp::min: f(algebra::Min<T>{}); return;
  }
  throw_argument_error("sixfold", "params.op", "sum, max or min",
                       std::to_string(int(op)));
}

// Calls f(monoid) with the monoid for (dtype, op); its value_type has dtype's size and layout.
template <class F>
void with_monoid(std::string_view where, DType dtype, MonoidOp op, F&& f) {
  switch (dtype) {
    case DType::f32: return with_op<float>(op, f);
    case DType::f64: return with_op<double>(op, f);
    case DType::i32: return with_op<std::int32_t>(op, f);
    default:
      throw_argument_error(where, "in", "dtype f32, f64 or i32", std::string(dtype_name(dtype)));
  }
}

}  // namespace sixfold::detail
