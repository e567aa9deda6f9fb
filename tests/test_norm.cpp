// Norm ops (RMSNorm, LayerNorm, softmax, log-softmax) on every backend against the float64
// reference: fresh random inputs, f32/bf16/f16, awkward row lengths (1, 3, 4095, 4097, 2^20),
// strided rows, in place, huge logits and −inf entries; the saved row statistics (mean / rstd)
// against float64; bad input rejected with nothing written.
// The CUDA cases run where a GPU is usable (skipped otherwise; SIXFOLD_REQUIRE_GPU=1 fails them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../src/reference/norm_reference.hpp"
#include "row_buffers.hpp"
#include "scoped_env.hpp"
#include "test_norm_stats.hpp"
#include "sixfold/ops/norm.hpp"
#include "sixfold/runtime/error.hpp"
#include "sixfold/runtime/tensor.hpp"

using namespace sixfold;
using namespace sixfold::testing;

namespace {

struct Case {
  NormKind kind;
  DType dtype;
  std::int64_t rows, n;
  bool affine = true;   // weight (and bias for LayerNorm)
  int pad_x = 0, pad_out = 0;
  bool in_place = false;
  double scale = 1.0;   // logits scale (1e4 for "huge")
  bool neg_inf = false; // sprinkle −inf entries (softmax kinds); row 0 all −inf
  int stats = 0;        // rms / layer: also save the row statistics, shaped (rows) (1) or
                        // (rows, 1) (2)
  bool far_head = false; // each row's first 64 elements 50 standard deviations above the rest:
                         // LayerNorm's shifted sums (about the head's mean) take the exact
                         // second pass
  bool no_bias = false;  // LayerNorm: the weight without a bias
};

std::string describe(const Case& c) {
  const char* k[] = {"rms", "layer", "softmax", "log_softmax"};
  return std::string(k[int(c.kind)]) + " " + std::string(dtype_name(c.dtype)) + " " +
         std::to_string(c.rows) + "x" + std::to_string(c.n) + (c.affine ? " affine" : "") +
         " pad " + std::to_string(c.pad_x) + "/" + std::to_string(c.pad_out) +
         (c.in_place ? " in-place" : "") + (c.scale != 1 ? " scale " + std::to_string(c.scale) : "") +
         (c.neg_inf ? " -inf" : "") + (c.stats ? " stats " + std::to_string(c.stats) : "") +
         (c.far_head ? " far head" : "") + (c.no_bias ? " no bias" : "");
}

void run_case(const Case& c, Device dev) {
  SCOPED_TRACE(describe(c) + " on " + to_string(dev));
  std::normal_distribution<double> nd(0.5, 2.0);
  std::vector<double> x(std::size_t(c.rows * c.n));
  for (auto& v : x) v = nd(engine()) * c.scale;
  if (c.far_head)
    for (std::int64_t r = 0; r < c.rows; ++r)
      for (std::int64_t i = 0; i < std::min<std::int64_t>(c.n, 64); ++i) x[std::size_t(r * c.n + i)] += 100.0 * c.scale;
  if (c.neg_inf) {
    for (std::int64_t i = 0; i < c.n; ++i) x[std::size_t(i)] = -INFINITY;  // a row of all −inf
    for (std::size_t i = std::size_t(c.n); i < x.size(); i += 7) x[i] = -INFINITY;
  }
  std::vector<double> w, b;
  const bool has_w = c.affine && (c.kind == NormKind::rms || c.kind == NormKind::layer);
  const bool has_b = c.affine && !c.no_bias && c.kind == NormKind::layer;
  if (has_w) { w.resize(std::size_t(c.n)); for (auto& v : w) v = nd(engine()); }
  if (has_b) { b.resize(std::size_t(c.n)); for (auto& v : b) v = nd(engine()); }
  const std::int64_t sx = c.n + c.pad_x, so = c.in_place ? sx : c.n + c.pad_out;
  const auto xbytes = encode(c.dtype, x, c.rows, c.n, sx);
  const auto xq = decode(c.dtype, xbytes, c.rows, c.n, sx);  // the inputs as stored
  DeviceBuffer bx(dev, xbytes);
  DeviceBuffer bo(dev, std::vector<std::uint8_t>(std::size_t(c.rows * so) * std::size_t(dtype_bits(c.dtype) / 8), 0xff));
  const auto wbytes = encode(c.dtype, w, has_w ? 1 : 0, c.n, c.n);
  const auto bbytes = encode(c.dtype, b, has_b ? 1 : 0, c.n, c.n);
  DeviceBuffer bw(dev, wbytes), bb(dev, bbytes);
  const TensorView tx = bx.rows_view(c.dtype, c.rows, c.n, sx);
  const TensorView to = c.in_place ? tx : bo.rows_view(c.dtype, c.rows, c.n, so);
  TensorView tw, tb;
  if (has_w) tw = TensorView::contiguous(bw.storage.get(), c.dtype, {c.n}, dev);
  if (has_b) tb = TensorView::contiguous(bb.storage.get(), c.dtype, {c.n}, dev);
  const float eps = 1e-5f;
  // Saved statistics: poisoned f32 buffers, viewed as (rows) or (rows, 1).
  const std::vector<std::uint8_t> spoison(std::size_t(c.rows) * 4, 0xff);
  DeviceBuffer bmean(dev, spoison), brstd(dev, spoison);
  NormStats st;
  if (c.stats) {
    const Shape sh = c.stats == 1 ? Shape{c.rows} : Shape{c.rows, 1};
    st.rstd = TensorView::contiguous(brstd.storage.get(), DType::f32, sh, dev);
    if (c.kind == NormKind::layer) st.mean = TensorView::contiguous(bmean.storage.get(), DType::f32, sh, dev);
  }
  switch (c.kind) {
    case NormKind::rms: rms_norm(tx, tw, to, {eps}, {}, st); break;
    case NormKind::layer: layer_norm(tx, tw, tb, to, {eps}, {}, st); break;
    case NormKind::softmax: softmax(tx, to); break;
    case NormKind::log_softmax: log_softmax(tx, to); break;
  }
  const auto out = decode(c.dtype, (c.in_place ? bx : bo).host(), c.rows, c.n, so);
  if (c.stats) expect_stats(c.kind, xq, c.rows, c.n, eps, floats_of(bmean), floats_of(brstd), 2e-5);
  const auto wq = has_w ? decode(c.dtype, wbytes, 1, c.n, c.n) : std::vector<double>{};
  const auto bq = has_b ? decode(c.dtype, bbytes, 1, c.n, c.n) : std::vector<double>{};
  const auto ref = reference::norm(c.kind, xq, c.rows, c.n, wq, bq, eps);
  // Rounded through the output dtype, then |out − ref| <= rtol·(|ref| + max|ref| of the row).
  const double rtol = c.dtype == DType::f32 ? 2e-5 : (c.dtype == DType::bf16 ? 1.6e-2 : 2e-3);
  for (std::int64_t r = 0; r < c.rows; ++r) {
    double row_max = 0;
    for (std::int64_t i = 0; i < c.n; ++i)
      if (std::isfinite(ref[std::size_t(r * c.n + i)])) row_max = std::max(row_max, std::fabs(ref[std::size_t(r * c.n + i)]));
    for (std::int64_t i = 0; i < c.n; ++i) {
      const double want = round_to(c.dtype, ref[std::size_t(r * c.n + i)]);
      const double got = out[std::size_t(r * c.n + i)];
      if (std::isnan(want) || std::isinf(want)) {
        ASSERT_TRUE(std::isnan(want) ? std::isnan(got) : got == want) << "row " << r << " i " << i << " got " << got << " want " << want;
        continue;
      }
      ASSERT_LE(std::fabs(got - want), rtol * (std::fabs(want) + row_max) + 1e-30)
          << "row " << r << " i " << i << " got " << got << " want " << want;
    }
  }
}

// streamed: also the CPU's ≥ 8 MB outputs (their float64 reference is slow beside a GPU run).
std::vector<Case> cases(bool streamed = false) {
  std::vector<Case> all;
  for (NormKind k : {NormKind::rms, NormKind::layer, NormKind::softmax, NormKind::log_softmax})
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      for (auto [rows, n] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 1}, {4, 3}, {5, 17},
                             {3, 4095}, {2, 4097}, {33, 1000}, {2, 8192}, {3, 40000},
                             // a warp per row (16-bit rows of 513..1024, f32 of 257..512): whole
                             // blocks of full rows, a last block of one row, odd (scalar) rows
                             {17, 1024}, {16, 512}, {5, 511},
                             {1, 432000},  // f32 on CUDA: cluster slices longer than the
                                           // shared-memory cache (re-read tail), memcheck-sized
                             {1, 1 << 20}}) {
        if (n >= (1 << 20) && std::getenv("SIXFOLD_TEST_SMALL")) continue;  // under compute-sanitizer
        all.push_back({k, t, rows, n});
      }
      all.push_back({k, t, 9, 777, false, 3, 5});          // strided rows, no weight/bias
      all.push_back({k, t, 6, 4096, true, 8, 0, true});    // in place, padded rows
      // Softmax's outputs of ≥ 8 MB with rows off a 64-byte boundary: the CPU's in-order path
      // (non-temporal stores from the boundary on; output_plan in rows_cpu.hpp).
      if (k != NormKind::rms && k != NormKind::layer && t == DType::bf16 && streamed &&
          !std::getenv("SIXFOLD_TEST_SMALL"))
        all.push_back({k, t, 2053, 2047});
      if (k != NormKind::rms && k != NormKind::layer) continue;
      // Outputs of ≥ 8 MB (the CPU's non-temporal stores for rows on a 64-byte boundary; for
      // bf16 in pair order, and where a row starts off the boundary (odd lengths, strided rows)
      // pair order with plain stores on AVX2 builds, in order with AVX512_BF16: output_plan),
      // with and without saved statistics.
      if (t == DType::bf16 && streamed && !std::getenv("SIXFOLD_TEST_SMALL")) {
        all.push_back({k, t, 2048, 2048});
        all.push_back({k, t, 2053, 2047, true, 0, 0, false, 1.0, false, 1});
        all.push_back({k, t, 1025, 4096, true, 3, 5});
      }
      // Full rows of the block kernel (LayerNorm: weight and bias staged in shared memory)
      // without weight and bias, and (LayerNorm) with the weight only.
      all.push_back({k, t, 5, 2048, false});
      if (k == NormKind::layer) all.push_back({k, t, 5, 2048, true, 0, 0, false, 1.0, false, 0, false, true});
      // The saved statistics on every path (register groups, blocks, clusters, 1M).
      for (auto [rows, n] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 1}, {5, 17}, {3, 4095},
                             {2, 4097}, {33, 1000}, {17, 1024}, {16, 512}, {2, 40000}, {1, 432000},
                             {1, 1 << 20}}) {
        if (n >= (1 << 20) && std::getenv("SIXFOLD_TEST_SMALL")) continue;
        all.push_back({k, t, rows, n, true, 0, 0, false, 1.0, false, n % 2 ? 1 : 2});
      }
      all.push_back({k, t, 9, 777, false, 3, 5, false, 1.0, false, 1});   // strided
      all.push_back({k, t, 6, 4096, true, 8, 0, true, 1.0, false, 2});    // in place
      if (t != DType::f16) all.push_back({k, t, 4, 1000, true, 0, 0, false, 1e4, false, 1});  // huge
      // Rows whose head is far from their mean, on the register paths (groups, blocks, scalars).
      for (auto [rows, n] : {std::pair<std::int64_t, std::int64_t>{5, 1000}, {3, 4096}, {4, 4097}, {2, 40000}})
        all.push_back({k, t, rows, n, true, 0, 0, false, 1.0, false, 1, true});
    }
  for (NormKind k : {NormKind::softmax, NormKind::log_softmax})
    for (DType t : {DType::f32, DType::bf16}) {
      all.push_back({k, t, 4, 1000, false, 0, 0, false, 1e4});         // huge logits
      all.push_back({k, t, 4, 4097, false, 0, 0, false, 1.0, true});   // −inf entries, a −inf row
    }
  return all;
}

}  // namespace

