// sixfold/ops/topk.hpp — exact top-k selection over the last dimension, and TopKStream, the
// bounded top-k state as an object.
//
// The k best of a union are the k best of the parts' k best: bounded selection is a monoid
// (associativity), so a row is cut anywhere — across cores, across GPU blocks, across chunks
// that arrive over time — and the parts' states merged. Most elements are rejected against the
// current k-th value without ever being ordered (redundancy): on the CPU a SIMD compare filters
// each vector of 16 against the running threshold; on the GPU a radix selection finds the k-th
// value's bits from digit histograms and only the few elements of its digit bucket are ordered.
//
// Order (the same on every backend, and the same as algebra::TopK):
//   - largest (default): greater values first; NaN is ordered above +inf (as torch.topk does),
//     all NaNs equal; −0.0 and +0.0 compare equal.
//   - smallest: the reverse order of values (NaN is the greatest value, so it comes last).
//   - ties: among equal values the lower index wins, so the selected set is deterministic on every
//     backend and every run.
//
// Shapes: x is (..., n), unit stride in the last dimension, leading dimensions collapsing into one
// row stride (rows = 1 for one long array; n up to 2^62 on the CPU, 2^40 on CUDA). values and
// indices are (..., k) with x's leading dimensions, unit stride in the last dimension (their own
// row strides allowed); values have x's dtype, indices are i64 positions in the row.
// dtypes: f32, f16, bf16, f64, i32. 1 <= k <= n.
// sorted = true: each row's k results best first. sorted = false: the same set, in an order that
// is unspecified (it may differ between backends).
// Backend follows the tensors (host: all CPU cores; CUDA: the tensors' device, in `stream`, with
// scratch memory from the stream-ordered allocator, freed in the stream). CUDA rows of more than
// 65536 elements, when fewer than 2 per SM: each such row synchronizes `stream` once (the host
// reads which selection path the sampled threshold left and launches only that one); under CUDA
// graph capture no synchronization happens and every path is captured (the unused ones skip on
// the device). Everything else is asynchronous. Outputs must not overlap x or each other.
#pragma once

#include <cstdint>
#include <memory>

#include "sixfold/ops/rows.hpp"
#include "sixfold/runtime/tensor.hpp"

namespace sixfold {

struct TopKParams {
  bool largest = true;  // false: the k smallest
  bool sorted = true;   // false: any order (the set is the same)
};

void topk(const TensorView& x, std::int64_t k, const TensorView& values,
          const TensorView& indices, TopKParams params = {}, Stream stream = {});

// Allocating form: values (..., k) of x's dtype and indices (..., k) i64, on x's device.
struct TopKResult {
  Tensor values, indices;
};
TopKResult topk(const TensorView& x, std::int64_t k, TopKParams params = {}, Stream stream = {});

// The kernel-facing description of one validated call.
struct TopKArgs {
  DType dtype = DType::f32;
  RowsView x;                 // (rows, n)
  RowsView values, indices;   // (rows, k); indices are std::int64_t
  std::int64_t k = 1;
  bool largest = true, sorted = true;
};

// TopKStream: the top-k state of a stream of host values, in O(k) memory.
//   push(chunk)               chunk's elements get the next indices (0, 1, ... over all pushes)
//   push(chunk, first_index)  chunk[i] has index first_index + i (chunks in any order)
//   merge(other)              this becomes the top-k of both streams (indices should be distinct:
//                             give each stream its own index range)
//   result(values, indices)   the current top-min(k, seen) best first; the state is unchanged
// Chunks are host tensors of the stream's dtype, any shape, contiguous (read in row-major order).
// The result is exactly topk of the concatenation, whatever the chunking and merge order.
class TopKStream {
 public:
  TopKStream(DType dtype, std::int64_t k, TopKParams params = {});
  ~TopKStream();
  TopKStream(TopKStream&&) noexcept;
  TopKStream& operator=(TopKStream&&) noexcept;
  TopKStream(const TopKStream& other);
  TopKStream& operator=(const TopKStream& other);

  void push(const TensorView& chunk);
  void push(const TensorView& chunk, std::int64_t first_index);
  template <class T> void push(const T* data, std::int64_t n) {
    push(TensorView::contiguous(const_cast<T*>(data), dtype_of_v<T>, {n}));
  }
  void merge(const TopKStream& other);

  std::int64_t k() const { return k_; }
  DType dtype() const { return dtype_; }
  bool largest() const { return largest_; }
  std::int64_t seen() const { return seen_; }        // elements pushed, merged streams included
  std::int64_t next_index() const { return next_; }  // index push(chunk) gives chunk[0]
  std::int64_t size() const { return seen_ < k_ ? seen_ : k_; }

  // values: (size()) of the stream's dtype, indices: (size()) i64, host, contiguous.
  void result(const TensorView& values, const TensorView& indices) const;
  TopKResult result() const;

  struct State;  // internal: the CPU selection state (src/ops/topk_cpu.cpp)

 private:
  DType dtype_;
  std::int64_t k_;
  bool largest_;
  std::int64_t seen_ = 0, next_ = 0;
  std::unique_ptr<State> state_;
};

}  // namespace sixfold
