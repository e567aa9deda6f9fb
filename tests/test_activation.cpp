// bias+GELU (erf, tanh) and SiLU-gate on every backend against float64 formulas: fresh random
// inputs, f32/bf16/f16, awkward row lengths, strided rows, in place, ±inf / NaN / huge inputs;
// bad input rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#ifdef SIXFOLD_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "../src/reference/activation_reference.hpp"
#include "../src/reference/norm_reference.hpp"
#include "row_buffers.hpp"
#include "sixfold/ops/activation.hpp"
#include "sixfold/ops/norm.hpp"
#include "sixfold/runtime/error.hpp"

using namespace sixfold;
using namespace sixfold::testing;

namespace {

struct Case {
  ActivationKind kind;
  DType dtype;
  std::int64_t rows, n;
  bool bias = true;
  int pad = 0;
  bool in_place = false;
  bool special = false;  // x cycles through ±inf, NaN, huge and saturating values
};

// What `special` cases feed: the formulas give gelu(+inf) = +inf, gelu(−inf) = NaN (−inf·0),
// silu(−inf) = NaN, and saturate cleanly to 0 or u at the finite extremes.
constexpr double kSpecial[] = {INFINITY, -INFINITY, NAN, 1e4, -1e4, 100.0, -100.0, 30.0, -30.0,
                               5.7, -5.7, 4.0, -4.0, 0.0, -0.0, 1e-3};

void run_case(const Case& c, Device dev) {
  SCOPED_TRACE(std::to_string(int(c.kind)) + " " + std::string(dtype_name(c.dtype)) + " " +
               std::to_string(c.rows) + "x" + std::to_string(c.n) + " pad " + std::to_string(c.pad) +
               (c.in_place ? " in-place" : "") + (c.special ? " special" : "") + " on " + to_string(dev));
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<double> nd(0.0, 3.0);
  const std::int64_t stride = c.n + c.pad;
  std::vector<double> x(std::size_t(c.rows * c.n)), g(x.size()), bias(std::size_t(c.n));
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = c.special ? kSpecial[i % std::size(kSpecial)] : nd(rng);
  for (auto& v : g) v = nd(rng);
  for (auto& v : bias) v = nd(rng) * 0.3;
  const bool gate = c.kind == ActivationKind::silu_gate, has_bias = c.bias && !gate;
  const auto xb = encode(c.dtype, x, c.rows, c.n, stride), gb = encode(c.dtype, g, c.rows, c.n, stride);
  const auto bb = encode(c.dtype, bias, 1, c.n, c.n);
  const auto xq = decode(c.dtype, xb, c.rows, c.n, stride), gq = decode(c.dtype, gb, c.rows, c.n, stride);
  const auto bq = decode(c.dtype, bb, 1, c.n, c.n);
  const std::size_t es = std::size_t(dtype_bits(c.dtype) / 8);
  DeviceBuffer bx(dev, xb), bg(dev, gb), bbias(dev, bb),
      bo(dev, std::vector<std::uint8_t>(std::size_t(c.rows * stride) * es, 0xff));
  const TensorView tx = bx.rows_view(c.dtype, c.rows, c.n, stride);
  const TensorView to = c.in_place ? tx : bo.rows_view(c.dtype, c.rows, c.n, stride);
  TensorView tb;
  if (has_bias) tb = TensorView::contiguous(bbias.storage.get(), c.dtype, {c.n}, dev);
  if (gate) silu_gate(tx, bg.rows_view(c.dtype, c.rows, c.n, stride), to);
  else bias_gelu(tx, tb, to, {c.kind == ActivationKind::gelu_tanh ? GeluForm::tanh : GeluForm::erf});
  const auto out = decode(c.dtype, (c.in_place ? bx : bo).host(), c.rows, c.n, stride);
  const double rtol = c.dtype == DType::f32 ? 1e-5 : (c.dtype == DType::bf16 ? 1.6e-2 : 2e-3);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double u = xq[i] + (has_bias ? bq[i % std::size_t(c.n)] : 0.0);
    const double want = round_to(c.dtype, reference::activation(c.kind, u, gq[i]));
    if (std::isnan(want) || std::isinf(want))
      ASSERT_TRUE(std::isnan(want) ? std::isnan(out[i]) : out[i] == want)
          << "i " << i << " u " << u << " got " << out[i] << " want " << want;
    else
      ASSERT_LE(std::fabs(out[i] - want), rtol * (std::fabs(want) + 1.0)) << "i " << i << " got " << out[i] << " want " << want;
  }
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (ActivationKind k : {ActivationKind::gelu_erf, ActivationKind::gelu_tanh, ActivationKind::silu_gate})
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      for (auto [rows, n] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 7}, {5, 4095}, {2, 4096}, {33, 1024}, {70000, 8}, {1, 1 << 20}})
        all.push_back({k, t, rows, n});
      all.push_back({k, t, 9, 1000, false, 5});        // strided rows, no bias
      // Rows longer than the CPU's bias tile (131072 columns): tiles cut over the threads
      // mid-row, a last tile of 37 columns; strided, a last tile of one column.
      all.push_back({k, t, 3, (1 << 18) + 37});
      all.push_back({k, t, 2, (1 << 17) + 1, true, 5});
      all.push_back({k, t, 4, 512, true, 8, true});     // in place
      all.push_back({k, t, 3, 64, false, 0, false, true});  // special values, vector path
      all.push_back({k, t, 2, 33, false, 0, false, true});  // special values, scalar path
    }
  return all;
}

}  // namespace