TEST(Norm, CpuMatchesReference) {
  for (const Case& c : cases(true)) run_case(c, Device::cpu());
}

// A row's output and statistics depend on that row only: computed among others (where the CPU
// runs each row's rewrite beside the next row's pass over memory, write_row_beside) they have
// the bits they have alone; rows with a far head (LayerNorm's exact second pass) and the fused
// residual add (its sum too) included.
TEST(Norm, CpuRowsIndependentOfTheirNeighbours) {
  std::normal_distribution<double> nd(0.5, 2.0);
  for (bool add : {false, true})
    for (NormKind k : {NormKind::rms, NormKind::layer})
      for (DType t : {DType::f32, DType::bf16, DType::f16})
        for (std::int64_t n : {1, 33, 1000, 1057, 4097}) {
          SCOPED_TRACE(describe({k, t, 7, n}) + (add ? " with a residual" : ""));
          const std::int64_t rows = 7;
          std::vector<double> x(static_cast<std::size_t>(rows * n)), res(x.size()), w(static_cast<std::size_t>(n)),
              b(static_cast<std::size_t>(n));
          for (auto& v : x) v = nd(engine());
          for (auto& v : res) v = nd(engine());
          for (std::int64_t i = 0; i < std::min<std::int64_t>(n, 64); ++i) x[std::size_t(2 * n + i)] += 100.0;
          for (auto& v : w) v = nd(engine());
          for (auto& v : b) v = nd(engine());
          const auto xb = encode(t, x, rows, n, n), rb = encode(t, res, rows, n, n);
          const auto wb = encode(t, w, 1, n, n), bb = encode(t, b, 1, n, n);
          const std::size_t es = std::size_t(dtype_bits(t) / 8), row_bytes = std::size_t(n) * es;
          // Row r0 onwards, r rows: y, then the sum (with a residual), then mean and rstd (f32).
          const auto run = [&](std::int64_t r0, std::int64_t r, bool with_add, const std::vector<std::uint8_t>& xb) {
            const std::size_t yb = std::size_t(r) * row_bytes;
            std::vector<std::uint8_t> out(2 * yb + std::size_t(r) * 8, 0xff);
            std::vector<float> mean(static_cast<std::size_t>(r)), rstd(static_cast<std::size_t>(r));
            auto view = [&](const std::uint8_t* p, Shape sh) { return TensorView::contiguous(const_cast<std::uint8_t*>(p), t, sh); };
            const TensorView tx = view(xb.data() + std::size_t(r0) * row_bytes, {r, n});
            const TensorView tr = view(rb.data() + std::size_t(r0) * row_bytes, {r, n});
            const TensorView to = view(out.data(), {r, n}), ts = view(out.data() + yb, {r, n});
            const TensorView tw = view(wb.data(), {n}), tb = view(bb.data(), {n});
            NormStats st{TensorView::contiguous(mean.data(), DType::f32, {r}), TensorView::contiguous(rstd.data(), DType::f32, {r})};
            if (k == NormKind::rms) st.mean = TensorView{};
            if (k == NormKind::rms && with_add) add_rms_norm(tx, tr, tw, to, ts, {1e-5f}, {}, st);
            else if (k == NormKind::rms) rms_norm(tx, tw, to, {1e-5f}, {}, st);
            else if (with_add) add_layer_norm(tx, tr, tw, tb, to, ts, {1e-5f}, {}, st);
            else layer_norm(tx, tw, tb, to, {1e-5f}, {}, st);
            std::memcpy(out.data() + 2 * yb, mean.data(), std::size_t(r) * 4);
            std::memcpy(out.data() + 2 * yb + std::size_t(r) * 4, rstd.data(), std::size_t(r) * 4);
            return out;
          };
          const auto all = run(0, rows, add, xb);
          const std::size_t ally = std::size_t(rows) * row_bytes;
          if (add) {  // the fused add's y and statistics are the norm's of its sum, bit for bit
            const std::vector<std::uint8_t> sum(all.begin() + std::ptrdiff_t(ally), all.begin() + std::ptrdiff_t(2 * ally));
            const auto of_sum = run(0, rows, false, sum);
            ASSERT_EQ(std::memcmp(of_sum.data(), all.data(), ally), 0) << "y against the norm of the sum";
            ASSERT_EQ(std::memcmp(of_sum.data() + 2 * ally, all.data() + 2 * ally, std::size_t(rows) * 8), 0)
                << "statistics against the norm's of the sum";
          }
          for (std::int64_t r = 0; r < rows; ++r) {
            const auto alone = run(r, 1, add, xb);
            const std::size_t at_r = std::size_t(r) * row_bytes;
            ASSERT_EQ(std::memcmp(alone.data(), all.data() + at_r, row_bytes), 0) << "y of row " << r;
            if (add) {
              ASSERT_EQ(std::memcmp(alone.data() + row_bytes, all.data() + ally + at_r, row_bytes), 0) << "sum of row " << r;
            }
            if (k == NormKind::layer) {
              ASSERT_EQ(std::memcmp(alone.data() + 2 * row_bytes, all.data() + 2 * ally + std::size_t(r) * 4, 4), 0)
                  << "mean of row " << r;
            }
            ASSERT_EQ(std::memcmp(alone.data() + 2 * row_bytes + 4, all.data() + 2 * ally + std::size_t(rows + r) * 4, 4), 0)
                << "rstd of row " << r;
          }
        }
}

