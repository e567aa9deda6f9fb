// Selective scan (and its decoding step) on every backend against the sequential float64 loop:
// fresh random inputs each run; f32/bf16/f16; L in {1, 7, 2047, 2048, 2049, 16384}; d_state n in
// {1, 16, 64, 256}; fixed or input-dependent B/C with groups; D, z, delta_bias, softplus,
// initial and final state; padded (strided) rows; varlen batches with empty sequences; out
// aliasing u; bad input rejected with nothing written. CUDA cases run where a GPU is usable
// (skipped otherwise; SIXFOLD_REQUIRE_GPU=1 fails them; SIXFOLD_TEST_SMALL=1 drops the largest),
// also with the kernel's wider launch shapes forced.
#include <gtest/gtest.h>

#ifdef SIXFOLD_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include <cmath>
#include <cstring>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../src/reference/selective_scan_reference.hpp"
#include "row_buffers.hpp"
#include "scoped_env.hpp"
#include "sixfold/ops/selective_scan.hpp"
#include "sixfold/runtime/error.hpp"
#include "sixfold/runtime/tensor.hpp"

using namespace sixfold;
using namespace sixfold::testing;

namespace {

std::vector<double> draw(std::size_t count, double lo, double hi) {
  std::uniform_real_distribution<double> ud(lo, hi);
  std::vector<double> v(count);
  for (auto& x : v) x = ud(engine());
  return v;
}

struct Case {
  DType dtype = DType::f32;
  std::int64_t batch = 1, d = 1, n = 16, len = 7, groups = 1;
  bool var_B = true, var_C = true, has_D = true, has_z = true, has_bias = true, softplus = true;
  bool init = false, want_final = true;
  int pad = 0;                       // extra elements per row of u/delta/z/out/B/C
  bool in_place = false;             // out aliases u
  std::vector<std::int32_t> seqlens; // non-empty: varlen with these sequence lengths
};

std::string describe(const Case& c) {
  std::string s = std::string(dtype_name(c.dtype)) + " b" + std::to_string(c.batch) + " d" + std::to_string(c.d) +
                  " n" + std::to_string(c.n) + " L" + std::to_string(c.len) + " g" + std::to_string(c.groups) +
                  (c.var_B ? " varB" : " fixB") + (c.var_C ? " varC" : " fixC") + (c.has_D ? " D" : "") +
                  (c.has_z ? " z" : "") + (c.has_bias ? " bias" : "") + (c.softplus ? " softplus" : "") +
                  (c.init ? " init" : "") + " pad" + std::to_string(c.pad) + (c.in_place ? " in-place" : "");
  if (!c.seqlens.empty()) {
    s += " varlen[";
    for (auto l : c.seqlens) s += std::to_string(l) + ",";
    s += "]";
  }
  return s;
}

// rows × len values held at row stride len + pad on `dev`, with a TensorView of `shape`.
struct Rows {
  DType t;
  std::int64_t rows, len, stride;
  std::vector<std::uint8_t> bytes;
  std::vector<double> stored;  // the values as the dtype holds them
  std::unique_ptr<DeviceBuffer> buf;
  Rows(DType t_, const std::vector<double>& v, std::int64_t rows_, std::int64_t len_, int pad, Device dev)
      : t(t_), rows(rows_), len(len_), stride(len_ + pad) {
    bytes = encode(t, v, rows, len, stride);
    stored = decode(t, bytes, rows, len, stride);
    buf = std::make_unique<DeviceBuffer>(dev, bytes);
  }
  // A view of shape (lead..., len): leading dimensions row-major over the rows.
  TensorView view(Shape shape) const {
    TensorView v = TensorView::contiguous(buf->storage.get(), t, shape, buf->device);
    std::int64_t s = stride;
    for (int i = shape.rank - 1; i >= 0; --i) {
      v.strides[i] = i == shape.rank - 1 ? 1 : s;
      if (i < shape.rank - 1) s *= shape.dims[i];
    }
    return v;
  }
  std::vector<double> read() const { return decode(t, buf->host(), rows, len, stride); }
};

// An f32 contiguous parameter on `dev`.
struct Param {
  std::vector<double> stored;
  std::unique_ptr<DeviceBuffer> buf;
  Param(const std::vector<double>& v, Device dev) {
    const auto b = encode(DType::f32, v, 1, std::int64_t(v.size()), std::int64_t(v.size()));
    stored = decode(DType::f32, b, 1, std::int64_t(v.size()), std::int64_t(v.size()));
    buf = std::make_unique<DeviceBuffer>(dev, b);
  }
  TensorView view(Shape s) const { return TensorView::contiguous(buf->storage.get(), DType::f32, s, buf->device); }
};

double tolerance(DType t) { return t == DType::f32 ? 5e-5 : (t == DType::bf16 ? 1.6e-2 : 4e-3); }

// Compares rows of out against the reference:
//   |got − want| <= rtol · (|want| + max|ref| of the row + magnitude of want's terms),
// the last (when given) so that an output whose terms cancel is judged by the size of the terms
// it was summed from, not by its own (a short row has no large neighbours to lend it a bound).
void expect_close(DType t, const std::vector<double>& got, const std::vector<double>& ref,
                  std::int64_t rows, std::int64_t len, const char* what,
                  const std::vector<double>* magnitude = nullptr) {
  const double rtol = tolerance(t);
  for (std::int64_t r = 0; r < rows; ++r) {
    double mx = 0;
    for (std::int64_t i = 0; i < len; ++i) mx = std::max(mx, std::fabs(ref[std::size_t(r * len + i)]));
    for (std::int64_t i = 0; i < len; ++i) {
      const double want = round_to(t, ref[std::size_t(r * len + i)]), g = got[std::size_t(r * len + i)];
      ASSERT_TRUE(std::isfinite(want)) << what << " row " << r << " t " << i << ": reference overflows the dtype";
      const double mag = magnitude ? (*magnitude)[std::size_t(r * len + i)] : 0.0;
      ASSERT_LE(std::fabs(g - want), rtol * (std::fabs(want) + mx + mag) + 1e-30)
          << what << " row " << r << " t " << i << " got " << g << " want " << want;
    }
  }
}

void run_case(const Case& c, Device dev) {
  SCOPED_TRACE(describe(c) + " on " + to_string(dev));
  const bool varlen = !c.seqlens.empty();
  std::int64_t total = c.len, nseq = c.batch;
  std::vector<std::int32_t> cu{0};
  if (varlen) {
    for (auto l : c.seqlens) cu.push_back(cu.back() + l);
    total = cu.back();
    nseq = std::int64_t(c.seqlens.size());
  }
  const std::int64_t B0 = varlen ? 1 : c.batch;  // leading batch of the packed tensors
  const std::int64_t rows = B0 * c.d, L = total, n = c.n, g = c.groups;
  Rows u(c.dtype, draw(std::size_t(rows * L), -2, 2), rows, L, c.pad, dev);
  Rows delta(c.dtype, draw(std::size_t(rows * L), c.softplus ? -4.0 : 0.0, c.softplus ? 1.0 : 1.0), rows, L, c.pad, dev);
  Rows z(c.dtype, draw(std::size_t(rows * L), -3, 3), rows, L, c.pad, dev);
  Rows out(c.dtype, std::vector<double>(std::size_t(rows * L), NAN), rows, L, c.pad, dev);
  std::vector<double> a = draw(std::size_t(c.d * n), std::log(0.05), std::log(4.0));
  for (auto& v : a) v = -std::exp(v);
  // Without softplus Δ = delta + bias must stay positive, or exp(Δ·A) > 1 and the state explodes.
  Param A(a, dev), D(draw(std::size_t(c.d), -1, 1), dev),
      bias(draw(std::size_t(c.d), c.softplus ? -0.5 : 0.0, 0.5), dev);
  const std::int64_t bc_rows = B0 * g * n;
  Rows Bv(c.dtype, draw(std::size_t(bc_rows * L), -1, 1), bc_rows, L, c.pad, dev);
  Rows Cv(c.dtype, draw(std::size_t(bc_rows * L), -1, 1), bc_rows, L, c.pad, dev);
  Param Bf(draw(std::size_t(c.d * n), -1, 1), dev), Cf(draw(std::size_t(c.d * n), -1, 1), dev);
  Param init(draw(std::size_t(nseq * c.d * n), -1, 1), dev);
  Param fin(std::vector<double>(std::size_t(nseq * c.d * n), NAN), dev);
  std::unique_ptr<DeviceBuffer> cu_dev;
  if (varlen) {
    std::vector<std::uint8_t> b(cu.size() * 4);
    std::memcpy(b.data(), cu.data(), b.size());
    cu_dev = std::make_unique<DeviceBuffer>(dev, b);
  }

  auto seq_shape = [&](std::int64_t lead) { return varlen ? Shape{lead, L} : Shape{c.batch, lead, L}; };
  auto bc_shape = varlen ? Shape{g, n, L} : Shape{c.batch, g, n, L};
  SelectiveScanTensors in;
  in.u = u.view(seq_shape(c.d));
  in.delta = delta.view(seq_shape(c.d));
  in.A = A.view({c.d, n});
  in.B = c.var_B ? Bv.view(bc_shape) : Bf.view({c.d, n});
  in.C = c.var_C ? Cv.view(bc_shape) : Cf.view({c.d, n});
  if (c.has_D) in.D = D.view({c.d});
  if (c.has_z) in.z = z.view(seq_shape(c.d));
  if (c.has_bias) in.delta_bias = bias.view({c.d});
  if (c.init) in.initial_state = init.view({nseq, c.d, n});
  const TensorView tout = c.in_place ? in.u : out.view(seq_shape(c.d));
  const TensorView tfin = c.want_final ? fin.view({nseq, c.d, n}) : TensorView{};
  const SelectiveScanParams params{c.softplus};
  if (varlen) {
    const TensorView tcu = TensorView::contiguous(cu_dev->storage.get(), DType::i32, {nseq + 1}, dev);
    selective_scan_varlen(in, tcu, tout, tfin, params);
  } else {
    selective_scan(in, tout, tfin, params);
  }
  synchronize(dev);

  // The reference, per sequence (varlen) or for the whole batch, on the stored inputs.
  std::vector<double> ref_out(std::size_t(rows * L)), ref_mag(std::size_t(rows * L)), ref_state(std::size_t(nseq * c.d * n)),
      ref_state_mag(ref_state.size());
  for (std::int64_t q = 0; q < (varlen ? nseq : 1); ++q) {
    reference::SelectiveScanProblem p;
    const std::int64_t t0 = varlen ? cu[std::size_t(q)] : 0, len = varlen ? c.seqlens[std::size_t(q)] : L;
    const std::int64_t pb = varlen ? 1 : c.batch;
    p.batch = pb; p.d = c.d; p.n = n; p.len = len; p.groups = g;
    p.var_B = c.var_B; p.var_C = c.var_C; p.softplus = c.softplus;
    auto slice = [&](const std::vector<double>& v, std::int64_t nrows) {
      std::vector<double> s(std::size_t(nrows * len));
      for (std::int64_t r = 0; r < nrows; ++r)
        for (std::int64_t t = 0; t < len; ++t) s[std::size_t(r * len + t)] = v[std::size_t(r * L + t0 + t)];
      return s;
    };
    p.u = slice(u.stored, pb * c.d);
    p.delta = slice(delta.stored, pb * c.d);
    if (c.has_z) p.z = slice(z.stored, pb * c.d);
    p.A = A.stored;
    p.B = c.var_B ? slice(Bv.stored, pb * g * n) : Bf.stored;
    p.C = c.var_C ? slice(Cv.stored, pb * g * n) : Cf.stored;
    if (c.has_D) p.D = D.stored;
    if (c.has_bias) p.bias = bias.stored;
    if (c.init) p.init.assign(init.stored.begin() + q * c.d * n * (varlen ? 1 : 0),
                              init.stored.begin() + (varlen ? (q + 1) * c.d * n : nseq * c.d * n));
    const auto r = reference::selective_scan(p);
    for (std::int64_t row = 0; row < pb * c.d; ++row)
      for (std::int64_t t = 0; t < len; ++t) {
        ref_out[std::size_t(row * L + t0 + t)] = r.out[std::size_t(row * len + t)];
        ref_mag[std::size_t(row * L + t0 + t)] = r.magnitude[std::size_t(row * len + t)];
      }
    std::copy(r.state.begin(), r.state.end(), ref_state.begin() + q * c.d * n * (varlen ? 1 : 0));
    std::copy(r.state_magnitude.begin(), r.state_magnitude.end(), ref_state_mag.begin() + q * c.d * n * (varlen ? 1 : 0));
  }
  const auto got = c.in_place ? u.read() : out.read();
  expect_close(c.dtype, got, ref_out, rows, L, "out", &ref_mag);
  if (c.want_final) {
    const auto st = decode(DType::f32, fin.buf->host(), 1, nseq * c.d * n, nseq * c.d * n);
    // The state is f32 in every dtype: its error is the f32 scan's on the rounded inputs.
    expect_close(DType::f32, st, ref_state, nseq * c.d, n, "final_state", &ref_state_mag);
  }
}

std::vector<Case> cases() {
  const bool small = std::getenv("SIXFOLD_TEST_SMALL") != nullptr;
  std::vector<Case> all;
  // Lengths × states, full options.
  for (std::int64_t len : {1, 7, 2047, 2048, 2049, 16384})
    for (std::int64_t n : {1, 16, 64, 256}) {
      if (small && len > 2049) continue;
      Case c;
      c.len = len;
      c.n = n;
      c.d = len >= 16384 ? 2 : (n >= 64 ? 3 : 5);
      c.batch = len >= 2047 ? 1 : 2;
      if (len >= 16384 && n >= 64) c.d = 1;
      all.push_back(c);
    }
  // dtypes, groups, option subsets, strides, state in/out.
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    Case c; c.dtype = t; c.batch = 2; c.d = 8; c.n = 16; c.len = 300; c.groups = 2; c.init = true; c.pad = 5;
    all.push_back(c);
    c.var_C = false; c.has_z = false; c.softplus = false; c.groups = 4;
    all.push_back(c);
    c.var_B = false; c.var_C = true; c.has_D = false; c.has_bias = false; c.init = false; c.pad = 0;
    all.push_back(c);
  }
  {
    Case c; c.batch = 3; c.d = 64; c.n = 16; c.len = 129; c.groups = 8; c.init = true;  // many channels
    all.push_back(c);
    c.var_B = c.var_C = false; c.want_final = false; c.in_place = true;
    all.push_back(c);
  }
  {
    Case c; c.batch = 1; c.d = 33; c.n = 17; c.len = 1000; c.groups = 3; c.dtype = DType::bf16; c.pad = 3;
    all.push_back(c);
  }
  // The CUDA kernel's version 6 (input-dependent B and C, n ∈ {16, 32, 64}, 4 or 8 channels of
  // one group per warp): lengths around its 32-step chunks, every dtype, aligned and padded
  // rows, groups, options off. 65 and 97: three and four chunks (each of the warp-specialised
  // form's two slots used twice).
  for (std::int64_t len : {1, 7, 31, 33, 65, 97, 2047, 2048, 2049, 16384})
    for (std::int64_t n : {16, 32, 64}) {
      if (small && len > 2049) continue;
      Case c; c.len = len; c.n = n; c.d = n == 16 ? 16 : 8; c.batch = len >= 2047 ? 1 : 2; c.init = len % 2 == 1;
      all.push_back(c);
    }
  for (DType t : {DType::bf16, DType::f16, DType::f32}) {
    Case c; c.dtype = t; c.batch = 2; c.d = 32; c.n = 16; c.len = 300; c.groups = 2; c.init = true;
    all.push_back(c);
    c.pad = 3; c.n = 64; c.has_z = false; c.softplus = false; c.has_bias = false;
    all.push_back(c);
    c.pad = 0; c.n = 32; c.has_D = false; c.has_z = true; c.want_final = false; c.in_place = true;
    all.push_back(c);
  }
  // Varlen: empty sequences, lengths around the chunk sizes, initial states.
  for (DType t : {DType::f32, DType::bf16}) {
    Case c; c.dtype = t; c.d = 6; c.n = 16; c.groups = 2; c.init = true;
    c.seqlens = {5, 0, 2049, 1, 300, 0};
    all.push_back(c);
    c.n = 64; c.var_C = false; c.seqlens = {3000}; c.d = 2;
    all.push_back(c);
    // Version 6's varlen: ragged starts (unaligned rows) and sequences shorter than a chunk.
    c.var_C = true; c.d = 8; c.groups = 1; c.seqlens = {5, 0, 2049, 1, 33, 0, 64};
    for (std::int64_t n : {16, 64}) {
      c.n = n;
      all.push_back(c);
    }
  }
  return all;
}

