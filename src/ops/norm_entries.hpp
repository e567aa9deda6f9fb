// Internal: backend entry points of the norm ops, called with validated NormArgs.
#pragma once

#include "sixfold/ops/norm.hpp"

namespace sixfold::detail {

void norm_cpu(const NormArgs& a);
void norm_cuda(const NormArgs& a, int device, Stream stream);  // src/cuda/norm.cu
void norm_backward_cpu(const NormBackwardArgs& a);              // src/ops/norm_backward_cpu.cpp
void norm_backward_cuda(const NormBackwardArgs& a, int device,
                        Stream stream);                          // src/cuda/norm_backward.cu

}  // namespace sixfold::detail
