// topk and TopKStream on every backend against the float64 reference (a full stable sort):
// indices must match exactly and values must be the selected elements, on fresh random inputs
// of every dtype, largest and smallest, sorted and unsorted, awkward sizes (1, primes, around
// powers of two, k = 1 and k = n, single rows long enough to be split across threads), strided
// rows, and adversarial data (duplicates everywhere, all equal, NaN / ±inf / ±0, sorted
// ascending and descending). Streams are fed in uneven chunks, in and out of index order, and
// merged in different orders. Bad input raises sixfold::Error with nothing written.
// The CUDA cases run where a GPU is usable (skipped otherwise; SIXFOLD_REQUIRE_GPU=1 fails them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../src/reference/topk_reference.hpp"
#include "row_buffers.hpp"
#include "sixfold/ops/topk.hpp"
#include "sixfold/runtime/error.hpp"
#include "sixfold/runtime/tensor.hpp"

#ifdef SIXFOLD_WITH_CUDA
#include <cuda_runtime.h>
#endif

using namespace sixfold;
using namespace sixfold::testing;

namespace {

std::size_t esize(DType t) { return std::size_t(dtype_bits(t) / 8); }

// Stores v as dtype t (values must be representable: the generators round them first).
void store(DType t, double v, void* p) {
  switch (t) {
    case DType::f64: std::memcpy(p, &v, 8); break;
    case DType::f32: { const float f = float(v); std::memcpy(p, &f, 4); break; }
    case DType::i32: { const std::int32_t i = std::int32_t(v); std::memcpy(p, &i, 4); break; }
    default: { const std::uint16_t b = encode16(t, v); std::memcpy(p, &b, 2); break; }
  }
}

double load(DType t, const void* p) {
  switch (t) {
    case DType::f64: { double d; std::memcpy(&d, p, 8); return d; }
    case DType::f32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::i32: { std::int32_t i; std::memcpy(&i, p, 4); return i; }
    default: { std::uint16_t b; std::memcpy(&b, p, 2); return decode16(t, b); }
  }
}

// The value as dtype t stores it (so the reference sees exactly what the kernel sees).
double representable(DType t, double v) {
  if (t == DType::i32) return std::nearbyint(std::clamp(v, -2.0e9, 2.0e9)) + 0.0;  // +0.0: no −0 in ints
  if (t == DType::f64 || std::isnan(v)) return v;
  return t == DType::f32 ? double(float(v)) : decode16(t, encode16(t, v));
}

// trap / trap_ties: large values (distinct / all equal) at the first 8 of every 64 positions,
// which is where the CUDA long-row path samples a row of 2^19 (runs of 8 keys, one every 64;
// it must then notice that the sample misled it).
// outlier: random, plus one huge value per row (the batched path's final sort bins keys by
// their distance to the threshold; one outlier puts the rest into one bin).
// narrow: ascending values in a range narrow for their magnitude (4096 + i / 512), which a
// 16-bit bin of the order key does not resolve (the batched threshold then refines its sample).
// unsampled: small random values, plus 6000 large ones at position 100 of the first 6000 runs of
// 512 — where the CUDA long-row path's sample (8 keys at the start of every 512 in a row of
// 2^22, k <= 1000) never looks: its range for the candidates' bins misses them all.
enum class Data { random, few_distinct, all_equal, specials, ascending, descending, trap, trap_ties, outlier, narrow,
                  unsampled };

const char* data_name(Data d) {
  const char* names[] = {"random", "few-distinct", "all-equal", "specials", "ascending", "descending",
                         "trap", "trap-ties", "outlier", "narrow", "unsampled"};
  return names[int(d)];
}

std::vector<double> make_data(Data kind, DType t, std::int64_t rows, std::int64_t n) {
  std::vector<double> x(std::size_t(rows * n));
  std::normal_distribution<double> nd(0.0, 100.0);
  std::uniform_int_distribution<int> few(-3, 3), pick(0, 9);
  const bool is_float = t != DType::i32;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < n; ++i) {
      double v = 0;
      switch (kind) {
        case Data::random: v = nd(engine()); break;
        case Data::few_distinct: v = few(engine()); break;
        case Data::all_equal: v = 1.5; break;
        case Data::specials: {
          const int p = pick(engine());
          if (is_float && p == 0) v = NAN;
          else if (is_float && p == 1) v = INFINITY;
          else if (is_float && p == 2) v = -INFINITY;
          else if (p == 3) v = 0.0;
          else if (is_float && p == 4) v = -0.0;
          else v = few(engine());
          break;
        }
        case Data::ascending: v = double(i % 60000) - 30000; break;   // f16/bf16 round: ties appear
        case Data::descending: v = 30000 - double(i % 60000); break;
        case Data::trap: v = i % 64 < 8 ? 1000.0 + double(i / 8) : nd(engine()) * 0.01; break;
        case Data::trap_ties: v = i % 64 < 8 ? 1000.0 : few(engine()); break;
        case Data::narrow: v = 4096.0 + double(i % 32768) / 512.0; break;
        case Data::outlier: v = i == (r * 7919 + 13) % n ? (r % 2 ? -1e30 : 1e30) : nd(engine()); break;
        case Data::unsampled: v = i % 512 == 100 && i / 512 < 6000 ? 1e6 + double(i) : nd(engine()) * 0.01; break;
      }
      x[std::size_t(r * n + i)] = representable(t, v);
    }
  return x;
}

