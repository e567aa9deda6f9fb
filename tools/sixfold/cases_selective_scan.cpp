// `sixfold bench selective_scan`: Mamba's selective scan (f32; input-dependent B and C with one
// group, D, z, delta_bias with softplus: the configuration of a Mamba block) on the shapes of
// the issue, and one decoding step (selective_state_update), on the CPU and, where usable, the
// GPU. Rows: the float64 sequential loop (the naive reference, on the smallest shape and the
// decoding step only: it takes seconds per call), on the CPU the single-threaded scalar f32
// sequential loop (std::exp, one state after another, as mamba-ssm's reference loop), and
// sixfold. PyTorch (step loop, associative_scan under torch.compile) is timed beside sixfold by
// bench/torch_selective_scan.py.
//
// Cost model: min bytes = u, Δ, z, B, C, A, D, bias read once and out written once (the decoding
// step also reads and writes its state); exps = n per (batch, d, t) element; flops = 6 per
// (element, state). The error is max|out − ref| / max|ref| over 32 sampled (batch, channel)
// rows against the float64 loop (the whole tensor for the decoding step).
#include <cmath>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <vector>

#include "../../src/reference/selective_scan_reference.hpp"
#include "bench.hpp"
#include "sixfold/ops/selective_scan.hpp"
#include "sixfold/runtime/tensor.hpp"

namespace sixfold::bench {
namespace {

struct ScanShape {
  std::int64_t batch, len, d, n;
  const char* label;
  bool naive;  // time the float64 loop on the whole shape
};

const ScanShape kShapes[] = {{1, 2048, 4096, 16, "b1 L2048 d4096 n16", true},
                             {8, 4096, 2048, 16, "b8 L4096 d2048 n16", false},
                             {4, 8192, 1536, 64, "b4 L8192 d1536 n64", false}};
const ScanShape kVerify[] = {{2, 2049, 37, 16, "b2 L2049 d37 n16", true},
                             {1, 4097, 9, 64, "b1 L4097 d9 n64", true},
                             {3, 129, 41, 256, "b3 L129 d41 n256", true}};
constexpr std::int64_t kDecodeBatch = 128, kDecodeD = 4096, kDecodeN = 16;

// Fast uniform fill (splitmix64): inputs of a gigabyte are drawn in about a second.
struct Rng {
  std::uint64_t s;
  double next(double lo, double hi) {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return lo + (hi - lo) * double(z >> 11) * 0x1.0p-53;
  }
};

std::vector<float> draw(Rng& r, std::int64_t count, double lo, double hi) {
  std::vector<float> v(static_cast<std::size_t>(count));
  for (auto& x : v) x = float(r.next(lo, hi));
  return v;
}

std::vector<double> up(const float* p, std::int64_t count) { return std::vector<double>(p, p + count); }

// Host inputs of one scan shape and where sixfold reads them (the device copy, or these).
struct ScanData {
  ScanShape sh;
  Device dev;
  std::vector<float> u, dt, z, B, C, A, D, bias;
  std::vector<std::shared_ptr<void>> keep;  // device buffers
  void *du = nullptr, *ddt = nullptr, *dz = nullptr, *dB = nullptr, *dC = nullptr, *dA = nullptr,
       *dD = nullptr, *dbias = nullptr, *dout = nullptr;
  std::vector<std::int64_t> rows;           // sampled (b·d + c)
  std::vector<double> ref;                  // (rows, len)

