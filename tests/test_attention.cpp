// tests/test_attention.cpp — attention, attention_varlen and merge_attention_states against the
// float64 reference (src/reference/attention_reference.hpp), on fresh random inputs each run.
//
// CPU (f32 and bf16 inputs, f32 compute): q_len × kv_len over {1, 17, 128, 1000, 4097}, causal
// and not (bottom-right aligned when q_len != kv_len), GQA/MQA, sliding windows, varlen batches,
// BLHD and padded (non-contiguous) layouts, decode shapes (split key ranges), head dims 1…256,
// fully masked rows (zeros, lse −inf), and every documented argument error (nothing written).
// Bound: |out − ref| <= 3e-5·max|v| (+ half an output ulp for bf16 outputs); lse within 3e-5.
//
// CUDA (skipped without a GPU; SIXFOLD_REQUIRE_GPU=1 makes a skip a failure): the same public
// entries in bf16 and f16, head dims 64/96/128/256, the same shape matrix, decode q_len 1…16
// against long caches with 8 q heads per kv head. Bound (FlashAttention's rule): the max error
// against the float64 reference is at most twice that of naive attention done in the low dtype
// (scores, probabilities and output each rounded to it), computed here on the same rows.
//
// Long cases compare a sample of rows (first, last, middle and random ones of every head); the
// whole output is still checked for unwritten (NaN-poisoned) elements.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../src/reference/attention_reference.hpp"
#include "row_buffers.hpp"
#include "sixfold/ops/attention.hpp"

namespace sixfold::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}

// ---- strided tensors ----------------------------------------------------------------------
// A tensor of logical shape `shape`, stored in the dimension order `perm` (outermost first) with
// `pad` extra elements after each innermost row.
// `vals` holds the logical values (row-major over shape), already rounded to the dtype.
struct Strided {
  DType dt = DType::f32;
  Device dev;
  std::vector<std::int64_t> shape, strides;
  std::int64_t span = 0;  // storage elements
  std::unique_ptr<DeviceBuffer> buf;
  std::vector<double> vals;

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto s : shape) n *= s;
    return n;
  }
  TensorView view() const {
    TensorView v;
    v.data = buf->storage.get();
    v.dtype = dt;
    v.device = dev;
    v.shape.rank = int(shape.size());
    for (std::size_t i = 0; i < shape.size(); ++i) v.shape.dims[i] = shape[i], v.strides[i] = strides[i];
    return v;
  }
  // Storage offsets of every element in logical row-major order (an odometer: no divisions).
  std::vector<std::int64_t> offsets() const {
    std::vector<std::int64_t> out(static_cast<std::size_t>(numel()));
    std::vector<std::int64_t> idx(shape.size(), 0);
    std::int64_t off = 0;
    for (std::size_t f = 0; f < out.size(); ++f) {
      out[f] = off;
      for (int i = int(shape.size()) - 1; i >= 0; --i) {
        const std::size_t u = std::size_t(i);
        off += strides[u];
        if (++idx[u] < shape[u]) break;
        off -= strides[u] * shape[u];
        idx[u] = 0;
      }
    }
    return out;
  }
  // Reads the storage back into logical order.
  std::vector<double> read() const {
    const std::vector<std::uint8_t> h = buf->host();
    const std::size_t es = std::size_t(dtype_bits(dt) / 8);
    std::vector<double> out(static_cast<std::size_t>(numel()));
    const std::vector<std::int64_t> offs = offsets();
    for (std::int64_t f = 0; f < numel(); ++f) {
      const std::uint8_t* p = h.data() + std::size_t(offs[std::size_t(f)]) * es;
      if (dt == DType::f32) { float x; std::memcpy(&x, p, 4); out[std::size_t(f)] = x; }
      else { std::uint16_t x; std::memcpy(&x, p, 2); out[std::size_t(f)] = decode16(dt, x); }
    }
    return out;
  }
};

