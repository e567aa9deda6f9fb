// The monoid laws for every instance, the checker's power to catch non-monoids, power(), and
// each instance's meaning (Welford is a variance, OnlineSoftmax a softmax-weighted mean, …)
// against float64 computations written the plain way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "sixfold/algebra/instances.hpp"
#include "sixfold/algebra/laws.hpp"
#include "sixfold/algebra/power.hpp"

using namespace sixfold::algebra;

static_assert(Monoid<Sum<float>>);
static_assert(Monoid<TopK<float, 8>>);
static_assert(Monoid<OnlineSoftmax<float, 64>>);
static_assert(!Monoid<int>);
static_assert(is_commutative_v<Sum<float>> && !is_commutative_v<Affine<float>>);
static_assert(is_exact_v<Mat2Product> && !is_exact_v<Sum<float>> && is_idempotent_v<Max<int>>);

TEST(Laws, EveryLibraryMonoidPasses) {
  const auto reports = check_library_monoids(2000, std::random_device{}());
  ASSERT_GE(reports.size(), 18u);
  for (const auto& r : reports) {
    EXPECT_TRUE(r.passed()) << format_report(r);
    EXPECT_GE(r.laws.size(), 4u) << r.monoid;  // closure, identity, associativity, power
  }
}

TEST(Laws, CheckerCatchesNonMonoids) {
  const auto reports = check_counterexamples(2000, std::random_device{}());
  ASSERT_EQ(reports.size(), 3u);
  auto failed = [](const LawReport& r, const std::string& law) {
    for (const auto& l : r.laws)
      if (l.law == law) return !l.passed && !l.counterexample.empty();
    return false;
  };
  EXPECT_TRUE(failed(reports[0], "associativity")) << format_report(reports[0]);  // subtraction
  EXPECT_TRUE(failed(reports[0], "identity")) << format_report(reports[0]);
  EXPECT_TRUE(failed(reports[1], "associativity")) << format_report(reports[1]);  // average
  EXPECT_TRUE(failed(reports[2], "closure")) << format_report(reports[2]);  // softmax, no max
  for (const auto& r : reports) {
    EXPECT_FALSE(r.passed());
    EXPECT_NE(format_report(r).find("counterexample: a = "), std::string::npos) << format_report(r);
  }
}

// A monoid that counts its combines, to check power() is O(log n).
struct CountingSum {
  using value_type = std::uint64_t;
  static inline int combines = 0;
  std::uint64_t identity() const { return 0; }
  std::uint64_t combine(std::uint64_t a, std::uint64_t b) const { ++combines; return a + b; }
};

TEST(Power, LogarithmicAndCorrect) {
  CountingSum::combines = 0;
  EXPECT_EQ(power(std::uint64_t(3), 1'000'000'000'000ull, CountingSum{}), 3'000'000'000'000ull);
  EXPECT_LE(CountingSum::combines, 2 * 40);
  EXPECT_EQ(power(std::uint64_t(5), 0, CountingSum{}), 0u);
  // Non-commutative: Fibonacci by powers of [[1,1],[1,0]] (mod 2^32).
  const Mat2 f = power(Mat2{1, 1, 1, 0}, 40, Mat2Product{});
  EXPECT_EQ(f.m01, 102334155u);  // F(40)
  // Affine power: x -> a x + b applied n times.
  const auto p = power(AffineMap<double>{0.5, 1.0}, 10, Affine<double>{});
  double h = 3.0;
  for (int i = 0; i < 10; ++i) h = 0.5 * h + 1.0;
  EXPECT_NEAR(p.a * 3.0 + p.b, h, 1e-12);
}

TEST(Instances, WelfordIsMeanAndVariance) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<double> d(3.0, 2.0);
  std::vector<double> x(1001);
  for (double& v : x) v = d(rng);
  Welford<double> w;
  auto left = w.identity(), right = w.identity();
  for (std::size_t i = 0; i < 400; ++i) left = w.combine(left, w.lift(x[i]));
  for (std::size_t i = 400; i < x.size(); ++i) right = w.combine(right, w.lift(x[i]));
  const auto s = w.combine(left, right);
  const double mean = std::accumulate(x.begin(), x.end(), 0.0) / double(x.size());
  double m2 = 0;
  for (double v : x) m2 += (v - mean) * (v - mean);
  EXPECT_EQ(s.count, 1001);
  EXPECT_NEAR(s.mean, mean, 1e-12);
  EXPECT_NEAR(s.m2, m2, 1e-9 * m2);
}

