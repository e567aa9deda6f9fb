// src/cuda/attention.cu — the CUDA backend of the attention op (being written: both entry points
// throw until the kernels land).
#include "../ops/attention_entries.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold::detail {

void attention_cuda(const AttentionArgs&, int, Stream) {
  throw_error("sixfold::attention (cuda)", "not implemented yet");
}

void merge_attention_states_cuda(const MergeArgs&, int, Stream) {
  throw_error("sixfold::merge_attention_states (cuda)", "not implemented yet");
}

}  // namespace sixfold::detail