  void* place(std::vector<float>& v) {
    if (dev.kind == DeviceKind::cpu) return v.data();
    keep.push_back(allocate(dev, std::int64_t(v.size()) * 4));
    copy_bytes(keep.back().get(), dev, v.data(), Device::cpu(), std::int64_t(v.size()) * 4);
    return keep.back().get();
  }
  SelectiveScanTensors tensors() const {
    const std::int64_t b = sh.batch, d = sh.d, L = sh.len, n = sh.n;
    auto v = [&](void* p, Shape s) { return TensorView::contiguous(p, DType::f32, s, dev); };
    SelectiveScanTensors in;
    in.u = v(du, {b, d, L});
    in.delta = v(ddt, {b, d, L});
    in.A = v(dA, {d, n});
    in.B = v(dB, {b, 1, n, L});
    in.C = v(dC, {b, 1, n, L});
    in.D = v(dD, {d});
    in.z = v(dz, {b, d, L});
    in.delta_bias = v(dbias, {d});
    return in;
  }
  TensorView out_view() const {
    return TensorView::contiguous(dout, DType::f32, {sh.batch, sh.d, sh.len}, dev);
  }
  // The float64 problem of one (batch, channel) row, or of everything (row < 0).
  reference::SelectiveScanProblem problem(std::int64_t row) const {
    const std::int64_t L = sh.len, n = sh.n;
    reference::SelectiveScanProblem p;
    p.n = n; p.len = L; p.softplus = true;
    if (row < 0) {
      p.batch = sh.batch; p.d = sh.d;
      p.u = up(u.data(), std::int64_t(u.size())); p.delta = up(dt.data(), std::int64_t(dt.size()));
      p.z = up(z.data(), std::int64_t(z.size()));
      p.A = up(A.data(), std::int64_t(A.size())); p.B = up(B.data(), std::int64_t(B.size()));
      p.C = up(C.data(), std::int64_t(C.size()));
      p.D = up(D.data(), sh.d); p.bias = up(bias.data(), sh.d);
      return p;
    }
    const std::int64_t b = row / sh.d, c = row % sh.d;
    p.u = up(u.data() + row * L, L); p.delta = up(dt.data() + row * L, L); p.z = up(z.data() + row * L, L);
    p.A = up(A.data() + c * n, n);
    p.B = up(B.data() + b * n * L, n * L); p.C = up(C.data() + b * n * L, n * L);
    p.D = {double(D[std::size_t(c)])}; p.bias = {double(bias[std::size_t(c)])};
    return p;
  }
  double error_of(const float* out) const {  // over the sampled rows
    double num = 0, den = 0;
    for (std::size_t i = 0; i < rows.size(); ++i)
      for (std::int64_t t = 0; t < sh.len; ++t) {
        const double r = ref[i * std::size_t(sh.len) + std::size_t(t)];
        const double o = out[std::size_t(rows[i] * sh.len + t)];
        if (std::isnan(o)) return INFINITY;
        num = std::max(num, std::fabs(o - r));
        den = std::max(den, std::fabs(r));
      }
    return den > 0 ? num / den : num;
  }
};

// Mamba's scalar loop in f32 on one thread: per step, one state after another, std::exp.
void scalar_loop(const ScanData& s, float* out) {
  const std::int64_t L = s.sh.len, n = s.sh.n;
  std::vector<float> h(static_cast<std::size_t>(n));
  for (std::int64_t b = 0; b < s.sh.batch; ++b)
    for (std::int64_t c = 0; c < s.sh.d; ++c) {
      const std::int64_t row = (b * s.sh.d + c) * L;
      const float* Bb = s.B.data() + b * n * L;
      const float* Cb = s.C.data() + b * n * L;
      std::fill(h.begin(), h.end(), 0.0f);
      for (std::int64_t t = 0; t < L; ++t) {
        float dt = s.dt[std::size_t(row + t)] + s.bias[std::size_t(c)];
        dt = dt <= 20.0f ? std::log1p(std::exp(dt)) : dt;
        const float u = s.u[std::size_t(row + t)];
        float y = 0.0f;
        for (std::int64_t k = 0; k < n; ++k) {
          h[std::size_t(k)] = std::exp(dt * s.A[std::size_t(c * n + k)]) * h[std::size_t(k)] + dt * Bb[k * L + t] * u;
          y += h[std::size_t(k)] * Cb[k * L + t];
        }
        y += s.D[std::size_t(c)] * u;
        const float z = s.z[std::size_t(row + t)];
        out[row + t] = y * z / (1.0f + std::exp(-z));
      }
    }
}

std::unique_ptr<Case> make_scan_case(const ScanShape& sh, Backend backend) {
  const Device dev = backend == Backend::cuda ? Device::cuda(0) : Device::cpu();
  const std::int64_t rows = sh.batch * sh.d, numel = rows * sh.len, bc = sh.batch * sh.n * sh.len;
  auto c = std::make_unique<Case>();
  c->op = "selective_scan";
  c->workload = std::string("f32 ") + sh.label;
  c->backend = backend;
  c->cost.min_bytes = 4.0 * (4.0 * double(numel) + 2.0 * double(bc) + double(sh.d * sh.n) + 2.0 * double(sh.d));
  c->cost.exps = double(numel) * double(sh.n);
  c->cost.flops = 6.0 * double(numel) * double(sh.n);
  c->tolerance = 1e-4;
  c->property = "associativity (Affine maps scanned across time segments) + locality (one fused pass)";
  c->slots = 1;  // every shape's inputs are over twice the GPU's L2 and the CPU's LLC
  auto s = std::make_shared<ScanData>();
  s->sh = sh;
  s->dev = dev;
  Rng rng{std::uint64_t(std::random_device{}()) << 1 | 1};
  s->u = draw(rng, numel, -2, 2);
  s->dt = draw(rng, numel, -5, 0);      // softplus: Δ in (0.007, 0.69)
  s->z = draw(rng, numel, -3, 3);
  s->B = draw(rng, bc, -1, 1);
  s->C = draw(rng, bc, -1, 1);
  s->A = draw(rng, sh.d * sh.n, -8, -0.5);
  s->D = draw(rng, sh.d, -1, 1);
  s->bias = draw(rng, sh.d, -1, 1);
  s->du = s->place(s->u); s->ddt = s->place(s->dt); s->dz = s->place(s->z);
  s->dB = s->place(s->B); s->dC = s->place(s->C); s->dA = s->place(s->A);
  s->dD = s->place(s->D); s->dbias = s->place(s->bias);
  auto host_out = std::make_shared<std::vector<float>>(static_cast<std::size_t>(numel));
  if (dev.kind == DeviceKind::cpu) {
    s->dout = host_out->data();
  } else {
    s->keep.push_back(allocate(dev, numel * 4));
    s->dout = s->keep.back().get();
  }
  for (int i = 0; i < 32 && i < rows; ++i) s->rows.push_back((std::int64_t(i) * 7919 + 13) % rows);
  for (std::int64_t r : s->rows) {
    const auto res = reference::selective_scan(s->problem(r));
    s->ref.insert(s->ref.end(), res.out.begin(), res.out.end());
  }
  c->poison = [s, numel] {
    std::vector<float> nan(static_cast<std::size_t>(numel), NAN);
    copy_bytes(s->dout, s->dev, nan.data(), Device::cpu(), numel * 4);
  };
  c->sync = [dev] { synchronize(dev); };
  if (sh.naive) {
    auto naive_out = std::make_shared<std::vector<float>>();
    auto whole = std::make_shared<reference::SelectiveScanProblem>(s->problem(-1));
    c->impls.push_back({"float64 sequential loop", ImplKind::naive, backend == Backend::cuda,
                        [whole, naive_out](int) {
                          const auto r = reference::selective_scan(*whole);
                          naive_out->assign(r.out.begin(), r.out.end());
                        },
                        [s, naive_out] { return s->error_of(naive_out->data()); }, 1});
  }
  if (backend == Backend::cpu && sh.naive) {
    auto scalar_out = std::make_shared<std::vector<float>>(static_cast<std::size_t>(numel));
    c->impls.push_back({"scalar f32 loop, 1 thread", ImplKind::peer, false,
                        [s, scalar_out](int) { scalar_loop(*s, scalar_out->data()); },
                        [s, scalar_out] { return s->error_of(scalar_out->data()); }, 2});
  }
  c->impls.push_back({"sixfold::selective_scan", ImplKind::sixfold, false,
                      [s](int) { selective_scan(s->tensors(), s->out_view(), {}, {true}); },
                      [s, host_out, numel] {
                        if (s->dev.kind == DeviceKind::cuda)
                          copy_bytes(host_out->data(), Device::cpu(), s->dout, s->dev, numel * 4);
                        return s->error_of(host_out->data());
                      },
                      backend == Backend::cpu ? 5 : 0});
  return c;
}

// ---- one decoding step ------------------------------------------------------------------------
struct StepData {
  Device dev;
  std::int64_t batch = kDecodeBatch, d = kDecodeD, n = kDecodeN;
  std::vector<float> x, dt, z, B, C, A, D, bias, state0;
  std::shared_ptr<void> x_d, dt_d, z_d, B_d, C_d, A_d, D_d, bias_d, out_d;
  std::vector<std::shared_ptr<void>> state_d;  // one state per slot: together > 2x the LLC
  std::vector<double> ref_out;
};

std::unique_ptr<Case> make_step_case(Backend backend) {
  const Device dev = backend == Backend::cuda ? Device::cuda(0) : Device::cpu();
  auto s = std::make_shared<StepData>();
  s->dev = dev;
  const std::int64_t rows = s->batch * s->d, sn = rows * s->n, bc = s->batch * s->n;
  auto c = std::make_unique<Case>();
  c->op = "selective_scan";
  c->workload = "decode step f32 b128 d4096 n16";
  c->backend = backend;
  c->cost.min_bytes = 4.0 * (2.0 * double(sn) + 4.0 * double(rows) + 2.0 * double(bc) + double(s->d * s->n) + 2.0 * double(s->d));
  c->cost.exps = double(sn);
  c->cost.flops = 6.0 * double(sn);
  c->tolerance = 1e-4;
  c->property = "redundancy (the cached state replaces the prefix) + locality (state read and written once)";
  c->slots = rotating_slots(backend, 4.0 * double(sn));
  Rng rng{std::uint64_t(std::random_device{}()) << 1 | 1};
  s->x = draw(rng, rows, -2, 2); s->dt = draw(rng, rows, -5, 0); s->z = draw(rng, rows, -3, 3);
  s->B = draw(rng, bc, -1, 1); s->C = draw(rng, bc, -1, 1); s->A = draw(rng, s->d * s->n, -8, -0.5);
  s->D = draw(rng, s->d, -1, 1); s->bias = draw(rng, s->d, -1, 1); s->state0 = draw(rng, sn, -1, 1);
  auto put = [&](const std::vector<float>& v) {
    auto p = allocate(dev, std::int64_t(v.size()) * 4);
    copy_bytes(p.get(), dev, v.data(), Device::cpu(), std::int64_t(v.size()) * 4);
    return p;
  };
  s->x_d = put(s->x); s->dt_d = put(s->dt); s->z_d = put(s->z); s->B_d = put(s->B); s->C_d = put(s->C);
  s->A_d = put(s->A); s->D_d = put(s->D); s->bias_d = put(s->bias);
  for (int k = 0; k < c->slots; ++k) s->state_d.push_back(put(s->state0));
  s->out_d = allocate(dev, rows * 4);
  auto st = std::make_shared<std::vector<double>>(s->state0.begin(), s->state0.end());
  auto d64 = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  auto args = std::make_shared<std::vector<std::vector<double>>>(std::vector<std::vector<double>>{
      d64(s->x), d64(s->dt), d64(s->A), d64(s->B), d64(s->C), d64(s->D), d64(s->z), d64(s->bias)});
  {
    auto st0 = *st;
    const auto& g = *args;
    s->ref_out = reference::selective_state_update(st0, s->batch, s->d, s->n, 1, g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], true);
  }
  auto err = [s](const float* out) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < s->ref_out.size(); ++i) {
      if (std::isnan(out[i])) return double(INFINITY);
      num = std::max(num, std::fabs(out[i] - s->ref_out[i]));
      den = std::max(den, std::fabs(s->ref_out[i]));
    }
    return den > 0 ? num / den : num;
  };
  c->poison = [s, rows, sn] {  // NaN out, and every slot's state back to its initial values
    std::vector<float> nan(static_cast<std::size_t>(rows), NAN);
    copy_bytes(s->out_d.get(), s->dev, nan.data(), Device::cpu(), rows * 4);
    for (const auto& st : s->state_d) copy_bytes(st.get(), s->dev, s->state0.data(), Device::cpu(), sn * 4);
  };
  c->sync = [dev] { synchronize(dev); };
  auto naive_out = std::make_shared<std::vector<float>>();
  c->impls.push_back({"float64 sequential loop", ImplKind::naive, backend == Backend::cuda,
                      [s, st, args, naive_out](int) {  // its own state, evolving from state0
                        const auto& g = *args;
                        const auto o = reference::selective_state_update(*st, s->batch, s->d, s->n, 1, g[0], g[1], g[2],
                                                                         g[3], g[4], g[5], g[6], g[7], true);
                        naive_out->assign(o.begin(), o.end());
                      },
                      [naive_out, err] { return err(naive_out->data()); }, 3});
  auto tensors = [s] {
    auto v = [&](const std::shared_ptr<void>& p, Shape sh) { return TensorView::contiguous(p.get(), DType::f32, sh, s->dev); };
    StateUpdateTensors in;
    in.x = v(s->x_d, {s->batch, s->d}); in.dt = v(s->dt_d, {s->batch, s->d}); in.z = v(s->z_d, {s->batch, s->d});
    in.A = v(s->A_d, {s->d, s->n}); in.B = v(s->B_d, {s->batch, 1, s->n}); in.C = v(s->C_d, {s->batch, 1, s->n});
    in.D = v(s->D_d, {s->d}); in.dt_bias = v(s->bias_d, {s->d});
    return in;
  };
  auto call = [s, tensors](int slot, Stream stream) {
    selective_state_update(TensorView::contiguous(s->state_d[std::size_t(slot)].get(), DType::f32, {s->batch, s->d, s->n}, s->dev),
                           tensors(), TensorView::contiguous(s->out_d.get(), DType::f32, {s->batch, s->d}, s->dev),
                           {true}, stream);
  };
  auto check = [s, err] {
    std::vector<float> h(static_cast<std::size_t>(s->batch * s->d));
    copy_bytes(h.data(), Device::cpu(), s->out_d.get(), s->dev, std::int64_t(h.size()) * 4);
    return err(h.data());
  };
  c->impls.push_back({"sixfold::selective_state_update", ImplKind::sixfold, false,
                      [call](int slot) { call(slot, Stream{}); }, check});
  if (backend == Backend::cuda) {
    // Decoding runs inside CUDA graphs in serving stacks; one replay steps every slot's state
    // once (each from its initial state after the poison, so the checked out is step one's).
    c->impls.push_back(graph_replay_impl(
        "sixfold::selective_state_update, CUDA graph replay", [call](Stream st, int i) { call(i, st); },
        c->slots, check));
  }
  return c;
}

}  // namespace