TEST(Activation, CpuMatchesReference) {
  for (const Case& c : cases()) run_case(c, Device::cpu());
}

TEST(Activation, CudaMatchesReference) {
  if (!gpu_usable()) GTEST_SKIP() << "no CUDA device";
  for (const Case& c : cases()) run_case(c, Device::cuda(0));
}

// The CUDA row kernels are launched as programmatic dependents: each may be scheduled before the
// work ahead of it in the stream has finished and must wait on the device before its first
// access. A chain of copies and kernels, each stage reading what the one before wrote into
// memory poisoned with NaN: a stage that read early would see NaN or the previous pass's
// values. Run on a stream, then captured into a CUDA graph and replayed twice (the graph's edges
// between copies, memsets and dependent kernels). Every stage is checked against the float64
// formula applied to what the device wrote for the stage before it.
TEST(Activation, CudaChainedAfterCopiesMatchReference) {
#ifdef SIXFOLD_WITH_CUDA
  if (!gpu_usable()) GTEST_SKIP() << "no CUDA device";
  const Device dev = Device::cuda(0);
  const DType t = DType::bf16;
  const std::int64_t rows = 257, n = 4096;  // one block a row (norm), several rows a block (gelu)
  std::normal_distribution<double> nd(0.0, 1.5);
  std::vector<double> x(static_cast<std::size_t>(rows * n)), w(static_cast<std::size_t>(n)),
      bias(static_cast<std::size_t>(n));
  for (auto& v : x) v = nd(engine());
  for (auto& v : w) v = 1.0 + 0.2 * nd(engine());
  for (auto& v : bias) v = 0.3 * nd(engine());
  const auto xb = encode(t, x, rows, n, n), wb = encode(t, w, 1, n, n), bb = encode(t, bias, 1, n, n);
  const auto xq = decode(t, xb, rows, n, n), wq = decode(t, wb, 1, n, n), bq = decode(t, bb, 1, n, n);
  const std::vector<std::uint8_t> poison(xb.size(), 0xff);
  DeviceBuffer src(dev, xb), bw(dev, wb), bbias(dev, bb), xd(dev, poison), h(dev, poison), z(dev, poison),
      z2(dev, poison), y(dev, poison);
  const auto view = [&](const DeviceBuffer& b) { return b.rows_view(t, rows, n, n); };
  const TensorView tw = TensorView::contiguous(bw.storage.get(), t, {n}, dev);
  const TensorView tbias = TensorView::contiguous(bbias.storage.get(), t, {n}, dev);
  const auto bytes = xb.size();
  // memset → copy → rms_norm → bias_gelu → copy → softmax
  const auto chain = [&](cudaStream_t s) {
    ASSERT_EQ(cudaMemsetAsync(h.storage.get(), 0xff, bytes, s), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(xd.storage.get(), src.storage.get(), bytes, cudaMemcpyDeviceToDevice, s), cudaSuccess);
    rms_norm(view(xd), tw, view(h), {1e-6f}, Stream{s});
    bias_gelu(view(h), tbias, view(z), {}, Stream{s});
    ASSERT_EQ(cudaMemcpyAsync(z2.storage.get(), z.storage.get(), bytes, cudaMemcpyDeviceToDevice, s), cudaSuccess);
    softmax(view(z2), view(y), Stream{s});
  };
  const auto check = [&](const char* how) {
    SCOPED_TRACE(how);
    const auto hq = decode(t, h.host(), rows, n, n), zq = decode(t, z.host(), rows, n, n),
               yq = decode(t, y.host(), rows, n, n);
    const auto h_ref = reference::norm(NormKind::rms, xq, rows, n, wq, {}, 1e-6);
    const auto y_ref = reference::norm(NormKind::softmax, zq, rows, n, {}, {}, 0.0);
    for (std::size_t i = 0; i < hq.size(); ++i) {
      const double z_ref = reference::activation(ActivationKind::gelu_erf, hq[i] + bq[i % std::size_t(n)], 0.0);
      ASSERT_LE(std::fabs(hq[i] - h_ref[i]), 1e-2 * (std::fabs(h_ref[i]) + 1.0)) << "rms_norm, i " << i;
      ASSERT_LE(std::fabs(zq[i] - z_ref), 1e-2 * (std::fabs(z_ref) + 1.0)) << "bias_gelu, i " << i;
      ASSERT_LE(std::fabs(yq[i] - y_ref[i]), 1e-2 * std::fabs(y_ref[i]) + 1e-6) << "softmax, i " << i;
    }
  };
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  chain(s);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  check("on a stream");
  for (DeviceBuffer* b : {&xd, &z, &z2, &y})
    ASSERT_EQ(cudaMemset(b->storage.get(), 0xff, bytes), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  chain(s);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int rep = 0; rep < 2; ++rep) ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  check("captured in a graph, replayed twice");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
#else
  GTEST_SKIP() << "a build without the CUDA backend";
#endif
}

