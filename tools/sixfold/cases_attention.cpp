// `sixfold bench attention`: exact softmax attention, flops = 4·b·h·q_len·kv_len·d (halved when
// causal), bytes = q, k, v read once and out written once.
//
// CPU rows (f32, 8 heads, seq 2048, head dim 64 and 128, causal and not; bf16 hd 128; a GQA
// decode row): "standard attention" — the textbook three loops over a materialized
// (b, h, q_len, kv_len) f32 score matrix, OpenMP over (b, h), the naive row — and sixfold.
// PyTorch's CPU SDPA is timed beside these by bench/torch_attention.py.
// Peak memory rows (f32, 1 head, d 64, seq 1k…8k): each implementation's extra peak resident
// memory for one call, measured by resetting the process's high-water mark
// (/proc/self/clear_refs) and reading VmHWM, printed in the workload label: the naive score
// matrix grows as N²; sixfold allocates nothing that grows with N beyond its output (its
// per-thread tiles, fixed in size, are allocated once and printed beside it).
// GPU rows (bf16): ../shared/BENCH.md's shapes — hd 128, 16 heads, 16k tokens per batch, seq
// 512…16384, causal and not —, hd 64 (32 heads) and 256 (8 heads) at seq 2048 and 8192, and
// decode (q_len 1, kv_len 8k/32k/128k, 64 q heads on 8 kv heads, hd 128; bytes = the KV cache
// read). PyTorch's flash and cuDNN SDPA backends are timed by bench/torch_attention.py.
// Errors: max |out − ref| / max |ref| over sampled rows (first, last and spread rows of every
// head) against the float64 reference.
#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../../src/reference/attention_reference.hpp"
#include "bench.hpp"
#include "sixfold/ops/attention.hpp"
#include "sixfold/runtime/tensor.hpp"