std::vector<std::uint8_t> encode_rows(DType t, const std::vector<double>& x, std::int64_t rows,
                                      std::int64_t n, std::int64_t stride) {
  std::vector<std::uint8_t> bytes(std::size_t(rows * stride) * esize(t), 0xff);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < n; ++i)
      store(t, x[std::size_t(r * n + i)], bytes.data() + std::size_t(r * stride + i) * esize(t));
  return bytes;
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// Checks one row's output against the reference order.
void check_row(const std::vector<double>& x, std::int64_t r, std::int64_t n, std::int64_t k,
               bool largest, bool sorted, const std::int64_t* ref, std::vector<std::int64_t> idx,
               const std::vector<double>& vals) {
  const double* row = x.data() + r * n;
  for (std::int64_t j = 0; j < k; ++j) {
    const std::int64_t i = idx[std::size_t(j)];
    ASSERT_TRUE(i >= 0 && i < n) << "row " << r << " position " << j << ": index " << i;
    ASSERT_TRUE(same_value(vals[std::size_t(j)], row[i]))
        << "row " << r << " position " << j << ": value " << vals[std::size_t(j)] << " is not x[" << i << "] = " << row[i];
  }
  if (!sorted)
    std::sort(idx.begin(), idx.end(), [&](std::int64_t a, std::int64_t b) {
      if (reference::topk_before(row[a], row[b], largest)) return true;
      if (reference::topk_before(row[b], row[a], largest)) return false;
      return a < b;
    });
  for (std::int64_t j = 0; j < k; ++j)
    ASSERT_EQ(idx[std::size_t(j)], ref[j]) << "row " << r << " position " << j << " (reference value "
                                           << row[ref[j]] << ")";
}

struct Case {
  DType dtype;
  std::int64_t rows, n, k;
  Data data = Data::random;
  bool largest = true, sorted = true;
  int pad = 0;  // extra elements per row of x and of the outputs
};

std::string describe(const Case& c) {
  return std::string(dtype_name(c.dtype)) + " " + std::to_string(c.rows) + "x" + std::to_string(c.n) +
         " k " + std::to_string(c.k) + " " + data_name(c.data) + (c.largest ? " largest" : " smallest") +
         (c.sorted ? " sorted" : " unsorted") + " pad " + std::to_string(c.pad);
}

