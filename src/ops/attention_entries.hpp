// Internal: backend entry points of attention, called with validated AttentionArgs.
#pragma once

#include "sixfold/ops/attention.hpp"

namespace sixfold::detail {

void attention_cpu(const AttentionArgs& a);
void attention_cuda(const AttentionArgs& a, int device, Stream stream);  // src/cuda/attention.cu

// merge_attention_states on n rows of head_dim: o (rows, d) with row strides, lse (rows) strided.
struct MergeArgs {
  DType dtype = DType::f32;  // of o1, o2, out
  std::int64_t rows = 0, head_dim = 0;
  const void* o1 = nullptr; const void* o2 = nullptr; void* out = nullptr;
  std::int64_t o1_stride = 0, o2_stride = 0, out_stride = 0;          // row strides (elements)
  const float* lse1 = nullptr; const float* lse2 = nullptr; float* lse_out = nullptr;
  std::int64_t lse1_stride = 0, lse2_stride = 0, lse_out_stride = 0;
};
void merge_attention_states_cpu(const MergeArgs& a);
void merge_attention_states_cuda(const MergeArgs& a, int device, Stream stream);

}  // namespace sixfold::detail