namespace sixfold::bench {
namespace {

struct AttnShape {
  std::int64_t b, hq, hkv, lq, lk, d;
  bool causal;
  DType dt;
  std::string label;
};

std::string label_of(const AttnShape& s) {
  std::string l = std::string(dtype_name(s.dt)) + " b" + std::to_string(s.b) + " h" + std::to_string(s.hq);
  if (s.hkv != s.hq) l += "/kv" + std::to_string(s.hkv);
  if (s.lq == s.lk) l += " seq" + std::to_string(s.lq);
  else l += " q" + std::to_string(s.lq) + " kv" + std::to_string(s.lk);
  l += " d" + std::to_string(s.d) + (s.causal ? " causal" : "");
  return l;
}

void fill_normal(std::vector<float>& x, unsigned seed) {
  const std::int64_t n = std::int64_t(x.size());
#pragma omp parallel
  {
    std::mt19937 rng(seed + 7919u * unsigned(omp_get_thread_num()));
    std::normal_distribution<float> nd(0.0f, 1.0f);
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) x[std::size_t(i)] = nd(rng);
  }
}

// Host values in the tensor's dtype (bf16 rounded), as bytes, and the same values as doubles.
std::vector<std::uint8_t> encode(const std::vector<float>& x, DType dt, std::vector<double>* exact) {
  std::vector<std::uint8_t> bytes(x.size() * std::size_t(dtype_bits(dt) / 8));
  if (exact) exact->resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    float v = x[i];
    if (dt == DType::bf16) {
      const std::uint16_t b = to_bfloat16(v).bits;
      std::memcpy(bytes.data() + 2 * i, &b, 2);
      v = to_float(BFloat16{b});
    } else if (dt == DType::f16) {
      const std::uint16_t b = to_half(v).bits;
      std::memcpy(bytes.data() + 2 * i, &b, 2);
      v = to_float(Half{b});
    } else {
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
    if (exact) (*exact)[i] = v;
  }
  return bytes;
}

std::vector<double> decode_bytes(const std::vector<std::uint8_t>& bytes, DType dt) {
  const std::size_t n = bytes.size() / std::size_t(dtype_bits(dt) / 8);
  std::vector<double> d(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (dt == DType::f32) { float v; std::memcpy(&v, bytes.data() + 4 * i, 4); d[i] = v; }
    else { std::uint16_t b; std::memcpy(&b, bytes.data() + 2 * i, 2);
           d[i] = dt == DType::bf16 ? to_float(BFloat16{b}) : to_float(Half{b}); }
  }
  return d;
}

// "Standard attention": S = scale·Q Kᵀ materialized for every (b, h), row softmax, O = P V; f32,
// plain loops, OpenMP over (b, h). `scores` holds b·hq·lq·lk floats.
void naive_attention(const AttnShape& s, const float* q, const float* k, const float* v, float* out,
                     float* scores) {
  const float scale = float(1.0 / std::sqrt(double(s.d)));
  const std::int64_t g = s.hq / s.hkv;
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t bh = 0; bh < s.b * s.hq; ++bh) {
    const std::int64_t b = bh / s.hq, h = bh % s.hq;
    const float* Q = q + bh * s.lq * s.d;
    const float* K = k + (b * s.hkv + h / g) * s.lk * s.d;
    const float* V = v + (b * s.hkv + h / g) * s.lk * s.d;
    float* S = scores + bh * s.lq * s.lk;
    float* O = out + bh * s.lq * s.d;
    for (std::int64_t i = 0; i < s.lq; ++i)
      for (std::int64_t j = 0; j < s.lk; ++j) {
        float dot = 0;
        for (std::int64_t c = 0; c < s.d; ++c) dot += Q[i * s.d + c] * K[j * s.d + c];
        const bool masked = s.causal && j > i + (s.lk - s.lq);
        S[i * s.lk + j] = masked ? -INFINITY : dot * scale;
      }
    for (std::int64_t i = 0; i < s.lq; ++i) {
      float* row = S + i * s.lk;
      float m = -INFINITY, l = 0;
      for (std::int64_t j = 0; j < s.lk; ++j) m = std::max(m, row[j]);
      for (std::int64_t j = 0; j < s.lk; ++j) l += row[j] = m == -INFINITY ? 0.0f : std::exp(row[j] - m);
      for (std::int64_t c = 0; c < s.d; ++c) O[i * s.d + c] = 0;
      for (std::int64_t j = 0; j < s.lk; ++j)
        for (std::int64_t c = 0; c < s.d; ++c) O[i * s.d + c] += row[j] / l * V[j * s.d + c];
    }
  }
}

// Rows checked against the float64 reference: first, last and evenly spread ones.
std::vector<std::int64_t> checked_rows(std::int64_t lq) {
  std::vector<std::int64_t> r;
  const std::int64_t n = std::min<std::int64_t>(lq, 12);
  for (std::int64_t t = 0; t < n; ++t) r.push_back(n == 1 ? 0 : t * (lq - 1) / (n - 1));
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

struct Sampled {
  std::vector<std::int64_t> rows;  // per (b, h): these query rows
  std::vector<double> ref;         // (b·hq, rows, d)
};

Sampled reference_rows(const AttnShape& s, const std::vector<double>& q, const std::vector<double>& k,
                       const std::vector<double>& v) {
  Sampled r;
  r.rows = checked_rows(s.lq);
  const std::int64_t nr = std::int64_t(r.rows.size()), g = s.hq / s.hkv;
  r.ref.resize(std::size_t(s.b * s.hq * nr * s.d));
  const double scale = 1.0 / std::sqrt(double(s.d));
#pragma omp parallel
  {
    std::vector<double> scratch(static_cast<std::size_t>(std::max<std::int64_t>(s.lk, 1)));
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t bh = 0; bh < s.b * s.hq; ++bh) {
      const std::int64_t b = bh / s.hq, h = bh % s.hq;
      const double* K = k.data() + (b * s.hkv + h / g) * s.lk * s.d;
      const double* V = v.data() + (b * s.hkv + h / g) * s.lk * s.d;
      for (std::int64_t t = 0; t < nr; ++t) {
        const std::int64_t i = r.rows[std::size_t(t)];
        reference::attention_row(q.data() + (bh * s.lq + i) * s.d, K, V,
                                 r.ref.data() + (bh * nr + t) * s.d, nullptr, i, s.lq, s.lk, s.d,
                                 scale, s.causal, -1, -1, scratch.data());
      }
    }
  }
  return r;
}