// Random N(0, sigma) values (or none: an output, all storage NaN-poisoned).
Strided make_strided(DType dt, Device dev, std::vector<std::int64_t> shape, std::vector<int> perm,
                     std::int64_t pad, bool random, double sigma = 1.0) {
  Strided t;
  t.dt = dt;
  t.dev = dev;
  t.shape = shape;
  t.strides.assign(shape.size(), 0);
  const std::size_t inner = std::size_t(perm.back());
  std::int64_t s = shape[inner] + pad;
  t.strides[inner] = 1;
  for (int i = int(perm.size()) - 2; i >= 0; --i) {
    t.strides[std::size_t(perm[std::size_t(i)])] = s;
    s *= shape[std::size_t(perm[std::size_t(i)])];
  }
  t.span = std::max<std::int64_t>(s, 1);
  const std::size_t es = std::size_t(dtype_bits(dt) / 8);
  std::vector<std::uint8_t> host(std::size_t(t.span) * es, 0xff);  // NaN poison
  if (random) {
    // Uniform on [−√3, √3]·sigma (variance sigma²) from splitmix64, seeded afresh by rng():
    // the normal distribution's generator dominated the sanitizer run's time.
    std::uint64_t state = rng()();
    auto next = [&state] {
      std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      return double((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
    };
    t.vals.resize(std::size_t(t.numel()));
    const std::vector<std::int64_t> offs = t.offsets();
    for (std::int64_t f = 0; f < t.numel(); ++f) {
      const double x = round_to(dt, (2.0 * next() - 1.0) * 1.7320508075688772 * sigma);
      t.vals[std::size_t(f)] = x;
      std::uint8_t* p = host.data() + std::size_t(offs[std::size_t(f)]) * es;
      if (dt == DType::f32) { const float v = float(x); std::memcpy(p, &v, 4); }
      else { const std::uint16_t b = encode16(dt, x); std::memcpy(p, &b, 2); }
    }
  }
  t.buf = std::make_unique<DeviceBuffer>(dev, host);
  return t;
}

// ---- one attention problem, as float64 (B, H, L, D) arrays, checked row by row ------------
struct Problem {
  std::int64_t b, hq, hkv, d;
  std::vector<std::int64_t> lq, lk;   // per sequence
  std::vector<std::vector<double>> q, k, v;  // per sequence: (h, l, d) dense
  double scale;
  bool causal;
  std::int64_t left, right;
};

struct Checked {
  double err = 0, naive_err = 0, lse_err = 0, naive_lse_err = 0, vmax = 0;
  std::int64_t rows = 0;
};

std::vector<std::int64_t> sample_rows(std::int64_t lq, std::int64_t lk, std::int64_t d,
                                      std::int64_t heads) {
  std::vector<std::int64_t> r;
  if (double(lq) * double(lk) * double(d) * double(heads) <= 1e7) {
    for (std::int64_t i = 0; i < lq; ++i) r.push_back(i);
    return r;
  }
  std::set<std::int64_t> s;
  for (std::int64_t i : {std::int64_t(0), std::int64_t(1), lq / 2, lq - 2, lq - 1})
    if (i >= 0 && i < lq) s.insert(i);
  std::uniform_int_distribution<std::int64_t> u(0, lq - 1);
  for (int n = 0; n < 4; ++n) s.insert(u(rng()));
  return {s.begin(), s.end()};
}

// Naive attention in a low dtype: scores, probabilities and the output each rounded to it.
void naive_row(DType lowp, const double* Q, const double* K, const double* V, double* O,
               double* L, std::int64_t i, std::int64_t lq, std::int64_t lk, std::int64_t d,
               double scale, bool causal, std::int64_t left, std::int64_t right) {
  std::vector<double> s(std::size_t(std::max<std::int64_t>(lk, 1)), -kInf);
  double m = -kInf;
  for (std::int64_t j = 0; j < lk; ++j) {
    if (!reference::attention_visible(i, j, lq, lk, causal, left, right)) continue;
    double dot = 0;
    for (std::int64_t c = 0; c < d; ++c) dot += Q[c] * K[j * d + c];
    s[std::size_t(j)] = round_to(lowp, dot * scale);
    m = std::max(m, s[std::size_t(j)]);
  }
  std::fill(O, O + d, 0.0);
  if (m == -kInf) { *L = -kInf; return; }
  double l = 0;
  for (std::int64_t j = 0; j < lk; ++j) l += std::exp(s[std::size_t(j)] - m);
  for (std::int64_t j = 0; j < lk; ++j) {
    const double p = round_to(lowp, std::exp(s[std::size_t(j)] - m) / l);
    for (std::int64_t c = 0; c < d; ++c) O[c] += p * V[j * d + c];
  }
  for (std::int64_t c = 0; c < d; ++c) O[c] = round_to(lowp, O[c]);
  *L = m + std::log(l);
}

// out(seq, h, i, c) and lse(seq, h, i) accessors of the tested outputs.
template <class OutAt, class LseAt>
Checked check_problem(const Problem& p, DType out_dt, bool gpu_rule, OutAt out_at, LseAt lse_at,
                      bool have_lse) {
  Checked r;
  const std::int64_t g = p.hq / p.hkv, d = p.d;
  for (const auto& vs : p.v)
    for (double x : vs) r.vmax = std::max(r.vmax, std::abs(x));
  struct Row { std::int64_t b, h, i; };
  std::vector<Row> rows;
  for (std::int64_t b = 0; b < p.b; ++b) {
    const std::vector<std::int64_t> picked = sample_rows(p.lq[std::size_t(b)], p.lk[std::size_t(b)], d, p.hq);
    for (std::int64_t h = 0; h < p.hq; ++h)
      for (std::int64_t i : picked) rows.push_back({b, h, i});
  }
  // The float64 rows (and the naive low-precision ones) on all cores; compared below.
  const std::size_t nr = rows.size();
  std::vector<double> ref(nr * std::size_t(d)), naive(gpu_rule ? nr * std::size_t(d) : 0);
  std::vector<double> ref_lse(nr), naive_lse(nr);
#pragma omp parallel
  {
    std::vector<double> s;
#pragma omp for schedule(dynamic, 4)
    for (std::size_t t = 0; t < nr; ++t) {
      const auto [b, h, i] = rows[t];
      const std::int64_t lq = p.lq[std::size_t(b)], lk = p.lk[std::size_t(b)];
      s.resize(std::size_t(std::max<std::int64_t>(lk, 1)));
      const double* Q = p.q[std::size_t(b)].data() + (h * lq + i) * d;
      const double* K = p.k[std::size_t(b)].data() + (h / g) * lk * d;
      const double* V = p.v[std::size_t(b)].data() + (h / g) * lk * d;
      reference::attention_row(Q, K, V, ref.data() + t * std::size_t(d), &ref_lse[t], i, lq, lk, d, p.scale,
                               p.causal, p.left, p.right, s.data());
      if (gpu_rule)
        naive_row(out_dt, Q, K, V, naive.data() + t * std::size_t(d), &naive_lse[t], i, lq, lk, d, p.scale,
                  p.causal, p.left, p.right);
    }
  }
  for (std::size_t t = 0; t < nr; ++t) {
    const auto [b, h, i] = rows[t];
    const double* o = ref.data() + t * std::size_t(d);
    ++r.rows;
    for (std::int64_t c = 0; c < d; ++c) {
      const double got = out_at(b, h, i, c);
      if (!(std::abs(got) < kInf)) {
        ADD_FAILURE() << "non-finite output at seq " << b << " head " << h << " row " << i << " col " << c
                      << ": " << got;
        return r;
      }
      double e = std::abs(got - o[c]);
      // CPU rule: an f32 bound, plus half an output ulp for 16-bit outputs.
      if (!gpu_rule && out_dt != DType::f32) e = std::max(0.0, e - std::abs(o[c]) / 256.0);
      r.err = std::max(r.err, e);
      if (gpu_rule) r.naive_err = std::max(r.naive_err, std::abs(naive[t * std::size_t(d) + std::size_t(c)] - o[c]));
    }
    if (have_lse) {
      const double got = lse_at(b, h, i), L = ref_lse[t];
      if (L == -kInf || got == -kInf) {
        EXPECT_EQ(got, L) << "lse of seq " << b << " head " << h << " row " << i;
      } else {
        r.lse_err = std::max(r.lse_err, std::abs(got - L) / (1.0 + std::abs(L)));
        if (gpu_rule) r.naive_lse_err = std::max(r.naive_lse_err, std::abs(naive_lse[t] - L) / (1.0 + std::abs(L)));
      }
    }
  }
  return r;
}

void expect_within(const Checked& r, bool gpu_rule, const std::string& what) {
  if (gpu_rule) {
    EXPECT_LE(r.err, 2.0 * r.naive_err + 1e-6 * r.vmax) << what << " (naive low-precision error " << r.naive_err << ")";
    EXPECT_LE(r.lse_err, 2.0 * r.naive_lse_err + 1e-5) << what << " lse (naive " << r.naive_lse_err << ")";
  } else {
    EXPECT_LE(r.err, 3e-5 * std::max(r.vmax, 1e-30)) << what;
    EXPECT_LE(r.lse_err, 3e-5) << what << " lse";
  }
}

// ---- fixed-length cases -------------------------------------------------------------------
struct Case {
  std::int64_t b = 1, hq = 1, hkv = 1, lq = 1, lk = 1, d = 64;
  bool causal = false;
  std::int64_t left = -1, right = -1;
  float scale = 0.0f;
  DType dt = DType::f32;
  bool blhd = false;  // q, k, v, out, lse token-major (permuted views)
  std::int64_t pad = 0;  // extra elements after each head_dim row (non-contiguous)
  bool lse = true;
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "b" << c.b << " hq" << c.hq << " hkv" << c.hkv << " lq" << c.lq << " lk" << c.lk << " d" << c.d
    << (c.causal ? " causal" : "") << " win(" << c.left << "," << c.right << ") " << dtype_name(c.dt)
    << (c.blhd ? " BLHD" : " BHLD") << " pad" << c.pad;
  return s.str();
}

void run_case(const Case& c, Device dev) {
  SCOPED_TRACE(describe(c));
  const std::vector<int> perm = c.blhd ? std::vector<int>{0, 2, 1, 3} : std::vector<int>{0, 1, 2, 3};
  Strided q = make_strided(c.dt, dev, {c.b, c.hq, c.lq, c.d}, perm, c.pad, true);
  Strided k = make_strided(c.dt, dev, {c.b, c.hkv, c.lk, c.d}, perm, c.pad, true);
  // v gets its own row padding: odd on the CPU; on the GPU a multiple of 8 elements (the CUDA
  // backend moves 16-byte chunks and requires 16-byte aligned strides).
  const std::int64_t v_pad = c.pad + (dev.kind == DeviceKind::cuda ? 8 : 3);
  Strided v = make_strided(c.dt, dev, {c.b, c.hkv, c.lk, c.d}, perm, v_pad, true);
  Strided out = make_strided(c.dt, dev, {c.b, c.hq, c.lq, c.d}, perm, c.pad, false);
  Strided lse = make_strided(DType::f32, dev, {c.b, c.hq, c.lq},
                             c.blhd ? std::vector<int>{0, 2, 1} : std::vector<int>{0, 1, 2}, 0, false);
  AttentionParams prm{c.scale, c.causal, c.left, c.right};
  attention(q.view(), k.view(), v.view(), out.view(), c.lse ? lse.view() : TensorView{}, prm);
  synchronize(dev);
  const std::vector<double> o = out.read();
  const std::vector<double> l = c.lse ? lse.read() : std::vector<double>{};
  for (double x : o) ASSERT_FALSE(std::isnan(x)) << "an output element was not written";
  Problem p{c.b, c.hq, c.hkv, c.d, std::vector<std::int64_t>(std::size_t(c.b), c.lq),
            std::vector<std::int64_t>(std::size_t(c.b), c.lk), {}, {}, {},
            c.scale != 0.0f ? double(c.scale) : 1.0 / std::sqrt(double(c.d)), c.causal, c.left, c.right};
  auto slice = [](const std::vector<double>& all, std::int64_t b, std::int64_t n) {
    return std::vector<double>(all.begin() + b * n, all.begin() + (b + 1) * n);
  };
  for (std::int64_t b = 0; b < c.b; ++b) {
    p.q.push_back(slice(q.vals, b, c.hq * c.lq * c.d));
    p.k.push_back(slice(k.vals, b, c.hkv * c.lk * c.d));
    p.v.push_back(slice(v.vals, b, c.hkv * c.lk * c.d));
  }
  const bool gpu = dev.kind == DeviceKind::cuda;
  const Checked r = check_problem(
      p, c.dt, gpu,
      [&](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t col) {
        return o[std::size_t(((b * c.hq + h) * c.lq + i) * c.d + col)];
      },
      [&](std::int64_t b, std::int64_t h, std::int64_t i) {
        return l[std::size_t((b * c.hq + h) * c.lq + i)];
      },
      c.lse);
  expect_within(r, gpu, describe(c));
}

// ---- varlen cases -------------------------------------------------------------------------
struct VarCase {
  std::vector<std::int64_t> lq, lk;
  std::int64_t hq = 2, hkv = 1, d = 64;
  bool causal = false;
  std::int64_t left = -1, right = -1;
  DType dt = DType::f32;
  bool head_major = false;  // (h, t, d) storage, passed as a permuted (t, h, d) view
  std::int64_t pad = 0;
};

void run_varlen(const VarCase& c, Device dev) {
  std::string what = "varlen " + std::string(dtype_name(c.dt)) + " d" + std::to_string(c.d) +
                     (c.causal ? " causal" : "") + (c.head_major ? " head-major" : "");
  SCOPED_TRACE(what);
  const std::int64_t nb = std::int64_t(c.lq.size());
  std::vector<std::int32_t> cq{0}, ck{0};
  for (std::int64_t b = 0; b < nb; ++b) {
    cq.push_back(cq.back() + std::int32_t(c.lq[std::size_t(b)]));
    ck.push_back(ck.back() + std::int32_t(c.lk[std::size_t(b)]));
  }
  const std::int64_t tq = cq.back(), tk = ck.back();
  const std::vector<int> perm = c.head_major ? std::vector<int>{1, 0, 2} : std::vector<int>{0, 1, 2};
  Strided q = make_strided(c.dt, dev, {tq, c.hq, c.d}, perm, c.pad, true);
  Strided k = make_strided(c.dt, dev, {tk, c.hkv, c.d}, perm, c.pad, true);
  Strided v = make_strided(c.dt, dev, {tk, c.hkv, c.d}, perm, c.pad, true);
  Strided out = make_strided(c.dt, dev, {tq, c.hq, c.d}, perm, c.pad, false);
  Strided lse = make_strided(DType::f32, dev, {c.hq, tq}, {0, 1}, 5, false);  // padded rows
  auto ints = [&](const std::vector<std::int32_t>& h) {
    std::vector<std::uint8_t> bytes(h.size() * 4);
    std::memcpy(bytes.data(), h.data(), bytes.size());
    return std::make_unique<DeviceBuffer>(dev, bytes);
  };
  auto bq = ints(cq), bk = ints(ck);
  const TensorView vq = TensorView::contiguous(bq->storage.get(), DType::i32, {nb + 1}, dev);
  const TensorView vk = TensorView::contiguous(bk->storage.get(), DType::i32, {nb + 1}, dev);
  AttentionParams prm{0.0f, c.causal, c.left, c.right};
  attention_varlen(q.view(), k.view(), v.view(), vq, vk, out.view(), lse.view(), prm);
  synchronize(dev);
  const std::vector<double> o = out.read(), l = lse.read();
  for (double x : o) ASSERT_FALSE(std::isnan(x)) << "an output element was not written";
  Problem p{nb, c.hq, c.hkv, c.d, c.lq, c.lk, {}, {}, {}, 1.0 / std::sqrt(double(c.d)), c.causal,
            c.left, c.right};
  auto gather = [&](const std::vector<double>& all, std::int64_t t0, std::int64_t n, std::int64_t h) {
    std::vector<double> r(static_cast<std::size_t>(h * n * c.d));  // (h, n, d) from (t, h, d)
    for (std::int64_t hh = 0; hh < h; ++hh)
      for (std::int64_t t = 0; t < n; ++t)
        for (std::int64_t x = 0; x < c.d; ++x)
          r[std::size_t((hh * n + t) * c.d + x)] = all[std::size_t(((t0 + t) * h + hh) * c.d + x)];
    return r;
  };
  for (std::int64_t b = 0; b < nb; ++b) {
    p.q.push_back(gather(q.vals, cq[std::size_t(b)], c.lq[std::size_t(b)], c.hq));
    p.k.push_back(gather(k.vals, ck[std::size_t(b)], c.lk[std::size_t(b)], c.hkv));
    p.v.push_back(gather(v.vals, ck[std::size_t(b)], c.lk[std::size_t(b)], c.hkv));
  }
  const bool gpu = dev.kind == DeviceKind::cuda;
  const Checked r = check_problem(
      p, c.dt, gpu,
      [&](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t col) {
        return o[std::size_t(((cq[std::size_t(b)] + i) * c.hq + h) * c.d + col)];
      },
      [&](std::int64_t b, std::int64_t h, std::int64_t i) {
        return l[std::size_t(h * tq + cq[std::size_t(b)] + i)];
      },
      true);
  expect_within(r, gpu, what);
}

// ---- case tables --------------------------------------------------------------------------
const std::int64_t kLens[] = {1, 17, 128, 1000, 4097};

std::vector<Case> length_matrix(DType dt, std::int64_t d, bool gpu) {
  std::vector<Case> cs;
  for (std::int64_t lq : kLens)
    for (std::int64_t lk : kLens)
      for (bool causal : {false, true}) {
        Case c;
        c.lq = lq, c.lk = lk, c.causal = causal, c.dt = dt, c.d = d;
        c.hq = gpu ? 4 : 1;
        c.hkv = gpu ? 2 : 1;
        cs.push_back(c);
      }
  return cs;
}

std::vector<Case> structure_cases(DType dt, const std::vector<std::int64_t>& dims) {
  std::vector<Case> cs;
  for (std::int64_t d : dims) {
    Case c;
    c.dt = dt, c.d = d, c.b = 2, c.hq = 3, c.hkv = 3, c.lq = 77, c.lk = 130;
    cs.push_back(c);
    c.causal = true, c.lq = 130, c.lk = 77;  // more queries than keys: leading rows see nothing
    cs.push_back(c);
  }
  const std::int64_t d = dims.front();
  auto base = [&] {
    Case c;
    c.dt = dt, c.d = d, c.b = 2, c.lq = 100, c.lk = 157;
    return c;
  };
  for (auto [hq, hkv] : {std::pair{8, 1}, std::pair{8, 2}, std::pair{6, 3}, std::pair{4, 4}}) {
    Case c = base();
    c.hq = hq, c.hkv = hkv, c.causal = hq == 8;
    cs.push_back(c);
  }
  // Windows (left, right), with and without causal (causal allows right 0 or −1 only).
  for (auto [l, r] : {std::pair{0, 0}, std::pair{5, -1}, std::pair{-1, 3}, std::pair{16, 16},
                      std::pair{100, 0}, std::pair{0, 200}})
    for (bool causal : {false, true}) {
      if (causal && r > 0) continue;
      Case c = base();
      c.hq = 4, c.hkv = 2, c.left = l, c.right = r, c.causal = causal;
      cs.push_back(c);
      c.lq = 157, c.lk = 100;
      cs.push_back(c);
    }
  // Non-contiguous: BLHD views, padded rows, both; custom scale; no lse.
  for (bool blhd : {false, true})
    for (std::int64_t pad : {0, 8}) {
      Case c = base();
      c.hq = 4, c.hkv = 2, c.blhd = blhd, c.pad = pad, c.causal = true, c.scale = 0.3f;
      c.lse = pad == 0;
      cs.push_back(c);
    }
  // Decode: q_len 1…16 against long caches, 8 q heads per kv head (split key ranges).
  for (std::int64_t lq : {1, 2, 5, 16})
    for (bool causal : {false, true}) {
      Case c = base();
      c.b = 1, c.hq = 16, c.hkv = 2, c.lq = lq, c.lk = 4097, c.causal = causal;
      cs.push_back(c);
    }
  return cs;
}

std::vector<VarCase> varlen_cases(DType dt, std::int64_t d) {
  std::vector<VarCase> cs;
  VarCase c;
  c.dt = dt, c.d = d;
  c.lq = {1, 17, 0, 128, 300, 5};
  c.lk = {1, 17, 9, 128, 300, 0};
  cs.push_back(c);
  c.causal = true, c.lq = {40, 1, 17, 129}, c.lk = {100, 33, 17, 64}, c.hq = 4, c.hkv = 2;
  cs.push_back(c);
  c.head_major = true, c.pad = 8, c.left = 7, c.right = 0;
  cs.push_back(c);
  c.causal = false, c.head_major = false, c.pad = 0, c.left = 20, c.right = 5, c.hq = 8, c.hkv = 1;
  c.lq = {3, 1000}, c.lk = {1000, 3};
  cs.push_back(c);
  return cs;
}

// ---- CPU -----------------------------------------------------------------------------------
TEST(AttentionCpu, LengthMatrixF32) {
  for (const Case& c : length_matrix(DType::f32, 64, false)) run_case(c, Device::cpu());
}

TEST(AttentionCpu, LengthMatrixBf16HeadDim128) {
  for (Case c : length_matrix(DType::bf16, 128, false))
    if (c.lq * c.lk <= 1000 * 4097) run_case(c, Device::cpu());
}

TEST(AttentionCpu, HeadDimsGqaWindowsLayoutsDecodeF32) {
  for (const Case& c : structure_cases(DType::f32, {64, 1, 3, 32, 80, 96, 128, 200, 256}))
    run_case(c, Device::cpu());
}

TEST(AttentionCpu, HeadDimsGqaWindowsLayoutsDecodeBf16) {
  for (const Case& c : structure_cases(DType::bf16, {64, 96, 256})) run_case(c, Device::cpu());
}

// Many heads, long key ranges: the CPU backend's head-major order (all lane tiles of a kv head
// fold one chunk of keys before the next; used with >= 2 heads per thread that divide evenly:
// 32 heads here, so 1, 2, 4, 8 or 16 threads take it).
TEST(AttentionCpu, HeadMajorOrder) {
  for (bool causal : {false, true}) {
    Case c;
    c.b = 2, c.hq = 32, c.hkv = 16, c.lq = 200, c.lk = 1100, c.d = 128, c.causal = causal;
    run_case(c, Device::cpu());
    c.left = causal ? 300 : -1;
    c.dt = DType::bf16, c.b = 1, c.hkv = 32, c.d = 64, c.lq = 130, c.lk = 2100;
    run_case(c, Device::cpu());
  }
}

TEST(AttentionCpu, Varlen) {
  for (DType dt : {DType::f32, DType::bf16})
    for (const VarCase& c : varlen_cases(dt, dt == DType::f32 ? 64 : 96)) run_varlen(c, Device::cpu());
}

TEST(AttentionCpu, NoKeysGivesZerosAndMinusInfinity) {
  // kv_len 0: every row sees nothing.
  Strided q = make_strided(DType::f32, Device::cpu(), {1, 2, 3, 8}, {0, 1, 2, 3}, 0, true);
  Strided k = make_strided(DType::f32, Device::cpu(), {1, 1, 0, 8}, {0, 1, 2, 3}, 0, true);
  Strided v = make_strided(DType::f32, Device::cpu(), {1, 1, 0, 8}, {0, 1, 2, 3}, 0, true);
  Strided out = make_strided(DType::f32, Device::cpu(), {1, 2, 3, 8}, {0, 1, 2, 3}, 0, false);
  Strided lse = make_strided(DType::f32, Device::cpu(), {1, 2, 3}, {0, 1, 2}, 0, false);
  attention(q.view(), k.view(), v.view(), out.view(), lse.view());
  for (double x : out.read()) EXPECT_EQ(x, 0.0);
  for (double x : lse.read()) EXPECT_EQ(x, -kInf);
}

// ---- merge_attention_states ----------------------------------------------------------------
// Two attentions over disjoint key ranges, merged, equal the attention over all keys.
void run_merge_split(DType dt, Device dev, std::int64_t d, bool in_place) {
  SCOPED_TRACE(std::string("merge split ") + std::string(dtype_name(dt)) + (in_place ? " in place" : ""));
  const std::int64_t b = 2, hq = 4, hkv = 2, lq = 9, lk = 700, split = 300;
  const std::vector<int> perm{0, 1, 2, 3};
  Strided q = make_strided(dt, dev, {b, hq, lq, d}, perm, 0, true);
  Strided k = make_strided(dt, dev, {b, hkv, lk, d}, perm, 0, true);
  Strided v = make_strided(dt, dev, {b, hkv, lk, d}, perm, 0, true);
  auto part = [&](const Strided& t, std::int64_t j0, std::int64_t n) {
    TensorView x = t.view();
    x.data = static_cast<char*>(x.data) + j0 * t.strides[2] * (dtype_bits(dt) / 8);
    x.shape.dims[2] = n;
    return x;
  };
  Strided o1 = make_strided(dt, dev, {b, hq, lq, d}, perm, 0, false);
  Strided o2 = make_strided(dt, dev, {b, hq, lq, d}, perm, 0, false);
  Strided l1 = make_strided(DType::f32, dev, {b, hq, lq}, {0, 1, 2}, 0, false);
  Strided l2 = make_strided(DType::f32, dev, {b, hq, lq}, {0, 1, 2}, 0, false);
  Strided out = make_strided(dt, dev, {b, hq, lq, d}, perm, 0, false);
  Strided lo = make_strided(DType::f32, dev, {b, hq, lq}, {0, 1, 2}, 0, false);
  attention(q.view(), part(k, 0, split), part(v, 0, split), o1.view(), l1.view());
  attention(q.view(), part(k, split, lk - split), part(v, split, lk - split), o2.view(), l2.view());
  const Strided& dst = in_place ? o1 : out;
  const Strided& ldst = in_place ? l2 : lo;
  merge_attention_states(o1.view(), l1.view(), o2.view(), l2.view(), dst.view(), ldst.view());
  synchronize(dev);
  const std::vector<double> o = dst.read(), l = ldst.read();
  Problem p{b, hq, hkv, d, std::vector<std::int64_t>(b, lq), std::vector<std::int64_t>(b, lk),
            {}, {}, {}, 1.0 / std::sqrt(double(d)), false, -1, -1};
  for (std::int64_t bb = 0; bb < b; ++bb) {
    p.q.emplace_back(q.vals.begin() + bb * hq * lq * d, q.vals.begin() + (bb + 1) * hq * lq * d);
    p.k.emplace_back(k.vals.begin() + bb * hkv * lk * d, k.vals.begin() + (bb + 1) * hkv * lk * d);
    p.v.emplace_back(v.vals.begin() + bb * hkv * lk * d, v.vals.begin() + (bb + 1) * hkv * lk * d);
  }
  const Checked r = check_problem(
      p, dt, false,
      [&](std::int64_t bb, std::int64_t h, std::int64_t i, std::int64_t c) {
        return o[std::size_t(((bb * hq + h) * lq + i) * d + c)];
      },
      [&](std::int64_t bb, std::int64_t h, std::int64_t i) { return l[std::size_t((bb * hq + h) * lq + i)]; },
      true);
  // Two roundings of 16-bit outputs (the partials, then the merge): one more ulp of slack.
  const double tol = (dt == DType::f32 ? 3e-5 : 3e-5 + 1.0 / 128) * r.vmax;
  EXPECT_LE(r.err, tol);
  EXPECT_LE(r.lse_err, 3e-5);
}

// Random states with −inf sides, against the merge formula in float64; rows at a stride.
void run_merge_formula(DType dt, Device dev) {
  SCOPED_TRACE(std::string("merge formula ") + std::string(dtype_name(dt)));
  const std::int64_t rows = 37, d = 96;
  Strided o1 = make_strided(dt, dev, {rows, d}, {0, 1}, 5, true);
  Strided o2 = make_strided(dt, dev, {rows, d}, {0, 1}, 0, true);
  Strided out = make_strided(dt, dev, {rows, d}, {0, 1}, 3, false);
  std::vector<float> l1(static_cast<std::size_t>(rows)), l2(static_cast<std::size_t>(rows));
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (std::int64_t r = 0; r < rows; ++r) {
    l1[std::size_t(r)] = r % 5 == 1 ? -INFINITY : nd(rng());
    l2[std::size_t(r)] = r % 7 == 2 || r % 5 == 1 ? -INFINITY : nd(rng());
  }
  auto floats = [&](const std::vector<float>& h) {
    std::vector<std::uint8_t> b(h.size() * 4);
    std::memcpy(b.data(), h.data(), b.size());
    return std::make_unique<DeviceBuffer>(dev, b);
  };
  auto b1 = floats(l1), b2 = floats(l2), bo = floats(std::vector<float>(std::size_t(rows), NAN));
  auto lv = [&](const DeviceBuffer& b) { return TensorView::contiguous(b.storage.get(), DType::f32, {rows}, dev); };
  merge_attention_states(o1.view(), lv(*b1), o2.view(), lv(*b2), out.view(), lv(*bo));
  synchronize(dev);
  const std::vector<double> o = out.read();
  std::vector<float> lo(static_cast<std::size_t>(rows));
  { const auto h = bo->host(); std::memcpy(lo.data(), h.data(), h.size()); }
  for (std::int64_t r = 0; r < rows; ++r) {
    const double a = l1[std::size_t(r)], b = l2[std::size_t(r)], m = std::max(a, b);
    const double w1 = m == -kInf ? 0 : std::exp(a - m), w2 = m == -kInf ? 0 : std::exp(b - m);
    const double lse = m == -kInf ? -kInf : m + std::log(w1 + w2);
    if (lse == -kInf) EXPECT_EQ(lo[std::size_t(r)], -INFINITY) << "row " << r;
    else EXPECT_NEAR(lo[std::size_t(r)], lse, 1e-5 * (1 + std::abs(lse))) << "row " << r;
    for (std::int64_t c = 0; c < d; ++c) {
      const double ref = m == -kInf ? 0.0 : (w1 * o1.vals[std::size_t(r * d + c)] + w2 * o2.vals[std::size_t(r * d + c)]) / (w1 + w2);
      const double tol = 1e-5 + (dt == DType::f32 ? 1e-5 : 1.0 / 256) * std::abs(ref);
      ASSERT_NEAR(o[std::size_t(r * d + c)], ref, tol) << "row " << r << " col " << c;
    }
  }
}

TEST(AttentionCpu, MergeAttentionStates) {
  run_merge_split(DType::f32, Device::cpu(), 64, false);
  run_merge_split(DType::f32, Device::cpu(), 64, true);
  run_merge_split(DType::bf16, Device::cpu(), 128, true);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) run_merge_formula(dt, Device::cpu());
}

// ---- errors --------------------------------------------------------------------------------
TEST(AttentionCpu, BadInputIsAClearErrorAndWritesNothing) {
  const Device cpu = Device::cpu();
  const std::vector<int> p4{0, 1, 2, 3};
  Strided q = make_strided(DType::f32, cpu, {1, 4, 8, 16}, p4, 0, true);
  Strided k = make_strided(DType::f32, cpu, {1, 2, 8, 16}, p4, 0, true);
  Strided v = make_strided(DType::f32, cpu, {1, 2, 8, 16}, p4, 0, true);
  Strided out = make_strided(DType::f32, cpu, {1, 4, 8, 16}, p4, 0, false);
  Strided lse = make_strided(DType::f32, cpu, {1, 4, 8}, {0, 1, 2}, 0, false);
  const TensorView Q = q.view(), K = k.view(), V = v.view(), O = out.view(), L = lse.view();
  auto run = [&](TensorView q2, TensorView k2, TensorView v2, TensorView o2, TensorView l2,
                 AttentionParams prm = {}) { attention(q2, k2, v2, o2, l2, prm); };

  Strided k8 = make_strided(DType::f32, cpu, {1, 2, 8, 8}, p4, 0, true);
  expect_error([&] { run(Q, k8.view(), V, O, L); }, "argument 'k': expected head_dim 16");
  Strided k3 = make_strided(DType::f32, cpu, {1, 3, 8, 16}, p4, 0, true);
  expect_error([&] { run(Q, k3.view(), k3.view(), O, L); }, "dividing q_heads = 4");
  expect_error([&] { run(Q, K, V, O, L, {0.0f, true, -1, 2}); }, "params.window_right");
  expect_error([&] { run(Q, K, V, O, L, {0.0f, false, -2, -1}); }, "params.window_left");
  expect_error([&] { run(Q, K, V, O, L, {NAN, false, -1, -1}); }, "params.scale");
  TensorView kc = K;
  kc.device = Device::cuda(0);
  expect_error([&] { run(Q, kc, V, O, L); }, "argument 'k': expected device cpu");
  TensorView lc = L;
  lc.device = Device::cuda(0);
  expect_error([&] { run(Q, K, V, O, lc); }, "argument 'lse': expected device cpu");
  TensorView vb = V;
  vb.dtype = DType::bf16;
  expect_error([&] { run(Q, K, vb, O, L); }, "argument 'v': expected dtype f32");
  TensorView qh = Q;
  qh.dtype = DType::f16;
  expect_error([&] { run(qh, K, V, O, L); }, "dtype f32 or bf16 (CPU backend)");
  TensorView qs = Q;
  qs.strides[3] = 2, qs.shape.dims[3] = 8;
  expect_error([&] { run(qs, K, V, O, L); }, "unit stride in the last dimension");
  expect_error([&] { run(Q, K, V, Q, L); }, "argument 'out'");
  TensorView l2 = L;
  l2.shape.dims[2] = 7;
  expect_error([&] { run(Q, K, V, O, l2); }, "argument 'lse': expected shape [1, 4, 8]");
  TensorView o3 = O;
  o3.strides[1] = 16;  // heads overlap
  expect_error([&] { run(Q, K, V, o3, L); }, "do not overlap");
  Strided big = make_strided(DType::f32, cpu, {1, 1, 4, 300}, p4, 0, true);
  expect_error([&] { run(big.view(), big.view(), big.view(), big.view(), TensorView{}); },
               "head_dim in 1..256");

  // varlen: cu_seqlens not increasing, wrong start, wrong end, wrong count, wrong dtype
  Strided qv = make_strided(DType::f32, cpu, {10, 2, 16}, {0, 1, 2}, 0, true);
  Strided kv = make_strided(DType::f32, cpu, {12, 1, 16}, {0, 1, 2}, 0, true);
  Strided ov = make_strided(DType::f32, cpu, {10, 2, 16}, {0, 1, 2}, 0, false);
  auto varlen = [&](std::vector<std::int32_t> cq, std::vector<std::int32_t> ck, DType cdt = DType::i32) {
    TensorView a = TensorView::contiguous(cq.data(), cdt, {std::int64_t(cq.size())});
    TensorView b = TensorView::contiguous(ck.data(), DType::i32, {std::int64_t(ck.size())});
    attention_varlen(qv.view(), kv.view(), kv.view(), a, b, ov.view(), TensorView{});
  };
  expect_error([&] { varlen({0, 6, 4, 10}, {0, 4, 8, 12}); }, "non-decreasing offsets");
  expect_error([&] { varlen({1, 6, 10}, {0, 4, 12}); }, "a first entry of 0");
  expect_error([&] { varlen({0, 6, 9}, {0, 4, 12}); }, "token count 10");
  expect_error([&] { varlen({0, 6, 10}, {0, 4, 8, 12}); }, "argument 'cu_seqlens_k': expected 3 entries");
  expect_error([&] { varlen({0, 6, 10}, {0, 4, 12}, DType::f32); }, "argument 'cu_seqlens_q': expected dtype i32");

  // merge: shapes and dtypes
  Strided m1 = make_strided(DType::f32, cpu, {4, 16}, {0, 1}, 0, true);
  Strided m2 = make_strided(DType::f32, cpu, {4, 16}, {0, 1}, 0, true);
  Strided mo = make_strided(DType::f32, cpu, {4, 16}, {0, 1}, 0, false);
  Strided ml = make_strided(DType::f32, cpu, {4}, {0}, 0, true);
  Strided ml3 = make_strided(DType::f32, cpu, {3}, {0}, 0, true);
  expect_error([&] { merge_attention_states(m1.view(), ml3.view(), m2.view(), ml.view(), mo.view(), TensorView{}); },
               "argument 'lse1': expected shape [4]");
  TensorView m2b = m2.view();
  m2b.dtype = DType::bf16;
  expect_error([&] { merge_attention_states(m1.view(), ml.view(), m2b, ml.view(), mo.view(), TensorView{}); },
               "argument 'o2': expected dtype f32");

  // Nothing was written by any failing call.
  for (double x : out.read()) EXPECT_TRUE(std::isnan(x));
  for (double x : lse.read()) EXPECT_TRUE(std::isnan(x));
  for (double x : ov.read()) EXPECT_TRUE(std::isnan(x));
  for (double x : mo.read()) EXPECT_TRUE(std::isnan(x));
}

// ---- CUDA: the public entries on the GPU ---------------------------------------------------
TEST(AttentionCuda, LengthMatrix) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable CUDA device";
  for (DType dt : {DType::bf16, DType::f16})
    for (const Case& c : length_matrix(dt, dt == DType::bf16 ? 128 : 64, true)) run_case(c, Device::cuda(0));
}

