// Internal: backend entry points of the norm ops, called with validated NormArgs.
#pragma once

#include "sixfold/ops/norm.hpp"

namespace sixfold::detail {

void norm_cpu(const NormArgs& a);
void norm_cuda(const NormArgs& a, int device, Stream stream);  // src/cuda/norm.cu

}  // namespace sixfold::detail