// Outputs large enough to be streamed past the caches (non-temporal stores), with input and
// output starting off a 64-byte boundary (each thread's head before its first aligned step),
// a bias, and every 89th input special: ±inf, NaN, ±0, u = 0 exactly (x = −bias), bf16/f16
// denormals, the far tail. For bf16 this is the 32-element step loop, whose fast rounding reads
// f32 denormals as zero and whose fast form gives 0 for −inf: the steps with a zero output are
// redone exactly, which this checks value by value (within 1 unit in the last place of the
// output dtype, or 1e-7 absolute in the far tail).
TEST(Activation, CpuStreamedOffsetRowsWithSpecialsMatchReference) {
  std::normal_distribution<double> nd(0.0, 3.0);
  // 8.4 / 8.9 MB of 16-bit output: whole rows, then rows in column tiles of the bias
  for (auto [rows, n] : {std::pair<std::int64_t, std::int64_t>{1031, 4099}, {17, 262147}})
  for (ActivationKind k : {ActivationKind::gelu_erf, ActivationKind::gelu_tanh})
    for (DType t : {DType::bf16, DType::f16}) {
      const std::int64_t total = rows * n;
      SCOPED_TRACE(std::to_string(int(k)) + " " + std::string(dtype_name(t)) + " " + std::to_string(n));
      std::vector<double> bias(static_cast<std::size_t>(n)), x(static_cast<std::size_t>(total));
      for (auto& v : bias) v = nd(engine()) * 0.3;
      auto bb = encode(t, bias, 1, n, n);
      const auto bq = decode(t, bb, 1, n, n);
      const double denorm = t == DType::bf16 ? 3e-39 : 3e-6;
      const double special[] = {INFINITY, -INFINITY, NAN, 0.0, -0.0, denorm, -denorm, -7.7, -7.6, -9.0, 7.9, 1e4};
      for (std::int64_t i = 0; i < total; ++i) {
        double v = nd(engine());
        if (i % 89 == 0) v = special[std::size_t(i / 89) % std::size(special)];
        if (i % 89 == 44) v = -bq[std::size_t(i % n)];  // u = 0 exactly
        x[std::size_t(i)] = v;
      }
      // Views 1 (x) and 3 (out) elements into their buffers: both off a 64-byte boundary.
      const auto xb = encode(t, x, rows, n, n);
      std::vector<std::uint8_t> xin(xb.size() + 2);  // one element of slack in front
      std::memcpy(xin.data() + 2, xb.data(), xb.size());
      std::vector<std::uint8_t> out(std::size_t(total + 3) * 2, 0xff);
      const auto xq = decode(t, xb, rows, n, n);
      bias_gelu(TensorView::contiguous(xin.data() + 2, t, {rows, n}), TensorView::contiguous(bb.data(), t, {n}),
                TensorView::contiguous(out.data() + 6, t, {rows, n}),
                {k == ActivationKind::gelu_tanh ? GeluForm::tanh : GeluForm::erf});
      const double ulp = t == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
      for (std::int64_t i = 0; i < total; ++i) {
        const double u = double(float(xq[std::size_t(i)]) + float(bq[std::size_t(i % n)]));
        const double want = round_to(t, reference::activation(k, u, 0.0));
        std::uint16_t bits;
        std::memcpy(&bits, out.data() + 6 + 2 * i, 2);
        const double got = decode16(t, bits);
        if (std::isnan(want) || std::isinf(want))
          ASSERT_TRUE(std::isnan(want) ? std::isnan(got) : got == want) << "i " << i << " u " << u << " got " << got;
        else
          ASSERT_LE(std::fabs(got - want), ulp * std::fabs(want) + 1e-7) << "i " << i << " u " << u << " got " << got << " want " << want;
      }
      for (int j = 0; j < 6; ++j) ASSERT_EQ(out[std::size_t(j)], 0xff) << "written before the output";
    }
}