TEST(Norm, CudaMatchesReference) {
  if (!gpu_usable()) GTEST_SKIP() << "no CUDA device";
  for (const Case& c : cases()) run_case(c, Device::cuda(0));
}

// Rows longer than the register paths (bf16 > 32768, f32 and scalar rows > 16384) through each
// long-row kernel, forced by the dev hook SIXFOLD_NORM_FWD (read on every call): the split path
// with its default rewrite (norm_split_apply, one pack a thread) and with norm_split_rewrite
// (chunk-sized blocks), and the grid form — on rows of a few chunks, odd lengths (scalar rows),
// saved statistics, strided and in-place rows; sanitizer-sized.
TEST(Norm, CudaLongRowKernelsMatchReference) {
  if (!gpu_usable()) GTEST_SKIP() << "no CUDA device";
  for (const char* flags : {"split", "split,norewrite-short", "gridall"}) {
    SCOPED_TRACE(std::string("SIXFOLD_NORM_FWD=") + flags);
    ScopedEnv env("SIXFOLD_NORM_FWD", flags);
    for (NormKind k : {NormKind::rms, NormKind::layer, NormKind::softmax, NormKind::log_softmax})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        for (auto [rows, n] : {std::pair<std::int64_t, std::int64_t>{1, 40000}, {3, 70001}, {2, 65536}})
          run_case({k, t, rows, n}, Device::cuda(0));
        run_case({k, t, 2, 50000, false, 3, 5}, Device::cuda(0));             // strided, no affine
        run_case({k, t, 2, 40960, true, 8, 0, true}, Device::cuda(0));        // in place, padded
        if (k == NormKind::rms || k == NormKind::layer)
          run_case({k, t, 3, 40000, true, 0, 0, false, 1.0, false, 1}, Device::cuda(0));  // stats
        if (k == NormKind::softmax || k == NormKind::log_softmax)
          run_case({k, t, 3, 40001, false, 0, 0, false, 1.0, true}, Device::cuda(0));  // −inf
      }
  }
}

