// CPU reduce / scans / segmented reduce against float64 (or exact) sequential references, on
// fresh random inputs, over awkward sizes, thread counts, in-place and misaligned buffers,
// non-commutative monoids, and sizes beyond 2^31.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "sixfold/algebra/instances.hpp"
#include "sixfold/parallel/cpu.hpp"

using namespace sixfold::algebra;
namespace cpu = sixfold::parallel::cpu;

namespace {

std::mt19937_64& engine() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}
std::uint64_t rnd() { return engine()(); }

// 1, around the SIMD width, around the serial cutoff and the scan block, several blocks, large.
const std::vector<std::int64_t> kSizes = {0,     1,     2,     15,     16,      17,      63,
                                          1023,  32767, 32768, 32769,  65535,   65537,   131071,
                                          200003, (1 << 20) + 3, 3'000'017};

std::vector<float> random_floats(std::int64_t n) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> x(std::size_t(n + 1));  // +1: room for a misaligned view
  for (auto& v : x) v = d(engine());
  return x;
}

class ThreadCount : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { saved_ = omp_get_max_threads(); omp_set_num_threads(GetParam()); }
  void TearDown() override { omp_set_num_threads(saved_); }
  int saved_ = 1;
};

// f32 sums against the f64 reference: |out − ref| ≤ tol · (Σ|x| over the prefix + 1).
void check_sum_scan(std::int64_t n, int offset, bool exclusive, bool in_place) {
  auto buf = random_floats(n);
  const float* x = buf.data() + offset;
  std::vector<float> out_buf(std::size_t(n + 1), NAN);
  float* y = in_place ? const_cast<float*>(x) : out_buf.data() + offset;
  std::vector<float> xin(x, x + n);
  std::span<const float> in(x, std::size_t(n));
  std::span<float> out(y, std::size_t(n));
  if (exclusive) cpu::exclusive_scan(in, out, Sum<float>{});
  else cpu::inclusive_scan(in, out, Sum<float>{});
  double ref = 0, mag = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double before = ref;
    ref += xin[i];
    mag += std::fabs(xin[i]);
    const double want = exclusive ? before : ref;
    ASSERT_NEAR(y[i], want, 2e-6 * (mag + 1) + 1e-6)
        << "n=" << n << " i=" << i << " offset=" << offset << " exclusive=" << exclusive;
  }
}

}  // namespace

TEST_P(ThreadCount, SumScanF32MatchesReference) {
  for (std::int64_t n : kSizes)
    for (int offset : {0, 1})
      for (bool exclusive : {false, true}) check_sum_scan(n, offset, exclusive, false);
}

TEST_P(ThreadCount, SumScanInPlace) {
  for (std::int64_t n : {std::int64_t(17), std::int64_t(65537), std::int64_t(1'000'003)})
    for (bool exclusive : {false, true}) check_sum_scan(n, 1, exclusive, true);
}

TEST_P(ThreadCount, ReduceF32AndMaxMatchReference) {
  for (std::int64_t n : kSizes) {
    auto buf = random_floats(n);
    std::span<const float> in(buf.data() + 1, std::size_t(n));
    double ref = 0, mag = 0;
    float mx = -INFINITY;
    for (float v : in) { ref += v; mag += std::fabs(v); mx = std::max(mx, v); }
    EXPECT_NEAR(cpu::reduce(in, Sum<float>{}), ref, 2e-6 * (mag + 1)) << n;
    EXPECT_EQ(cpu::reduce(in, Max<float>{}), mx) << n;
  }
}

TEST_P(ThreadCount, AffineScanIsTheRecurrence) {
  for (std::int64_t n : kSizes) {
    std::uniform_real_distribution<double> da(0.5, 1.0), db(-1.0, 1.0);
    std::vector<AffineMap<double>> f(static_cast<std::size_t>(n));
    for (auto& g : f) g = {da(engine()), db(engine())};
    std::vector<AffineMap<double>> out(std::size_t(n), {NAN, NAN});
    cpu::inclusive_scan(std::span<const AffineMap<double>>(f), std::span(out), Affine<double>{});
    double h = 0.0;  // h_t = a_t h_{t-1} + b_t from h = 0: the scan's b component
    for (std::int64_t i = 0; i < n; ++i) {
      h = f[i].a * h + f[i].b;
      ASSERT_NEAR(out[i].b, h, 1e-9) << "n=" << n << " i=" << i;
    }
    const auto total = cpu::reduce(std::span<const AffineMap<double>>(f), Affine<double>{});
    if (n > 0) {
      EXPECT_NEAR(total.b, h, 1e-9);
    }
  }
}