SelectiveScanTensors tensors(TensorView u, TensorView delta, TensorView A, TensorView B, TensorView C) {
  SelectiveScanTensors in;
  in.u = u; in.delta = delta; in.A = A; in.B = B; in.C = C;
  return in;
}

class SelectiveScanCpu : public ::testing::Test {};
class SelectiveScanCuda : public ::testing::Test {};

TEST(SelectiveScanCpu, MatchesReference) {
  for (const Case& c : cases()) run_case(c, Device::cpu());
}

TEST(SelectiveScanCuda, MatchesReference) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable CUDA device";
  for (const Case& c : cases()) run_case(c, Device::cuda(0));
}

// The CUDA kernel's launch width (channels per warp, 32 / that time segments per warp) follows
// the problem size, so the small shapes above always get one channel per warp; the hook
// SIXFOLD_SSCAN_CW forces the wider ones (the widest power of two up to it that divides the
// channels of a B/C group), which the bench shapes use, on the same cases.
TEST(SelectiveScanCuda, WideLaunchShapesMatchReference) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable CUDA device";
  for (const char* cw : {"2", "4", "8"}) {
    SCOPED_TRACE(std::string("SIXFOLD_SSCAN_CW=") + cw);
    ScopedEnv env("SIXFOLD_SSCAN_CW", cw);
    for (const Case& c : cases()) run_case(c, Device::cuda(0));
  }
}