void run_case(const Case& c, Device dev) {
  SCOPED_TRACE(describe(c) + " on " + to_string(dev));
  const auto x = make_data(c.data, c.dtype, c.rows, c.n);
  const std::int64_t sx = c.n + c.pad, so = c.k + c.pad;
  DeviceBuffer bx(dev, encode_rows(c.dtype, x, c.rows, c.n, sx));
  DeviceBuffer bv(dev, std::vector<std::uint8_t>(std::size_t(c.rows * so) * esize(c.dtype), 0xff));
  DeviceBuffer bi(dev, std::vector<std::uint8_t>(std::size_t(c.rows * so) * 8, 0xff));
  const TensorView tx = bx.rows_view(c.dtype, c.rows, c.n, sx);
  const TensorView tv = bv.rows_view(c.dtype, c.rows, c.k, so);
  const TensorView ti = bi.rows_view(DType::i64, c.rows, c.k, so);
  topk(tx, c.k, tv, ti, {c.largest, c.sorted});
  synchronize(dev);
  const auto hv = bv.host(), hi = bi.host();
  const auto ref = reference::topk(x, c.rows, c.n, c.k, c.largest);
  for (std::int64_t r = 0; r < c.rows; ++r) {
    std::vector<std::int64_t> idx(std::size_t(c.k));
    std::vector<double> vals(std::size_t(c.k));
    for (std::int64_t j = 0; j < c.k; ++j) {
      std::memcpy(&idx[std::size_t(j)], hi.data() + std::size_t(r * so + j) * 8, 8);
      vals[std::size_t(j)] = load(c.dtype, hv.data() + std::size_t(r * so + j) * esize(c.dtype));
    }
    check_row(x, r, c.n, c.k, c.largest, c.sorted, ref.data() + r * c.k, idx, vals);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i32};

std::vector<Case> sweep_cases() {
  std::vector<Case> cs;
  for (DType t : kDtypes)
    for (bool largest : {true, false}) {
      cs.push_back({t, 1, 1, 1, Data::random, largest});
      cs.push_back({t, 3, 7, 7, Data::random, largest});                 // k = n
      cs.push_back({t, 5, 4095, 17, Data::random, largest, false});      // unsorted
      cs.push_back({t, 4, 4097, 4097, Data::few_distinct, largest});      // k = n, ties
      cs.push_back({t, 7, 1031, 1, Data::specials, largest, true, 3});   // strided
      cs.push_back({t, 2, 65536, 100, Data::specials, largest});
      cs.push_back({t, 33, 2048, 64, Data::random, largest, true, 5});
      cs.push_back({t, 3, 8191, 300, Data::all_equal, largest});
      cs.push_back({t, 2, 16384, 9, Data::ascending, largest});
      cs.push_back({t, 2, 16385, 9, Data::descending, largest});
    }
  return cs;
}

// Single rows long enough to be split across threads (CPU) and across blocks (CUDA).
std::vector<Case> long_row_cases() {
  std::vector<Case> cs;
  for (bool largest : {true, false}) {
    cs.push_back({DType::f32, 1, 300007, 1000, Data::random, largest});
    cs.push_back({DType::f32, 1, (1 << 18) + 1, 1, Data::ascending, largest});
    cs.push_back({DType::f32, 1, 1 << 18, 5000, Data::few_distinct, largest, false});
    cs.push_back({DType::f32, 1, 262143, 77, Data::specials, largest});
    cs.push_back({DType::bf16, 1, 400000, 2000, Data::random, largest});
    cs.push_back({DType::f64, 1, 200003, 64, Data::descending, largest});
    cs.push_back({DType::i32, 1, 300000, 3000, Data::all_equal, largest});
    cs.push_back({DType::f16, 1, 270000, 10, Data::specials, largest});
    // Sorted rows with many ties (bf16 rounds 30000 to multiples of 128): the CPU reads the
    // adversarial order's rest in reverse blocks, non-strictly before the threshold's index.
    cs.push_back({DType::bf16, 1, 300001, 3000, Data::ascending, largest});
    cs.push_back({DType::f32, 1, 250007, 999, Data::descending, largest, false});
  }
  return cs;
}

TEST(TopK, CpuSweep) {
  for (const Case& c : sweep_cases()) {
    run_case(c, Device::cpu());
    if (HasFatalFailure()) return;
  }
}

TEST(TopK, CpuLongRows) {
  for (const Case& c : long_row_cases()) {
    run_case(c, Device::cpu());
    if (HasFatalFailure()) return;
  }
}

TEST(TopK, AllocatingFormMatchesReference) {
  const auto x = make_data(Data::random, DType::f32, 3, 1000);
  std::vector<float> xf(x.begin(), x.end());
  const TensorView tx = TensorView::contiguous(xf.data(), DType::f32, {3, 1000});
  const TopKResult r = topk(tx, 10, {false, true});
  ASSERT_EQ(r.values.view().shape, (Shape{3, 10}));
  ASSERT_EQ(r.indices.view().dtype, DType::i64);
  const auto ref = reference::topk(x, 3, 1000, 10, false);
  for (std::size_t j = 0; j < ref.size(); ++j) {
    EXPECT_EQ(r.indices.data_as<std::int64_t>()[j], ref[j]);
    EXPECT_EQ(double(r.values.data_as<float>()[j]), x[(j / 10) * 1000 + std::size_t(ref[j])]);
  }
}

// ---- TopKStream ------------------------------------------------------------------------------

std::vector<std::int64_t> uneven_cuts(std::int64_t n) {
  std::uniform_int_distribution<std::int64_t> len(0, 3000);
  std::vector<std::int64_t> cuts{0};
  while (cuts.back() < n) cuts.push_back(std::min(n, cuts.back() + (len(engine()) % 7 == 0 ? 1 : len(engine()))));
  return cuts;
}

void check_stream(const TopKStream& s, const std::vector<double>& x, std::int64_t k, bool largest) {
  const std::int64_t n = std::int64_t(x.size());
  ASSERT_EQ(s.seen(), n);
  ASSERT_EQ(s.size(), std::min(k, n));
  const TopKResult r = s.result();
  const std::int64_t m = s.size();
  const auto ref = reference::topk(x, 1, n, m, largest);
  std::vector<std::int64_t> idx(r.indices.data_as<std::int64_t>(), r.indices.data_as<std::int64_t>() + m);
  std::vector<double> vals(static_cast<std::size_t>(m));
  for (std::int64_t j = 0; j < m; ++j)
    vals[std::size_t(j)] = load(s.dtype(), static_cast<const std::uint8_t*>(r.values.data()) + std::size_t(j) * esize(s.dtype()));
  check_row(x, 0, n, m, largest, true, ref.data(), idx, vals);
}

TEST(TopKStream, UnevenChunksInOrder) {
  for (DType t : kDtypes)
    for (Data d : {Data::random, Data::specials, Data::ascending, Data::few_distinct})
      for (std::int64_t k : {1, 10, 1000}) {
        const bool largest = k != 10;
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + data_name(d) + " k " + std::to_string(k));
        const std::int64_t n = 50000;
        const auto x = make_data(d, t, 1, n);
        const auto bytes = encode_rows(t, x, 1, n, n);
        TopKStream s(t, k, {largest});
        const auto cuts = uneven_cuts(n);
        for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
          void* p = const_cast<std::uint8_t*>(bytes.data()) + std::size_t(cuts[c]) * esize(t);
          s.push(TensorView::contiguous(p, t, {cuts[c + 1] - cuts[c]}));
          if (c == cuts.size() / 2) {  // a result mid-stream: the top k of the prefix
            const std::vector<double> prefix(x.begin(), x.begin() + cuts[c + 1]);
            check_stream(s, prefix, k, largest);
          }
        }
        check_stream(s, x, k, largest);
        if (HasFatalFailure()) return;
      }
}

