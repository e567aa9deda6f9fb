// The fused residual-add norms (add_rms_norm, add_layer_norm) and the backward passes of
// RMSNorm, LayerNorm, softmax and log-softmax on every backend against the float64 reference:
// fresh random inputs, f32/bf16/f16, awkward row lengths (1, 3, 4095, 4097, 2^20), strided
// rows, in place, huge values; dweight/dbias determinism (identical bits on repeated calls);
// the saved row statistics (forward → backward round trip, and float64 ones) against the
// reference and the recompute path; bad input rejected with nothing written. CUDA cases run
// where a GPU is usable (skipped otherwise; SIXFOLD_REQUIRE_GPU=1 fails them).
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

#ifdef SIXFOLD_WITH_CUDA
#include <cuda_runtime.h>
#endif
#include "sixfold/ops/norm.hpp"
#include "sixfold/runtime/error.hpp"
#include "sixfold/runtime/tensor.hpp"

using namespace sixfold;
using namespace sixfold::testing;

namespace {

const char* kind_name(NormKind k) {
  const char* names[] = {"rms", "layer", "softmax", "log_softmax"};
  return names[int(k)];
}

std::vector<double> random_values(std::size_t count, double mean, double sd) {
  std::normal_distribution<double> nd(mean, sd);
  std::vector<double> v(count);
  for (auto& e : v) e = nd(engine());
  return v;
}

std::size_t esize(DType t) { return std::size_t(dtype_bits(t) / 8); }

// |got − want| <= rtol·(|want| + max|want| of the row) for every element (NaN/Inf exactly).
// `terms`, when given: per element, the magnitude of the terms that cancel in it (the bound
// then scales with the row's largest term instead of the possibly tiny result).
void expect_close(const std::vector<double>& got, const std::vector<double>& want, DType t,
                  std::int64_t rows, std::int64_t n, double rtol, const char* what,
                  const std::vector<double>& terms = {}) {
  for (std::int64_t r = 0; r < rows; ++r) {
    double row_max = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double w = want[std::size_t(r * n + i)];
      if (std::isfinite(w)) row_max = std::max(row_max, std::fabs(w));
      if (!terms.empty() && std::isfinite(terms[std::size_t(r * n + i)]))
        row_max = std::max(row_max, terms[std::size_t(r * n + i)]);
    }
    for (std::int64_t i = 0; i < n; ++i) {
      const double w = round_to(t, want[std::size_t(r * n + i)]);
      const double g = got[std::size_t(r * n + i)];
      if (!std::isfinite(w)) {
        ASSERT_TRUE(std::isnan(w) ? std::isnan(g) : g == w) << what << " row " << r << " i " << i;
        continue;
      }
      ASSERT_LE(std::fabs(g - w), rtol * (std::fabs(w) + row_max) + 1e-30)
          << what << " row " << r << " i " << i << " got " << g << " want " << w;
    }
  }
}

double rtol_of(DType t, double f32) {
  return t == DType::f32 ? f32 : (t == DType::bf16 ? 1.6e-2 : 2e-3);
}

// ---- fused residual add + norm ------------------------------------------------------------

struct AddCase {
  NormKind kind;  // rms or layer
  DType dtype;
  std::int64_t rows, n;
  bool affine = true;
  int pad = 0;            // extra elements per row of every tensor (strided rows)
  int alias = 0;          // 0: separate outputs; 1: sum_out = residual; 2: sum_out = x, out = residual
  double scale = 1.0;     // huge values: 1e4 (bf16/f32) or 1e2 (f16)
  bool stats = false;     // also save the statistics of s (mean / rstd)
};

void run_add_case(const AddCase& c, Device dev) {
  SCOPED_TRACE(std::string("add_") + kind_name(c.kind) + " " + std::string(dtype_name(c.dtype)) +
               " " + std::to_string(c.rows) + "x" + std::to_string(c.n) + " pad " +
               std::to_string(c.pad) + " alias " + std::to_string(c.alias) + " scale " +
               std::to_string(c.scale) + " on " + to_string(dev));
  const std::size_t numel = std::size_t(c.rows * c.n);
  auto x = random_values(numel, 0.5, 2.0 * c.scale), r = random_values(numel, -0.2, 1.5 * c.scale);
  const bool has_b = c.affine && c.kind == NormKind::layer;
  const auto w = c.affine ? random_values(std::size_t(c.n), 1.0, 0.5) : std::vector<double>{};
  const auto b = has_b ? random_values(std::size_t(c.n), 0.0, 0.5) : std::vector<double>{};
  const std::int64_t st = c.n + c.pad;
  const auto xb = encode(c.dtype, x, c.rows, c.n, st), rb = encode(c.dtype, r, c.rows, c.n, st);
  const auto xq = decode(c.dtype, xb, c.rows, c.n, st), rq = decode(c.dtype, rb, c.rows, c.n, st);
  const std::vector<std::uint8_t> poison(std::size_t(c.rows * st) * esize(c.dtype), 0xff);
  DeviceBuffer bx(dev, xb), br(dev, rb), bo(dev, poison), bs(dev, poison);
  const auto wb = encode(c.dtype, w, c.affine ? 1 : 0, c.n, c.n);
  const auto bbytes = encode(c.dtype, b, has_b ? 1 : 0, c.n, c.n);
  DeviceBuffer bw(dev, wb), bb(dev, bbytes);
  const TensorView tx = bx.rows_view(c.dtype, c.rows, c.n, st);
  const TensorView tr = br.rows_view(c.dtype, c.rows, c.n, st);
  TensorView to = bo.rows_view(c.dtype, c.rows, c.n, st), ts = bs.rows_view(c.dtype, c.rows, c.n, st);
  const DeviceBuffer* out_buf = &bo;
  const DeviceBuffer* sum_buf = &bs;
  if (c.alias == 1) { ts = tr; sum_buf = &br; }
  if (c.alias == 2) { ts = tx; sum_buf = &bx; to = tr; out_buf = &br; }
  TensorView tw, tb;
  if (c.affine) tw = TensorView::contiguous(bw.storage.get(), c.dtype, {c.n}, dev);
  if (has_b) tb = TensorView::contiguous(bb.storage.get(), c.dtype, {c.n}, dev);
  const float eps = 1e-5f;
  const std::vector<std::uint8_t> spoison(std::size_t(c.rows) * 4, 0xff);
  DeviceBuffer bmean(dev, spoison), brstd(dev, spoison);
  NormStats stats;
  if (c.stats) {
    stats.rstd = TensorView::contiguous(brstd.storage.get(), DType::f32, {c.rows}, dev);
    if (c.kind == NormKind::layer) stats.mean = TensorView::contiguous(bmean.storage.get(), DType::f32, {c.rows}, dev);
  }
  if (c.kind == NormKind::rms) add_rms_norm(tx, tr, tw, to, ts, {eps}, {}, stats);
  else add_layer_norm(tx, tr, tw, tb, to, ts, {eps}, {}, stats);
  const auto s = decode(c.dtype, sum_buf->host(), c.rows, c.n, st);
  const auto y = decode(c.dtype, out_buf->host(), c.rows, c.n, st);
  // s against x + residual rounded once to the dtype; y against the norm of the stored s.
  expect_close(s, reference::add(xq, rq), c.dtype, c.rows, c.n,
               c.dtype == DType::f32 ? 1e-7 : (c.dtype == DType::bf16 ? 4e-3 : 5e-4), "sum");
  const auto wq = c.affine ? decode(c.dtype, wb, 1, c.n, c.n) : std::vector<double>{};
  const auto bq = has_b ? decode(c.dtype, bbytes, 1, c.n, c.n) : std::vector<double>{};
  expect_close(y, reference::norm(c.kind, s, c.rows, c.n, wq, bq, eps), c.dtype, c.rows, c.n,
               rtol_of(c.dtype, 2e-5), "y");
  if (c.stats) expect_stats(c.kind, s, c.rows, c.n, eps, floats_of(bmean), floats_of(brstd), 2e-5);
}

