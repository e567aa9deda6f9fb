// The float64 reference of the fused activations: the formulas per element (the oracle of the
// tests) and the unfused chain, one pass per operation (the naive row of `sixfold bench norm`).
// Inputs are given as doubles (already upcast from their dtype).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "sixfold/ops/activation.hpp"

namespace sixfold::reference {

inline double gelu_erf(double u) { return 0.5 * u * (1 + std::erf(u / std::sqrt(2.0))); }
inline double gelu_tanh(double u) {
  return 0.5 * u * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
}
inline double silu(double a) { return a / (1 + std::exp(-a)); }

// One element: u = x (+ bias) for the GELUs, (a, g) for SiLU-gate.
inline double activation(ActivationKind k, double u, double g) {
  switch (k) {
    case ActivationKind::gelu_erf: return gelu_erf(u);
    case ActivationKind::gelu_tanh: return gelu_tanh(u);
    case ActivationKind::silu_gate: return silu(u) * g;
  }
  return NAN;
}

// x, g: rows × n row-major (g only for SiLU-gate); bias: n or empty (the GELUs). Unfused: the
// bias add, the activation and the gate product are separate passes over the whole tensor.
inline std::vector<double> activation(ActivationKind k, const std::vector<double>& x,
                                      const std::vector<double>& g, const std::vector<double>& bias,
                                      std::int64_t rows, std::int64_t n) {
  std::vector<double> t(x);
  if (!bias.empty())
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = 0; i < n; ++i) t[std::size_t(r * n + i)] += bias[std::size_t(i)];
  for (double& v : t) v = k == ActivationKind::silu_gate ? silu(v) : activation(k, v, 0.0);
  if (k == ActivationKind::silu_gate)
    for (std::size_t i = 0; i < t.size(); ++i) t[i] *= g[i];
  return t;
}

}  // namespace sixfold::reference
