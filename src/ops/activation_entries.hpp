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
  // erf(z) ≈ z·P(z²)/Q(z²) on |z| <= 4 (±1 beyond): P and Q of degree 5, highest first, a
  // weighted least-squares fit to the minimax error, |error| <= 4e-7 evaluated in f32.
  static constexpr float kErfP[6] = {1.9746598809433635e-06f, 2.8801473672501743e-04f,
                                     4.003269597887993e-03f,  5.346635356545448e-02f,
                                     1.9624271988868713e-01f, 1.128378987312317f};
  static constexpr float kErfQ[6] = {3.747765003936365e-05f, 1.2162323109805584e-03f,
                                     1.5443719923496246e-02f, 1.1647356301546097e-01f,
                                     5.07246732711792e-01f,   1.0f};
  static constexpr float kErfClamp = 4.0f;
};

}  // namespace sixfold::detail