TEST(TopKStream, ChunksOutOfOrderAndMergesInAnyOrder) {
  for (DType t : {DType::f32, DType::bf16, DType::i32})
    for (Data d : {Data::random, Data::few_distinct, Data::all_equal, Data::descending})
      for (bool largest : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + data_name(d) + (largest ? " largest" : " smallest"));
        const std::int64_t n = 40000, k = 37;
        const auto x = make_data(d, t, 1, n);
        const auto bytes = encode_rows(t, x, 1, n, n);
        auto cuts = uneven_cuts(n);
        std::vector<std::size_t> order(cuts.size() - 1);
        std::iota(order.begin(), order.end(), std::size_t(0));
        std::shuffle(order.begin(), order.end(), engine());
        // Chunks dealt out to 4 streams in random order, each with its explicit index.
        std::vector<TopKStream> parts;
        for (int p = 0; p < 4; ++p) parts.emplace_back(t, k, TopKParams{largest});
        for (std::size_t j = 0; j < order.size(); ++j) {
          const std::size_t c = order[j];
          void* ptr = const_cast<std::uint8_t*>(bytes.data()) + std::size_t(cuts[c]) * esize(t);
          parts[j % 4].push(TensorView::contiguous(ptr, t, {cuts[c + 1] - cuts[c]}), cuts[c]);
        }
        // ((a·b)·c)·d and a·(b·(c·d)) and a copy merged the other way round.
        TopKStream left = parts[0];
        for (int p = 1; p < 4; ++p) left.merge(parts[std::size_t(p)]);
        TopKStream right = parts[3];
        for (int p = 2; p >= 0; --p) { TopKStream m = parts[std::size_t(p)]; m.merge(right); right = m; }
        check_stream(left, x, k, largest);
        check_stream(right, x, k, largest);
        if (HasFatalFailure()) return;
      }
}

