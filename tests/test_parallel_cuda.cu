// CUDA reduce / scans / segmented reduce against float64 or exact host references, on fresh
// random inputs and awkward sizes, including non-commutative monoids (which take the
// order-preserving reduction), the tensor entries, CUDA-graph capture and > 2^31 elements.
// Without a GPU every test is skipped; SIXFOLD_REQUIRE_GPU=1 turns the skip into a failure.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "sixfold/algebra/instances.hpp"
#include "sixfold/parallel/cuda.cuh"
#include "sixfold/parallel/parallel.hpp"
#include "sixfold/runtime/error.hpp"
#include "sixfold/runtime/tensor.hpp"

using namespace sixfold;
using namespace sixfold::algebra;
namespace gpu = sixfold::parallel::cuda;

namespace {

std::mt19937_64& engine() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}
std::uint64_t rnd() { return engine()(); }

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_available()) return;
    if (std::getenv("SIXFOLD_REQUIRE_GPU")) FAIL() << "SIXFOLD_REQUIRE_GPU is set but no GPU is usable";
    GTEST_SKIP() << "no CUDA device";
  }
};

template <class T>
struct DeviceArray {
  explicit DeviceArray(std::int64_t n) : n(n) {
    if (n) gpu::check_cuda(cudaMalloc(&p, sizeof(T) * std::size_t(n)), "test");
    poison();
  }
  explicit DeviceArray(const std::vector<T>& h) : DeviceArray(std::int64_t(h.size())) {
    if (n) cudaMemcpy(p, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice);
  }
  ~DeviceArray() { if (p) cudaFree(p); }
  void poison() { if (n) cudaMemset(p, 0xff, sizeof(T) * std::size_t(n)); }  // NaN for floats
  std::vector<T> host() const {
    std::vector<T> h(static_cast<std::size_t>(n));
    gpu::check_cuda(cudaDeviceSynchronize(), "test");
    if (n) cudaMemcpy(h.data(), p, sizeof(T) * h.size(), cudaMemcpyDeviceToHost);
    return h;
  }
  T* p = nullptr;
  std::int64_t n;
};

// SIXFOLD_TEST_SMALL=1 (used under compute-sanitizer) keeps the sizes small.
bool small_only() { return std::getenv("SIXFOLD_TEST_SMALL") != nullptr; }

const std::vector<std::int64_t> kSizes = [] {
  std::vector<std::int64_t> all = {0, 1, 2, 17, 1023, 1024, 1025, 4095, 4097, 65537, 1'000'003, 25'000'001};
  if (small_only()) all.resize(10);
  return all;
}();

}  // namespace

TEST_F(Cuda, SumScanF32MatchesReference) {
  for (std::int64_t n : kSizes) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(engine());
    DeviceArray<float> dx(x), dy(n);
    for (bool exclusive : {false, true}) {
      dy.poison();
      if (exclusive) gpu::exclusive_scan(dx.p, dy.p, n, Sum<float>{});
      else gpu::inclusive_scan(dx.p, dy.p, n, Sum<float>{});
      const auto y = dy.host();
      double ref = 0, mag = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const double before = ref;
        ref += x[i];
        mag += std::fabs(x[i]);
        ASSERT_NEAR(y[i], exclusive ? before : ref, 2e-6 * (mag + 1) + 1e-6)
            << "n=" << n << " i=" << i << " exclusive=" << exclusive;
      }
    }
  }
}

// Sizes around the single-pass bulk scan of f32 sums (src/cuda/scan_bulk.cu, 8192-element tiles,
// from 2^20 elements): whole tiles only, one element past, many tiles plus a ragged tail; in place
// and out of place; an input offset by one element (not 16-byte aligned) takes CUB's path.
TEST_F(Cuda, SumScanF32BulkPath) {
  std::vector<std::int64_t> sizes = {1 << 20, (1 << 20) + 1, (1 << 20) - 1};
  if (!small_only()) sizes.push_back(8192 * 1321 + 4099);
  for (std::int64_t n : sizes)
    for (int mode = 0; mode < 3; ++mode) {  // 0 out of place, 1 in place, 2 misaligned input
      std::vector<float> x(static_cast<std::size_t>(n) + 1);
      for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(engine());
      DeviceArray<float> dx(x), dy(n + 1);
      dy.poison();
      const float* in = mode == 2 ? dx.p + 1 : dx.p;
      float* out = mode == 1 ? dx.p : dy.p;
      gpu::inclusive_scan(in, out, n, Sum<float>{});
      const auto y = mode == 1 ? dx.host() : dy.host();
      double ref = 0, mag = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        ref += x[std::size_t(i + (mode == 2))];
        mag += std::fabs(x[std::size_t(i + (mode == 2))]);
        ASSERT_NEAR(y[std::size_t(i)], ref, 2e-6 * (mag + 1) + 1e-6) << "n=" << n << " mode=" << mode << " i=" << i;
      }
    }
}

TEST_F(Cuda, AffineScanAndOrderedReduce) {
  for (std::int64_t n : kSizes) {
    if (n > 2'000'000) continue;
    std::vector<AffineMap<double>> f(static_cast<std::size_t>(n));
    for (auto& g : f)
      g = {std::uniform_real_distribution<double>(0.5, 1.0)(engine()),
           std::uniform_real_distribution<double>(-1, 1)(engine())};
    DeviceArray<AffineMap<double>> df(f), dout(n), dred(1);
    gpu::inclusive_scan(df.p, dout.p, n, Affine<double>{});
    gpu::reduce(df.p, dred.p, n, Affine<double>{});  // non-commutative: ordered path
    const auto out = dout.host();
    const auto red = dred.host();
    double h = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      h = f[i].a * h + f[i].b;
      ASSERT_NEAR(out[i].b, h, 1e-9) << "n=" << n << " i=" << i;
    }
    EXPECT_NEAR(red[0].b, h, 1e-9) << n;
  }
}

