// sixfold/algebra/instances.hpp — the monoids sixfold's kernels are built from.
//
// | monoid            | state                         | what its associativity licenses          |
// |-------------------|-------------------------------|------------------------------------------|
// | Sum, Max, Min     | one value                     | reductions and scans in any split        |
// | Welford           | (count, mean, M2), Chan merge | one-pass, chunked mean/variance (norms)  |
// | KahanNeumaier     | (sum, compensation)           | compensated sums that still parallelize  |
// | LogSumExp         | (m, l): m + log l             | chunked log-sum-exp without overflow     |
// | OnlineSoftmax     | (m, l, acc[D])                | attention over key tiles (FlashAttention) |
// | Affine            | (a, b): x -> a·x + b          | linear recurrences as scans (Mamba)      |
// | TopK              | k best (value, index), sorted | streaming / split top-k selection        |
// | Mat2 / Bicyclic   | 2×2 matrix / (a, b) pair      | exact non-commutative test monoids       |
//
// NaN policy: Max and Min propagate NaN (NaN wins, the leftmost NaN is kept); TopK orders NaN
// above +inf. −0.0 and +0.0 compare equal; on ties Max/Min keep the left operand, TopK the lower
// index. These choices make each combine associative bit for bit on all inputs.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "sixfold/algebra/monoid.hpp"