// Version 6 takes the input-dependent cases with n ∈ {16, 32, 64}: a plain form at 2 (n = 16),
// 4 or 8 lanes per channel, or a warp-specialised form, by size (the small shapes above always
// get the specialised one): SIXFOLD_SSCAN_KERNEL forces each choice, and version 5 (which keeps
// the other cases) on all of them.
TEST(SelectiveScanCuda, KernelVersionsMatchReference) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable CUDA device";
  for (const char* v : {"v5", "p2", "p4", "p8", "spec"}) {
    SCOPED_TRACE(std::string("SIXFOLD_SSCAN_KERNEL=") + v);
    ScopedEnv env("SIXFOLD_SSCAN_KERNEL", v);
    for (const Case& c : cases()) run_case(c, Device::cuda(0));
  }
}

// ---- selective_state_update ---------------------------------------------------------------

struct StepCase {
  DType dtype = DType::f32;
  std::int64_t batch = 2, d = 8, n = 16, groups = 1;
  bool has_D = true, has_z = true, has_bias = true, softplus = true;
};

// Fresh random inputs of one decoding step on `dev` (out with `out_pad` elements between rows),
// and the float64 steps taken so far (ref_*), starting from the same state.
std::vector<double> draw_A(std::int64_t count) {
  std::vector<double> a = draw(std::size_t(count), std::log(0.05), std::log(4.0));
  for (auto& v : a) v = -std::exp(v);
  return a;
}
struct StepInputs {
  StepCase c;
  std::int64_t rows;
  Rows x, dt, z, out, B, C;
  Param A, D, bias, state;
  StateUpdateTensors in;
  std::vector<double> ref_state, ref_out, ref_mag, ref_state_mag;
  StepInputs(const StepCase& c_, Device dev, int out_pad)
      : c(c_), rows(c.batch * c.d),
        x(c.dtype, draw(std::size_t(rows), -2, 2), c.batch, c.d, 0, dev),
        dt(c.dtype, draw(std::size_t(rows), -3, 1), c.batch, c.d, 0, dev),
        z(c.dtype, draw(std::size_t(rows), -3, 3), c.batch, c.d, 0, dev),
        out(c.dtype, std::vector<double>(std::size_t(rows), NAN), c.batch, c.d, out_pad, dev),
        B(c.dtype, draw(std::size_t(c.batch * c.groups * c.n), -1, 1), c.batch * c.groups, c.n, 0, dev),
        C(c.dtype, draw(std::size_t(c.batch * c.groups * c.n), -1, 1), c.batch * c.groups, c.n, 0, dev),
        A(draw_A(c.d * c.n), dev), D(draw(std::size_t(c.d), -1, 1), dev), bias(draw(std::size_t(c.d), -0.5, 0.5), dev),
        state(draw(std::size_t(rows * c.n), -1, 1), dev), ref_state(state.stored) {
    in.x = x.view({c.batch, c.d});
    in.dt = dt.view({c.batch, c.d});
    in.A = A.view({c.d, c.n});
    in.B = B.view({c.batch, c.groups, c.n});
    in.C = C.view({c.batch, c.groups, c.n});
    if (c.has_D) in.D = D.view({c.d});
    if (c.has_z) in.z = z.view({c.batch, c.d});
    if (c.has_bias) in.dt_bias = bias.view({c.d});
  }
  void step(Stream s = {}) {
    selective_state_update(state.view({c.batch, c.d, c.n}), in, out.view({c.batch, c.d}), {c.softplus}, s);
  }
  void reference_steps(int steps) {
    for (int k = 0; k < steps; ++k)
      ref_out = reference::selective_state_update(
          ref_state, c.batch, c.d, c.n, c.groups, x.stored, dt.stored, A.stored, B.stored, C.stored,
          c.has_D ? D.stored : std::vector<double>{}, c.has_z ? z.stored : std::vector<double>{},
          c.has_bias ? bias.stored : std::vector<double>{}, c.softplus, &ref_mag, &ref_state_mag);
  }
  // The device's output and state against the float64 steps.
  void check() const {
    expect_close(c.dtype, out.read(), ref_out, c.batch, c.d, "out", &ref_mag);
    expect_close(DType::f32, decode(DType::f32, state.buf->host(), 1, rows * c.n, rows * c.n), ref_state, rows, c.n,
                 "state", &ref_state_mag);
  }
};