std::vector<std::pair<std::int64_t, std::int64_t>> shapes() {
  std::vector<std::pair<std::int64_t, std::int64_t>> v = {
      {1, 1},    {3, 1},     {4, 3},    {5, 17},   {3, 4095}, {2, 4097},
      {33, 1000}, {17, 1024}, {16, 512}, {5, 511}, {2, 8192}, {3, 40000}};
  if (!std::getenv("SIXFOLD_TEST_SMALL")) v.push_back({1, 1 << 20});  // not under the sanitizer
  return v;
}

// streamed: also the CPU's ≥ 8 MB outputs (their float64 reference is slow beside a GPU run).
std::vector<AddCase> add_cases(bool streamed = false) {
  std::vector<AddCase> all;
  for (NormKind k : {NormKind::rms, NormKind::layer})
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      for (auto [rows, n] : shapes()) all.push_back({k, t, rows, n});
      all.push_back({k, t, 9, 777, false, 5});               // strided rows, no weight/bias
      all.push_back({k, t, 6, 4096, true, 8, 1});            // residual updated in place
      all.push_back({k, t, 7, 1000, true, 0, 2});            // sum into x, y into residual
      all.push_back({k, t, 2, 50000, true, 3, 1});           // long rows, in place, strided
      all.push_back({k, t, 4, 1000, true, 0, 0, t == DType::f16 ? 1e2 : 1e4});  // huge values
      // Saved statistics of s on every path.
      for (auto [rows, n] : {std::pair<std::int64_t, std::int64_t>{3, 1}, {5, 17}, {2, 4097},
                             {33, 1000}, {17, 1024}, {3, 40000}})
        all.push_back({k, t, rows, n, true, 0, 0, 1.0, true});
      all.push_back({k, t, 2, 50000, true, 3, 1, 1.0, true});  // long rows, in place, strided
      // Outputs of ≥ 8 MB: the CPU's non-temporal stores, bf16 in pair order (aligned rows);
      // odd lengths and strided rows (some row starts off a 64-byte boundary) in pair order with
      // plain stores on AVX2 builds, in order with AVX512_BF16 (output_plan, rows_cpu.hpp).
      if (t == DType::bf16 && streamed && !std::getenv("SIXFOLD_TEST_SMALL")) {
        all.push_back({k, t, 2048, 2048, true, 0, 0, 1.0, true});
        all.push_back({k, t, 2053, 2047});
        all.push_back({k, t, 1025, 4096, true, 5, 1});
      }
    }
  return all;
}

// ---- backward ---------------------------------------------------------------------------------

struct BwdCase {
  NormKind kind;
  DType dtype;
  std::int64_t rows, n;
  bool affine = true;      // weight (and dweight / dbias where the kind has them)
  bool f32_grads = false;  // dweight/dbias in f32 instead of the dtype
  int pad = 0;             // strided rows
  int in_place = 0;        // 0: dx separate; 1: dx = dy; 2: dx = x (or y)
  double scale = 1.0;      // huge inputs (rms/layer: x scale; softmax: logits scale)
  bool neg_inf = false;    // softmax kinds: every 5th logit −inf (y = 0, log-softmax y = −inf)
  // rms / layer: the row statistics given to the backward (NormStats) instead of recomputed:
  // 1 — saved by sixfold's forward on the same device (the round trip), 2 — the float64 ones
  // rounded to f32.
  int saved = 0;
  bool graph = false;  // CUDA: the backward call captured into a CUDA graph, replayed twice
};

struct BwdResult {
  std::vector<std::uint8_t> dx, dw, db;
};

