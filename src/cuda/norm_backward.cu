// src/cuda/norm_backward.cu — backward passes of the norm ops on the GPU (being written).
#include "../ops/norm_entries.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold::detail {

void norm_backward_cuda(const NormBackwardArgs&, int, Stream) {
  throw_error("sixfold norm backward (cuda)", "not implemented yet");
}

}  // namespace sixfold::detail
