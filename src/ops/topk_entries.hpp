// Internal: backend entry points of the topk op, called with validated TopKArgs, and the CPU
// selection state behind TopKStream.
#pragma once

#include <cstdint>
#include <memory>

#include "sixfold/ops/topk.hpp"

namespace sixfold::detail {

void topk_cpu(const TopKArgs& a);
void topk_cuda(const TopKArgs& a, int device, Stream stream);  // src/cuda/topk.cu

// The streaming selection state of one dtype (f32, f16, bf16, f64, i32), runtime k.
class TopKSelector {
 public:
  virtual ~TopKSelector() = default;
  // n elements of the selector's dtype; element i has index first + i.
  virtual void push(const void* data, std::int64_t n, std::int64_t first) = 0;
  virtual void merge(const TopKSelector& other) = 0;  // same dtype, k and order
  virtual std::unique_ptr<TopKSelector> clone() const = 0;
  // Writes the min(k, candidates) best, best first (sorted) or in any order.
  virtual std::int64_t result(void* values, std::int64_t* indices, bool sorted) const = 0;
};

std::unique_ptr<TopKSelector> make_topk_selector(DType dtype, std::int64_t k, bool largest);

}  // namespace sixfold::detail

struct sixfold::TopKStream::State {
  std::unique_ptr<detail::TopKSelector> selector;
};