// Runs one backward call on `dev` and returns the raw bytes of dx, dweight and dbias.
BwdResult run_backward(const BwdCase& c, Device dev, const std::vector<std::uint8_t>& xb,
                       const std::vector<std::uint8_t>& db, const std::vector<std::uint8_t>& wb) {
  const std::int64_t st = c.n + c.pad;
  const bool norm = c.kind == NormKind::rms || c.kind == NormKind::layer;
  const bool has_w = norm && c.affine, has_b = c.kind == NormKind::layer && c.affine;
  const DType gt = c.f32_grads ? DType::f32 : c.dtype;
  DeviceBuffer bx(dev, xb), bd(dev, db), bw(dev, wb);
  DeviceBuffer bdx(dev, std::vector<std::uint8_t>(xb.size(), 0xff));
  const std::vector<std::uint8_t> gpoison(std::size_t(c.n) * esize(gt), 0xff);
  DeviceBuffer bgw(dev, gpoison), bgb(dev, gpoison);
  const TensorView tx = bx.rows_view(c.dtype, c.rows, c.n, st);
  const TensorView tdy = bd.rows_view(c.dtype, c.rows, c.n, st);
  TensorView tdx = bdx.rows_view(c.dtype, c.rows, c.n, st);
  const DeviceBuffer* dx_buf = &bdx;
  if (c.in_place == 1) { tdx = tdy; dx_buf = &bd; }
  if (c.in_place == 2) { tdx = tx; dx_buf = &bx; }
  TensorView tw, tgw, tgb;
  if (has_w) {
    tw = TensorView::contiguous(bw.storage.get(), c.dtype, {c.n}, dev);
    tgw = TensorView::contiguous(bgw.storage.get(), gt, {c.n}, dev);
  }
  if (has_b) tgb = TensorView::contiguous(bgb.storage.get(), gt, {c.n}, dev);
  const float eps = 1e-5f;
  // Saved statistics (before any in-place write of dx over x).
  std::vector<float> given_mean(std::size_t(c.rows)), given_rstd(std::size_t(c.rows));
  if (c.saved == 2) {
    const auto want = reference::norm_stats(c.kind, decode(c.dtype, xb, c.rows, c.n, st), c.rows,
                                            c.n, eps);
    for (std::size_t r = 0; r < std::size_t(c.rows); ++r)
      given_mean[r] = float(want.mean[r]), given_rstd[r] = float(want.rstd[r]);
  }
  auto as_bytes = [](const std::vector<float>& v) {
    std::vector<std::uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  DeviceBuffer bmean(dev, as_bytes(given_mean)), brstd(dev, as_bytes(given_rstd));
  NormStats stats;
  if (c.saved) {
    stats.rstd = TensorView::contiguous(brstd.storage.get(), DType::f32, {c.rows}, dev);
    if (c.kind == NormKind::layer) stats.mean = TensorView::contiguous(bmean.storage.get(), DType::f32, {c.rows}, dev);
  }
  if (c.saved == 1) {  // the forward's statistics (its output itself is not used here)
    DeviceBuffer by(dev, std::vector<std::uint8_t>(xb.size(), 0));
    const TensorView ty = by.rows_view(c.dtype, c.rows, c.n, st);
    if (c.kind == NormKind::rms) rms_norm(tx, tw, ty, {eps}, {}, stats);
    else layer_norm(tx, tw, TensorView{}, ty, {eps}, {}, stats);
  }
  const auto call = [&](Stream s) {
    switch (c.kind) {
      case NormKind::rms: rms_norm_backward(tdy, tx, tw, tdx, tgw, {eps}, s, stats); break;
      case NormKind::layer: layer_norm_backward(tdy, tx, tw, tdx, tgw, tgb, {eps}, s, stats); break;
      case NormKind::softmax: softmax_backward(tdy, tx, tdx, s); break;
      case NormKind::log_softmax: log_softmax_backward(tdy, tx, tdx, s); break;
    }
  };
  if (!c.graph) {
    call(Stream{});
  } else {
#ifdef SIXFOLD_WITH_CUDA
    // Captured (as a training step under CUDA graphs would be), then replayed twice: the
    // outputs do not depend on how many times the graph ran (not in place).
    cudaStream_t s = nullptr;
    EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    try {
      call(Stream{s});
    } catch (const std::exception& e) {
      ADD_FAILURE() << "captured call threw: " << e.what();
    }
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    if (graph) {
      EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      for (int rep = 0; rep < 2 && exec; ++rep) EXPECT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
#else
    ADD_FAILURE() << "graph cases need a CUDA build";
#endif
  }
  BwdResult res;
  res.dx = dx_buf->host();
  if (has_w) res.dw = bgw.host();
  if (has_b) res.db = bgb.host();
  return res;
}

struct BwdInputs {
  std::vector<std::uint8_t> xb, db, wb;
  std::vector<double> xq, dq, wq;
};

BwdInputs make_inputs(const BwdCase& c) {
  const std::int64_t st = c.n + c.pad;
  const std::size_t numel = std::size_t(c.rows * c.n);
  BwdInputs in;
  std::vector<double> x = random_values(numel, 0.5, 2.0 * c.scale);
  if (c.neg_inf)
    for (std::size_t i = 0; i < x.size(); i += 5) x[i] = -INFINITY;
  if (c.kind == NormKind::softmax || c.kind == NormKind::log_softmax)  // x holds y = f(logits)
    x = reference::norm(c.kind, x, c.rows, c.n, {}, {}, 0.0);
  const auto d = random_values(numel, 0.0, 1.0);
  const bool has_w = (c.kind == NormKind::rms || c.kind == NormKind::layer) && c.affine;
  const auto w = has_w ? random_values(std::size_t(c.n), 1.0, 0.5) : std::vector<double>{};
  in.xb = encode(c.dtype, x, c.rows, c.n, st);
  in.db = encode(c.dtype, d, c.rows, c.n, st);
  in.wb = encode(c.dtype, w, has_w ? 1 : 0, c.n, c.n);
  in.xq = decode(c.dtype, in.xb, c.rows, c.n, st);
  in.dq = decode(c.dtype, in.db, c.rows, c.n, st);
  if (has_w) in.wq = decode(c.dtype, in.wb, 1, c.n, c.n);
  return in;
}

// Per element of dx, the sum of the magnitudes of its terms (see norm.hpp's formulas).
std::vector<double> dx_terms(NormKind kind, const std::vector<double>& x,
                             const std::vector<double>& dy, std::int64_t rows, std::int64_t n,
                             const std::vector<double>& w, double eps) {
  std::vector<double> t(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * n;
    const double* d = dy.data() + r * n;
    double mean = 0, ss = 0, sg = 0, sgx = 0, s = 0;
    if (kind == NormKind::layer) {
      for (std::int64_t i = 0; i < n; ++i) mean += xr[i];
      mean /= double(n);
    }
    for (std::int64_t i = 0; i < n; ++i) ss += (xr[i] - mean) * (xr[i] - mean);
    const double rs = 1.0 / std::sqrt(ss / double(n) + eps);
    for (std::int64_t i = 0; i < n; ++i) {
      const double g = d[i] * (w.empty() ? 1.0 : w[std::size_t(i)]);
      sg += std::fabs(g);
      sgx += std::fabs(g * (xr[i] - mean) * rs);
      s += kind == NormKind::softmax ? std::fabs(d[i] * xr[i]) : std::fabs(d[i]);
    }
    for (std::int64_t i = 0; i < n; ++i) {
      const double g = d[i] * (w.empty() ? 1.0 : w[std::size_t(i)]);
      const double xh = (xr[i] - mean) * rs;
      double& e = t[std::size_t(r * n + i)];
      if (kind == NormKind::rms || kind == NormKind::layer)
        e = rs * (std::fabs(g) + sg / double(n) + std::fabs(xh) * sgx / double(n));
      else if (kind == NormKind::softmax) e = std::fabs(xr[i]) * (std::fabs(d[i]) + s);
      else e = std::fabs(d[i]) + std::exp(xr[i]) * s;
    }
  }
  return t;
}

void run_bwd_case(const BwdCase& c, Device dev) {
  SCOPED_TRACE(std::string(kind_name(c.kind)) + "_backward " + std::string(dtype_name(c.dtype)) +
               " " + std::to_string(c.rows) + "x" + std::to_string(c.n) +
               (c.affine ? " affine" : "") + (c.f32_grads ? " f32-grads" : "") + " pad " +
               std::to_string(c.pad) + " in-place " + std::to_string(c.in_place) + " scale " +
               std::to_string(c.scale) + (c.neg_inf ? " -inf" : "") +
               (c.saved ? " saved " + std::to_string(c.saved) : "") + " on " + to_string(dev));
  const BwdInputs in = make_inputs(c);
  const BwdResult got = run_backward(c, dev, in.xb, in.db, in.wb);
  const auto ref = reference::norm_backward(c.kind, in.xq, in.dq, c.rows, c.n, in.wq, 1e-5);
  const std::int64_t st = c.n + c.pad;
  // dx: f32 statistics over up to 2^20 elements, so a looser f32 bound than the forward's.
  expect_close(decode(c.dtype, got.dx, c.rows, c.n, st), ref.dx, c.dtype, c.rows, c.n,
               rtol_of(c.dtype, 1e-4), "dx",
               dx_terms(c.kind, in.xq, in.dq, c.rows, c.n, in.wq, 1e-5));
  const DType gt = c.f32_grads ? DType::f32 : c.dtype;
  if (!got.dw.empty())
    expect_close(decode(gt, got.dw, 1, c.n, c.n), ref.dweight, gt, 1, c.n, rtol_of(gt, 1e-4), "dweight");
  if (!got.db.empty())
    expect_close(decode(gt, got.db, 1, c.n, c.n), ref.dbias, gt, 1, c.n, rtol_of(gt, 1e-4), "dbias");
}

// streamed: as add_cases.
std::vector<BwdCase> bwd_cases(bool streamed = false) {
  std::vector<BwdCase> all;
  for (NormKind k : {NormKind::rms, NormKind::layer, NormKind::softmax, NormKind::log_softmax})
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      for (auto [rows, n] : shapes()) all.push_back({k, t, rows, n});
      all.push_back({k, t, 9, 777, false, false, 5});          // strided, no weight
      all.push_back({k, t, 6, 4096, true, true, 8, 1});        // f32 grads, dx = dy, strided
      all.push_back({k, t, 70, 1024, true, false, 0, 2});      // many rows, dx = x
      all.push_back({k, t, 5, 30000, true, true, 2, 0});       // long strided rows, f32 grads
      all.push_back({k, t, 300, 96, true, false});             // short rows, many row groups
      if (k == NormKind::layer) {  // 17 row groups of 16 (the last of 5): rows pipelined across groups
        all.push_back({k, t, 261, 4096, true, false, 3, 2});                  // strided, dx = x
        all.push_back({k, t, 261, 4096, true, true, 0, 1, 1.0, false, 1});   // dx = dy, saved
      }
      if (t == DType::bf16 && streamed && !std::getenv("SIXFOLD_TEST_SMALL")) {
        // dx of ≥ 8 MB: the CPU's non-temporal stores in pair order (rows on 64-byte
        // boundaries); odd lengths and strided rows as output_plan chooses (rows_cpu.hpp); the
        // dw / db partials in each.
        all.push_back({k, t, 2048, 2048});
        all.push_back({k, t, 2053, 2047, true, true});
        all.push_back({k, t, 1025, 4096, true, false, 3});
        if (k == NormKind::rms || k == NormKind::layer)  // dx = dy, saved statistics
          all.push_back({k, t, 2048, 2048, true, false, 0, 1, 1.0, false, 1});
      }
      if (k == NormKind::layer && t == DType::bf16) {
        // Row groups enough (256 on a 132-SM GPU) for v9's in-kernel dw/db sum in 32-column
        // tiles, whose partial rows' L2 lines are then discarded: recomputed and saved statistics.
        all.push_back({k, t, 512, 4096});
        all.push_back({k, t, 512, 4096, true, false, 0, 0, 1.0, false, 1});
      }
      if (k == NormKind::softmax || k == NormKind::log_softmax || t != DType::f16)
        all.push_back({k, t, 4, 1000, true, false, 0, 0, 1e4});  // huge inputs / logits
      if (k == NormKind::softmax || k == NormKind::log_softmax) {
        all.push_back({k, t, 3, 4097, true, false, 0, 0, 1.0, true});   // masked (−inf) logits
        all.push_back({k, t, 2, 20000, true, false, 0, 0, 1.0, true});  // long rows, masked
        continue;
      }
      // Saved statistics: the round trip on every path and layout above, and float64 ones.
      for (auto [rows, n] : shapes()) all.push_back({k, t, rows, n, true, false, 0, 0, 1.0, false, 1});
      all.push_back({k, t, 9, 777, false, false, 5, 0, 1.0, false, 1});    // strided, no weight
      all.push_back({k, t, 6, 4096, true, true, 8, 1, 1.0, false, 2});     // dx = dy, f32 grads
      all.push_back({k, t, 70, 1024, true, false, 0, 2, 1.0, false, 1});   // dx = x
      all.push_back({k, t, 5, 30000, true, true, 2, 0, 1.0, false, 2});    // long strided rows
      all.push_back({k, t, 300, 96, true, false, 0, 0, 1.0, false, 1});    // many row groups
      if (t != DType::f16) all.push_back({k, t, 4, 1000, true, false, 0, 0, 1e4, false, 1});
    }
  return all;
}

}  // namespace

