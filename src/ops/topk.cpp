// Validation of topk and TopKStream (nothing is written when it fails), then the backend.
#include "sixfold/ops/topk.hpp"

#include <algorithm>
#include <string>

#include "rows.hpp"
#include "sixfold/runtime/error.hpp"
#include "topk_entries.hpp"

namespace sixfold {
namespace {

constexpr const char* kWhere = "sixfold::topk";

bool supported(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64 ||
         t == DType::i32;
}

void check_dtype(std::string_view where, std::string_view arg, DType t) {
  if (!supported(t))
    throw_argument_error(where, arg, "dtype f32, f16, bf16, f64 or i32", std::string(dtype_name(t)));
}

void check_k(std::string_view where, std::int64_t k, std::int64_t n) {
  if (k < 1 || k > n)
    throw_argument_error(where, "k", "1 <= k <= n = " + std::to_string(n) + " (the row length)",
                         std::to_string(k));
}

// x's shape with the last dimension replaced by k.
Shape output_shape(const TensorView& x, std::int64_t k) {
  Shape s = x.shape;
  s.dims[std::size_t(s.rank - 1)] = k;
  return s;
}

// Outputs may not alias anything (check::no_overlap allows exact aliasing, for in-place ops).
void no_alias(const char* arg, const TensorView& t, const char* other_arg, const TensorView& other) {
  if (t.data == other.data && t.numel() > 0 && other.numel() > 0)
    throw_argument_error(kWhere, arg, "memory apart from '" + std::string(other_arg) + "'",
                         "the same buffer");
  check::no_overlap(kWhere, arg, t, other_arg, other);
}

RowsView check_output(const char* arg, const TensorView& out, const TensorView& x, DType dtype,
                      std::int64_t k) {
  check::not_null(kWhere, arg, out);
  const Shape want = output_shape(x, k);
  if (!(out.shape == want))
    throw_argument_error(kWhere, arg, "shape " + to_string(want) + " (x's with the last dimension k)",
                         to_string(out.shape));
  check::dtype(kWhere, arg, out, dtype);
  check::same_device(kWhere, arg, out, "x", x);
  const RowsView r = detail::rows_of(kWhere, arg, out);
  if (r.rows > 1 && r.row_stride < r.n)
    throw_argument_error(kWhere, arg, "rows that do not overlap (row stride >= k)",
                         "row stride " + std::to_string(r.row_stride));
  no_alias(arg, out, "x", x);
  return r;
}

}  // namespace

void topk(const TensorView& x, std::int64_t k, const TensorView& values,
          const TensorView& indices, TopKParams params, Stream stream) {
  TopKArgs a;
  a.x = detail::rows_of(kWhere, "x", x);
  check_dtype(kWhere, "x", x.dtype);
  check_k(kWhere, k, a.x.n);
  a.values = check_output("values", values, x, x.dtype, k);
  a.indices = check_output("indices", indices, x, DType::i64, k);
  no_alias("indices", indices, "values", values);
  if (x.device.kind == DeviceKind::cuda && a.x.n > (std::int64_t(1) << 40))
    throw_argument_error(kWhere, "x", "rows of at most 2^40 elements on CUDA",
                         std::to_string(a.x.n));
  a.dtype = x.dtype;
  a.k = k;
  a.largest = params.largest;
  a.sorted = params.sorted;
  if (a.x.rows == 0) return;
  if (x.device.kind == DeviceKind::cuda) detail::topk_cuda(a, x.device.index, stream);
  else detail::topk_cpu(a);
}

TopKResult topk(const TensorView& x, std::int64_t k, TopKParams params, Stream stream) {
  // Validate x and k first, so that nothing is allocated for a call that must fail.
  const RowsView r = detail::rows_of(kWhere, "x", x);
  check_dtype(kWhere, "x", x.dtype);
  check_k(kWhere, k, r.n);
  const Shape s = output_shape(x, k);
  TopKResult out{Tensor(x.dtype, s, x.device), Tensor(DType::i64, s, x.device)};
  topk(x, k, out.values, out.indices, params, stream);
  return out;
}

// ---- TopKStream ------------------------------------------------------------------------------

TopKStream::TopKStream(DType dtype, std::int64_t k, TopKParams params)
    : dtype_(dtype), k_(k), largest_(params.largest) {
  constexpr const char* where = "sixfold::TopKStream";
  check_dtype(where, "dtype", dtype);
  if (k < 1) throw_argument_error(where, "k", "k >= 1", std::to_string(k));
  state_ = std::make_unique<State>();
  state_->selector = detail::make_topk_selector(dtype, k, params.largest);
}

TopKStream::~TopKStream() = default;
TopKStream::TopKStream(TopKStream&&) noexcept = default;
TopKStream& TopKStream::operator=(TopKStream&&) noexcept = default;

TopKStream::TopKStream(const TopKStream& o)
    : dtype_(o.dtype_), k_(o.k_), largest_(o.largest_), seen_(o.seen_), next_(o.next_) {
  state_ = std::make_unique<State>();
  state_->selector = o.state_->selector->clone();
}

TopKStream& TopKStream::operator=(const TopKStream& o) {
  if (this != &o) *this = TopKStream(o);
  return *this;
}

void TopKStream::push(const TensorView& chunk) { push(chunk, next_); }

void TopKStream::push(const TensorView& chunk, std::int64_t first_index) {
  constexpr const char* where = "sixfold::TopKStream::push";
  if (!state_) throw_error(where, "the stream was moved from");
  if (chunk.device.kind != DeviceKind::cpu)
    throw_argument_error(where, "chunk", "host memory", to_string(chunk.device));
  if (chunk.dtype != dtype_)
    throw_argument_error(where, "chunk", "dtype " + std::string(dtype_name(dtype_)) + " (the stream's)",
                         std::string(dtype_name(chunk.dtype)));
  if (first_index < 0)
    throw_argument_error(where, "first_index", "a non-negative index", std::to_string(first_index));
  const std::int64_t n = chunk.numel();
  if (n == 0) return;
  check::not_null(where, "chunk", chunk);
  check::contiguous(where, "chunk", chunk);
  state_->selector->push(chunk.data, n, first_index);
  seen_ += n;
  next_ = std::max(next_, first_index + n);
}

void TopKStream::merge(const TopKStream& other) {
  constexpr const char* where = "sixfold::TopKStream::merge";
  if (!state_ || !other.state_) throw_error(where, "a stream was moved from");
  if (other.dtype_ != dtype_ || other.k_ != k_ || other.largest_ != largest_)
    throw_argument_error(where, "other", "a stream of the same dtype, k and order",
                         std::string(dtype_name(other.dtype_)) + ", k = " + std::to_string(other.k_) +
                             (other.largest_ ? ", largest" : ", smallest"));
  if (&other == this) return;  // the top k of x ∪ x (same indices) is the top k of x
  state_->selector->merge(*other.state_->selector);
  seen_ += other.seen_;
  next_ = std::max(next_, other.next_);
}

void TopKStream::result(const TensorView& values, const TensorView& indices) const {
  constexpr const char* where = "sixfold::TopKStream::result";
  if (!state_) throw_error(where, "the stream was moved from");
  const std::int64_t m = size();
  auto check_out = [&](const char* arg, const TensorView& t, DType dt) {
    check::not_null(where, arg, t);
    if (t.device.kind != DeviceKind::cpu)
      throw_argument_error(where, arg, "host memory", to_string(t.device));
    if (t.rank() != 1 || t.size(0) != m)
      throw_argument_error(where, arg, "shape [" + std::to_string(m) + "] (size())", to_string(t.shape));
    check::dtype(where, arg, t, dt);
    check::contiguous(where, arg, t);
  };
  if (m == 0) return;
  check_out("values", values, dtype_);
  check_out("indices", indices, DType::i64);
  check::no_overlap(where, "indices", indices, "values", values);
  state_->selector->result(values.data, indices.data_as<std::int64_t>(), true);
}

TopKResult TopKStream::result() const {
  TopKResult r{Tensor(dtype_, {size()}), Tensor(DType::i64, {size()})};
  result(r.values, r.indices);
  return r;
}

}  // namespace sixfold

#ifndef SIXFOLD_WITH_CUDA
namespace sixfold::detail {
void topk_cuda(const TopKArgs&, int, Stream) {
  throw_error("sixfold::topk", "tensors are on a CUDA device but this build has no CUDA backend");
}
}  // namespace sixfold::detail
#endif