TEST(Activation, BadInputIsRejectedAndNothingWritten) {
  std::vector<float> x(24, 1.0f), y(24, NAN), b(5, 0.0f);
  auto tx = TensorView::contiguous(x.data(), DType::f32, {4, 6});
  auto ty = TensorView::contiguous(y.data(), DType::f32, {4, 6});
  expect_error([&] { bias_gelu(tx, TensorView::contiguous(b.data(), DType::f32, {5}), ty); },
         "sixfold::bias_gelu: argument 'bias': expected shape [6]");
  expect_error([&] { silu_gate(tx, TensorView::contiguous(x.data(), DType::f32, {6, 4}), ty); },
         "sixfold::silu_gate: argument 'b': expected shape [4, 6]");
  expect_error([&] { silu_gate(tx, tx, TensorView::contiguous(y.data(), DType::f16, {4, 6})); },
         "argument 'out': expected dtype f32, got f16");
  expect_error([&] { bias_gelu(tx, TensorView{}, ty, {GeluForm(9)}); }, "argument 'params.form'");
  expect_error([&] { bias_gelu(TensorView::contiguous(x.data(), DType::i32, {4, 6}), TensorView{}, TensorView::contiguous(y.data(), DType::i32, {4, 6})); },
         "argument 'x': expected dtype f32, bf16 or f16, got i32");
  for (float v : y) ASSERT_TRUE(std::isnan(v));
}