void run_step(const StepCase& c, Device dev) {
  SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " b" + std::to_string(c.batch) + " d" + std::to_string(c.d) +
               " n" + std::to_string(c.n) + " g" + std::to_string(c.groups) + " on " + to_string(dev));
  StepInputs s(c, dev, 2);  // padded output rows
  s.step();
  synchronize(dev);
  s.reference_steps(1);
  s.check();
}

std::vector<StepCase> step_cases() {
  std::vector<StepCase> all;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (std::int64_t n : {1, 16, 64, 256}) {
      StepCase c; c.dtype = t; c.n = n; c.groups = n == 16 ? 4 : 1;
      all.push_back(c);
    }
  StepCase c; c.batch = 5; c.d = 37; c.n = 13; c.has_D = c.has_z = c.has_bias = c.softplus = false;
  all.push_back(c);
  c.batch = 64; c.d = 256; c.n = 16; c.groups = 8; c.has_z = true;
  all.push_back(c);
  // A decoding batch of serving size: 83968 rows (1312 CUDA blocks), groups of 512 channels.
  c.batch = 41; c.d = 2048; c.groups = 4; c.has_D = c.has_bias = c.softplus = true;
  all.push_back(c);
  // More batch rows than a CUDA grid's y dimension holds (65535).
  c.batch = 70001; c.d = 3; c.n = 4; c.groups = 1;
  all.push_back(c);
  // State rows of 20 and 24: a last round with fewer packs than a lane holds (CUDA: 1 or 2 lanes
  // a row hold 4 or 2 packs of 4 states).
  c.batch = 3; c.d = 40; c.groups = 2;
  for (std::int64_t n : {20, 24}) {
    c.n = n;
    all.push_back(c);
  }
  return all;
}