double sampled_error(const AttnShape& s, const Sampled& r, const std::vector<double>& out) {
  const std::int64_t nr = std::int64_t(r.rows.size());
  std::vector<double> got(r.ref.size());
  for (std::int64_t bh = 0; bh < s.b * s.hq; ++bh)
    for (std::int64_t t = 0; t < nr; ++t)
      for (std::int64_t c = 0; c < s.d; ++c)
        got[std::size_t((bh * nr + t) * s.d + c)] =
            out[std::size_t((bh * s.lq + r.rows[std::size_t(t)]) * s.d + c)];
  return max_rel_error(r.ref.data(), got.data(), std::int64_t(got.size()));
}

// ---- peak memory ---------------------------------------------------------------------------
long status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.rfind(k, 0) == 0) return std::stol(line.substr(k.size()));
  return -1;
}

// Extra peak resident memory of one call of f (glibc), in bytes (−1 where the kernel does not let the
// high-water mark be reset).
double peak_extra_bytes(const std::function<void()>& f) {
  malloc_trim(0);  // free heap pages go back to the system: reuse by f counts as growth
  { std::ofstream reset("/proc/self/clear_refs"); reset << "5"; }
  const long before = status_kb("VmRSS"), hwm0 = status_kb("VmHWM");
  if (before < 0 || hwm0 < 0 || hwm0 > before + 64) return -1;  // reset did not take
  f();
  return double(status_kb("VmHWM") - before) * 1024.0;
}

// Floats of one thread's scratch in src/ops/attention_cpu.cpp (Qᵀ and Oᵀ of 64 lanes, a 128-key
// score tile, two widened K/V tiles, the lane state): kept here for the memory label only.
double sixfold_scratch_floats(std::int64_t d) {
  const std::int64_t m = 64, bk = 128;
  return double(2 * d * m + bk * m + 2 * bk * d + 8 * m + d);
}

std::string mib(double bytes) {
  if (bytes < 0) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  return buf;
}