// Rows longer than the register paths in one streamed pass (fv15, norm_rows_stream: 16-byte rows
// without the fused add, where every column tile of a row is resident at once; the default for
// RMSNorm, forced for the other kinds by SIXFOLD_NORM_FWD=streamall), and the same cases with it
// off (SIXFOLD_NORM_FWD=nostream: the cluster, grid or split kernels): one row,
// rows enough for several a block (each row's Coef kFwdLag rows behind its fold), tiles of
// unequal fill, in place, strided with even strides, saved statistics, a row of all −inf,
// huge logits, LayerNorm's far head and weight without bias, and the longest rows.
TEST(Norm, CudaStreamedLongRowsMatchReference) {
  if (!gpu_usable()) GTEST_SKIP() << "no CUDA device";
  const bool small = std::getenv("SIXFOLD_TEST_SMALL") != nullptr;
  std::vector<Case> cases;
  for (NormKind k : {NormKind::rms, NormKind::layer, NormKind::softmax, NormKind::log_softmax})
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      const bool norm = k == NormKind::rms || k == NormKind::layer;
      cases.push_back({k, t, 1, 40000});
      cases.push_back({k, t, 40, 33000});                               // 2 rows a group
      cases.push_back({k, t, 5, 40960, true, 8, 0, true});              // in place, padded
      cases.push_back({k, t, 4, 49160, false, 16, 8});                  // strided, no affine
      if (norm) cases.push_back({k, t, 6, 40000, true, 0, 0, false, 1.0, false, 1});  // stats
      if (k == NormKind::layer) {
        cases.push_back({k, t, 3, 40000, true, 0, 0, false, 1.0, false, 0, true});  // far head
        cases.push_back({k, t, 3, 40000, true, 0, 0, false, 1.0, false, 0, false, true});
      }
      if (!norm) {
        cases.push_back({k, t, 4, 40000, false, 0, 0, false, 1.0, true});  // −inf, row 0 all −inf
        cases.push_back({k, t, 2, 40000, false, 0, 0, false, 1e4});        // huge logits
      }
      if (small || t != DType::bf16) continue;  // not under the sanitizer; f32 / f16 above
      cases.push_back({k, t, 300, 32776});                              // 12 rows a group
      if (k == NormKind::rms || k == NormKind::softmax) cases.push_back({k, t, 40, 262144});
      if (k == NormKind::layer || k == NormKind::log_softmax) cases.push_back({k, t, 3, 1 << 20});
    }
  for (const char* flags : {"streamall", "nostream"}) {
    SCOPED_TRACE(std::string("SIXFOLD_NORM_FWD=") + flags);
    ScopedEnv env("SIXFOLD_NORM_FWD", flags);
    for (const Case& c : cases) {
      run_case(c, Device::cuda(0));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(Norm, BadInputIsRejectedAndNothingWritten) {
  std::vector<float> x(24, 1.0f), y(24, NAN), w(5, 1.0f);
  auto tx = TensorView::contiguous(x.data(), DType::f32, {4, 6});
  auto ty = TensorView::contiguous(y.data(), DType::f32, {4, 6});
  expect_error([&] { rms_norm(tx, TensorView::contiguous(w.data(), DType::f32, {5}), ty); },
         "argument 'weight': expected shape [6] (the row length of 'x'), got [5]");
  expect_error([&] { layer_norm(tx, TensorView{}, TensorView::contiguous(w.data(), DType::f32, {5}), ty); },
         "argument 'bias': expected shape [6]");
  expect_error([&] { softmax(tx, TensorView::contiguous(y.data(), DType::f32, {6, 4})); },
         "argument 'out': expected shape [4, 6]");
  expect_error([&] { softmax(tx, TensorView::contiguous(y.data(), DType::bf16, {4, 6})); },
         "argument 'out': expected dtype f32, got bf16");
  expect_error([&] { softmax(TensorView::contiguous(x.data(), DType::i32, {4, 6}), TensorView::contiguous(y.data(), DType::i32, {4, 6})); },
         "argument 'x': expected dtype f32, bf16 or f16, got i32");
  auto col = tx;
  std::swap(col.strides[0], col.strides[1]);
  std::swap(col.shape.dims[0], col.shape.dims[1]);
  expect_error([&] { softmax(col, TensorView::contiguous(y.data(), DType::f32, {6, 4})); },
         "argument 'x': expected unit stride in the last dimension");
  auto overlapping = ty;
  overlapping.strides[0] = 3;
  overlapping.shape.dims[0] = 4;
  expect_error([&] { softmax(tx, overlapping); }, "argument 'out': expected rows that do not overlap");
  expect_error([&] { rms_norm(tx, TensorView{}, ty, {-1.0f}); }, "argument 'params.eps'");
  // Saved statistics: (4) f32 on x's device, rms without a mean, apart from the outputs.
  std::vector<float> st(8, NAN);
  auto sv = [&](std::int64_t at, Shape sh, DType t = DType::f32) {
    return TensorView::contiguous(st.data() + at, t, sh);
  };
  expect_error([&] { rms_norm(tx, TensorView{}, ty, {}, {}, {sv(0, {4}), sv(4, {4})}); },
               "argument 'mean': expected absent (rms_norm keeps no mean)");
  expect_error([&] { layer_norm(tx, TensorView{}, TensorView{}, ty, {}, {}, {sv(0, {4}), sv(4, {3})}); },
               "argument 'rstd': expected 4 elements (one per row of 'x'");
  expect_error([&] { layer_norm(tx, TensorView{}, TensorView{}, ty, {}, {}, {sv(0, {4}, DType::bf16), {}}); },
               "argument 'mean': expected dtype f32, got bf16");
  expect_error([&] { layer_norm(tx, TensorView{}, TensorView{}, ty, {}, {}, {sv(0, {4}), sv(2, {4})}); },
               "argument 'rstd': expected memory that does not partly overlap 'mean'");
  expect_error([&] { layer_norm(tx, TensorView{}, TensorView{}, ty, {}, {}, {sv(0, {4}), sv(0, {4})}); },
               "argument 'rstd': expected memory apart from 'mean'");
  expect_error([&] { rms_norm(tx, TensorView{}, ty, {}, {}, {{}, TensorView::contiguous(y.data() + 2, DType::f32, {4})}); },
               "argument 'rstd': expected memory that does not partly overlap 'out'");
  expect_error([&] { rms_norm(tx, TensorView{}, ty, {}, {}, {{}, TensorView::contiguous(y.data(), DType::f32, {4})}); },
               "argument 'rstd': expected memory apart from 'out'");
  expect_error([&] { rms_norm(tx, TensorView{}, ty, {}, {}, {{}, TensorView::contiguous(st.data(), DType::f32, {4}, Device::cuda(0))}); },
               "argument 'rstd': expected device cpu");
  auto strided = sv(0, {4});
  strided.strides[0] = 2;
  expect_error([&] { rms_norm(tx, TensorView{}, ty, {}, {}, {{}, strided}); },
               "argument 'rstd': expected a contiguous tensor");
  for (float v : st) ASSERT_TRUE(std::isnan(v));
  expect_error([&] { rms_norm(tx, TensorView{}, TensorView::contiguous(y.data(), DType::f32, {4, 6}, Device::cuda(0))); },
         "argument 'out': expected device cpu");
  for (float v : y) ASSERT_TRUE(std::isnan(v));
}

// bf16 outputs in the subnormal range are rounded like every other value, not flushed to zero
// (the CPU's own f32 → bf16 conversion, AVX512-BF16's vcvtne2ps2bf16, flushes them: a kernel
// that uses it must fall back for such chunks). CPU only: the CUDA kernels' ex2.approx.ftz
// flushes subnormal exponentials, as the GPU's other softmax kernels do.
TEST(Norm, CpuBf16SubnormalOutputsAreNotFlushed) {
  const std::int64_t rows = 3, n = 100;  // a 64-byte body of two 32-element chunks and a tail
  std::vector<double> x(static_cast<std::size_t>(rows * n)), w(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < n; ++i)  // e^x from 1.6e-38 (normal) down to 3e-40
      x[std::size_t(r * n + i)] = i == r ? 0.0 : -87.0 - 0.5 * double((i * 7 + r) % 9);
  for (std::int64_t i = 0; i < n; ++i) w[std::size_t(i)] = std::ldexp(1.0 + double(i % 4), -131);
  const auto xb = encode(DType::bf16, x, rows, n, n), wb = encode(DType::bf16, w, 1, n, n);
  const auto xq = decode(DType::bf16, xb, rows, n, n), wq = decode(DType::bf16, wb, 1, n, n);
  auto xs = xb, wsb = wb;
  const TensorView tx = TensorView::contiguous(xs.data(), DType::bf16, {rows, n});
  const TensorView tw = TensorView::contiguous(wsb.data(), DType::bf16, {n});
  for (NormKind k : {NormKind::softmax, NormKind::rms}) {
    SCOPED_TRACE(k == NormKind::softmax ? "softmax" : "rms");
    std::vector<std::uint8_t> ob(xb.size(), 0xff);
    const TensorView to = TensorView::contiguous(ob.data(), DType::bf16, {rows, n});
    if (k == NormKind::softmax) softmax(tx, to);
    else rms_norm(tx, tw, to, {1e-5f});
    const auto out = decode(DType::bf16, ob, rows, n, n);
    const auto ref = reference::norm(k, xq, rows, n, k == NormKind::rms ? wq : std::vector<double>{}, {}, 1e-5f);
    int subnormal = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      const double want = round_to(DType::bf16, ref[i]);
      if (want != 0 && std::fabs(want) < 0x1p-126) ++subnormal;
      // one bf16 subnormal ulp (2^-133), and the relative error of a normal result
      ASSERT_LE(std::fabs(out[i] - want), 0x1p-133 + 1e-2 * std::fabs(want)) << i << " got " << out[i] << " want " << want;
    }
    EXPECT_GT(subnormal, 100);  // the case does reach the range it is about
  }
}

// LayerNorm's rewrite takes x̂ = (x − μ)·r as one FMA, x·r − μ·r, only where μ is close to 0 in
// standard deviations and var ≥ eps (norm_cpu.cpp, with_xhat). Rows on both sides of that rule,
// on every CPU path (short rows, rows pipelined in pairs, a row split over the threads): f32 to
// within a few ulp of the row's scale plus the size of μ's own rounding, and constant rows to
// exactly 0 (what the rule keeps them out of the FMA form for).
TEST(Norm, CpuLayerNormOffsetRowsKeepTheirAccuracy) {
  const double ratios[] = {0.0, 0.9, 1.1, -3.0, 200.0, 300.0, -1e4};  // μ / σ of the rows
  const double sigmas[] = {1.0, 4e-3};                              // var ≫ eps, and var ≈ eps / 6
  std::mt19937_64 gen(std::random_device{}());
  std::normal_distribution<double> nd(0.0, 1.0);
  for (DType t : {DType::f32, DType::bf16})
    for (std::int64_t n : {std::int64_t(1000), std::int64_t(4096), std::int64_t(300000)}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " n " + std::to_string(n));
      // Rows: each (ratio, sigma), then two constant rows (x = 1.7 and x = -3e4).
      const std::int64_t rows = std::int64_t(std::size(ratios) * std::size(sigmas)) + 2;
      std::vector<double> x(std::size_t(rows * n));
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t i = 0; i < n; ++i) {
          double v;
          if (r + 2 < rows) {
            const double sig = sigmas[r % 2], mu = ratios[r / 2] * sig;
            v = mu + sig * nd(gen);
          } else {
            v = r + 2 == rows ? 1.7 : -3e4;
          }
          x[std::size_t(r * n + i)] = v;
        }
      const auto xb = encode(t, x, rows, n, n);
      const auto xq = decode(t, xb, rows, n, n);
      auto xs = xb;
      std::vector<std::uint8_t> ob(xb.size(), 0xff);
      const TensorView tx = TensorView::contiguous(xs.data(), t, {rows, n});
      const TensorView to = TensorView::contiguous(ob.data(), t, {rows, n});
      const float eps = 1e-5f;
      layer_norm(tx, TensorView{}, TensorView{}, to, {eps});
      const auto out = decode(t, ob, rows, n, n);
      const auto ref = reference::norm(NormKind::layer, xq, rows, n, {}, {}, eps);
      for (std::int64_t r = 0; r < rows; ++r) {
        double mean = 0, var = 0, row_max = 0;
        for (std::int64_t i = 0; i < n; ++i) mean += xq[std::size_t(r * n + i)];
        mean /= double(n);
        for (std::int64_t i = 0; i < n; ++i) var += (xq[std::size_t(r * n + i)] - mean) * (xq[std::size_t(r * n + i)] - mean);
        var /= double(n);
        const double shift = std::fabs(mean) / std::sqrt(var + eps);  // |μ·r|
        for (std::int64_t i = 0; i < n; ++i) row_max = std::max(row_max, std::fabs(ref[std::size_t(r * n + i)]));
        for (std::int64_t i = 0; i < n; ++i) {
          const double want = round_to(t, ref[std::size_t(r * n + i)]), got = out[std::size_t(r * n + i)];
          if (r + 2 >= rows) {
            ASSERT_EQ(got, 0.0) << "constant row " << r << " i " << i;
            continue;
          }
          // f32: 8 ulp of the row's scale, and μ's rounding (|μ·r|·2^-24, on the exact form too)
          // twice; 16-bit: the test's usual bound.
          const double bound = t == DType::f32 ? 0x1p-21 * (std::fabs(want) + row_max) + 0x1p-23 * shift
                                               : 1.6e-2 * (std::fabs(want) + row_max);
          ASSERT_LE(std::fabs(got - want), bound) << "row " << r << " i " << i << " got " << got << " want " << want
                                                  << " |mu r| " << shift;
        }
      }
    }
}