TEST(AttentionCuda, HeadDimsGqaWindowsLayoutsDecode) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable CUDA device";
  for (DType dt : {DType::bf16, DType::f16})
    for (const Case& c : structure_cases(dt, {128, 64, 96, 256})) run_case(c, Device::cuda(0));
}

TEST(AttentionCuda, DecodeLongCacheGqa8) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable CUDA device";
  for (std::int64_t lq : {1, 3, 8, 16})
    for (std::int64_t lk : {8192, 32768 + 7}) {
      Case c;
      c.dt = DType::bf16, c.d = 128, c.b = 2, c.hq = 16, c.hkv = 2, c.lq = lq, c.lk = lk;
      c.causal = lq > 1, c.blhd = lq == 3;
      run_case(c, Device::cuda(0));
    }
}

TEST(AttentionCuda, Varlen) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable CUDA device";
  for (DType dt : {DType::bf16, DType::f16})
    for (std::int64_t d : {64, 128})
      for (const VarCase& c : varlen_cases(dt, d)) run_varlen(c, Device::cuda(0));
}

TEST(AttentionCuda, MergeAttentionStates) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable CUDA device";
  run_merge_split(DType::bf16, Device::cuda(0), 128, false);
  run_merge_split(DType::f16, Device::cuda(0), 64, true);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) run_merge_formula(dt, Device::cuda(0));
}