// ---- one case ------------------------------------------------------------------------------
std::unique_ptr<Case> make_attention_case(const AttnShape& s, Backend backend, bool naive,
                                          bool measure_memory) {
  const Device dev = backend == Backend::cuda ? Device::cuda(0) : Device::cpu();
  const std::int64_t es = dtype_bits(s.dt) / 8;
  const std::int64_t nq = s.b * s.hq * s.lq * s.d, nk = s.b * s.hkv * s.lk * s.d;
  auto c = std::make_unique<Case>();
  c->op = "attention";
  c->workload = s.label;
  c->backend = backend;
  const double causal_frac = s.causal ? 0.5 : 1.0;
  c->cost.flops = 4.0 * double(s.b * s.hq) * double(s.lq) * double(s.lk) * double(s.d) * causal_frac;
  c->cost.min_bytes = double((2 * nq + 2 * nk) * es);
  c->cost.exps = double(s.b * s.hq) * double(s.lq) * double(s.lk) * causal_frac;
  c->cost.tensor_core = backend == Backend::cuda && s.dt != DType::f32;  // HGMMA/HMMA work
  c->tolerance = s.dt == DType::f32 ? 2e-5 : 1e-2;
  c->property = "associativity (online-softmax monoid over key tiles) + locality (scores stay in "
                "cache: O(N) extra memory)";
  // Compute-bound rows reread q/k/v from cache inside one call: one input set. Memory-bound
  // (decode) rows rotate sets larger than the last-level cache.
  const bool decode = s.lq <= 16;
  c->slots = decode ? rotating_slots(backend, double((nq + 2 * nk) * es), 4) : 1;

  const unsigned seed = std::random_device{}();
  std::vector<float> hq(static_cast<std::size_t>(nq)), hk(static_cast<std::size_t>(nk)),
      hv(static_cast<std::size_t>(nk));
  std::vector<double> q0, k0, v0;
  std::vector<std::shared_ptr<void>> qs, ks, vs;
  for (int slot = 0; slot < c->slots; ++slot) {
    fill_normal(hq, seed + 3u * unsigned(slot));
    fill_normal(hk, seed + 3u * unsigned(slot) + 1u);
    fill_normal(hv, seed + 3u * unsigned(slot) + 2u);
    for (auto [host, list, exact] : {std::tuple{&hq, &qs, &q0}, std::tuple{&hk, &ks, &k0},
                                     std::tuple{&hv, &vs, &v0}}) {
      const std::vector<std::uint8_t> bytes = encode(*host, s.dt, slot == 0 ? exact : nullptr);
      list->push_back(allocate(dev, std::int64_t(bytes.size())));
      copy_bytes(list->back().get(), dev, bytes.data(), Device::cpu(), std::int64_t(bytes.size()));
    }
  }
  auto sampled = std::make_shared<Sampled>(reference_rows(s, q0, k0, v0));
  q0.clear(), k0.clear(), v0.clear();
  auto out = allocate(dev, nq * es);
  c->poison = [out, dev, nq, es] {
    std::vector<std::uint8_t> nan(static_cast<std::size_t>(nq * es), 0xff);
    copy_bytes(out.get(), dev, nan.data(), Device::cpu(), nq * es);
  };
  c->sync = [dev] { synchronize(dev); };
  auto read_out = [=] {
    std::vector<std::uint8_t> h(static_cast<std::size_t>(nq * es));
    copy_bytes(h.data(), Device::cpu(), out.get(), dev, nq * es);
    return sampled_error(s, *sampled, decode_bytes(h, s.dt));
  };

  std::string memory_note;
  if (naive) {  // CPU only: f32 inputs on the host
    auto hostf = [](const std::shared_ptr<void>& p) { return static_cast<const float*>(p.get()); };
    auto nout = std::make_shared<std::vector<float>>(static_cast<std::size_t>(nq));
    const std::int64_t score_floats = s.b * s.hq * s.lq * s.lk;
    auto run_naive = [=](int slot) {
      std::vector<float> scores(static_cast<std::size_t>(score_floats));  // the N² matrix
      naive_attention(s, hostf(qs[std::size_t(slot)]), hostf(ks[std::size_t(slot)]),
                      hostf(vs[std::size_t(slot)]), nout->data(), scores.data());
    };
    if (measure_memory) memory_note += "naive +" + mib(peak_extra_bytes([&] { run_naive(0); }));
    c->impls.push_back({"standard attention (f32, materialized scores)", ImplKind::naive, false,
                        run_naive,
                        [=] {
                          std::vector<double> d(nout->begin(), nout->end());
                          return sampled_error(s, *sampled, d);
                        },
                        2});
  }
  auto view = [s, dev](void* p, std::int64_t h, std::int64_t l) {
    return TensorView::contiguous(p, s.dt, {s.b, h, l, s.d}, dev);
  };
  AttentionParams prm;
  prm.causal = s.causal;
  auto run_sixfold = [=](int slot) {
    attention(view(qs[std::size_t(slot)].get(), s.hq, s.lq), view(ks[std::size_t(slot)].get(), s.hkv, s.lk),
              view(vs[std::size_t(slot)].get(), s.hkv, s.lk), view(out.get(), s.hq, s.lq), TensorView{},
              prm);
  };
  if (measure_memory) {
    run_sixfold(0);  // first-touch of the output and of the threads' stacks outside the measurement
    memory_note += std::string(naive ? ", " : "") + "sixfold +" + mib(peak_extra_bytes([&] { run_sixfold(0); })) +
                   " beyond its per-thread tiles (kept between calls, " +
                   mib(double(sixfold_scratch_floats(s.d)) * 4.0 * omp_get_max_threads()) + ")";
  }
  c->impls.push_back({"sixfold::attention", ImplKind::sixfold, false, run_sixfold, read_out});
  if (decode && backend == Backend::cuda) {
    // The same calls replayed from a CUDA graph, 2·slots per replay, the last on slot 0 (the one
    // the error check reads): the per-call time without the host's launch cost, which an idle
    // GPU otherwise waits for at every call (how decoding loops run in serving stacks).
    const int slots = c->slots, calls = 2 * slots;
    c->impls.push_back(graph_replay_impl(
        "sixfold::attention, CUDA graph replay",
        [=](Stream st, int i) {
          const auto slot = std::size_t((i + 1) % slots);
          attention(view(qs[slot].get(), s.hq, s.lq), view(ks[slot].get(), s.hkv, s.lk),
                    view(vs[slot].get(), s.hkv, s.lk), view(out.get(), s.hq, s.lq), TensorView{}, prm, st);
        },
        calls, read_out));
  }
  if (!memory_note.empty()) c->workload += " [peak extra memory: " + memory_note + "]";
  return c;
}

