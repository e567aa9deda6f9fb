// The law specs of every monoid sixfold ships, and of three operations that are not monoids.
//
// Generators draw elements the way kernels make them: a fold of a few lifted data values
// (so Welford states have counts > 1, TopK states are partly filled), with the identity mixed
// in, and data that includes the awkward values (±0, ±inf, NaN where the policy defines them;
// attention-sized logits, normal with σ = 40, where exp() would overflow a naive state).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "sixfold/algebra/instances.hpp"
#include "sixfold/algebra/laws.hpp"

namespace sixfold::algebra {
namespace {

std::string num(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}
std::string num(std::int64_t x) { return std::to_string(x); }
std::string num(std::uint32_t x) { return std::to_string(x); }
std::string num(std::int32_t x) { return std::to_string(x); }

template <class V> bool bitwise_equal(const V& a, const V& b) {
  return std::memcmp(&a, &b, sizeof(V)) == 0;
}

// |x − y| <= rtol · (1 + max(|x|, |y|)); NaN never compares close.
template <class T> bool close(T x, T y, double rtol) {
  if (std::isnan(double(x)) || std::isnan(double(y))) return false;
  if (x == y) return true;  // also equal infinities
  const double d = std::fabs(double(x) - double(y));
  return d <= rtol * (1.0 + std::fmax(std::fabs(double(x)), std::fabs(double(y))));
}
template <class T> double rtol_for() { return std::is_same_v<T, float> ? 2e-5 : 1e-12; }
template <class T> std::string tol_text() {
  return std::is_same_v<T, float> ? "|x-y| <= 2e-5 (1 + max|x|,|y|)"
                                  : "|x-y| <= 1e-12 (1 + max|x|,|y|)";
}
template <class T> const char* tname() {
  if constexpr (std::is_same_v<T, float>) return "f32";
  else if constexpr (std::is_same_v<T, double>) return "f64";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "i32";
  else return "u32";
}

// Fold 0..max_terms lifted draws: reachable elements, the identity among them.
template <class M, class Lift>
typename M::value_type fold_of(const M& m, std::mt19937_64& rng, int max_terms, Lift lift) {
  auto v = m.identity();
  const int n = int(rng() % unsigned(max_terms + 1));
  for (int i = 0; i < n; ++i) v = m.combine(v, lift(rng));
  return v;
}

double uniform(std::mt19937_64& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}
double logit(std::mt19937_64& rng) { return std::normal_distribution<double>(0.0, 40.0)(rng); }

// Floats with the awkward values mixed in: ±0, ±inf, NaN.
template <class T> T awkward(std::mt19937_64& rng) {
  switch (rng() % 16) {
    case 0: return T(0);
    case 1: return -T(0);
    case 2: return std::numeric_limits<T>::infinity();
    case 3: return -std::numeric_limits<T>::infinity();
    case 4: return std::numeric_limits<T>::quiet_NaN();
    default: return T(std::round(uniform(rng, -8, 8)));  // small set: ties happen
  }
}

template <class T> void add_sum(std::vector<LawReport>& out, int trials, std::uint64_t seed) {
  LawSpec<Sum<T>> s;
  s.name = std::string("Sum<") + tname<T>() + ">";
  if constexpr (std::is_integral_v<T>) {
    s.draw = [](auto& r) { return T(std::int64_t(r() % 2001) - 1000); };
    s.equal = bitwise_equal<T>;
  } else {
    s.draw = [](auto& r) { return T(uniform(r, -1, 1)); };
    s.equal = [](T a, T b) { return close(a, b, rtol_for<T>()); };
    s.tolerance = tol_text<T>();
  }
  s.show = [](T v) { return num(v); };
  out.push_back(check_laws(s, trials, seed));
}

template <template <class> class Extremum, class T>
void add_extremum(std::vector<LawReport>& out, const char* name, int trials, std::uint64_t seed) {
  LawSpec<Extremum<T>> s;
  s.name = std::string(name) + "<" + tname<T>() + ">";
  if constexpr (std::is_integral_v<T>)
    s.draw = [](auto& r) { return T(std::int64_t(r() % 41) - 20); };
  else
    s.draw = [](auto& r) { return awkward<T>(r); };
  s.equal = bitwise_equal<T>;
  s.show = [](T v) { return num(v); };
  out.push_back(check_laws(s, trials, seed));
}

template <class T> void add_welford(std::vector<LawReport>& out, int trials, std::uint64_t seed) {
  using M = Welford<T>;
  LawSpec<M> s;
  s.name = std::string("Welford<") + tname<T>() + ">";
  s.draw = [m = M{}](auto& r) {
    return fold_of(m, r, 5, [](auto& g) { return M::lift(T(uniform(g, -3, 5))); });
  };
  s.equal = [](const auto& a, const auto& b) {
    return a.count == b.count && close(a.mean, b.mean, rtol_for<T>()) &&
           close(a.m2, b.m2, rtol_for<T>());
  };
  s.show = [](const auto& v) {
    return "{n=" + num(v.count) + ", mean=" + num(v.mean) + ", M2=" + num(v.m2) + "}";
  };
  s.valid = [](const auto& v) { return std::isfinite(v.mean) && std::isfinite(v.m2) && v.m2 >= 0; };
  s.tolerance = "count exact; mean, M2: " + tol_text<T>();
  out.push_back(check_laws(s, trials, seed));
}

template <class T> void add_kahan(std::vector<LawReport>& out, int trials, std::uint64_t seed) {
  using M = KahanNeumaier<T>;
  LawSpec<M> s;
  s.name = std::string("KahanNeumaier<") + tname<T>() + ">";
  // Values spanning 12 orders of magnitude: where plain summation loses digits.
  s.draw = [m = M{}](auto& r) {
    return fold_of(m, r, 4, [](auto& g) {
      return M::lift(T(uniform(g, -1, 1) * std::pow(10.0, double(g() % 13) - 6)));
    });
  };
  // The represented value sum + comp is what must agree.
  s.equal = [](const auto& a, const auto& b) {
    return close(M::value(a), M::value(b), rtol_for<T>());
  };
  s.show = [](const auto& v) { return "{sum=" + num(v.sum) + ", comp=" + num(v.comp) + "}"; };
  s.valid = [](const auto& v) { return std::isfinite(v.sum) && std::isfinite(v.comp); };
  s.tolerance = "sum + comp: " + tol_text<T>();
  out.push_back(check_laws(s, trials, seed));
}

template <class T> void add_logsumexp(std::vector<LawReport>& out, int trials, std::uint64_t seed) {
  using M = LogSumExp<T>;
  LawSpec<M> s;
  s.name = std::string("LogSumExp<") + tname<T>() + ">";
  s.draw = [m = M{}](auto& r) {
    return fold_of(m, r, 4, [](auto& g) { return M::lift(T(logit(g))); });
  };
  s.equal = [](const auto& a, const auto& b) {
    return bitwise_equal(a.m, b.m) && close(a.l, b.l, rtol_for<T>());
  };
  s.show = [](const auto& v) { return "{m=" + num(v.m) + ", l=" + num(v.l) + "}"; };
  // The identity (−inf, 0) is valid; any other element has a finite max.
  s.valid = [](const auto& v) {
    return std::isfinite(v.l) && (std::isfinite(v.m) || (v.l == 0 && v.m < 0));
  };
  s.tolerance = "m exact; l: " + tol_text<T>();
  out.push_back(check_laws(s, trials, seed));
}

constexpr int kSoftmaxDim = 3;

template <class T> std::string show_softmax(T m, T l, const T* acc) {
  std::string r = "{m=" + num(m) + ", l=" + num(l) + ", acc=[";
  for (int i = 0; i < kSoftmaxDim; ++i) r += (i ? ", " : "") + num(acc[i]);
  return r + "]}";
}

template <class T> void add_online_softmax(std::vector<LawReport>& out, int trials,
                                           std::uint64_t seed) {
  using M = OnlineSoftmax<T, kSoftmaxDim>;
  LawSpec<M> s;
  s.name = std::string("OnlineSoftmax<") + tname<T>() + ", D=3>";
  s.draw = [m = M{}](auto& r) {
    return fold_of(m, r, 4, [](auto& g) {
      T v[kSoftmaxDim];
      for (T& x : v) x = T(uniform(g, -1, 1));
      return M::lift(T(logit(g)), v);
    });
  };
  s.equal = [](const auto& a, const auto& b) {
    bool ok = bitwise_equal(a.m, b.m) && close(a.l, b.l, rtol_for<T>());
    for (int i = 0; i < kSoftmaxDim; ++i) ok = ok && close(a.acc[i], b.acc[i], rtol_for<T>());
    return ok;
  };
  s.show = [](const auto& v) { return show_softmax(v.m, v.l, v.acc); };
  s.valid = [](const auto& v) {
    bool ok = std::isfinite(v.l);
    for (int i = 0; i < kSoftmaxDim; ++i) ok = ok && std::isfinite(v.acc[i]);
    return ok;
  };
  s.tolerance = "m exact; l, acc: " + tol_text<T>();
  out.push_back(check_laws(s, trials, seed));
}

template <class T> void add_affine(std::vector<LawReport>& out, int trials, std::uint64_t seed) {
  LawSpec<Affine<T>> s;
  s.name = std::string("Affine<") + tname<T>() + ">";
  if constexpr (std::is_integral_v<T>) {
    s.draw = [](auto& r) { return AffineMap<T>{T(r()), T(r())}; };
    s.equal = bitwise_equal<AffineMap<T>>;
  } else {
    s.draw = [](auto& r) { return AffineMap<T>{T(uniform(r, -1.5, 1.5)), T(uniform(r, -1, 1))}; };
    s.equal = [](const auto& a, const auto& b) {
      return close(a.a, b.a, rtol_for<T>()) && close(a.b, b.b, rtol_for<T>());
    };
    s.tolerance = tol_text<T>();
  }
  s.show = [](const auto& v) { return "{a=" + num(v.a) + ", b=" + num(v.b) + "}"; };
  out.push_back(check_laws(s, trials, seed));
}

void add_topk(std::vector<LawReport>& out, int trials, std::uint64_t seed) {
  using M = TopK<float, 4>;
  LawSpec<M> s;
  s.name = "TopK<f32, k=4>";
  // Indices are unique across all draws (as positions in one input are); values repeat often.
  s.draw = [m = M{}, next = std::int64_t(0)](auto& r) mutable {
    return fold_of(m, r, 6, [&](auto& g) { return M::lift(awkward<float>(g), next++); });
  };
  s.equal = bitwise_equal<M::value_type>;
  s.show = [](const M::value_type& v) {
    std::string r = "[";
    for (int i = 0; i < v.count; ++i)
      r += (i ? ", " : "") + num(v.value[i]) + "@" + num(v.index[i]);
    return r + "]";
  };
  out.push_back(check_laws(s, trials, seed));
}

void add_mat2(std::vector<LawReport>& out, int trials, std::uint64_t seed) {
  LawSpec<Mat2Product> s;
  s.name = "Mat2Product<u32>";
  s.draw = [](auto& r) {
    return Mat2{std::uint32_t(r()), std::uint32_t(r()), std::uint32_t(r()), std::uint32_t(r())};
  };
  s.equal = bitwise_equal<Mat2>;
  s.show = [](const Mat2& v) {
    return "[[" + num(v.m00) + ", " + num(v.m01) + "], [" + num(v.m10) + ", " + num(v.m11) + "]]";
  };
  out.push_back(check_laws(s, trials, seed));
}

void add_bicyclic(std::vector<LawReport>& out, int trials, std::uint64_t seed) {
  LawSpec<Bicyclic> s;
  s.name = "Bicyclic";
  s.draw = [](auto& r) { return BicyclicPair{std::uint32_t(r() % 6), std::uint32_t(r() % 6)}; };
  s.equal = bitwise_equal<BicyclicPair>;
  s.show = [](const BicyclicPair& v) { return "(" + num(v.close) + ", " + num(v.open) + ")"; };
  out.push_back(check_laws(s, trials, seed));
}

// ---- Not monoids ----

struct Subtraction {
  using value_type = float;
  float identity() const { return 0.0f; }
  float combine(float a, float b) const { return a - b; }
};

// The mean of two values, forgetting how many each stands for.
struct AverageWithoutCount {
  using value_type = float;
  float identity() const { return 0.0f; }
  float combine(float a, float b) const { return 0.5f * (a + b); }
};

// Σ exp(s) and Σ exp(s)·v kept directly, with no running max to rescale by.
struct SoftmaxSumsState {
  float l;
  float acc;
};
struct SoftmaxWithoutMax {
  using value_type = SoftmaxSumsState;
  static SoftmaxSumsState lift(float s, float v) { return {std::exp(s), std::exp(s) * v}; }
  SoftmaxSumsState identity() const { return {0.0f, 0.0f}; }
  SoftmaxSumsState combine(SoftmaxSumsState a, SoftmaxSumsState b) const {
    return {a.l + b.l, a.acc + b.acc};
  }
};

}  // namespace

std::vector<LawReport> check_library_monoids(int trials, std::uint64_t seed) {
  std::vector<LawReport> out;
  add_sum<float>(out, trials, seed);
  add_sum<double>(out, trials, seed);
  add_sum<std::int32_t>(out, trials, seed);
  add_extremum<Max, float>(out, "Max", trials, seed);
  add_extremum<Max, std::int32_t>(out, "Max", trials, seed);
  add_extremum<Min, float>(out, "Min", trials, seed);
  add_extremum<Min, std::int32_t>(out, "Min", trials, seed);
  add_welford<float>(out, trials, seed);
  add_welford<double>(out, trials, seed);
  add_kahan<float>(out, trials, seed);
  add_kahan<double>(out, trials, seed);
  add_logsumexp<float>(out, trials, seed);
  add_logsumexp<double>(out, trials, seed);
  add_online_softmax<float>(out, trials, seed);
  add_affine<float>(out, trials, seed);
  add_affine<double>(out, trials, seed);
  add_affine<std::uint32_t>(out, trials, seed);
  add_topk(out, trials, seed);
  add_mat2(out, trials, seed);
  add_bicyclic(out, trials, seed);
  return out;
}

std::vector<LawReport> check_counterexamples(int trials, std::uint64_t seed) {
  std::vector<LawReport> out;
  auto show_f = [](float v) { return num(v); };
  auto close_f = [](float a, float b) { return close(a, b, rtol_for<float>()); };
  {
    LawSpec<Subtraction> s{"Subtraction<f32> (not a monoid)", {},
                           [](auto& r) { return float(uniform(r, -1, 1)); }, close_f, show_f};
    s.tolerance = tol_text<float>();
    out.push_back(check_laws(s, trials, seed));
  }
  {
    LawSpec<AverageWithoutCount> s{"AverageWithoutCount<f32> (not a monoid)", {},
                                   [](auto& r) { return float(uniform(r, -1, 1)); }, close_f,
                                   show_f};
    s.tolerance = tol_text<float>();
    out.push_back(check_laws(s, trials, seed));
  }
  {
    LawSpec<SoftmaxWithoutMax> s;
    s.name = "SoftmaxWithoutMax<f32> (not a monoid)";
    s.draw = [](auto& r) {
      return SoftmaxWithoutMax::lift(float(logit(r)), float(uniform(r, -1, 1)));
    };
    s.equal = [](const auto& a, const auto& b) {
      return close(a.l, b.l, 2e-5) && close(a.acc, b.acc, 2e-5);
    };
    s.show = [](const auto& v) { return "{l=" + num(v.l) + ", acc=" + num(v.acc) + "}"; };
    s.valid = [](const auto& v) { return std::isfinite(v.l) && std::isfinite(v.acc); };
    s.tolerance = tol_text<float>();
    out.push_back(check_laws(s, trials, seed));
  }
  return out;
}

std::string format_report(const LawReport& r) {
  std::string s = r.monoid + (r.tags.empty() ? "" : " [" + r.tags + "]") +
                  " — equality: " + r.tolerance + "\n";
  for (const auto& l : r.laws) {
    s += "  " + std::string(l.passed ? "ok   " : "FAIL ") + l.law + " (" +
         std::to_string(l.trials) + " trials)";
    if (!l.passed) s += "\n       counterexample: " + l.counterexample;
    s += "\n";
  }
  return s;
}

}  // namespace sixfold::algebra