TEST(AddNorm, CpuMatchesReference) {
  for (const AddCase& c : add_cases(true)) run_add_case(c, Device::cpu());
}

TEST(AddNorm, CudaMatchesReference) {
  if (!gpu_usable()) GTEST_SKIP() << "no CUDA device";
  for (const AddCase& c : add_cases()) run_add_case(c, Device::cuda(0));
}

// The fused adds' long rows through each long-row kernel, forced by SIXFOLD_NORM_FWD (read on
// every call): the split path with either rewrite kernel (add_rms_norm's default for rows past
// the register paths), on rows of a few chunks, odd (scalar) rows, in place and strided.
TEST(AddNorm, CudaLongRowKernelsMatchReference) {
  if (!gpu_usable()) GTEST_SKIP() << "no CUDA device";
  for (const char* flags : {"split", "split,norewrite-short"}) {
    SCOPED_TRACE(std::string("SIXFOLD_NORM_FWD=") + flags);
    ScopedEnv env("SIXFOLD_NORM_FWD", flags);
    for (NormKind k : {NormKind::rms, NormKind::layer})
      for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        run_add_case({k, t, 3, 70001}, Device::cuda(0));
        run_add_case({k, t, 2, 65536, true, 0, 0, 1.0, true}, Device::cuda(0));  // stats
        run_add_case({k, t, 2, 50000, false, 3, 1}, Device::cuda(0));  // in place, strided
        run_add_case({k, t, 2, 40000, true, 0, 2}, Device::cuda(0));   // sum into x, y into r
      }
  }
}