TEST_P(ThreadCount, NonCommutativeExactMonoidsBitForBit) {
  for (std::int64_t n : kSizes) {
    std::vector<Mat2> m(static_cast<std::size_t>(n));
    for (auto& e : m) e = {std::uint32_t(rnd()), std::uint32_t(rnd()), std::uint32_t(rnd()), std::uint32_t(rnd())};
    std::vector<Mat2> out(static_cast<std::size_t>(n));
    cpu::exclusive_scan(std::span<const Mat2>(m), std::span(out), Mat2Product{});
    Mat2Product p;
    Mat2 acc = p.identity();
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(&out[i], &acc, sizeof acc), 0) << "n=" << n << " i=" << i;
      acc = p.combine(acc, m[i]);
    }
    const Mat2 r = cpu::reduce(std::span<const Mat2>(m), p);
    EXPECT_EQ(std::memcmp(&r, &acc, sizeof acc), 0) << n;

    std::vector<BicyclicPair> b(static_cast<std::size_t>(n)), bo(static_cast<std::size_t>(n));
    for (auto& e : b) e = {std::uint32_t(rnd() % 3), std::uint32_t(rnd() % 3)};
    cpu::inclusive_scan(std::span<const BicyclicPair>(b), std::span(bo), Bicyclic{});
    BicyclicPair ba{0, 0};
    for (std::int64_t i = 0; i < n; ++i) {
      ba = Bicyclic{}.combine(ba, b[i]);
      ASSERT_TRUE(bo[i].close == ba.close && bo[i].open == ba.open) << "n=" << n << " i=" << i;
    }
  }
}

TEST_P(ThreadCount, SegmentedReduceManyAndFewSegments) {
  for (std::int64_t n : {std::int64_t(0), std::int64_t(1), std::int64_t(1000), std::int64_t(300007)}) {
    for (int segments : {1, 3, 5000}) {
      auto x = random_floats(n);
      std::vector<std::int64_t> off(static_cast<std::size_t>(segments + 1));
      for (auto& o : off) o = n ? std::int64_t(rnd() % std::uint64_t(n + 1)) : 0;
      std::sort(off.begin(), off.end());
      off.front() = 0;  // empty segments appear naturally (repeated offsets)
      std::vector<AffineMap<float>> f(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) f[i] = {0.75f, x[i]};
      std::vector<float> out(std::size_t(segments), NAN);
      std::vector<AffineMap<float>> fout(static_cast<std::size_t>(segments));
      cpu::segmented_reduce(std::span<const float>(x.data(), std::size_t(n)),
                            std::span<const std::int64_t>(off), std::span(out), Sum<float>{});
      cpu::segmented_reduce(std::span<const AffineMap<float>>(f), std::span<const std::int64_t>(off),
                            std::span(fout), Affine<float>{});
      for (int s = 0; s < segments; ++s) {
        double ref = 0, mag = 0, h = 0;
        for (std::int64_t i = off[s]; i < off[s + 1]; ++i) {
          ref += x[i]; mag += std::fabs(x[i]); h = 0.75 * h + x[i];
        }
        ASSERT_NEAR(out[s], ref, 2e-6 * (mag + 1)) << "n=" << n << " s=" << s;
        ASSERT_NEAR(fout[s].b, h, 1e-4) << "n=" << n << " s=" << s;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, ThreadCount, ::testing::Values(1, 2, 3));

// Beyond 2^31 elements: 64-bit indexing end to end.
TEST(Large, ReduceLiftedBeyond2e31) {
  const std::int64_t n = (std::int64_t(1) << 31) + 5;
  const auto r = cpu::reduce_lifted(n, [](std::int64_t i) { return std::int64_t(i % 7); },
                                    Sum<std::int64_t>{});
  const std::int64_t q = n / 7, rem = n % 7;
  EXPECT_EQ(r, q * 21 + rem * (rem - 1) / 2);
}

TEST(Large, InPlaceScanBeyond2e31) {
  const std::int64_t n = (std::int64_t(1) << 31) + 100;
  std::vector<std::uint8_t> x(static_cast<std::size_t>(n));
#pragma omp parallel for
  for (std::int64_t i = 0; i < n; ++i) x[std::size_t(i)] = std::uint8_t(i % 251);
  cpu::inclusive_scan(std::span<const std::uint8_t>(x), std::span(x), Sum<std::uint8_t>{});
  // Σ_{j<=i} (j mod 251), mod 256, in closed form.
  auto expect = [](std::int64_t i) {
    const std::int64_t m = i + 1, q = m / 251, r = m % 251;
    return std::uint8_t((q * (250 * 251 / 2) + r * (r - 1) / 2) & 0xff);
  };
  for (std::int64_t i : {std::int64_t(0), std::int64_t(250), (std::int64_t(1) << 31) - 1,
                         std::int64_t(1) << 31, n - 1})
    EXPECT_EQ(x[std::size_t(i)], expect(i)) << i;
  std::mt19937_64 r(std::random_device{}());
  for (int k = 0; k < 1000; ++k) {
    const std::int64_t i = std::int64_t(r() % std::uint64_t(n));
    ASSERT_EQ(x[std::size_t(i)], expect(i)) << i;
  }
}
