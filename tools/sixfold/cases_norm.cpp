// `sixfold bench norm`: fused RMSNorm, LayerNorm and softmax on the shapes of the norm issue,
// bf16, against the unfused float64 reference loops (the naive row), on the CPU and, where
// usable, on the GPU (PyTorch's kernels are timed beside these by bench/torch_norm.py).
#include <cmath>
#include <cstring>
#include <random>

#include "../../src/reference/norm_reference.hpp"
#include "bench.hpp"
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
  auto w = allocate(dev, sh.n * 2), b = allocate(dev, sh.n * 2), out = allocate(dev, numel * 2);
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
  c->poison = [out, dev, numel] {
    std::vector<std::uint16_t> nan(static_cast<std::size_t>(numel), 0x7fc0);
    copy_bytes(out.get(), dev, nan.data(), Device::cpu(), numel * 2);
  };
  c->sync = [dev] { synchronize(dev); };
  c->impls.push_back({"float64 loops (unfused)", ImplKind::naive, backend == Backend::cuda,
                      [=](int) { *naive_out = reference::norm(kind, *xd, sh.rows, sh.n, *wd, *bd, eps); },
                      [=] { return max_rel_error(ref->data(), naive_out->data(), numel); }, 2});
  auto view = [dev, sh](void* p) { return TensorView::contiguous(p, DType::bf16, {sh.rows, sh.n}, dev); };
  const TensorView tw = TensorView::contiguous(w.get(), DType::bf16, {sh.n}, dev);
  const TensorView tb = TensorView::contiguous(b.get(), DType::bf16, {sh.n}, dev);
  std::string name = std::string("sixfold::") + kind_name(kind);
  c->impls.push_back({name, ImplKind::sixfold, false,
                      [=, keep = std::vector{w, b}](int s) {  // keep: weight/bias outlive the views
                        (void)keep;
                        const TensorView x = view(xs[std::size_t(s)].get()), y = view(out.get());
                        if (kind == NormKind::rms) rms_norm(x, tw, y, {eps});
                        else if (kind == NormKind::layer) layer_norm(x, tw, tb, y, {eps});
                        else softmax(x, y);
                      },
                      [=] {
                        std::vector<std::uint16_t> h(static_cast<std::size_t>(numel));
                        copy_bytes(h.data(), Device::cpu(), out.get(), dev, numel * 2);
                        std::vector<double> d(h.size());
                        for (std::size_t i = 0; i < h.size(); ++i) d[i] = to_float(BFloat16{h[i]});
                        return max_rel_error(ref->data(), d.data(), numel);
                      }});
  return c;
}

}  // namespace

void register_norm_cases() {
  for (Backend backend : {Backend::cpu, Backend::cuda}) {
    if (backend == Backend::cuda && !cuda_available()) continue;
    for (NormKind k : {NormKind::rms, NormKind::layer, NormKind::softmax})
      for (const Shape2& sh : kShapes) {
        // `bench` runs each shape once; the factory's size argument is unused (shape-defined).
        registry().push_back({"norm", std::string(kind_name(k)) + " bf16 " + sh.label, backend,
                              [=](std::int64_t) { return make_norm_case(k, sh, backend); },
                              {{sh.rows * sh.n, sh.label}}, {1}});
      }
  }
}

}  // namespace sixfold::bench