TEST(SelectiveScanCpu, StateUpdateMatchesReference) {
  for (const StepCase& c : step_cases()) run_step(c, Device::cpu());
}

TEST(SelectiveScanCuda, StateUpdateMatchesReference) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable CUDA device";
  for (const StepCase& c : step_cases()) run_step(c, Device::cuda(0));
}

// The decoding step with 1 or 4 lanes a (batch, channel) row instead of 2 (SIXFOLD_SSCAN_DECODE;
// each lane then holds 4 or 1 packs of 4 states instead of 2).
TEST(SelectiveScanCuda, StateUpdateLaneVariantsMatchReference) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable CUDA device";
  for (const char* v : {"1", "4"}) {
    SCOPED_TRACE(std::string("SIXFOLD_SSCAN_DECODE=") + v);
    ScopedEnv env("SIXFOLD_SSCAN_DECODE", v);
    for (const StepCase& c : step_cases()) run_step(c, Device::cuda(0));
  }
}

// Decoding steps back to back on one stream, each reading the state the step before wrote: the
// step is launched as a programmatic dependent, so its wait must hold every load until the step
// before has finished. Six steps on a stream, then three captured in a CUDA graph and replayed
// twice; the state and the last output against as many float64 steps. 64 blocks (one wave: a
// step's blocks start while the step before is still writing) and 768 (two waves).
#ifdef SIXFOLD_WITH_CUDA
void run_chained_steps(std::int64_t batch) {
  SCOPED_TRACE("batch " + std::to_string(batch));
  StepCase c;
  c.batch = batch, c.d = 1024, c.n = 16, c.groups = 4;
  StepInputs st(c, Device::cuda(0), 0);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  for (int k = 0; k < 6; ++k) st.step(Stream{s});
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  st.reference_steps(6);
  {
    SCOPED_TRACE("six steps on a stream");
    st.check();
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  for (int k = 0; k < 3; ++k) st.step(Stream{s});
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int rep = 0; rep < 2; ++rep) ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  st.reference_steps(6);
  {
    SCOPED_TRACE("three steps in a graph, replayed twice");
    st.check();
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}
#endif

TEST(SelectiveScanCuda, StateUpdateStepsChainedMatchReference) {
#ifdef SIXFOLD_WITH_CUDA
  if (!gpu_usable()) GTEST_SKIP() << "no usable CUDA device";
  run_chained_steps(8);   // 8192 rows, 2 lanes a row: 64 blocks of 256
  run_chained_steps(96);  // 768 blocks
#else
  GTEST_SKIP() << "a build without the CUDA backend";
#endif
}

// Running a sequence in two halves, passing the final state on, equals running it whole.
TEST(SelectiveScanCpu, ChunkedEqualsWhole) {
  const std::int64_t d = 3, n = 16, L = 1000, h = 613;
  auto u = draw(std::size_t(d * L), -2, 2), dl = draw(std::size_t(d * L), 0, 0.5);
  auto A = draw(std::size_t(d * n), -2, -0.1), B = draw(std::size_t(n * L), -1, 1), C = draw(std::size_t(n * L), -1, 1);
  std::vector<float> uf(u.begin(), u.end()), df(dl.begin(), dl.end()), Af(A.begin(), A.end()),
      Bf(B.begin(), B.end()), Cf(C.begin(), C.end()), whole(std::size_t(d * L)), parts(std::size_t(d * L)),
      st(std::size_t(d * n)), st2(std::size_t(d * n));
  auto view = [](std::vector<float>& v, Shape s) { return TensorView::contiguous(v.data(), DType::f32, s); };
  auto sub = [&](std::vector<float>& v, std::int64_t rows, std::int64_t t0, std::int64_t len) {
    TensorView t = TensorView::contiguous(v.data() + t0, DType::f32, {1, rows, len});
    t.strides[0] = rows * L; t.strides[1] = L;
    return t;
  };
  auto bc = [&](std::vector<float>& v, std::int64_t t0, std::int64_t len) {
    TensorView t = TensorView::contiguous(v.data() + t0, DType::f32, {1, 1, n, len});
    t.strides[0] = n * L; t.strides[1] = n * L; t.strides[2] = L;
    return t;
  };
  SelectiveScanTensors in = tensors(view(uf, {1, d, L}), view(df, {1, d, L}), view(Af, {d, n}), bc(Bf, 0, L), bc(Cf, 0, L));
  selective_scan(in, view(whole, {1, d, L}));
  SelectiveScanTensors first = tensors(sub(uf, d, 0, h), sub(df, d, 0, h), view(Af, {d, n}), bc(Bf, 0, h), bc(Cf, 0, h));
  selective_scan(first, sub(parts, d, 0, h), view(st, {1, d, n}));
  SelectiveScanTensors second = tensors(sub(uf, d, h, L - h), sub(df, d, h, L - h), view(Af, {d, n}), bc(Bf, h, L - h), bc(Cf, h, L - h));
  second.initial_state = view(st, {1, d, n});
  selective_scan(second, sub(parts, d, h, L - h), view(st2, {1, d, n}));
  for (std::size_t i = 0; i < whole.size(); ++i)
    ASSERT_NEAR(parts[i], whole[i], 1e-4 * (1 + std::fabs(whole[i]))) << i;
}

// ---- bad input: clear errors, nothing written --------------------------------------------

TEST(SelectiveScanCpu, RejectsBadInput) {
  const std::int64_t b = 2, d = 8, n = 4, L = 10;
  std::vector<float> u(std::size_t(b * d * L), 1.f), dl(u), z(u), A(std::size_t(d * n), -1.f),
      B(std::size_t(b * 2 * n * L), 0.5f), C(B), Bf(std::size_t(d * n), 1.f), out(u.size(), NAN),
      big(std::size_t(d * 300), -1.f), st(std::size_t(b * d * n), NAN);
  std::vector<std::int32_t> cu{0, 4, 3};
  auto v = [](auto& x, Shape s, DType t = DType::f32) { return TensorView::contiguous(x.data(), t, s); };
  const TensorView tu = v(u, {b, d, L});
  auto base = [&] {
    return tensors(tu, v(dl, {b, d, L}), v(A, {d, n}), v(B, {b, 2, n, L}), v(C, {b, 2, n, L}));
  };
  auto run = [&](SelectiveScanTensors in, const std::string& frag, TensorView o = {}, TensorView fs = {}) {
    if (o.data == nullptr) o = v(out, {b, d, L});
    expect_error([&] { selective_scan(in, o, fs); }, frag);
    for (float x : out) ASSERT_TRUE(std::isnan(x)) << "out written on error: " << frag;
    for (float x : st) ASSERT_TRUE(std::isnan(x)) << "final_state written on error: " << frag;
  };
  { auto in = base(); in.A = v(A, {d - 1, n}); run(in, "argument 'A'"); }
  { auto in = base(); in.A = v(big, {d, 300}); run(in, "d_state n in 1..256"); }
  { auto in = base(); in.B = v(B, {b, 3, n, L}); run(in, "argument 'B'"); }          // 3 groups, d = 8
  { auto in = base(); in.C = v(C, {b, 1, n, 2 * L}); run(in, "argument 'C'"); }      // length mismatch
  { auto in = base(); in.delta = v(dl, {b, d, L - 1}); run(in, "argument 'delta'"); }
  { auto in = base(); in.z = v(z, {b, d, L}, DType::bf16); run(in, "argument 'z'"); }
  { auto in = base(); in.B = v(Bf, {d, n + 1}); run(in, "argument 'B'"); }
  { auto in = base(); in.D = v(Bf, {d + 1}); run(in, "argument 'D'"); }
  { auto in = base(); in.initial_state = v(Bf, {1, d, n}); run(in, "argument 'initial_state'"); }
  { auto in = base(); run(in, "argument 'final_state'", {}, v(st, {b, d, n + 1})); }
  {
    auto in = base();
    TensorView o = v(out, {b, d, L});
    o.strides[1] = 3;  // rows overlap
    run(in, "argument 'out'", o);
  }
  {
    auto in = base();
    TensorView o = v(out, {b, d, L});
    o.data = u.data() + 1;  // partly overlaps u
    expect_error([&] { selective_scan(in, o); }, "argument 'out'");
  }
  {
    SelectiveScanTensors in = tensors(v(u, {d, b * L}), v(dl, {d, b * L}), v(A, {d, n}), v(Bf, {d, n}), v(Bf, {d, n}));
    expect_error([&] { selective_scan_varlen(in, v(cu, {3}, DType::i32), v(out, {d, b * L})); }, "argument 'cu_seqlens'");
    for (float x : out) ASSERT_TRUE(std::isnan(x));
  }
  {  // state update: groups not dividing d
    std::vector<float> x(std::size_t(b * d), 1.f), bb(std::size_t(b * 3 * n), 1.f), o(std::size_t(b * d), NAN);
    StateUpdateTensors in;
    in.x = v(x, {b, d}); in.dt = v(x, {b, d}); in.A = v(A, {d, n}); in.B = v(bb, {b, 3, n}); in.C = v(bb, {b, 3, n});
    expect_error([&] { selective_state_update(v(st, {b, d, n}), in, v(o, {b, d})); }, "argument 'B'");
    for (float e : o) ASSERT_TRUE(std::isnan(e));
    for (float e : st) ASSERT_TRUE(std::isnan(e));
  }
}

}  // namespace
