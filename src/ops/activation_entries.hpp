// Internal: backend entry points of the activation ops, called with validated arguments.
#pragma once

#include "sixfold/ops/activation.hpp"

namespace sixfold::detail {

void activation_cpu(const ActivationArgs& a);
void activation_cuda(const ActivationArgs& a, int device, Stream stream);  // src/cuda/activation.cu

// The scalar formulas, shared by both backends' tests and the CPU loops.
struct ActivationMath {
  static constexpr float kSqrtHalf = 0.70710678118654752f;
  static constexpr float kSqrt2OverPi = 0.79788456080286536f;
};

}  // namespace sixfold::detail