TEST(TopKStream, EmptyStreamAndErrors) {
  TopKStream s(DType::f32, 5);
  EXPECT_EQ(s.size(), 0);
  EXPECT_EQ(s.result().values.view().numel(), 0);
  std::vector<double> d(3, 1.0);
  expect_error([&] { s.push(TensorView::contiguous(d.data(), DType::f64, {3})); }, "'chunk'");
  expect_error([] { TopKStream bad(DType::i8, 5); }, "'dtype'");
  expect_error([] { TopKStream bad(DType::f32, 0); }, "'k'");
  TopKStream other(DType::f32, 6);
  expect_error([&] { s.merge(other); }, "'other'");
  std::vector<float> v(4, 2.0f);
  s.push(v.data(), 4);
  std::vector<float> out(4);
  std::vector<std::int64_t> idx(3);
  expect_error([&] { s.result(TensorView::contiguous(out.data(), DType::f32, {4}),
                              TensorView::contiguous(idx.data(), DType::i64, {3})); }, "'indices'");
}

// ---- bad input -------------------------------------------------------------------------------

TEST(TopK, BadInputIsRejectedAndNothingIsWritten) {
  std::vector<float> x(2 * 10, 1.0f), v(2 * 3, -7.0f);
  std::vector<std::int64_t> i(2 * 3, -7);
  std::vector<std::int32_t> i32(2 * 3, -7);
  std::vector<std::int8_t> x8(20, 1);
  const TensorView tx = TensorView::contiguous(x.data(), DType::f32, {2, 10});
  const TensorView tv = TensorView::contiguous(v.data(), DType::f32, {2, 3});
  const TensorView ti = TensorView::contiguous(i.data(), DType::i64, {2, 3});
  expect_error([&] { topk(tx, 11, tv, ti); }, "'k'");
  expect_error([&] { topk(tx, 0, tv, ti); }, "'k'");
  expect_error([&] { topk(tx, -1, tv, ti); }, "'k'");
  expect_error([&] { topk(TensorView::contiguous(x8.data(), DType::i8, {2, 10}), 3, tv, ti); }, "'x'");
  expect_error([&] { topk(tx, 2, tv, ti); }, "'values'");  // values shape [2, 3] for k = 2
  expect_error([&] { topk(tx, 3, TensorView::contiguous(v.data(), DType::f32, {6}), ti); }, "'values'");
  expect_error([&] { topk(tx, 3, tv, TensorView::contiguous(i.data(), DType::i64, {3, 2})); }, "'indices'");
  expect_error([&] { topk(tx, 3, tv, TensorView::contiguous(i32.data(), DType::i32, {2, 3})); }, "'indices'");
  expect_error([&] { topk(tx, 3, TensorView::contiguous(v.data(), DType::f64, {2, 3}), ti); }, "'values'");
  TensorView on_gpu = ti;
  on_gpu.device = Device::cuda(0);
  expect_error([&] { topk(tx, 3, tv, on_gpu); }, "'indices'");
  expect_error([&] { topk(tx, 3, TensorView::contiguous(x.data(), DType::f32, {2, 3}), ti); }, "'values'");  // overlaps x
  expect_error([&] { topk(tx, 3, tv, TensorView::contiguous(v.data(), DType::i64, {2, 3})); }, "'indices'");  // overlaps values
  expect_error([&] { topk(TensorView{}, 3, tv, ti); }, "'x'");
  for (float f : v) EXPECT_EQ(f, -7.0f);
  for (std::int64_t j : i) EXPECT_EQ(j, -7);
}

// ---- CUDA ------------------------------------------------------------------------------------

TEST(TopKCuda, Sweep) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable GPU";
  for (const Case& c : sweep_cases()) {
    run_case(c, Device::cuda(0));
    if (HasFatalFailure()) return;
  }
}