TEST(Instances, KahanNeumaierBeatsPlainSum) {
  // 1 + many tiny values: plain f32 summation loses all of them.
  KahanNeumaier<float> k;
  auto s = k.lift(1.0f);
  float plain = 1.0f;
  for (int i = 0; i < 100000; ++i) { s = k.combine(s, k.lift(1e-8f)); plain += 1e-8f; }
  EXPECT_EQ(plain, 1.0f);
  EXPECT_NEAR(KahanNeumaier<float>::value(s), 1.001, 1e-6);
}

TEST(Instances, LogSumExpAndOnlineSoftmaxMatchDirectFormulas) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<double> d(0.0, 30.0);
  constexpr int D = 4;
  const int n = 257;
  std::vector<double> s(n), v(n * D);
  for (auto& x : s) x = d(rng);
  for (auto& x : v) x = std::uniform_real_distribution<double>(-1, 1)(rng);
  LogSumExp<double> lse;
  OnlineSoftmax<double, D> osm;
  auto a = lse.identity();
  auto o = osm.identity();
  for (int i = n - 1; i >= 0; --i) {  // any order and grouping: right to left here
    a = lse.combine(lse.lift(s[i]), a);
    o = osm.combine(osm.lift(s[i], &v[i * D]), o);
  }
  const double m = *std::max_element(s.begin(), s.end());
  double l = 0, acc[D] = {};
  for (int i = 0; i < n; ++i) {
    const double p = std::exp(s[i] - m);
    l += p;
    for (int j = 0; j < D; ++j) acc[j] += p * v[i * D + j];
  }
  EXPECT_NEAR(LogSumExp<double>::value(a), m + std::log(l), 1e-12 * std::fabs(m));
  for (int j = 0; j < D; ++j) EXPECT_NEAR(o.acc[j] / o.l, acc[j] / l, 1e-12);
}

TEST(Instances, AffineScanIsTheRecurrence) {
  Affine<double> m;
  std::vector<AffineMap<double>> f = {{0.9, 1.0}, {0.5, -2.0}, {1.1, 0.25}};
  const auto all = m.combine(m.combine(f[0], f[1]), f[2]);
  double h = 7.0;
  for (const auto& g : f) h = g.a * h + g.b;
  EXPECT_DOUBLE_EQ(all.a * 7.0 + all.b, h);
}

TEST(Instances, TopKSelectsLargestWithLowerIndexOnTies) {
  std::mt19937_64 rng(std::random_device{}());
  constexpr int K = 5;
  TopK<float, K> t;
  std::vector<float> x(300);
  for (auto& v : x) v = float(int(rng() % 20));  // many ties
  x[17] = NAN;
  x[200] = INFINITY;
  auto st = t.identity();
  // Fold in chunks, merged in an unusual order: ((c2 · c0) · c1) — commutative for distinct
  // indices, so any order must give the same bits.
  auto chunk = [&](int lo, int hi) {
    auto c = t.identity();
    for (int i = lo; i < hi; ++i) c = t.combine(c, t.lift(x[i], i));
    return c;
  };
  st = t.combine(t.combine(chunk(200, 300), chunk(0, 100)), chunk(100, 200));
  std::vector<int> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
    return TopK<float, K>::better(x[a], a, x[b], b);
  });
  ASSERT_EQ(st.count, K);
  EXPECT_EQ(st.index[0], 17);   // NaN ranks above +inf
  EXPECT_EQ(st.index[1], 200);
  for (int i = 0; i < K; ++i) EXPECT_EQ(st.index[i], idx[i]) << i;
}

TEST(Instances, MaxMinPropagateNaNAndKeepLeftmostTies) {
  Max<float> mx;
  Min<float> mn;
  EXPECT_TRUE(std::isnan(mx.combine(1.0f, NAN)));
  EXPECT_TRUE(std::isnan(mn.combine(NAN, -INFINITY)));
  EXPECT_TRUE(std::signbit(mx.combine(-0.0f, 0.0f)));
  EXPECT_FALSE(std::signbit(mx.combine(0.0f, -0.0f)));
  EXPECT_EQ(mx.identity(), -INFINITY);
  EXPECT_EQ(Max<int>{}.identity(), std::numeric_limits<int>::min());
}

TEST(Instances, BicyclicCancelsMatchedPairs) {
  Bicyclic b;
  // ")((" · "))(" = ")" + "((" + "))" + "(" -> ")" + "(" : (1, 1)
  const auto r = b.combine(BicyclicPair{1, 2}, BicyclicPair{2, 1});
  EXPECT_EQ(r.close, 1u);
  EXPECT_EQ(r.open, 1u);
  const auto q = b.combine(BicyclicPair{2, 1}, BicyclicPair{1, 2});
  EXPECT_EQ(q.close, 2u);
  EXPECT_EQ(q.open, 2u);  // order matters: non-commutative
}
