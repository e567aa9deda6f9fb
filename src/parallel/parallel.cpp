// Tensor entries of parallel.hpp: validation (nothing is written when it fails), then the
// generic monoid algorithms on the CPU, or the CUDA backend for device tensors.
#include "sixfold/parallel/parallel.hpp"

#include <span>
#include <string>

#include "dispatch.hpp"
#include "entries.hpp"
#include "sixfold/parallel/cpu.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold {
namespace {

void check_input(std::string_view where, const TensorView& x) {
  check::not_null(where, "x", x);
  check::rank(where, "x", x, 1);
  if (x.dtype != DType::f32 && x.dtype != DType::f64 && x.dtype != DType::i32)
    throw_argument_error(where, "x", "dtype f32, f64 or i32", std::string(dtype_name(x.dtype)));
  check::contiguous(where, "x", x);
}

void check_output(std::string_view where, const TensorView& x, const TensorView& out) {
  check::not_null(where, "out", out);
  check::same_device(where, "out", out, "x", x);
  check::dtype(where, "out", out, x.dtype);
}

template <class V> std::span<const V> span_of(const TensorView& t) {
  return {static_cast<const V*>(t.data), std::size_t(t.numel())};
}
template <class V> std::span<V> mut_span_of(const TensorView& t) {
  return {static_cast<V*>(t.data), std::size_t(t.numel())};
}

void scan_entry(bool exclusive, const TensorView& x, const TensorView& out, ScanParams p,
                Stream stream) {
  const char* where = exclusive ? "sixfold::exclusive_scan" : "sixfold::inclusive_scan";
  check_input(where, x);
  check_output(where, x, out);
  check::same_shape(where, "out", out, "x", x);
  check::contiguous(where, "out", out);
  check::no_overlap(where, "out", out, "x", x);
  detail::with_monoid(where, x.dtype, p.op, [](auto) {});  // validates op before any work
  if (x.device.kind == DeviceKind::cuda) return detail::cuda_scan(exclusive, x, out, p.op, stream);
  detail::with_monoid(where, x.dtype, p.op, [&](auto m) {
    using V = typename decltype(m)::value_type;
    if (exclusive) parallel::cpu::exclusive_scan(span_of<V>(x), mut_span_of<V>(out), m);
    else parallel::cpu::inclusive_scan(span_of<V>(x), mut_span_of<V>(out), m);
  });
}

}  // namespace

void reduce(const TensorView& x, const TensorView& out, ScanParams p, Stream stream) {
  const char* where = "sixfold::reduce";
  check_input(where, x);
  check_output(where, x, out);
  if (out.numel() != 1 || out.rank() > 1)
    throw_argument_error(where, "out", "one element (shape [] or [1])", to_string(out.shape));
  detail::with_monoid(where, x.dtype, p.op, [](auto) {});
  if (x.device.kind == DeviceKind::cuda) return detail::cuda_reduce(x, out, p.op, stream);
  detail::with_monoid(where, x.dtype, p.op, [&](auto m) {
    using V = typename decltype(m)::value_type;
    *static_cast<V*>(out.data) = parallel::cpu::reduce(span_of<V>(x), m);
  });
}

void inclusive_scan(const TensorView& x, const TensorView& out, ScanParams p, Stream stream) {
  scan_entry(false, x, out, p, stream);
}

void exclusive_scan(const TensorView& x, const TensorView& out, ScanParams p, Stream stream) {
  scan_entry(true, x, out, p, stream);
}

namespace {

template <class O>
void check_host_offsets(std::string_view where, const TensorView& offsets, std::int64_t n) {
  const auto* o = static_cast<const O*>(offsets.data);
  for (std::int64_t s = 0; s < offsets.numel(); ++s) {
    const bool bad_range = o[s] < 0 || std::int64_t(o[s]) > n;
    const bool bad_order = s > 0 && o[s] < o[s - 1];
    if (bad_range || bad_order)
      throw_argument_error(where, "offsets",
                           "non-decreasing entries within [0, " + std::to_string(n) + "]",
                           "offsets[" + std::to_string(s) + "] = " + std::to_string(o[s]) +
                               (bad_order ? " after " + std::to_string(o[s - 1]) : ""));
  }
}

}  // namespace

void segmented_reduce(const TensorView& x, const TensorView& offsets, const TensorView& out,
                      ScanParams p, Stream stream) {
  const char* where = "sixfold::segmented_reduce";
  check_input(where, x);
  check::not_null(where, "offsets", offsets);
  check::rank(where, "offsets", offsets, 1);
  if (offsets.dtype != DType::i32 && offsets.dtype != DType::i64)
    throw_argument_error(where, "offsets", "dtype i32 or i64",
                         std::string(dtype_name(offsets.dtype)));
  check::same_device(where, "offsets", offsets, "x", x);
  check::contiguous(where, "offsets", offsets);
  check_output(where, x, out);
  check::rank(where, "out", out, 1);
  check::contiguous(where, "out", out);
  check::no_overlap(where, "out", out, "x", x);
  if (offsets.numel() != out.numel() + 1)
    throw_argument_error(where, "offsets",
                         std::to_string(out.numel() + 1) + " entries (len(out) + 1)",
                         std::to_string(offsets.numel()) + " entries");
  detail::with_monoid(where, x.dtype, p.op, [](auto) {});
  if (x.device.kind == DeviceKind::cuda)
    return detail::cuda_segmented_reduce(x, offsets, out, p.op, stream);
  const bool wide = offsets.dtype == DType::i64;
  if (wide) check_host_offsets<std::int64_t>(where, offsets, x.numel());
  else check_host_offsets<std::int32_t>(where, offsets, x.numel());
  detail::with_monoid(where, x.dtype, p.op, [&](auto m) {
    using V = typename decltype(m)::value_type;
    if (wide)
      parallel::cpu::segmented_reduce(span_of<V>(x), span_of<std::int64_t>(offsets),
                                      mut_span_of<V>(out), m);
    else
      parallel::cpu::segmented_reduce(span_of<V>(x), span_of<std::int32_t>(offsets),
                                      mut_span_of<V>(out), m);
  });
}

}  // namespace sixfold