TEST(Norm, LeadingDimensionsCollapseIgnoringSizeOneStrides) {
  const std::int64_t n = 37;
  std::vector<float> x(3 * 2 * n), y3(3 * n, NAN), y2(3 * n, NAN);
  std::mt19937 r(std::random_device{}());
  for (auto& v : x) v = std::uniform_real_distribution<float>(-3, 3)(r);
  TensorView x3 = TensorView::contiguous(x.data(), DType::f32, {3, 1, n});
  x3.strides[0] = 2 * n;
  x3.strides[1] = 12345;  // a size-1 dimension's stride means nothing
  TensorView x2 = TensorView::contiguous(x.data(), DType::f32, {3, n});
  x2.strides[0] = 2 * n;
  softmax(x3, TensorView::contiguous(y3.data(), DType::f32, {3, 1, n}));
  softmax(x2, TensorView::contiguous(y2.data(), DType::f32, {3, n}));
  for (std::size_t i = 0; i < y2.size(); ++i) ASSERT_EQ(y3[i], y2[i]) << i;
  TensorView bad = TensorView::contiguous(x.data(), DType::f32, {2, 3, n});
  bad.strides[0] = 5 * n;  // (2, 3) rows that do not nest into one stride
  try {
    softmax(bad, TensorView::contiguous(y3.data(), DType::f32, {2, 3, n}));
    ADD_FAILURE() << "accepted leading dimensions that do not collapse";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("collapse into one row stride"), std::string::npos) << e.what();
  }
}