void add(const AttnShape& s, Backend backend, bool naive, bool measure_memory = false) {
  registry().push_back({"attention", s.label, backend,
                        [=](std::int64_t) { return make_attention_case(s, backend, naive, measure_memory); },
                        {{s.lq, s.label}}, {1}});
}

AttnShape shape(std::int64_t b, std::int64_t hq, std::int64_t hkv, std::int64_t lq, std::int64_t lk,
                std::int64_t d, bool causal, DType dt) {
  AttnShape s{b, hq, hkv, lq, lk, d, causal, dt, ""};
  s.label = label_of(s);
  return s;
}

}  // namespace

void register_attention_cases() {
  // CPU: the bar's shapes (f32, seq 2048, hd 64/128), then bf16, decode and memory scaling.
  for (std::int64_t d : {64, 128})
    for (bool causal : {false, true}) add(shape(1, 8, 8, 2048, 2048, d, causal, DType::f32), Backend::cpu, true);
  add(shape(1, 8, 8, 2048, 2048, 128, false, DType::bf16), Backend::cpu, false);
  add(shape(1, 32, 4, 1, 32768, 128, false, DType::f32), Backend::cpu, true);
  for (std::int64_t n : {1024, 2048, 4096, 8192})
    add(shape(1, 1, 1, n, n, 64, false, DType::f32), Backend::cpu, true, true);
  if (!cuda_available()) return;
  // GPU: BENCH.md's shapes (bf16, hd 128, 16 heads, 16k tokens per batch), hd 64 / 256 at the
  // same hidden size 2048, decode with GQA (8 q heads per kv head).
  for (std::int64_t seq : {512, 1024, 2048, 4096, 8192, 16384})
    for (bool causal : {false, true})
      add(shape(16384 / seq, 16, 16, seq, seq, 128, causal, DType::bf16), Backend::cuda, false);
  for (auto [d, h] : {std::pair<std::int64_t, std::int64_t>{64, 32}, {256, 8}})
    for (std::int64_t seq : {2048, 8192})
      for (bool causal : {false, true})
        add(shape(16384 / seq, h, h, seq, seq, d, causal, DType::bf16), Backend::cuda, false);
  for (std::int64_t kv : {8192, 32768, 131072})
    add(shape(std::max<std::int64_t>(1, 65536 / kv), 64, 8, 1, kv, 128, false, DType::bf16),
        Backend::cuda, false);
}

}  // namespace sixfold::bench