TEST(NormBackward, CpuMatchesReference) {
  for (const BwdCase& c : bwd_cases(true)) run_bwd_case(c, Device::cpu());
}

// A row's dx depends on that row only: computed among others (where the CPU runs each row's
// last pass beside the next row's first, write_row_beside) it has the bits it has alone. And
// the dw / db partials of row groups without rows (rows not a multiple of the group count)
// are zero although an earlier call left values in the scratch they live in.
TEST(NormBackward, CpuRowsIndependentOfTheirNeighbours) {
  for (NormKind k : {NormKind::rms, NormKind::layer, NormKind::softmax, NormKind::log_softmax})
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (int saved : {0, 2})
        for (auto [n, pad] : std::vector<std::pair<std::int64_t, int>>{{1, 0}, {33, 0}, {1000, 0}, {1057, 0}, {4097, 0}, {256, 3}}) {
          if (saved && k != NormKind::rms && k != NormKind::layer) continue;  // statistics: rms / layer only
          const BwdCase c{k, t, 7, n, true, true, pad, 0, 1.0, false, saved};
          SCOPED_TRACE(std::string(kind_name(k)) + " " + std::string(dtype_name(t)) + " n " +
                       std::to_string(n) + " pad " + std::to_string(pad) + " saved " + std::to_string(saved));
          const BwdInputs in = make_inputs(c);
          const BwdResult all = run_backward(c, Device::cpu(), in.xb, in.db, in.wb);
          const std::size_t row_bytes = std::size_t(n + pad) * esize(t);
          for (std::int64_t r = 0; r < c.rows; ++r) {
            BwdCase one = c;
            one.rows = 1;
            const auto slice = [&](const std::vector<std::uint8_t>& v) {
              return std::vector<std::uint8_t>(v.begin() + std::ptrdiff_t(r * row_bytes),
                                               v.begin() + std::ptrdiff_t((r + 1) * row_bytes));
            };
            const BwdResult alone = run_backward(one, Device::cpu(), slice(in.xb), slice(in.db), in.wb);
            ASSERT_EQ(std::memcmp(alone.dx.data(), all.dx.data() + r * row_bytes, std::size_t(n) * esize(t)), 0)
                << "row " << r;
          }
        }
  // A call of 8 MB and more (stream_output), its rows 16 bytes off a 64-byte boundary (as malloc
  // gives them), against the same rows alone: the rows' dx bits must not depend on the call's
  // size (the rms f32 rows differed in the last ulp while GCC contracted pass C's products on its
  // own: which product it fused differed between the inlined copies of the chunk).
  for (NormKind k : {NormKind::rms, NormKind::layer}) {
    const std::int64_t rows = 2048, n = 1024;
    std::mt19937 gen(11);
    std::normal_distribution<float> nd(0.5f, 1.0f);
    const auto nn = static_cast<std::size_t>(n);
    std::vector<float> base(3 * nn * rows + 64), w(nn), dw(nn), db(nn), one(nn + 20);
    const auto off16 = [](std::vector<float>& v) {  // 16 bytes past a 64-byte boundary
      return v.data() + (64 - reinterpret_cast<std::uintptr_t>(v.data()) % 64) / 4 + 4;
    };
    float* x = off16(base);
    float* dy = x + rows * n;
    float* dx = dy + rows * n;
    for (std::int64_t i = 0; i < 2 * rows * n; ++i) x[i] = nd(gen);
    for (float& v : w) v = nd(gen);
    const auto rows_of = [&](float* p, std::int64_t r) { return TensorView::contiguous(p, DType::f32, {r, n}); };
    const auto row = [&](std::vector<float>& v) { return TensorView::contiguous(v.data(), DType::f32, {n}); };
    const auto call = [&](float* px, float* pdy, float* pdx, std::int64_t r) {
      if (k == NormKind::rms) rms_norm_backward(rows_of(pdy, r), rows_of(px, r), row(w), rows_of(pdx, r), row(dw), {1e-5f});
      else layer_norm_backward(rows_of(pdy, r), rows_of(px, r), row(w), rows_of(pdx, r), row(dw), row(db), {1e-5f});
    };
    call(x, dy, dx, rows);
    for (std::int64_t r = 0; r < rows; r += (r % 2 == 0 ? 1 : 97)) {  // pairs of neighbours
      float* alone = off16(one);
      call(x + r * n, dy + r * n, alone, 1);
      ASSERT_EQ(std::memcmp(alone, dx + r * n, nn * 4), 0) << kind_name(k) << " row " << r;
    }
  }
  for (DType t : {DType::f32, DType::bf16}) {
    run_bwd_case({NormKind::layer, t, 640, 4096, true, true}, Device::cpu());  // every group's partials written
    run_bwd_case({NormKind::layer, t, 1025, 1024, true, true}, Device::cpu());  // 64 groups of 17, 3 empty
    run_bwd_case({NormKind::rms, t, 1100, 512, true, true, 0, 0, 1.0, false, 2}, Device::cpu());  // 64 of 18, 2 empty
  }
}

