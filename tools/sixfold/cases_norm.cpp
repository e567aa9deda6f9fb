// `sixfold bench norm`: fused RMSNorm, LayerNorm and softmax, the fused residual add + norm, the
// fused activations (bias + GELU erf / tanh, SiLU-gate) and the backward passes, on the shapes of
// the norm issue, bf16, against the unfused float64 reference loops (the naive row), on the CPU
// and, where usable, on the GPU (PyTorch's kernels are timed beside these by bench/torch_norm.py
// and bench/torch_activation.py). SIXFOLD_NORM_CASES=forward,add,activation,backward (any
// subset; default all) picks the families that are registered, SIXFOLD_NORM_SHAPES (e.g.
// 4096x4096,65536x1024; default all) the shapes, SIXFOLD_NORM_OPS the workloads by name
// (rms_norm, layer_norm_backward, add_rms_norm, bias_gelu, bias_gelu_tanh, silu_gate, ...;
// default all); SIXFOLD_NORM_SKIP_NAIVE=1 leaves out the float64 naive rows (sixfold's outputs
// are still checked against the float64 reference). The rms / layer backward rows take the
// forward's saved row statistics (mean / rstd, as torch's backward does); a second row,
// "(recompute stats)", times the path that recomputes them from x. On the GPU each case also has
// a "CUDA graph replay" row (per call, the host's launch work hidden; see add_graph_row).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "../../src/reference/activation_reference.hpp"
#include "../../src/reference/norm_reference.hpp"
#include "bench.hpp"
#include "sixfold/ops/activation.hpp"
#include "sixfold/ops/norm.hpp"
#include "sixfold/runtime/tensor.hpp"

