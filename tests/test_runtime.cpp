// Tensor views, dtype conversions, and the validation of every public tensor entry: bad input
// raises sixfold::Error naming the argument, and leaves the outputs untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "sixfold/parallel/parallel.hpp"
#include "sixfold/runtime/ceilings.hpp"
#include "sixfold/runtime/error.hpp"
#include "sixfold/runtime/tensor.hpp"

using namespace sixfold;

namespace {

// Runs f, expects sixfold::Error whose message contains every fragment.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no sixfold::Error was thrown";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const auto& frag : fragments)
      EXPECT_NE(m.find(frag), std::string::npos) << "message: " << m << "\nmissing: " << frag;
  }
}

bool all_nan(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isnan(x)) return false;
  return true;
}

}  // namespace

TEST(Tensor, ViewsAndShapes) {
  Tensor t(DType::f32, {2, 3, 4});
  EXPECT_EQ(t.view().numel(), 24);
  EXPECT_TRUE(t.view().is_contiguous());
  EXPECT_EQ(t.view().stride(0), 12);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0u);
  EXPECT_EQ(to_string(t.view().shape), "[2, 3, 4]");
  TensorView v = t;
  std::swap(v.shape.dims[0], v.shape.dims[2]);
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_EQ(dtype_bytes(DType::i4, 3), 2);
  EXPECT_EQ(dtype_bytes(DType::bf16, 3), 6);
  // 64-bit sizes: a view of 2^33 elements is described without overflow.
  auto big = TensorView::contiguous(nullptr, DType::i8, {std::int64_t(1) << 33});
  EXPECT_EQ(big.numel(), std::int64_t(1) << 33);
}

TEST(DTypes, HalfAndBFloat16RoundTrip) {
  std::mt19937 r(std::random_device{}());
  for (int i = 0; i < 100000; ++i) {
    const std::uint16_t bits = std::uint16_t(r());
    const Half h{bits};
    const float f = to_float(h);
    if (std::isnan(f)) { EXPECT_TRUE(std::isnan(to_float(to_half(f)))); continue; }
    EXPECT_EQ(to_half(f).bits, bits) << std::hex << bits;  // every half is exact in float
    const BFloat16 b{bits};
    const float g = to_float(b);
    if (!std::isnan(g)) {
      EXPECT_EQ(to_bfloat16(g).bits, bits);
    }
  }
  EXPECT_EQ(to_float(to_half(1.0f + 1.0f / 4096)), 1.0f);  // ties to even
  EXPECT_EQ(to_float(to_bfloat16(3.0f)), 3.0f);
  EXPECT_TRUE(std::isinf(to_float(to_half(70000.0f))));
}

TEST(Validation, ScanRejectsBadArgumentsAndWritesNothing) {
  std::vector<float> x(10, 1.0f), y(10, NAN), z(9, NAN);
  std::vector<double> yd(10, NAN);
  auto in = TensorView::contiguous(x.data(), DType::f32, {10});
  auto out = TensorView::contiguous(y.data(), DType::f32, {10});
  expect_error([&] { inclusive_scan(in, TensorView::contiguous(z.data(), DType::f32, {9})); },
               {"sixfold::inclusive_scan", "'out'", "expected shape [10]", "got [9]"});
  expect_error([&] { exclusive_scan(in, TensorView::contiguous(yd.data(), DType::f64, {10})); },
               {"sixfold::exclusive_scan", "'out'", "dtype f32", "got f64"});
  expect_error([&] { inclusive_scan(TensorView::contiguous(nullptr, DType::f32, {10}), out); },
               {"'x'", "non-null", "10 elements"});
  expect_error([&] { inclusive_scan(TensorView::contiguous(x.data(), DType::f32, {2, 5}), out); },
               {"'x'", "rank 1", "[2, 5]"});
  expect_error([&] { inclusive_scan(TensorView::contiguous(x.data(), DType::i8, {10}),
                                    TensorView::contiguous(y.data(), DType::i8, {10})); },
               {"'x'", "f32, f64 or i32", "got i8"});
  auto on_gpu = TensorView::contiguous(y.data(), DType::f32, {10}, Device::cuda(0));
  expect_error([&] { inclusive_scan(in, on_gpu); }, {"'out'", "device cpu", "got cuda:0"});
  auto strided = in;
  strided.strides[0] = 2;
  strided.shape.dims[0] = 5;
  expect_error([&] { inclusive_scan(strided, TensorView::contiguous(y.data(), DType::f32, {5})); },
               {"'x'", "contiguous"});
  auto shifted = TensorView::contiguous(x.data() + 1, DType::f32, {9});
  expect_error([&] { inclusive_scan(TensorView::contiguous(x.data(), DType::f32, {9}), shifted); },
               {"'out'", "overlap"});
  expect_error([&] { inclusive_scan(in, out, {.op = MonoidOp(7)}); }, {"params.op"});
  EXPECT_TRUE(all_nan(y));
  EXPECT_TRUE(all_nan(z));
}