namespace sixfold::algebra {

namespace math {
template <class T> SIXFOLD_HD constexpr T infinity() {
  if constexpr (std::is_same_v<T, float>) return __builtin_huge_valf();
  else return __builtin_huge_val();
}
template <class T> SIXFOLD_HD constexpr bool is_nan(T x) {
  if constexpr (std::is_floating_point_v<T>) return x != x; else return false;
}
template <class T> SIXFOLD_HD inline T exp(T x) {
  if constexpr (std::is_same_v<T, float>) return ::expf(x); else return ::exp(x);
}
template <class T> SIXFOLD_HD inline T log(T x) {
  if constexpr (std::is_same_v<T, float>) return ::logf(x); else return ::log(x);
}
template <class T> SIXFOLD_HD constexpr T lowest() {
  if constexpr (std::is_floating_point_v<T>) return -infinity<T>();
  else if constexpr (std::is_signed_v<T>) return T(T(1) << (sizeof(T) * 8 - 1));
  else return T(0);
}
template <class T> SIXFOLD_HD constexpr T highest() {
  if constexpr (std::is_floating_point_v<T>) return infinity<T>();
  else if constexpr (std::is_signed_v<T>) return T(~lowest<T>());
  else return T(~T(0));
}
}  // namespace math

template <class T>
struct Sum {
  using value_type = T;
  static constexpr bool commutative = true;
  static constexpr bool exact = std::is_integral_v<T>;  // integer sums must not overflow
  SIXFOLD_HD T identity() const { return T(0); }
  SIXFOLD_HD T combine(T a, T b) const { return a + b; }
};

// Leftmost maximum; NaN beats everything.
template <class T>
struct Max {
  using value_type = T;
  static constexpr bool commutative = !std::is_floating_point_v<T>;  // ±0 / NaN payloads
  static constexpr bool idempotent = true;
  static constexpr bool exact = true;
  SIXFOLD_HD T identity() const { return math::lowest<T>(); }
  SIXFOLD_HD T combine(T a, T b) const {
    if (math::is_nan(a)) return a;
    return (math::is_nan(b) || b > a) ? b : a;
  }
};

// Leftmost minimum; NaN beats everything.
template <class T>
struct Min {
  using value_type = T;
  static constexpr bool commutative = !std::is_floating_point_v<T>;
  static constexpr bool idempotent = true;
  static constexpr bool exact = true;
  SIXFOLD_HD T identity() const { return math::highest<T>(); }
  SIXFOLD_HD T combine(T a, T b) const {
    if (math::is_nan(a)) return a;
    return (math::is_nan(b) || b < a) ? b : a;
  }
};

// (count, mean, M2) with Chan, Golub and LeVeque's pairwise merge; variance = M2 / count.
template <class T>
struct WelfordState {
  std::int64_t count;
  T mean;
  T m2;
};

template <class T>
struct Welford {
  using value_type = WelfordState<T>;
  static constexpr bool commutative = true;
  SIXFOLD_HD value_type identity() const { return {0, T(0), T(0)}; }
  SIXFOLD_HD static value_type lift(T x) { return {1, x, T(0)}; }
  SIXFOLD_HD value_type combine(value_type a, value_type b) const {
    if (a.count == 0) return b;
    if (b.count == 0) return a;
    const std::int64_t n = a.count + b.count;
    const T wb = T(b.count) / T(n);
    const T delta = b.mean - a.mean;
    return {n, a.mean + delta * wb, a.m2 + b.m2 + delta * delta * T(a.count) * wb};
  }
};

// Neumaier's compensated sum: the represented value is sum + comp.
template <class T>
struct CompensatedSum {
  T sum;
  T comp;
};

template <class T>
struct KahanNeumaier {
  using value_type = CompensatedSum<T>;
  static constexpr bool commutative = true;
  SIXFOLD_HD value_type identity() const { return {T(0), T(0)}; }
  SIXFOLD_HD static value_type lift(T x) { return {x, T(0)}; }
  SIXFOLD_HD static T value(value_type s) { return s.sum + s.comp; }
  SIXFOLD_HD value_type combine(value_type a, value_type b) const {
    const T s = a.sum + b.sum;
    const T bp = s - a.sum;
    const T err = (a.sum - (s - bp)) + (b.sum - bp);  // Knuth's TwoSum: exact rounding error
    return {s, a.comp + b.comp + err};
  }
};

// log Σ exp(x_i) as (m, l) with m = max x_i and l = Σ exp(x_i − m): never overflows.
template <class T>
struct LogSumExpState {
  T m;
  T l;
};

template <class T>
struct LogSumExp {
  using value_type = LogSumExpState<T>;
  static constexpr bool commutative = true;
  SIXFOLD_HD value_type identity() const { return {-math::infinity<T>(), T(0)}; }
  SIXFOLD_HD static value_type lift(T x) { return {x, T(1)}; }
  SIXFOLD_HD static T value(value_type s) { return s.m + math::log(s.l); }
  SIXFOLD_HD value_type combine(value_type a, value_type b) const {
    if (a.l == T(0)) return b;  // identity on either side (also keeps exp(-inf - -inf) away)
    if (b.l == T(0)) return a;
    const T m = a.m > b.m ? a.m : b.m;
    return {m, a.l * math::exp(a.m - m) + b.l * math::exp(b.m - m)};
  }
};

// The FlashAttention state for one query row over a set of keys with scores s_j and values
// v_j ∈ R^D: m = max s_j, l = Σ exp(s_j − m), acc = Σ exp(s_j − m) v_j. The attention output is
// acc / l; merging two key sets rescales each side by exp(m_side − m).
template <class T, int D>
struct OnlineSoftmaxState {
  T m;
  T l;
  T acc[D];
};

template <class T, int D>
struct OnlineSoftmax {
  static_assert(D >= 1);
  using value_type = OnlineSoftmaxState<T, D>;
  static constexpr bool commutative = true;
  SIXFOLD_HD value_type identity() const {
    value_type r{-math::infinity<T>(), T(0), {}};
    for (int i = 0; i < D; ++i) r.acc[i] = T(0);
    return r;
  }
  // One key with score s and value row v.
  SIXFOLD_HD static value_type lift(T s, const T* v) {
    value_type r{s, T(1), {}};
    for (int i = 0; i < D; ++i) r.acc[i] = v[i];
    return r;
  }
  SIXFOLD_HD value_type combine(value_type a, value_type b) const {
    if (a.l == T(0)) return b;
    if (b.l == T(0)) return a;
    const T m = a.m > b.m ? a.m : b.m;
    const T sa = math::exp(a.m - m), sb = math::exp(b.m - m);
    value_type r{m, a.l * sa + b.l * sb, {}};
    for (int i = 0; i < D; ++i) r.acc[i] = a.acc[i] * sa + b.acc[i] * sb;
    return r;
  }
};

// The affine map x -> a·x + b. combine(f, g) is "f, then g" = g ∘ f, so an inclusive scan over
// (a_t, b_t) yields the maps h_0 -> h_t of the recurrence h_t = a_t·h_{t−1} + b_t.
template <class T>
struct AffineMap {
  T a;
  T b;
};

template <class T>
struct Affine {
  using value_type = AffineMap<T>;
  static constexpr bool exact = std::is_integral_v<T>;
  SIXFOLD_HD value_type identity() const { return {T(1), T(0)}; }
  SIXFOLD_HD value_type combine(value_type f, value_type g) const {
    return {g.a * f.a, g.a * f.b + g.b};
  }
};

// The K best (value, index) pairs, best first; "best" is the larger value (NaN above +inf),
// and the lower index among equal values. count < K until K elements have been seen.
template <class T, int K>
struct TopKState {
  T value[K];
  std::int64_t index[K];
  int count;
};

template <class T, int K>
struct TopK {
  static_assert(K >= 1);
  using value_type = TopKState<T, K>;
  static constexpr bool commutative = true;  // for distinct indices
  static constexpr bool exact = true;

