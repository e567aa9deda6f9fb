// The fit behind phi_far_tail (src/ops/activation_cpu.cpp): Φ(−a) for a ≥ 2 as M(1/a)·e^(−a²/2)/(2a),
// M(s) = a·erfc(a/√2)·e^(a²/2) (→ √(2/π) as a → ∞), a degree-7 polynomial in s = 1/a fitted by
// least squares weighted for relative error on 200 Chebyshev nodes of [0, 1/2], in double.
// Prints the coefficients (lowest first) and the worst relative error of Φ(−a) for a in [2, 13)
// with the polynomial and the exponential evaluated in f32.
//   g++ -O2 -std=c++20 dev/activation/erf_tail_fit.cpp -o /tmp/erf_tail_fit && /tmp/erf_tail_fit
#include <cmath>
#include <cstdio>

namespace {

double mills(double s) {  // M(s); below s = 1/36 (where e^(a²/2) would overflow) its asymptotic series
  if (s < 1.0 / 36) {
    const double t = s * s;
    return std::sqrt(2 / M_PI) * (1 - t + 3 * t * t - 15 * t * t * t);
  }
  const double a = 1 / s;
  return a * std::erfc(a / std::sqrt(2.0)) * std::exp(a * a / 2);
}

}  // namespace

int main() {
  constexpr int kDeg = 7, kNodes = 200;
  double ata[kDeg + 1][kDeg + 2] = {};  // normal equations
  for (int j = 0; j < kNodes; ++j) {
    const double s = 0.25 + 0.25 * std::cos(M_PI * (j + 0.5) / kNodes), f = mills(s), w = 1 / (f * f);
    double pw[kDeg + 1];
    pw[0] = 1;
    for (int r = 1; r <= kDeg; ++r) pw[r] = pw[r - 1] * s;
    for (int r = 0; r <= kDeg; ++r) {
      for (int c = 0; c <= kDeg; ++c) ata[r][c] += w * pw[r] * pw[c];
      ata[r][kDeg + 1] += w * pw[r] * f;
    }
  }
  for (int col = 0; col <= kDeg; ++col)  // Gauss–Jordan (positive definite)
    for (int r = 0; r <= kDeg; ++r) {
      if (r == col) continue;
      const double q = ata[r][col] / ata[col][col];
      for (int c = col; c <= kDeg + 1; ++c) ata[r][c] -= q * ata[col][c];
    }
  float m[kDeg + 1];
  for (int r = 0; r <= kDeg; ++r) m[r] = float(ata[r][kDeg + 1] / ata[r][r]), std::printf("%.9ef, ", m[r]);
  double worst = 0, at = 0;
  for (float a = 2.0f; a < 13.0f; a += 0.001f) {
    const float s = 1.0f / a;
    float p = m[kDeg];
    for (int r = kDeg - 1; r >= 0; --r) p = p * s + m[r];
    const float g = p * s * std::exp(a * a * -0.5f) * 0.5f;
    const double want = 0.5 * std::erfc(a / std::sqrt(2.0)), e = std::fabs(g - want) / want;
    if (e > worst) worst = e, at = a;
  }
  std::printf("\nworst relative error %.3g at a = %.3f\n", worst, at);
}