TEST_F(Cuda, NonCommutativeExactMonoidsBitForBit) {
  for (std::int64_t n : kSizes) {
    if (n > 2'000'000) continue;
    std::vector<Mat2> m(static_cast<std::size_t>(n));
    for (auto& e : m)
      e = {std::uint32_t(rnd()), std::uint32_t(rnd()), std::uint32_t(rnd()), std::uint32_t(rnd())};
    DeviceArray<Mat2> dm(m), dout(n), dred(1);
    gpu::exclusive_scan(dm.p, dout.p, n, Mat2Product{});
    gpu::reduce(dm.p, dred.p, n, Mat2Product{});
    const auto out = dout.host();
    Mat2Product p;
    Mat2 acc = p.identity();
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(&out[i], &acc, sizeof acc), 0) << "n=" << n << " i=" << i;
      acc = p.combine(acc, m[i]);
    }
    const auto red = dred.host();
    EXPECT_EQ(std::memcmp(&red[0], &acc, sizeof acc), 0) << n;
  }
}

TEST_F(Cuda, SegmentedReduceCommutativeAndNot) {
  for (std::int64_t n : {std::int64_t(1), std::int64_t(1000), std::int64_t(small_only() ? 4097 : 300007)}) {
    for (int segments : {1, 3, 5000}) {
      std::vector<float> x(static_cast<std::size_t>(n));
      for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(engine());
      std::vector<std::int64_t> off(static_cast<std::size_t>(segments + 1));
      for (auto& o : off) o = std::int64_t(rnd() % std::uint64_t(n + 1));
      std::sort(off.begin(), off.end());
      off.front() = 0;
      std::vector<AffineMap<float>> f(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) f[i] = {0.75f, x[i]};
      DeviceArray<float> dx(x), dout(segments);
      DeviceArray<std::int64_t> doff(off);
      DeviceArray<AffineMap<float>> df(f), dfout(segments);
      gpu::segmented_reduce(dx.p, doff.p, dout.p, segments, Sum<float>{});
      gpu::segmented_reduce(df.p, doff.p, dfout.p, segments, Affine<float>{});
      const auto out = dout.host();
      const auto fout = dfout.host();
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

TEST_F(Cuda, TensorEntriesAndMixedDevices) {
  const std::int64_t n = 100003;
  std::vector<float> x(n);
  for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(engine());
  DeviceArray<float> dx(x), dy(n), dr(1);
  auto in = TensorView::contiguous(dx.p, DType::f32, {n}, Device::cuda(0));
  auto out = TensorView::contiguous(dy.p, DType::f32, {n}, Device::cuda(0));
  inclusive_scan(in, out, {.op = MonoidOp::max});
  reduce(in, TensorView::contiguous(dr.p, DType::f32, {1}, Device::cuda(0)));
  const auto y = dy.host();
  float m = -INFINITY;
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) { m = std::max(m, x[i]); s += x[i]; ASSERT_EQ(y[i], m); }
  EXPECT_NEAR(dr.host()[0], s, 1e-3);
  std::vector<float> host_out(n, NAN);
  try {
    inclusive_scan(in, TensorView::contiguous(host_out.data(), DType::f32, {n}));
    ADD_FAILURE() << "mixed devices accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected device cuda:0"), std::string::npos) << e.what();
  }
  for (float v : host_out) ASSERT_TRUE(std::isnan(v));
}

TEST_F(Cuda, CapturedInCudaGraph) {
  const std::int64_t n = 1 << 20;
  std::vector<float> x(n);
  for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(engine());
  DeviceArray<float> dx(x), dy(n);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaGraph_t g;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  inclusive_scan(TensorView::contiguous(dx.p, DType::f32, {n}, Device::cuda(0)),
                 TensorView::contiguous(dy.p, DType::f32, {n}, Device::cuda(0)), {}, Stream{s});
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphExec_t ge;
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  dy.poison();
  ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const auto y = dy.host();
  double ref = 0, mag = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    ref += x[i]; mag += std::fabs(x[i]);
    ASSERT_NEAR(y[i], ref, 2e-6 * (mag + 1)) << i;
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

TEST_F(Cuda, InPlaceScanBeyond2e31) {
  if (small_only()) GTEST_SKIP() << "large case excluded by SIXFOLD_TEST_SMALL";
  const std::int64_t n = (std::int64_t(1) << 31) + 100;
  std::vector<std::uint8_t> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) x[std::size_t(i)] = std::uint8_t(i % 251);
  DeviceArray<std::uint8_t> d(x);
  gpu::inclusive_scan(d.p, d.p, n, Sum<std::uint8_t>{});
  const auto y = d.host();
  auto expect = [](std::int64_t i) {
    const std::int64_t m = i + 1, q = m / 251, r = m % 251;
    return std::uint8_t((q * (250 * 251 / 2) + r * (r - 1) / 2) & 0xff);
  };
  for (std::int64_t i = 0; i < n; i += 997) ASSERT_EQ(y[std::size_t(i)], expect(i)) << i;
  EXPECT_EQ(y[std::size_t(n - 1)], expect(n - 1));
}