TEST(Validation, ReduceAndSegmentedReduce) {
  std::vector<float> x(10, 1.0f), y(3, NAN);
  std::vector<std::int64_t> off = {0, 4, 2, 10};
  auto in = TensorView::contiguous(x.data(), DType::f32, {10});
  auto out = TensorView::contiguous(y.data(), DType::f32, {3});
  expect_error([&] { reduce(in, out); }, {"sixfold::reduce", "'out'", "one element", "[3]"});
  expect_error([&] { segmented_reduce(in, TensorView::contiguous(off.data(), DType::i64, {4}), out); },
               {"sixfold::segmented_reduce", "'offsets'", "non-decreasing", "offsets[2] = 2 after 4"});
  off = {0, 4, 6, 11};
  expect_error([&] { segmented_reduce(in, TensorView::contiguous(off.data(), DType::i64, {4}), out); },
               {"'offsets'", "within [0, 10]", "offsets[3] = 11"});
  expect_error([&] { segmented_reduce(in, TensorView::contiguous(off.data(), DType::i64, {3}), out); },
               {"'offsets'", "4 entries", "got 3 entries"});
  expect_error([&] { segmented_reduce(in, TensorView::contiguous(off.data(), DType::f32, {4}), out); },
               {"'offsets'", "i32 or i64", "got f32"});
  EXPECT_TRUE(all_nan(y));
  // And the valid call works, on i32 data with wrapping sums.
  std::vector<std::int32_t> xi = {2147483647, 1, 5, -5};
  std::vector<std::int32_t> o32 = {0, 2, 4}, yi(2, 0);
  segmented_reduce(TensorView::contiguous(xi.data(), DType::i32, {4}),
                   TensorView::contiguous(o32.data(), DType::i32, {3}),
                   TensorView::contiguous(yi.data(), DType::i32, {2}));
  EXPECT_EQ(yi[0], std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(yi[1], 0);
}

TEST(TensorEntries, ScanReduceAllOpsAndDtypes) {
  std::mt19937_64 r(std::random_device{}());
  const std::int64_t n = 100003;
  std::vector<double> xd(n);
  for (auto& v : xd) v = std::uniform_real_distribution<double>(-1, 1)(r);
  std::vector<double> yd(n, NAN);
  inclusive_scan(TensorView::contiguous(xd.data(), DType::f64, {n}),
                 TensorView::contiguous(yd.data(), DType::f64, {n}));
  double acc = 0;
  for (std::int64_t i = 0; i < n; ++i) { acc += xd[i]; ASSERT_NEAR(yd[i], acc, 1e-10); }
  double mx = NAN;
  std::vector<double> one(1, NAN);
  reduce(TensorView::contiguous(xd.data(), DType::f64, {n}),
         TensorView::contiguous(one.data(), DType::f64, {1}), {.op = MonoidOp::max});
  mx = *std::max_element(xd.begin(), xd.end());
  EXPECT_EQ(one[0], mx);
  std::vector<std::int32_t> xi(n), yi(n, 0);
  for (auto& v : xi) v = std::int32_t(r() % 1000) - 500;
  exclusive_scan(TensorView::contiguous(xi.data(), DType::i32, {n}),
                 TensorView::contiguous(yi.data(), DType::i32, {n}), {.op = MonoidOp::min});
  std::int32_t m = std::numeric_limits<std::int32_t>::max();
  for (std::int64_t i = 0; i < n; ++i) { ASSERT_EQ(yi[i], m); m = std::min(m, xi[i]); }
  // Empty input: the identity.
  std::vector<float> e(1, NAN);
  reduce(TensorView::contiguous(nullptr, DType::f32, {0}), TensorView::contiguous(e.data(), DType::f32, {}),
         {.op = MonoidOp::min});
  EXPECT_EQ(e[0], INFINITY);
}