TEST(NormBackward, CudaMatchesReference) {
  if (!gpu_usable()) GTEST_SKIP() << "no CUDA device";
  for (const BwdCase& c : bwd_cases()) run_bwd_case(c, Device::cuda(0));
}

// Two calls on the same inputs give identical bits (dx, dweight, dbias): the row groups and the
// order of every reduction are fixed.
void check_determinism(Device dev) {
  for (const BwdCase& c : {BwdCase{NormKind::layer, DType::f32, 3000, 512},
                           BwdCase{NormKind::rms, DType::bf16, 600, 4096, true, true},
                           BwdCase{NormKind::layer, DType::bf16, 24, 50000, true, true},
                           BwdCase{NormKind::layer, DType::bf16, 600, 4096, true, false, 0, 0,
                                   1.0, false, 1}}) {
    SCOPED_TRACE(std::string(kind_name(c.kind)) + " " + std::to_string(c.rows) + "x" +
                 std::to_string(c.n) + " on " + to_string(dev));
    const BwdInputs in = make_inputs(c);
    const BwdResult a = run_backward(c, dev, in.xb, in.db, in.wb);
    const BwdResult b = run_backward(c, dev, in.xb, in.db, in.wb);
    EXPECT_TRUE(a.dx == b.dx);
    ASSERT_FALSE(a.dw.empty());
    EXPECT_TRUE(a.dw == b.dw) << "dweight differs between two runs";
    if (c.kind == NormKind::layer) {
      EXPECT_TRUE(a.db == b.db) << "dbias differs between two runs";
    }
  }
}

TEST(NormBackward, CpuGradientsAreDeterministic) { check_determinism(Device::cpu()); }

// The saved-statistics path (the forward's own mean / rstd) against the recompute path on the
// same inputs: dx, dweight and dbias agree within the dtype's tolerance of each other.
void check_saved_matches_recompute(Device dev) {
  for (NormKind k : {NormKind::rms, NormKind::layer})
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (auto [rows, n] : std::vector<std::pair<std::int64_t, std::int64_t>>{
               {1, 1}, {7, 3}, {40, 1024}, {3, 4097}, {2, 30000}}) {
        BwdCase c{k, t, rows, n, true, true};
        SCOPED_TRACE(std::string(kind_name(k)) + " " + std::string(dtype_name(t)) + " " +
                     std::to_string(rows) + "x" + std::to_string(n) + " on " + to_string(dev));
        const BwdInputs in = make_inputs(c);
        const BwdResult recompute = run_backward(c, dev, in.xb, in.db, in.wb);
        c.saved = 1;
        const BwdResult saved = run_backward(c, dev, in.xb, in.db, in.wb);
        expect_close(decode(t, saved.dx, rows, n, n), decode(t, recompute.dx, rows, n, n), t, rows,
                     n, rtol_of(t, 1e-4), "dx", dx_terms(k, in.xq, in.dq, rows, n, in.wq, 1e-5));
        expect_close(decode(DType::f32, saved.dw, 1, n, n), decode(DType::f32, recompute.dw, 1, n, n),
                     DType::f32, 1, n, 1e-4, "dweight");
        if (k == NormKind::layer)
          expect_close(decode(DType::f32, saved.db, 1, n, n),
                       decode(DType::f32, recompute.db, 1, n, n), DType::f32, 1, n, 1e-6, "dbias");
      }
}

TEST(NormBackward, CpuSavedStatsMatchRecompute) { check_saved_matches_recompute(Device::cpu()); }

TEST(NormBackward, CudaSavedStatsMatchRecompute) {
  if (!gpu_usable()) GTEST_SKIP() << "no CUDA device";
  check_saved_matches_recompute(Device::cuda(0));
}

// Every CUDA path captured into a CUDA graph: rows in registers (v7 for 16-bit rows, v4 for f32,
// with and without saved statistics), long rows (statistics chunks, scratch memory from the
// stream-ordered allocator), the softmax kinds.
TEST(NormBackward, CudaCapturedInAGraph) {
  if (!gpu_usable()) GTEST_SKIP() << "no CUDA device";
  std::vector<BwdCase> cases;
  for (NormKind k : {NormKind::rms, NormKind::layer})
    for (int saved : {0, 1}) {
      cases.push_back({k, DType::bf16, 600, 4096, true, false, 0, 0, 1.0, false, saved, true});
      cases.push_back({k, DType::f32, 300, 1000, true, true, 0, 0, 1.0, false, saved, true});
      cases.push_back({k, DType::bf16, 3, 40000, true, false, 0, 0, 1.0, false, saved, true});
    }
  for (NormKind k : {NormKind::softmax, NormKind::log_softmax}) {
    cases.push_back({k, DType::bf16, 40, 1000, false, false, 0, 0, 1.0, false, 0, true});
    cases.push_back({k, DType::f16, 2, 30000, false, false, 0, 0, 1.0, false, 0, true});
  }
  for (const BwdCase& c : cases) {
    SCOPED_TRACE("in a CUDA graph");
    run_bwd_case(c, Device::cuda(0));
    if (HasFatalFailure()) return;
  }
}

TEST(NormBackward, CudaGradientsAreDeterministic) {
  if (!gpu_usable()) GTEST_SKIP() << "no CUDA device";
  check_determinism(Device::cuda(0));
}