  SIXFOLD_HD static bool better(T va, std::int64_t ia, T vb, std::int64_t ib) {
    const bool na = math::is_nan(va), nb = math::is_nan(vb);
    if (na != nb) return na;
    if (!na && va != vb) return va > vb;
    return ia < ib;
  }
  SIXFOLD_HD value_type identity() const {
    value_type r{};
    r.count = 0;
    return r;
  }
  SIXFOLD_HD static value_type lift(T v, std::int64_t i) {
    value_type r{};
    r.value[0] = v;
    r.index[0] = i;
    r.count = 1;
    return r;
  }
  SIXFOLD_HD value_type combine(const value_type& a, const value_type& b) const {
    value_type r{};
    int i = 0, j = 0, n = 0;
    while (n < K && (i < a.count || j < b.count)) {
      const bool take_a =
          j >= b.count ||
          (i < a.count && better(a.value[i], a.index[i], b.value[j], b.index[j]));
      if (take_a) { r.value[n] = a.value[i]; r.index[n] = a.index[i]; ++i; }
      else        { r.value[n] = b.value[j]; r.index[n] = b.index[j]; ++j; }
      ++n;
    }
    r.count = n;
    return r;
  }
};

// 2×2 matrices over Z/2^32 under multiplication: exact and non-commutative.
struct Mat2 {
  std::uint32_t m00, m01, m10, m11;
};

struct Mat2Product {
  using value_type = Mat2;
  static constexpr bool exact = true;
  SIXFOLD_HD Mat2 identity() const { return {1, 0, 0, 1}; }
  SIXFOLD_HD Mat2 combine(Mat2 x, Mat2 y) const {
    return {x.m00 * y.m00 + x.m01 * y.m10, x.m00 * y.m01 + x.m01 * y.m11,
            x.m10 * y.m00 + x.m11 * y.m10, x.m10 * y.m01 + x.m11 * y.m11};
  }
};

// The bicyclic monoid: (a, b) stands for a string of a ')' followed by b '('; concatenation
// cancels matched pairs. Exact, non-commutative, and the monoid CUB benchmarks its scans on.
struct BicyclicPair {
  std::uint32_t close;
  std::uint32_t open;
};

struct Bicyclic {
  using value_type = BicyclicPair;
  static constexpr bool exact = true;
  SIXFOLD_HD BicyclicPair identity() const { return {0, 0}; }
  SIXFOLD_HD BicyclicPair combine(BicyclicPair x, BicyclicPair y) const {
    const std::uint32_t matched = x.open < y.close ? x.open : y.close;
    return {x.close + y.close - matched, x.open + y.open - matched};
  }
};

}  // namespace sixfold::algebra
