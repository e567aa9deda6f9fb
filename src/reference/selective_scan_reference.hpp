// The float64 reference of the selective scan: the sequential loop over time, one state at a
// time (the oracle of the tests and the naive row of `sixfold bench selective_scan`). Inputs are
// doubles in contiguous layouts, already upcast from their dtype.
//   Δ = softplus?(delta + bias);  h = exp(Δ·A)·h + Δ·B·u;  y = Σ_s C·h + D·u;  y·silu(z)
// Varlen problems are independent sequences: call this once per sequence (batch 1).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace sixfold::reference {

struct SelectiveScanProblem {
  std::int64_t batch = 1, d = 1, n = 1, len = 1, groups = 1;
  bool var_B = true, var_C = true, softplus = false;
  std::vector<double> u, delta, z;   // (batch, d, len); z may be empty
  std::vector<double> A;             // (d, n)
  std::vector<double> B, C;          // fixed (d, n) or input-dependent (batch, groups, n, len)
  std::vector<double> D, bias;       // (d) or empty
  std::vector<double> init;          // (batch, d, n) or empty
};

inline double softplus(double x) { return x <= 20.0 ? std::log1p(std::exp(x)) : x; }

struct SelectiveScanResult {
  std::vector<double> out;    // (batch, d, len)
  std::vector<double> state;  // (batch, d, n): h after the last step
  // The size of the terms that sum to each value: where they cancel, a value is small but its
  // rounding error is not, so tests scale their bounds by these. |h| is the same recurrence over
  // |terms|: |h|_t = exp(Δ·A)·|h|_{t−1} + |Δ·B·u|; out: (Σ_s |C|·|h| + |D·u|)·|silu(z)|.
  std::vector<double> magnitude;        // (batch, d, len), as out
  std::vector<double> state_magnitude;  // (batch, d, n), as state
};

inline SelectiveScanResult selective_scan(const SelectiveScanProblem& p) {
  const std::int64_t L = p.len, n = p.n, per_group = p.d / p.groups;
  SelectiveScanResult r;
  r.out.assign(std::size_t(p.batch * p.d * L), 0.0);
  r.state.assign(std::size_t(p.batch * p.d * n), 0.0);
  r.magnitude.assign(r.out.size(), 0.0);
  r.state_magnitude.assign(r.state.size(), 0.0);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t c = 0; c < p.d; ++c) {
      const std::int64_t row = (b * p.d + c) * L, g = c / per_group;
      double* h = r.state.data() + (b * p.d + c) * n;
      double* hm = r.state_magnitude.data() + (b * p.d + c) * n;
      for (std::int64_t s = 0; s < n; ++s) {
        h[s] = p.init.empty() ? 0.0 : p.init[std::size_t((b * p.d + c) * n + s)];
        hm[s] = std::fabs(h[s]);
      }
      for (std::int64_t t = 0; t < L; ++t) {
        const double u = p.u[std::size_t(row + t)];
        double dt = p.delta[std::size_t(row + t)] + (p.bias.empty() ? 0.0 : p.bias[std::size_t(c)]);
        if (p.softplus) dt = softplus(dt);
        double y = 0, mag = 0;
        for (std::int64_t s = 0; s < n; ++s) {
          const double Bv = p.var_B ? p.B[std::size_t(((b * p.groups + g) * n + s) * L + t)] : p.B[std::size_t(c * n + s)];
          const double Cv = p.var_C ? p.C[std::size_t(((b * p.groups + g) * n + s) * L + t)] : p.C[std::size_t(c * n + s)];
          const double decay = std::exp(dt * p.A[std::size_t(c * n + s)]);
          h[s] = decay * h[s] + dt * Bv * u;
          hm[s] = decay * hm[s] + std::fabs(dt * Bv * u);
          y += Cv * h[s];
          mag += std::fabs(Cv) * hm[s];
        }
        if (!p.D.empty()) {
          y += p.D[std::size_t(c)] * u;
          mag += std::fabs(p.D[std::size_t(c)] * u);
        }
        if (!p.z.empty()) {
          const double z = p.z[std::size_t(row + t)], gate = z / (1.0 + std::exp(-z));
          y *= gate;
          mag *= std::fabs(gate);
        }
        r.out[std::size_t(row + t)] = y;
        r.magnitude[std::size_t(row + t)] = mag;
      }
    }
  return r;
}

// One decoding step. state (batch, d, n) is updated in place; returns out (batch, d) and, when
// asked, the magnitudes of out's and the new state's terms as in SelectiveScanResult.
// x, dt, z: (batch, d); B, C: (batch, groups, n); A (d, n); D, bias (d) or empty.
inline std::vector<double> selective_state_update(std::vector<double>& state, std::int64_t batch,
                                                  std::int64_t d, std::int64_t n, std::int64_t groups,
                                                  const std::vector<double>& x, const std::vector<double>& dt_in,
                                                  const std::vector<double>& A, const std::vector<double>& B,
                                                  const std::vector<double>& C, const std::vector<double>& D,
                                                  const std::vector<double>& z, const std::vector<double>& bias,
                                                  bool softplus_dt,
                                                  std::vector<double>* magnitude = nullptr,
                                                  std::vector<double>* state_magnitude = nullptr) {
  std::vector<double> out(std::size_t(batch * d));
  if (magnitude) magnitude->assign(out.size(), 0.0);
  if (state_magnitude) state_magnitude->assign(state.size(), 0.0);
  const std::int64_t per_group = d / groups;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t c = 0; c < d; ++c) {
      const std::size_t i = std::size_t(b * d + c);
      const std::int64_t g = c / per_group;
      double dt = dt_in[i] + (bias.empty() ? 0.0 : bias[std::size_t(c)]);
      if (softplus_dt) dt = softplus(dt);
      double y = 0, mag = 0;
      for (std::int64_t s = 0; s < n; ++s) {
        double& h = state[i * std::size_t(n) + std::size_t(s)];
        const std::size_t bc = std::size_t((b * groups + g) * n + s);
        const double decay = std::exp(dt * A[std::size_t(c * n + s)]);
        const double hm = decay * std::fabs(h) + std::fabs(dt * B[bc] * x[i]);
        h = decay * h + dt * B[bc] * x[i];
        y += C[bc] * h;
        mag += std::fabs(C[bc]) * hm;
        if (state_magnitude) (*state_magnitude)[i * std::size_t(n) + std::size_t(s)] = hm;
      }
      if (!D.empty()) {
        y += D[std::size_t(c)] * x[i];
        mag += std::fabs(D[std::size_t(c)] * x[i]);
      }
      if (!z.empty()) {
        const double gate = z[i] / (1.0 + std::exp(-z[i]));
        y *= gate;
        mag *= std::fabs(gate);
      }
      out[i] = y;
      if (magnitude) (*magnitude)[i] = mag;
    }
  return out;
}

}  // namespace sixfold::reference