// The rms / layer backward variants for rows of n ≤ 8192 (src/cuda/norm_backward.cu, picked by
// SIXFOLD_NORM_BWD_KERNEL; regspf, v7, is the default for 16-bit rows; SIXFOLD_NORM_BWD_REDUCE) : the cases above
// plus rows enough for many rows per block (the dw/db slots and registers accumulate across
// rows), with and without a weight; 700x8192 and 1500x2048 sum dw/db in the row kernel (v9),
// 6000x1024 in bwd_grad_reduce; where v9's tiles are 32 columns (layer with weight and bias)
// it discards the partial rows' L2 lines once read, unless SIXFOLD_NORM_BWD_DISCARD=0.
TEST(NormBackward, CudaKernelVariantsMatchReference) {
  if (!gpu_usable()) GTEST_SKIP() << "no CUDA device";
  std::vector<BwdCase> cases;
  for (const BwdCase& c : bwd_cases())
    if (c.n <= 8192) cases.push_back(c);  // softmax kinds too: one kernel whatever the variant
  for (NormKind k : {NormKind::rms, NormKind::layer})
    for (DType t : {DType::bf16, DType::f16}) {
      if (std::getenv("SIXFOLD_TEST_SMALL")) break;  // not under the sanitizer
      cases.push_back({k, t, 700, 8192, true, false});
      cases.push_back({k, t, 1500, 2048, false, false});
      cases.push_back({k, t, 6000, 1024, true, true});
    }
  for (const char* v : {"smem", "smem1", "regs", "regs0", "regspf"}) {
    SCOPED_TRACE(std::string("SIXFOLD_NORM_BWD_KERNEL=") + v);
    ScopedEnv env("SIXFOLD_NORM_BWD_KERNEL", v);
    for (const BwdCase& c : cases) run_bwd_case(c, Device::cuda(0));
    check_determinism(Device::cuda(0));
  }
  {  // the partial rows' L2 lines kept instead of discarded once read
    SCOPED_TRACE("SIXFOLD_NORM_BWD_DISCARD=0");
    ScopedEnv keep("SIXFOLD_NORM_BWD_DISCARD", "0");
    for (const BwdCase& c : cases) run_bwd_case(c, Device::cuda(0));
    check_determinism(Device::cuda(0));
  }
  // The default kernel with dw/db summed by bwd_grad_reduce instead of in the row kernel (v9).
  SCOPED_TRACE("SIXFOLD_NORM_BWD_REDUCE=kernel");
  ScopedEnv env("SIXFOLD_NORM_BWD_REDUCE", "kernel");
  for (const BwdCase& c : cases) run_bwd_case(c, Device::cuda(0));
  check_determinism(Device::cuda(0));
}