void register_selective_scan_cases() {
  // Dev filter: SIXFOLD_SSCAN_CASES lists the rows to register, by index into the scan shapes
  // (0, 1, 2) and `decode` (default: all), e.g. SIXFOLD_SSCAN_CASES=decode for A/B runs.
  const auto wanted = [](const std::string& key) { return env_lists("SIXFOLD_SSCAN_CASES", key); };
  for (Backend backend : {Backend::cpu, Backend::cuda}) {
    if (backend == Backend::cuda && !cuda_available()) continue;
    for (std::size_t i = 0; i < std::size(kShapes); ++i) {
      if (!wanted(std::to_string(i))) continue;
      const ScanShape sh = kShapes[i], small = kVerify[i];
      // `bench` builds the shape; `verify` (size 1) a small awkward one with the same n.
      registry().push_back({"selective_scan", std::string("f32 ") + sh.label, backend,
                            [=](std::int64_t size) { return make_scan_case(size == 1 ? small : sh, backend); },
                            {{sh.batch * sh.d * sh.len, sh.label}}, {1}});
    }
    if (wanted("decode"))
      registry().push_back({"selective_scan", "decode step f32 b128 d4096 n16", backend,
                            [=](std::int64_t) { return make_step_case(backend); },
                            {{kDecodeBatch * kDecodeD, "b128 d4096"}}, {1}});
  }
}

}  // namespace sixfold::bench
