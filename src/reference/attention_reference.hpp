// src/reference/attention_reference.hpp — float64 attention that materializes the scores: the
// ground truth of the tests and the "standard attention" baseline. Inputs are float64 copies in
// BHLD order, contiguous: q (b, hq, lq, d), k/v (b, hkv, lk, d); out (b, hq, lq, d),
// lse (b, hq, lq). Masking follows sixfold/ops/attention.hpp exactly.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace sixfold::reference {

inline bool attention_visible(std::int64_t i, std::int64_t j, std::int64_t lq, std::int64_t lk, bool causal,
                              std::int64_t left, std::int64_t right) {
  const std::int64_t diag = i + (lk - lq);
  if (causal && j > diag) return false;
  if (left >= 0 && j < diag - left) return false;
  if (right >= 0 && j > diag + right) return false;
  return true;
}

// One query row i of one (batch, head): Q (d), K/V (lk, d) contiguous; O (d), *L optional.
// `s` is scratch of at least lk doubles.
inline void attention_row(const double* Q, const double* K, const double* V, double* O, double* L,
                          std::int64_t i, std::int64_t lq, std::int64_t lk, std::int64_t d,
                          double scale, bool causal, std::int64_t left, std::int64_t right,
                          double* s) {
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < lk; ++j) {
    if (!attention_visible(i, j, lq, lk, causal, left, right)) {
      s[j] = -std::numeric_limits<double>::infinity();
      continue;
    }
    double dot = 0;
    for (std::int64_t c = 0; c < d; ++c) dot += Q[c] * K[j * d + c];
    s[j] = dot * scale;
    m = std::max(m, s[j]);
  }
  std::fill(O, O + d, 0.0);
  if (m == -std::numeric_limits<double>::infinity()) {  // no visible key
    if (L) *L = m;
    return;
  }
  double l = 0;
  for (std::int64_t j = 0; j < lk; ++j) {
    if (s[j] == -std::numeric_limits<double>::infinity()) continue;
    const double p = std::exp(s[j] - m);
    l += p;
    for (std::int64_t c = 0; c < d; ++c) O[c] += p * V[j * d + c];
  }
  for (std::int64_t c = 0; c < d; ++c) O[c] /= l;
  if (L) *L = m + std::log(l);
}

inline void attention(const double* q, const double* k, const double* v, double* out, double* lse,
                      std::int64_t b, std::int64_t hq, std::int64_t hkv, std::int64_t lq, std::int64_t lk,
                      std::int64_t d, double scale, bool causal, std::int64_t left = -1,
                      std::int64_t right = -1) {
  std::vector<double> s(static_cast<std::size_t>(std::max<std::int64_t>(lk, 1)));
  const std::int64_t group = hq / hkv;
  for (std::int64_t bi = 0; bi < b; ++bi)
    for (std::int64_t h = 0; h < hq; ++h) {
      const std::int64_t kh = h / group;
      const double* K = k + (bi * hkv + kh) * lk * d;
      const double* V = v + (bi * hkv + kh) * lk * d;
      for (std::int64_t i = 0; i < lq; ++i)
        attention_row(q + ((bi * hq + h) * lq + i) * d, K, V, out + ((bi * hq + h) * lq + i) * d,
                      lse ? lse + (bi * hq + h) * lq + i : nullptr, i, lq, lk, d, scale, causal,
                      left, right, s.data());
    }
}

}  // namespace sixfold::reference