TEST(TopKCuda, LongRows) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable GPU";
  for (const Case& c : long_row_cases()) {
    run_case(c, Device::cuda(0));
    if (HasFatalFailure()) return;
  }
}

TEST(TopKCuda, LargeShapes) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable GPU";
  // Larger shapes of the bench: one row of 2^24 + 3 with k up to 1e5, batched rows with large k.
  run_case({DType::f32, 1, (1 << 24) + 3, 100000, Data::random, true}, Device::cuda(0));
  run_case({DType::f32, 1, (1 << 22), 1, Data::ascending, true}, Device::cuda(0));
  run_case({DType::f32, 1, (1 << 21) + 5, 1000, Data::all_equal, true}, Device::cuda(0));
  run_case({DType::f32, 1, (1 << 21) + 5, 1000, Data::descending, false}, Device::cuda(0));
  run_case({DType::f32, 1, (1 << 21) - 3, 333, Data::specials, false}, Device::cuda(0));
  run_case({DType::f64, 1, (1 << 21) + 1, 1000, Data::random, true}, Device::cuda(0));
  run_case({DType::i32, 1, (1 << 21), 100000, Data::few_distinct, true, false}, Device::cuda(0));
  run_case({DType::f32, 1, (1 << 22) - 1, 4096, Data::few_distinct, false, false}, Device::cuda(0));
  run_case({DType::f32, 64, 32768, 1024, Data::random, true}, Device::cuda(0));
  run_case({DType::f32, 64, 32768, 8, Data::specials, false}, Device::cuda(0));
  run_case({DType::bf16, 16, 262144, 64, Data::random, true}, Device::cuda(0));
  run_case({DType::f32, 8, 100003, 20000, Data::few_distinct, true}, Device::cuda(0));
}

// The long-row path's device-side decisions: candidates only (random), candidates + ties in
// index order (all-equal, few-distinct), a misleading sample (trap: fewer candidates than k;
// trap-ties: the k-th key among unsampled ties), large equal-key bins sorted by index, rows
// that start off a 16-byte boundary, k = 1, sizes around powers of two.
TEST(TopKCuda, LongRowPaths) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable GPU";
  const Device d = Device::cuda(0);
  for (bool largest : {true, false}) {
    run_case({DType::f32, 1, 1 << 19, 100, Data::trap, largest}, d);
    run_case({DType::f32, 1, 1 << 19, 70000, Data::trap_ties, largest}, d);
    run_case({DType::i32, 1, 1 << 19, 3000, Data::trap_ties, largest, false}, d);
    run_case({DType::f32, 1, (1 << 18) + 7, 100000, Data::few_distinct, largest}, d);
    run_case({DType::f32, 2, 300001, 1000, Data::random, largest, true, 1}, d);
    run_case({DType::f16, 3, 200001, 500, Data::specials, largest, true, 3}, d);
    run_case({DType::bf16, 2, 131071, 1, Data::random, largest, true, 5}, d);
    for (std::int64_t n : {(1 << 20) - 1, 1 << 20, (1 << 20) + 1})
      run_case({DType::f32, 1, n, 4097, Data::random, largest, n % 2 == 0}, d);
    run_case({DType::f32, 1, 1 << 20, 1, Data::specials, largest}, d);
    run_case({DType::f32, 1, (1 << 21) + 3, 1000, Data::descending, largest}, d);
    run_case({DType::i32, 1, 1 << 21, 100000, Data::ascending, largest}, d);
    run_case({DType::f32, 1, 1 << 22, 1000, Data::unsampled, largest}, d);
    // k reaching past the zeros: ±0 and NaN among the candidates (the sort writes values from
    // their keys, except these two, whose bits come from the input).
    run_case({DType::f32, 1, 1 << 19, 419430, Data::specials, largest}, d);
    run_case({DType::bf16, 1, 100003, 80000, Data::specials, largest, true, 1}, d);
    if (HasFatalFailure()) return;
  }
}