TEST(AttentionCuda, BadInput) {
  if (!gpu_usable()) GTEST_SKIP() << "no usable CUDA device";
  const Device gpu = Device::cuda(0);
  const std::vector<int> p4{0, 1, 2, 3};
  Strided q = make_strided(DType::bf16, gpu, {1, 2, 8, 64}, p4, 0, true);
  Strided k = make_strided(DType::bf16, Device::cpu(), {1, 2, 8, 64}, p4, 0, true);
  Strided out = make_strided(DType::bf16, gpu, {1, 2, 8, 64}, p4, 0, false);
  expect_error([&] { attention(q.view(), k.view(), k.view(), out.view(), TensorView{}); },
               "argument 'k': expected device cuda:0");
  Strided q48 = make_strided(DType::bf16, gpu, {1, 2, 8, 48}, p4, 0, true);
  Strided o48 = make_strided(DType::bf16, gpu, {1, 2, 8, 48}, p4, 0, false);
  expect_error([&] { attention(q48.view(), q48.view(), q48.view(), o48.view(), TensorView{}); },
               "head_dim 64, 96, 128 or 256");
  Strided qf = make_strided(DType::f32, gpu, {1, 2, 8, 64}, p4, 0, true);
  Strided of = make_strided(DType::f32, gpu, {1, 2, 8, 64}, p4, 0, false);
  expect_error([&] { attention(qf.view(), qf.view(), qf.view(), of.view(), TensorView{}); },
               "dtype bf16 or f16 (CUDA backend)");
  for (double x : out.read()) EXPECT_TRUE(std::isnan(x));
}

}  // namespace
}  // namespace sixfold::testing