namespace sixfold::bench {
namespace {

struct Shape2 {
  std::int64_t rows, n;
  const char* label;
};

const Shape2 kShapes[] = {{16384, 8192, "16384x8192"}, {4096, 4096, "4096x4096"},
                          {65536, 1024, "65536x1024"}, {256, 262144, "256x262144"},
                          {32, 1048576, "32x1048576"}};

const char* kind_name(NormKind k) {
  switch (k) {
    case NormKind::rms: return "rms_norm";
    case NormKind::layer: return "layer_norm";
    case NormKind::softmax: return "softmax";
    case NormKind::log_softmax: return "log_softmax";
  }
  return "?";
}

// One buffer of `bytes` per rotating slot. Outputs rotate with the inputs: a single output
// buffer, rewritten by every call, can stay in L2 between calls (4096x4096 bf16 on an H200: 32 MB
// of output, 64 MB of inputs in two slots), and then its writes need not reach DRAM.
std::vector<std::shared_ptr<void>> slot_buffers(Device dev, int slots, std::int64_t bytes) {
  std::vector<std::shared_ptr<void>> v;
  for (int s = 0; s < slots; ++s) v.push_back(allocate(dev, bytes));
  return v;
}

void poison_bf16(const std::shared_ptr<void>& p, Device dev, std::int64_t numel) {
  std::vector<std::uint16_t> nan(static_cast<std::size_t>(numel), 0x7fc0);
  copy_bytes(p.get(), dev, nan.data(), Device::cpu(), numel * 2);
}

// The same calls replayed from a CUDA graph (BENCH.md: graph replays for tiny ops): the GPU's
// time per call without the host's submission of each launch, which an idle GPU waits for when
// every call is timed alone (4096x4096 is a 15-25 us problem; an empty kernel costs ~5 us per
// call). At least 4 calls, on the slots in reverse order so that the last (checked) call is
// slot 0's, whose inputs the reference used.
template <class Call, class Check>
void add_graph_row(Case& c, Backend backend, const std::string& name, Call call, Check check) {
  if (backend != Backend::cuda) return;
  const int slots = c.slots, calls = std::max(4, slots);
  c.impls.push_back(graph_replay_impl(
      name + ", CUDA graph replay",
      [call, slots, calls](Stream st, int i) { call((calls - 1 - i) % slots, st); }, calls, check));
}

// bf16 rows, weight (and bias for LayerNorm) of ones-ish values; bytes = read x + write out.
std::unique_ptr<Case> make_norm_case(NormKind kind, Shape2 sh, Backend backend) {
  const Device dev = backend == Backend::cuda ? Device::cuda(0) : Device::cpu();
  const std::int64_t numel = sh.rows * sh.n;
  auto c = std::make_unique<Case>();
  c->op = "norm";
  c->workload = std::string(kind_name(kind)) + " bf16 " + sh.label;
  c->backend = backend;
  c->cost = {double(numel) * (kind == NormKind::softmax ? 4 : 5), double(numel) * 4, 0};
  if (kind == NormKind::softmax) c->cost.exps = double(numel);
  c->tolerance = 1.6e-2;
  c->property = kind == NormKind::layer
                    ? "locality (one read, one write) + Sum/Welford monoids for the row statistics"
                    : "locality (one read, one write) + associativity of the row statistics";
  c->slots = rotating_slots(backend, double(numel) * 4);
  // Inputs: random bf16 bits from N(0.5, 2), drawn per slot; the reference from slot 0's values.
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> nd(0.5f, 2.0f);
  auto host_x = std::make_shared<std::vector<std::uint16_t>>(std::size_t(numel));
  std::vector<std::shared_ptr<void>> xs;
  for (int s = 0; s < c->slots; ++s) {
    for (auto& v : *host_x) v = to_bfloat16(nd(rng)).bits;
    xs.push_back(allocate(dev, numel * 2));
    copy_bytes(xs.back().get(), dev, host_x->data(), Device::cpu(), numel * 2);
  }  // host_x now holds the last slot; redraw slot 0's values for the reference below
  copy_bytes(host_x->data(), Device::cpu(), xs[0].get(), dev, numel * 2);
  std::vector<std::uint16_t> hw(static_cast<std::size_t>(sh.n)), hb(static_cast<std::size_t>(sh.n));
  for (auto& v : hw) v = to_bfloat16(1.0f + 0.1f * nd(rng)).bits;
  for (auto& v : hb) v = to_bfloat16(0.1f * nd(rng)).bits;
  auto w = allocate(dev, sh.n * 2), b = allocate(dev, sh.n * 2);
  const auto outs = slot_buffers(dev, c->slots, numel * 2);
  const auto out = outs[0];  // slot 0's output: the checked one
  copy_bytes(w.get(), dev, hw.data(), Device::cpu(), sh.n * 2);
  copy_bytes(b.get(), dev, hb.data(), Device::cpu(), sh.n * 2);
  auto up = [](const std::vector<std::uint16_t>& v) {
    std::vector<double> d(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) d[i] = to_float(BFloat16{v[i]});
    return d;
  };
  auto xd = std::make_shared<std::vector<double>>(up(*host_x));
  auto wd = std::make_shared<std::vector<double>>(kind == NormKind::softmax ? std::vector<double>{} : up(hw));
  auto bd = std::make_shared<std::vector<double>>(kind == NormKind::layer ? up(hb) : std::vector<double>{});
  const float eps = 1e-5f;
  auto ref = std::make_shared<std::vector<double>>(reference::norm(kind, *xd, sh.rows, sh.n, *wd, *bd, eps));
  auto naive_out = std::make_shared<std::vector<double>>();
  c->poison = [out, dev, numel] { poison_bf16(out, dev, numel); };
  c->sync = [dev] { synchronize(dev); };
  if (!std::getenv("SIXFOLD_NORM_SKIP_NAIVE"))
  c->impls.push_back({"float64 loops (unfused)", ImplKind::naive, backend == Backend::cuda,
                      [=](int) { *naive_out = reference::norm(kind, *xd, sh.rows, sh.n, *wd, *bd, eps); },
                      [=] { return max_rel_error(ref->data(), naive_out->data(), numel); }, 2});
  auto view = [dev, sh](void* p) { return TensorView::contiguous(p, DType::bf16, {sh.rows, sh.n}, dev); };
  const TensorView tw = TensorView::contiguous(w.get(), DType::bf16, {sh.n}, dev);
  const TensorView tb = TensorView::contiguous(b.get(), DType::bf16, {sh.n}, dev);
  std::string name = std::string("sixfold::") + kind_name(kind);
  auto call = [=, keep = std::vector{w, b}](int s, Stream st) {  // keep: weight/bias outlive the views
    (void)keep;
    const TensorView x = view(xs[std::size_t(s)].get()), y = view(outs[std::size_t(s)].get());
    if (kind == NormKind::rms) rms_norm(x, tw, y, {eps}, st);
    else if (kind == NormKind::layer) layer_norm(x, tw, tb, y, {eps}, st);
    else softmax(x, y, st);
  };
  auto check = [=] {
    std::vector<std::uint16_t> h(static_cast<std::size_t>(numel));
    copy_bytes(h.data(), Device::cpu(), out.get(), dev, numel * 2);
    std::vector<double> d(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) d[i] = to_float(BFloat16{h[i]});
    return max_rel_error(ref->data(), d.data(), numel);
  };
  c->impls.push_back({name, ImplKind::sixfold, false, [call](int s) { call(s, Stream{}); }, check});
  add_graph_row(*c, backend, name, call, check);
  return c;
}

// ---- fused residual add + norm, backward ------------------------------------------------------

// Random bf16 bits (uniform in [lo, hi)) from a splitmix64 stream: cheap for 10^8 elements.
std::vector<std::uint16_t> random_bf16(std::size_t count, float lo, float hi, std::uint64_t seed) {
  std::vector<std::uint16_t> v(count);
  std::uint64_t z = seed;
  for (auto& e : v) {
    z += 0x9e3779b97f4a7c15ull;
    std::uint64_t q = z;
    q = (q ^ (q >> 30)) * 0xbf58476d1ce4e5b9ull;
    q = (q ^ (q >> 27)) * 0x94d049bb133111ebull;
    q ^= q >> 31;
    e = to_bfloat16(lo + (hi - lo) * float(q >> 40) * (1.0f / 16777216.0f)).bits;
  }
  return v;
}

std::vector<double> up(const std::vector<std::uint16_t>& v) {
  std::vector<double> d(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) d[i] = to_float(BFloat16{v[i]});
  return d;
}

std::shared_ptr<void> to_device(Device dev, const std::vector<std::uint16_t>& h) {
  auto p = allocate(dev, std::int64_t(h.size()) * 2);
  copy_bytes(p.get(), dev, h.data(), Device::cpu(), std::int64_t(h.size()) * 2);
  return p;
}

std::vector<double> fetch(Device dev, const std::shared_ptr<void>& p, std::int64_t numel) {
  std::vector<std::uint16_t> h(static_cast<std::size_t>(numel));
  copy_bytes(h.data(), Device::cpu(), p.get(), dev, numel * 2);
  return up(h);
}

std::uint64_t seed() { return std::random_device{}() * 0x100000001ull + std::random_device{}(); }

// add_rms_norm / add_layer_norm: reads x and residual, writes out and sum_out (8 bytes/element).
std::unique_ptr<Case> make_add_case(NormKind kind, Shape2 sh, Backend backend) {
  const Device dev = backend == Backend::cuda ? Device::cuda(0) : Device::cpu();
  const std::int64_t numel = sh.rows * sh.n;
  auto c = std::make_unique<Case>();
  c->op = "norm";
  c->workload = std::string("add_") + kind_name(kind) + " bf16 " + sh.label;
  c->backend = backend;
  c->cost = {double(numel) * 6, double(numel) * 8, 0};
  c->tolerance = 1.6e-2;
  c->property = "locality: the residual add fused into the norm's one read and one write";
  c->slots = rotating_slots(backend, double(numel) * 8);
  std::vector<std::shared_ptr<void>> xs, rs;
  std::vector<std::uint16_t> hx0, hr0;
  for (int s = 0; s < c->slots; ++s) {
    auto hx = random_bf16(std::size_t(numel), -3.0f, 4.0f, seed());
    auto hr = random_bf16(std::size_t(numel), -2.0f, 2.0f, seed());
    xs.push_back(to_device(dev, hx));
    rs.push_back(to_device(dev, hr));
    if (s == 0) hx0 = std::move(hx), hr0 = std::move(hr);
  }
  const auto hw = random_bf16(std::size_t(sh.n), 0.8f, 1.2f, seed());
  const auto hb = random_bf16(std::size_t(sh.n), -0.2f, 0.2f, seed());
  auto w = to_device(dev, hw), b = to_device(dev, hb);
  const auto outs = slot_buffers(dev, c->slots, numel * 2), sums = slot_buffers(dev, c->slots, numel * 2);
  const auto out = outs[0], sum = sums[0];  // slot 0's: the checked ones
  auto xd = std::make_shared<std::vector<double>>(up(hx0));
  auto rd = std::make_shared<std::vector<double>>(up(hr0));
  hx0.clear(), hr0.clear();
  auto wd = std::make_shared<std::vector<double>>(up(hw));
  auto bd = std::make_shared<std::vector<double>>(kind == NormKind::layer ? up(hb) : std::vector<double>{});
  const float eps = 1e-5f;
  // The unfused baseline: s = x + residual rounded to bf16, then the norm of s.
  auto naive = [=] {
    auto s = reference::add(*xd, *rd);
    for (auto& v : s) v = to_float(to_bfloat16(float(v)));
    return std::pair{reference::norm(kind, s, sh.rows, sh.n, *wd, *bd, eps), s};
  };
  auto ref = std::make_shared<std::pair<std::vector<double>, std::vector<double>>>(naive());
  auto naive_out = std::make_shared<std::pair<std::vector<double>, std::vector<double>>>();
  c->poison = [out, sum, dev, numel] {
    poison_bf16(out, dev, numel);
    poison_bf16(sum, dev, numel);
  };
  c->sync = [dev] { synchronize(dev); };
  if (!std::getenv("SIXFOLD_NORM_SKIP_NAIVE"))
  c->impls.push_back({"float64 loops (unfused)", ImplKind::naive, backend == Backend::cuda,
                      [=](int) { *naive_out = naive(); },
                      [=] {
                        return std::max(max_rel_error(ref->first.data(), naive_out->first.data(), numel),
                                        max_rel_error(ref->second.data(), naive_out->second.data(), numel));
                      }, 2});
  auto view = [dev, sh](void* p) { return TensorView::contiguous(p, DType::bf16, {sh.rows, sh.n}, dev); };
  const TensorView tw = TensorView::contiguous(w.get(), DType::bf16, {sh.n}, dev);
  const TensorView tb = TensorView::contiguous(b.get(), DType::bf16, {sh.n}, dev);
  auto call = [=, keep = std::vector{w, b}](int s, Stream st) {
    (void)keep;
    const TensorView x = view(xs[std::size_t(s)].get()), r = view(rs[std::size_t(s)].get());
    const TensorView y = view(outs[std::size_t(s)].get()), xr = view(sums[std::size_t(s)].get());
    if (kind == NormKind::rms) add_rms_norm(x, r, tw, y, xr, {eps}, st);
    else add_layer_norm(x, r, tw, tb, y, xr, {eps}, st);
  };
  auto check = [=] {
    return std::max(max_rel_error(ref->first.data(), fetch(dev, out, numel).data(), numel),
                    max_rel_error(ref->second.data(), fetch(dev, sum, numel).data(), numel));
  };
  const std::string name = std::string("sixfold::add_") + kind_name(kind);
  c->impls.push_back({name, ImplKind::sixfold, false, [call](int s) { call(s, Stream{}); }, check});
  add_graph_row(*c, backend, name, call, check);
  return c;
}

// bias + GELU (erf, tanh) and SiLU-gate: read x (and the n-element bias) or a and b, write y.
const char* activation_name(ActivationKind k) {
  switch (k) {
    case ActivationKind::gelu_erf: return "bias_gelu";
    case ActivationKind::gelu_tanh: return "bias_gelu_tanh";
    case ActivationKind::silu_gate: return "silu_gate";
  }
  return "?";
}

std::unique_ptr<Case> make_activation_case(ActivationKind kind, Shape2 sh, Backend backend) {
  const Device dev = backend == Backend::cuda ? Device::cuda(0) : Device::cpu();
  const std::int64_t numel = sh.rows * sh.n;
  const bool gate = kind == ActivationKind::silu_gate;
  auto c = std::make_unique<Case>();
  c->op = "norm";
  c->workload = std::string(activation_name(kind)) + " bf16 " + sh.label;
  c->backend = backend;
  // Operations an element as the kernels count them: the erf form's rational fit ~18, the tanh
  // form and SiLU ~7 with one exp each. The exps are not put on the roofline (cost.exps): the
  // kernels' exp is cheaper than the f32 exp whose rate is measured, so the floor is the bytes.
  c->cost = {double(numel) * (kind == ActivationKind::gelu_erf ? 18 : 7),
             double(numel) * (gate ? 6 : 4) + (gate ? 0.0 : double(sh.n) * 2), 0};
  c->tolerance = 1.6e-2;
  c->property = gate ? "locality: a and b read once, silu(a)·b written once"
                     : "locality: the bias add fused into the GELU's one read and one write";
  c->slots = rotating_slots(backend, double(numel) * (gate ? 6 : 4));
  std::vector<std::shared_ptr<void>> xs, gs;
  std::vector<std::uint16_t> hx0, hg0;
  for (int s = 0; s < c->slots; ++s) {
    auto hx = random_bf16(std::size_t(numel), -6.0f, 6.0f, seed());
    xs.push_back(to_device(dev, hx));
    if (gate) {
      auto hg = random_bf16(std::size_t(numel), -2.0f, 2.0f, seed());
      gs.push_back(to_device(dev, hg));
      if (s == 0) hg0 = std::move(hg);
    }
    if (s == 0) hx0 = std::move(hx);
  }
  const auto hb = random_bf16(std::size_t(sh.n), -0.5f, 0.5f, seed());
  auto b = to_device(dev, hb);
  const auto outs = slot_buffers(dev, c->slots, numel * 2);
  const auto out = outs[0];  // slot 0's: the checked one
  auto xd = std::make_shared<std::vector<double>>(up(hx0));
  auto gd = std::make_shared<std::vector<double>>(up(hg0));
  hx0.clear(), hg0.clear();
  auto bd = std::make_shared<std::vector<double>>(gate ? std::vector<double>{} : up(hb));
  auto naive = [=] { return reference::activation(kind, *xd, *gd, *bd, sh.rows, sh.n); };
  auto ref = std::make_shared<std::vector<double>>(naive());
  auto naive_out = std::make_shared<std::vector<double>>();
  c->poison = [out, dev, numel] { poison_bf16(out, dev, numel); };
  c->sync = [dev] { synchronize(dev); };
  if (!std::getenv("SIXFOLD_NORM_SKIP_NAIVE"))
    c->impls.push_back({"float64 loops (unfused)", ImplKind::naive, backend == Backend::cuda,
                        [=](int) { *naive_out = naive(); },
                        [=] { return max_rel_error(ref->data(), naive_out->data(), numel); }, 2});
  auto view = [dev, sh](void* p) { return TensorView::contiguous(p, DType::bf16, {sh.rows, sh.n}, dev); };
  const TensorView tb = TensorView::contiguous(b.get(), DType::bf16, {sh.n}, dev);
  auto call = [=, keep = b](int s, Stream st) {
    (void)keep;
    const TensorView x = view(xs[std::size_t(s)].get()), y = view(outs[std::size_t(s)].get());
    if (gate) silu_gate(x, view(gs[std::size_t(s)].get()), y, st);
    else bias_gelu(x, tb, y, {kind == ActivationKind::gelu_tanh ? GeluForm::tanh : GeluForm::erf}, st);
  };
  auto check = [=] { return max_rel_error(ref->data(), fetch(dev, out, numel).data(), numel); };
  const std::string name = std::string("sixfold::") + activation_name(kind);
  c->impls.push_back({name, ImplKind::sixfold, false, [call](int s) { call(s, Stream{}); }, check});
  add_graph_row(*c, backend, name, call, check);
  return c;
}

// Backward: reads x (softmax: y) and dy, writes dx (and dweight/dbias, n elements each); rms /
// layer also read the saved statistics (4 or 8 bytes per row, not counted in the floor).
std::unique_ptr<Case> make_backward_case(NormKind kind, Shape2 sh, Backend backend) {
  const Device dev = backend == Backend::cuda ? Device::cuda(0) : Device::cpu();
  const std::int64_t numel = sh.rows * sh.n;
  const bool norm = kind == NormKind::rms || kind == NormKind::layer;
  const int grads = kind == NormKind::layer ? 2 : (kind == NormKind::rms ? 1 : 0);
  auto c = std::make_unique<Case>();
  c->op = "norm";
  c->workload = std::string(kind_name(kind)) + "_backward bf16 " + sh.label;
  c->backend = backend;
  c->cost = {double(numel) * (kind == NormKind::layer ? 12 : (norm ? 9 : 4)),
             double(numel) * 6 + double(sh.n) * 2 * (norm ? 1 + grads : 0), 0};
  c->tolerance = 1.6e-2;
  c->property = norm ? "locality (x, dy read once, dx written once) + Sum monoids; dweight/dbias "
                       "per row group, summed in a fixed order (deterministic)"
                     : "locality (y, dy read once, dx written once) + the Sum monoid";
  c->slots = rotating_slots(backend, double(numel) * 6);
  std::vector<std::shared_ptr<void>> xs, ds;
  std::vector<std::uint16_t> hx0, hd0;
  const float xlo = norm ? -3.0f : 0.0f, xhi = norm ? 4.0f : 2.0f / float(sh.n);  // softmax: y-like
  for (int s = 0; s < c->slots; ++s) {
    auto hx = random_bf16(std::size_t(numel), xlo, xhi, seed());
    auto hd = random_bf16(std::size_t(numel), -1.0f, 1.0f, seed());
    xs.push_back(to_device(dev, hx));
    ds.push_back(to_device(dev, hd));
    if (s == 0) hx0 = std::move(hx), hd0 = std::move(hd);
  }
  const auto hw = random_bf16(std::size_t(sh.n), 0.8f, 1.2f, seed());
  auto w = to_device(dev, hw);
  const auto dxs = slot_buffers(dev, c->slots, numel * 2);
  const auto dx = dxs[0];  // slot 0's: the checked one
  auto dw = allocate(dev, sh.n * 2), db = allocate(dev, sh.n * 2);
  auto xd = std::make_shared<std::vector<double>>(up(hx0));
  auto dd = std::make_shared<std::vector<double>>(up(hd0));
  hx0.clear(), hd0.clear();
  auto wd = std::make_shared<std::vector<double>>(norm ? up(hw) : std::vector<double>{});
  const float eps = 1e-5f;
  auto ref = std::make_shared<reference::NormGrads>(
      reference::norm_backward(kind, *xd, *dd, sh.rows, sh.n, *wd, eps));
  auto naive_out = std::make_shared<reference::NormGrads>();
  c->poison = [dx, dw, db, dev, numel, n = sh.n] {
    std::vector<std::uint16_t> nan(static_cast<std::size_t>(numel), 0x7fc0);
    copy_bytes(dx.get(), dev, nan.data(), Device::cpu(), numel * 2);
    copy_bytes(dw.get(), dev, nan.data(), Device::cpu(), n * 2);
    copy_bytes(db.get(), dev, nan.data(), Device::cpu(), n * 2);
  };
  c->sync = [dev] { synchronize(dev); };
  auto err = [=](const std::vector<double>& gdx, const std::vector<double>& gdw,
                 const std::vector<double>& gdb) {
    double e = max_rel_error(ref->dx.data(), gdx.data(), numel);
    if (grads >= 1) e = std::max(e, max_rel_error(ref->dweight.data(), gdw.data(), sh.n));
    if (grads >= 2) e = std::max(e, max_rel_error(ref->dbias.data(), gdb.data(), sh.n));
    return e;
  };
  if (!std::getenv("SIXFOLD_NORM_SKIP_NAIVE"))
  c->impls.push_back({"float64 loops (unfused)", ImplKind::naive, backend == Backend::cuda,
                      [=](int) { *naive_out = reference::norm_backward(kind, *xd, *dd, sh.rows, sh.n, *wd, eps); },
                      [=] { return err(naive_out->dx, naive_out->dweight, naive_out->dbias); }, 2});
  auto view = [dev, sh](void* p) { return TensorView::contiguous(p, DType::bf16, {sh.rows, sh.n}, dev); };
  const TensorView tw = TensorView::contiguous(w.get(), DType::bf16, {sh.n}, dev);
  const TensorView tdw = TensorView::contiguous(dw.get(), DType::bf16, {sh.n}, dev);
  const TensorView tdb = TensorView::contiguous(db.get(), DType::bf16, {sh.n}, dev);
  // The saved statistics of each slot, written by sixfold's forward of that slot's x (its
  // output goes to dx, which every timed call overwrites).
  std::vector<NormStats> stats(std::size_t(c->slots));
  std::vector<std::shared_ptr<void>> stat_bufs;
  if (norm)
    for (int s = 0; s < c->slots; ++s) {
      auto f32_rows = [&] {
        stat_bufs.push_back(allocate(dev, sh.rows * 4));
        return TensorView::contiguous(stat_bufs.back().get(), DType::f32, {sh.rows}, dev);
      };
      NormStats& st = stats[std::size_t(s)];
      st.rstd = f32_rows();
      if (kind == NormKind::layer) st.mean = f32_rows();
      const TensorView x = view(xs[std::size_t(s)].get()), y = view(dx.get());
      if (kind == NormKind::rms) rms_norm(x, tw, y, {eps}, {}, st);
      else layer_norm(x, tw, TensorView{}, y, {eps}, {}, st);
    }
  auto check = [=] {
    return err(fetch(dev, dx, numel), grads >= 1 ? fetch(dev, dw, sh.n) : std::vector<double>{},
               grads >= 2 ? fetch(dev, db, sh.n) : std::vector<double>{});
  };
  for (bool saved : {true, false}) {
    if (!norm && !saved) break;
    std::string name = std::string("sixfold::") + kind_name(kind) + "_backward";
    if (norm && !saved) name += " (recompute stats)";
    auto call = [=, keep = std::vector{w, dw, db}, keep_stats = stat_bufs](int s, Stream stream) {
      (void)keep, (void)keep_stats;
      const TensorView x = view(xs[std::size_t(s)].get()), d = view(ds[std::size_t(s)].get());
      const TensorView g = view(dxs[std::size_t(s)].get());
      const NormStats st = saved ? stats[std::size_t(s)] : NormStats{};
      if (kind == NormKind::rms) rms_norm_backward(d, x, tw, g, tdw, {eps}, stream, st);
      else if (kind == NormKind::layer) layer_norm_backward(d, x, tw, g, tdw, tdb, {eps}, stream, st);
      else softmax_backward(d, x, g, stream);
    };
    c->impls.push_back({name, ImplKind::sixfold, false, [call](int s) { call(s, Stream{}); }, check});
    if (saved) add_graph_row(*c, backend, name, call, check);
  }
  return c;
}

}  // namespace

void register_norm_cases() {
  for (Backend backend : {Backend::cpu, Backend::cuda}) {
    if (backend == Backend::cuda && !cuda_available()) continue;
    // `bench` runs each shape once; the factories' size argument is unused (shape-defined).
    auto add = [&](const std::string& workload, const Shape2& sh,
                   std::function<std::unique_ptr<Case>()> make) {
      if (!env_lists("SIXFOLD_NORM_SHAPES", sh.label) || !env_lists("SIXFOLD_NORM_OPS", workload)) return;
      registry().push_back({"norm", workload + " bf16 " + sh.label, backend,
                            [make](std::int64_t) { return make(); },
                            {{sh.rows * sh.n, sh.label}}, {1}});
    };
    if (env_lists("SIXFOLD_NORM_CASES", "forward"))
      for (NormKind k : {NormKind::rms, NormKind::layer, NormKind::softmax})
        for (const Shape2& sh : kShapes)
          add(kind_name(k), sh, [=] { return make_norm_case(k, sh, backend); });
    if (env_lists("SIXFOLD_NORM_CASES", "add"))
      for (NormKind k : {NormKind::rms, NormKind::layer})
        for (const Shape2& sh : kShapes)
          add(std::string("add_") + kind_name(k), sh, [=] { return make_add_case(k, sh, backend); });
    if (env_lists("SIXFOLD_NORM_CASES", "activation"))
      for (ActivationKind k : {ActivationKind::gelu_erf, ActivationKind::gelu_tanh, ActivationKind::silu_gate})
        for (const Shape2& sh : kShapes)
          add(activation_name(k), sh, [=] { return make_activation_case(k, sh, backend); });
    if (env_lists("SIXFOLD_NORM_CASES", "backward"))
      for (NormKind k : {NormKind::rms, NormKind::layer, NormKind::softmax})
        for (const Shape2& sh : kShapes)
          add(std::string(kind_name(k)) + "_backward", sh,
              [=] { return make_backward_case(k, sh, backend); });
  }
}

}  // namespace sixfold::bench