// Batched rows through the sampled-threshold kernel (32-bit keys, k <= 1024, rows >= 8192):
// its final sort by bins of the key (random rows), the bitonic fallback when one bin holds too
// many of the first k (outliers, duplicates), the ties path, and the rows it hands to the radix
// kernel; k around the limits, row lengths off 16-byte multiples, strided rows.
TEST(TopKCuda, BatchedRows) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable GPU";
  const Device d = Device::cuda(0);
  for (bool largest : {true, false}) {
    run_case({DType::f32, 37, 32768, 1024, Data::random, largest}, d);
    run_case({DType::f32, 19, 32771, 1023, Data::outlier, largest, true, 5}, d);
    run_case({DType::bf16, 9, 40000, 1000, Data::random, largest}, d);
    run_case({DType::f16, 7, 8192, 1024, Data::outlier, largest}, d);
    run_case({DType::i32, 11, 8193, 700, Data::random, largest}, d);
    run_case({DType::f32, 5, 12289, 513, Data::ascending, largest}, d);
    run_case({DType::f32, 5, 20000, 1, Data::descending, largest, false}, d);
    run_case({DType::f32, 6, 16384, 1000, Data::few_distinct, largest}, d);
    run_case({DType::f32, 4, 9000, 64, Data::trap, largest}, d);
    run_case({DType::i32, 4, 30000, 256, Data::specials, largest, false}, d);
    run_case({DType::f32, 6, 32768, 64, Data::narrow, largest}, d);
    run_case({DType::f32, 3, 20011, 1024, Data::narrow, largest, true, 3}, d);
    run_case({DType::bf16, 4, 16384, 100, Data::narrow, largest}, d);
    if (HasFatalFailure()) return;
  }
}

#ifdef SIXFOLD_WITH_CUDA
// Captured into a CUDA graph on a stream of its own (the long-row path then launches every
// selection path, the unused ones skipping on the device), replayed twice.
TEST(TopKCuda, CapturedInAGraph) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable GPU";
  for (const Case& c : {Case{DType::f32, 1, 300007, 1000, Data::random, true},
                        Case{DType::f32, 2, 200000, 50, Data::all_equal, false},
                        Case{DType::f32, 1, 1 << 20, 7, Data::ascending, true},
                        Case{DType::f32, 5, 5000, 64, Data::few_distinct, true}}) {
    SCOPED_TRACE(describe(c) + " in a graph");
    const auto x = make_data(c.data, c.dtype, c.rows, c.n);
    DeviceBuffer bx(Device::cuda(0), encode_rows(c.dtype, x, c.rows, c.n, c.n));
    DeviceBuffer bv(Device::cuda(0), std::vector<std::uint8_t>(std::size_t(c.rows * c.k) * 4, 0xff));
    DeviceBuffer bi(Device::cuda(0), std::vector<std::uint8_t>(std::size_t(c.rows * c.k) * 8, 0xff));
    cudaStream_t st = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    topk(bx.rows_view(c.dtype, c.rows, c.n, c.n), c.k, bv.rows_view(c.dtype, c.rows, c.k, c.k),
         bi.rows_view(DType::i64, c.rows, c.k, c.k), {c.largest, true}, Stream{st});
    ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int rep = 0; rep < 2; ++rep) ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    const auto hv = bv.host(), hi = bi.host();
    const auto ref = reference::topk(x, c.rows, c.n, c.k, c.largest);
    for (std::int64_t r = 0; r < c.rows; ++r) {
      std::vector<std::int64_t> idx(std::size_t(c.k));
      std::vector<double> vals(std::size_t(c.k));
      for (std::int64_t j = 0; j < c.k; ++j) {
        std::memcpy(&idx[std::size_t(j)], hi.data() + std::size_t(r * c.k + j) * 8, 8);
        vals[std::size_t(j)] = load(c.dtype, hv.data() + std::size_t(r * c.k + j) * 4);
      }
      check_row(x, r, c.n, c.k, c.largest, true, ref.data() + r * c.k, idx, vals);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(st);
    if (HasFatalFailure()) return;
  }
}
#endif

TEST(TopKCuda, MixedDevicesRejected) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable GPU";
  DeviceBuffer bx(Device::cuda(0), std::vector<std::uint8_t>(4 * 10, 0));
  std::vector<float> v(3);
  std::vector<std::int64_t> i(3);
  expect_error([&] {
    topk(bx.rows_view(DType::f32, 1, 10, 10), 3, TensorView::contiguous(v.data(), DType::f32, {1, 3}),
         TensorView::contiguous(i.data(), DType::i64, {1, 3}));
  }, "'values'");
}

}  // namespace
