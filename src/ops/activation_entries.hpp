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

// The same fit taken to u = z·√2 directly, as both backends evaluate it:
//   Φ(u) = 1/2 + u·P̂(w)/Q̂(w) clamped to [0, 1],  w = min(u², kWMax),
//   P̂(w) = P(w/2)·√½/2,  Q̂(w) = Q(w/2)   (coefficients highest first),
// so gelu(u) = u·Φ(u). The scale is folded in at compile time (powers of two exact, √½/2 one
// rounding). Past |u| = 4√2 (w frozen at 32) the ratio is about u/(8√2), so Φ leaves [0, 1] on
// the side the clamp sends to 0 or 1, as it does with the fit's ~4e-7 dip below 0 far left.
// Q̂ >= 1 on w >= 0, so an approximate reciprocal is safe.
struct GeluErfFolded {
  float p[6], q[6];
  static constexpr float kWMax = 2.0f * ActivationMath::kErfClamp * ActivationMath::kErfClamp;
};
constexpr GeluErfFolded gelu_erf_folded() {
  using M = ActivationMath;
  GeluErfFolded c{};
  float scale = 1.0f;  // 2^−(5−i): coefficient i multiplies s^(5−i) = (w/2)^(5−i)
  for (int i = 5; i >= 0; --i) {
    c.p[i] = M::kErfP[i] * scale * (M::kSqrtHalf * 0.5f);
    c.q[i] = M::kErfQ[i] * scale;
    scale *= 0.5f;
  }
  return c;
}

}  // namespace sixfold::detail