// Rows longer than 8192 on both CUDA paths: one pass (v14, bwd_rows_stream: the default where
// every column tile of a row is resident at once) and the three kernels
// (SIXFOLD_NORM_BWD_LONG=chunks). Rows enough for many rows a block (stages reused, each row's
// wait kStreamLag rows behind its loads), one row group (dw / db written by the row kernel) and
// several (partial rows summed by bwd_grad_reduce), tiles of unequal fill (9000, 24584, 16400), strided
// and in-place rows, saved statistics, masked logits, and the longest rows.
TEST(NormBackward, CudaLongRowPathsMatchReference) {
  if (!gpu_usable()) GTEST_SKIP() << "no CUDA device";
  const bool small = std::getenv("SIXFOLD_TEST_SMALL") != nullptr;
  std::vector<BwdCase> cases;
  for (NormKind k : {NormKind::rms, NormKind::layer, NormKind::softmax, NormKind::log_softmax})
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      const bool norm = k == NormKind::rms || k == NormKind::layer;
      cases.push_back({k, t, 1, 9000});                                 // 2 tiles, one group
      cases.push_back({k, t, 40, 9000, true, true});                    // 40 groups, f32 grads
      cases.push_back({k, t, 5, 24584, true, false, 8, 1});             // strided, dx = dy
      cases.push_back({k, t, 3, 16400, false, false, 0, 2});            // no weight, dx = x
      if (!norm) cases.push_back({k, t, 30, 12000, false, false, 0, 0, 1.0, true});  // masked
      if (norm) cases.push_back({k, t, 40, 9000, true, false, 0, 0, 1.0, false, 1});  // saved
      if (small || t != DType::bf16) continue;  // not under the sanitizer; f32 / f16 above
      cases.push_back({k, t, 300, 16384, true, true});                  // 5 rows a group
      if (norm) cases.push_back({k, t, 300, 16384, true, false, 0, 0, 1.0, false, 1});
      if (k == NormKind::rms || k == NormKind::softmax) cases.push_back({k, t, 40, 262144});  // 10 rows a group
      if (k == NormKind::layer) cases.push_back({k, t, 3, 1 << 20, true, true});  // 128 tiles, one group
    }
  for (const char* v : {"stream", "chunks"}) {
    SCOPED_TRACE(std::string("SIXFOLD_NORM_BWD_LONG=") + v);
    ScopedEnv env("SIXFOLD_NORM_BWD_LONG", v);
    for (const BwdCase& c : cases) {
      run_bwd_case(c, Device::cuda(0));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(AddNorm, BadInputIsRejectedAndNothingWritten) {
  std::vector<float> x(24, 1.0f), r(24, 1.0f), y(24, NAN), s(24, NAN), w(5, 1.0f), r2(20, 1.0f);
  auto v = [](std::vector<float>& d, Shape sh) { return TensorView::contiguous(d.data(), DType::f32, sh); };
  const auto tx = v(x, {4, 6}), tr = v(r, {4, 6}), ty = v(y, {4, 6}), ts = v(s, {4, 6});
  expect_error([&] { add_rms_norm(tx, tr, v(w, {5}), ty, ts); },
               "argument 'weight': expected shape [6] (the row length of 'x'), got [5]");
  expect_error([&] { add_layer_norm(tx, v(r2, {4, 5}), TensorView{}, TensorView{}, ty, ts); },
               "argument 'residual': expected shape [4, 6] (that of 'x'), got [4, 5]");
  expect_error([&] { add_rms_norm(tx, TensorView::contiguous(r.data(), DType::bf16, {4, 6}), TensorView{}, ty, ts); },
               "argument 'residual': expected dtype f32");
  expect_error([&] { add_rms_norm(tx, tr, TensorView{}, ty, v(s, {6, 4})); },
               "argument 'sum_out': expected shape [4, 6]");
  expect_error([&] { add_rms_norm(tx, tr, TensorView{}, ty, ty); },
               "argument 'sum_out': expected memory apart from 'out'");
  auto shifted = ty;
  shifted.data = y.data() + 1;
  shifted.shape.dims[0] = 3;
  auto tx3 = v(x, {3, 6}), tr3 = v(r, {3, 6});
  expect_error([&] { add_rms_norm(tx3, tr3, TensorView{}, v(y, {3, 6}), shifted); },
               "argument 'sum_out': expected memory that does not partly overlap 'out'");
  for (float e : y) ASSERT_TRUE(std::isnan(e));
  for (float e : s) ASSERT_TRUE(std::isnan(e));
  for (float e : r) ASSERT_EQ(e, 1.0f);
}

TEST(NormBackward, BadInputIsRejectedAndNothingWritten) {
  std::vector<float> x(24, 1.0f), dy(24, 1.0f), dx(24, NAN), w(6, 1.0f), gw(6, NAN), gb(6, NAN),
      small(5, NAN);
  auto v = [](std::vector<float>& d, Shape sh) { return TensorView::contiguous(d.data(), DType::f32, sh); };
  const auto tx = v(x, {4, 6}), tdy = v(dy, {4, 6}), tdx = v(dx, {4, 6});
  expect_error([&] { rms_norm_backward(tdy, tx, v(small, {5}), tdx, TensorView{}); },
               "argument 'weight': expected shape [6] (the row length of 'x'), got [5]");
  expect_error([&] { rms_norm_backward(tdy, tx, v(w, {6}), tdx, v(small, {5})); },
               "argument 'dweight': expected shape [6] (the row length of 'x'), got [5]");
  expect_error([&] { layer_norm_backward(tdy, tx, TensorView{}, tdx, v(gw, {6}), TensorView{}); },
               "argument 'dweight': expected absent when 'weight' is absent");
  expect_error([&] { layer_norm_backward(tdy, v(x, {6, 4}), TensorView{}, tdx, TensorView{}, TensorView{}); },
               "argument 'x': expected shape [4, 6] (that of 'dy'), got [6, 4]");
  expect_error([&] { softmax_backward(tdy, tx, v(dx, {4, 5})); }, "argument 'dx': expected shape [4, 6]");
  expect_error([&] { log_softmax_backward(tdy, TensorView::contiguous(x.data(), DType::f16, {4, 6}), tdx); },
               "argument 'y': expected dtype f32");
  expect_error([&] { layer_norm_backward(tdy, tx, v(w, {6}), tdx, v(gw, {6}), v(gw, {6})); },
               "argument 'dbias': expected memory apart from 'dweight'");
  expect_error([&] { layer_norm_backward(tdy, tx, v(w, {6}), tdx, TensorView::contiguous(gw.data(), DType::i32, {6}), TensorView{}); },
               "argument 'dweight': expected dtype f32 (that of 'x') or f32, got i32");
  expect_error([&] { rms_norm_backward(tdy, tx, TensorView{}, tdx, TensorView{}, {-1.0f}); }, "argument 'params.eps'");
  // Saved statistics: (4) f32, rms without a mean, layer both or neither, apart from outputs.
  std::vector<float> mean(4, 0.0f), rstd(4, 1.0f);
  const auto tm = v(mean, {4}), tr = v(rstd, {4});
  expect_error([&] { rms_norm_backward(tdy, tx, TensorView{}, tdx, TensorView{}, {}, {}, {tm, tr}); },
               "argument 'mean': expected absent (rms_norm keeps no mean)");
  expect_error([&] { layer_norm_backward(tdy, tx, TensorView{}, tdx, TensorView{}, TensorView{}, {}, {}, {tm, {}}); },
               "argument 'rstd': expected given together with 'mean'");
  expect_error([&] { layer_norm_backward(tdy, tx, TensorView{}, tdx, TensorView{}, TensorView{}, {}, {}, {{}, tr}); },
               "argument 'mean': expected given together with 'rstd'");
  expect_error([&] { rms_norm_backward(tdy, tx, TensorView{}, tdx, TensorView{}, {}, {}, {{}, v(rstd, {3})}); },
               "argument 'rstd': expected 4 elements (one per row of 'x'");
  expect_error([&] { rms_norm_backward(tdy, tx, TensorView{}, tdx, TensorView{}, {}, {}, {{}, TensorView::contiguous(rstd.data(), DType::f16, {4})}); },
               "argument 'rstd': expected dtype f32, got f16");
  expect_error([&] { layer_norm_backward(tdy, tx, v(w, {6}), tdx, v(gw, {6}), TensorView{}, {}, {}, {tm, v(gw, {4})}); },
               "argument 'rstd': expected memory apart from 'dweight'");
  expect_error([&] { rms_norm_backward(tdy, tx, TensorView{}, tdx, TensorView{}, {}, {}, {{}, v(dx, {4})}); },
               "argument 'rstd': expected memory apart from 'dx'");
  for (float e : dx) ASSERT_TRUE(std::isnan(e));
  for (float e : gw) ASSERT_TRUE(std::isnan(e));
  for (float e : gb) ASSERT_TRUE(std::isnan(e));
}

TEST(NormBackward, NoRowsGiveZeroGradients) {
  std::vector<float> none(1, 0.0f), w(6, 1.0f), gw(6, NAN), gb(6, NAN);
  const auto empty = TensorView::contiguous(none.data(), DType::f32, {0, 6});
  layer_norm_backward(empty, empty, TensorView::contiguous(w.data(), DType::f32, {6}), empty,
                      TensorView::contiguous(gw.data(), DType::f32, {6}),
                      TensorView::contiguous(gb.data(), DType::f32, {6}));
  for (float e : gw) ASSERT_EQ(e, 0.0f);
  for (float e : gb) ASSERT_EQ(e, 0.0f);
}
