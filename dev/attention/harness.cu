// dev/attention/harness.cu — standalone check and timing of the CUDA attention kernels
// (src/cuda/attention*.cu[h], compiled into this one translation unit).
//
// Checks every kernel against the float64 reference (src/reference/attention_reference.hpp) on
// fresh random inputs, outputs poisoned with NaN before each call: awkward lengths (1, 17, 128,
// 1000, 4097), q_len ≠ kv_len with causal, GQA/MQA, windows, varlen with empty sequences, BLHD
// and padded layouts, bf16 and f16, head dims 64/96/128/256, split-KV decode, merge_states.
// Then times prefill (the BENCH.md shapes: 16 heads, 16k tokens per batch) and decode (GQA 8).
//
// Versions (all live in src/cuda and are selected per call with detail::attn::Kernel):
//   v1 prefill_mma        mma.sync FlashAttention-2 style (attention_mma.cuh); D 96's kernel
//   v2 prefill_wgmma      wgmma, cp.async by all threads, block barrier per tile (attention_wgmma.cuh;
//                         as first measured: v2_wgmma_sync.cuh)
//   v3                    softmax with one FFMA + ex2 per score, rescale skipped (all kernels)
//   v4 prefill_wgmma_pp   ping-pong warpgroups on mbarrier stages, cp.async
//   v5 prefill_wgmma_tma  v4 fed by a TMA producer warpgroup (setmaxnreg) — the default
//   decode                split-KV flash-decoding on mma.sync, splits merged by the monoid
// Results and the prediction/outcome log: docs/perf/attention_cuda.md.
//
// Build:  nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++20 -Iinclude --expt-relaxed-constexpr \
//           -Xcompiler -fopenmp -o build-dev/attn_harness dev/attention/harness.cu src/runtime/error.cpp
// Run:    attn_harness check      correctness table (exit 1 on any failure)
//         attn_harness small      a few small cases (for compute-sanitizer memcheck)
//         attn_harness bench      TFLOP/s and decode GB/s
#include <cuda_runtime.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../../src/cuda/attention.cu"
#include "../../src/reference/attention_reference.hpp"

using namespace sixfold;
using sixfold::detail::attn::Kernel;

#define CK(x)                                                                                \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

static unsigned g_seed = 12345;

__global__ void fill_random(std::uint16_t* p, long long n, unsigned seed, bool bf16) {
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += 256LL * gridDim.x) {
    unsigned x = unsigned(i) * 2654435761u ^ seed ^ unsigned(i >> 32) * 40503u;
    x ^= x >> 15; x *= 2246822519u; x ^= x >> 13; x *= 3266489917u; x ^= x >> 16;
    const float u = (x & 0xffffff) / float(0x1000000) * 4.0f - 2.0f;  // [-2, 2)
    if (bf16) { __nv_bfloat16 b = __float2bfloat16_rn(u); p[i] = *reinterpret_cast<std::uint16_t*>(&b); }
    else { __half h = __float2half_rn(u); p[i] = *reinterpret_cast<std::uint16_t*>(&h); }
  }
}

static double dec(DType t, std::uint16_t b) { return t == DType::bf16 ? to_float(BFloat16{b}) : to_float(Half{b}); }

struct Case {
  const char* name;
  DType dt = DType::bf16;
  int D = 128, b = 1, hq = 1, hkv = 1, lq = 128, lk = 128;
  bool causal = false;
  int left = -1, right = -1;
  int layout = 0;  // 0 BHLD, 1 BLHD, 2 BLHD with a padded head (stride D + 16)
  std::vector<int> vq, vk;  // varlen sequence lengths (empty: dense)
  Kernel kernel = Kernel::automatic;
  int splits = 0;
};

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { CK(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
  ~Dev() { cudaFree(p); }
};

// One tensor (b, h, L, D) in a layout; host copy decoded to contiguous BHLD doubles.
struct Tensor4 {
  int b, h, L, D, layout;
  long long s[3];  // batch, head, token strides
  long long elems;
  Tensor4(int b_, int h_, int L_, int D_, int layout_) : b(b_), h(h_), L(L_), D(D_), layout(layout_) {
    const long long hd = layout == 2 ? D + 16 : D;
    if (layout == 0) { s[2] = D; s[1] = (long long)L * D; s[0] = (long long)h * L * D; }
    else { s[2] = h * hd; s[1] = hd; s[0] = (long long)L * h * hd; }
    elems = layout == 0 ? (long long)b * h * L * D : (long long)b * L * h * hd;
  }
  std::vector<double> decode(DType t, const std::vector<std::uint16_t>& raw) const {
    std::vector<double> out((size_t)b * h * L * D);
    for (int bi = 0; bi < b; ++bi)
      for (int hi = 0; hi < h; ++hi)
        for (int i = 0; i < L; ++i)
          for (int c = 0; c < D; ++c)
            out[(((size_t)bi * h + hi) * L + i) * D + c] = dec(t, raw[bi * s[0] + hi * s[1] + i * s[2] + c]);
    return out;
  }
};

static std::vector<std::uint16_t> random_dev(DType t, Dev& d, long long n) {
  fill_random<<<1024, 256>>>(static_cast<std::uint16_t*>(d.p), n, g_seed += 7919, t == DType::bf16);
  CK(cudaGetLastError());
  std::vector<std::uint16_t> h(n);
  CK(cudaMemcpy(h.data(), d.p, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

// Reference for one sequence of one batch into out/lse (BHLD slices), threaded over heads × rows.
static void ref_attention(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                      std::vector<double>& out, std::vector<double>& lse, int b, int hq, int hkv, int lq, int lk,
                      int D, double scale, bool causal, int left, int right) {
  const int group = hq / hkv;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int bi = 0; bi < b; ++bi)
    for (int h = 0; h < hq; ++h) {
      const size_t qo = ((size_t)bi * hq + h) * lq * D, ko = ((size_t)bi * hkv + h / group) * lk * D;
      reference::attention(q.data() + qo, k.data() + ko, v.data() + ko, out.data() + qo,
                           lse.data() + ((size_t)bi * hq + h) * lq, 1, 1, 1, lq, lk, D, scale, causal, left, right);
    }
}

struct Err { double rel, lse_abs; bool nan, inf_mismatch; };

static Err compare(const std::vector<double>& got, const std::vector<double>& ref, const std::vector<double>& glse,
                   const std::vector<double>& rlse) {
  Err e{0, 0, false, false};
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i])) e.nan = true;
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  e.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  for (size_t i = 0; i < rlse.size(); ++i) {
    if (std::isnan(glse[i])) e.nan = true;
    else if (std::isinf(rlse[i]) || std::isinf(glse[i])) e.inf_mismatch |= glse[i] != rlse[i];
    else e.lse_abs = std::max(e.lse_abs, std::fabs(glse[i] - rlse[i]));
  }
  return e;
}

static const char* kname(Kernel k) {
  switch (k) {
    case Kernel::decode: return "decode";
    case Kernel::prefill_mma: return "mma";
    case Kernel::prefill_wgmma: return "wgmma";
    case Kernel::prefill_wgmma_pp: return "pingpong";
    case Kernel::prefill_wgmma_tma: return "tma";
    default: return "auto";
  }
}

static bool run_case(const Case& c) {
  const bool varlen = !c.vq.empty();
  const int nb = varlen ? int(c.vq.size()) : c.b;
  const double scale = 1.0 / std::sqrt(double(c.D));
  bool ok = true;
  Err e;
  if (!varlen) {
    Tensor4 tq(c.b, c.hq, c.lq, c.D, c.layout), tk(c.b, c.hkv, c.lk, c.D, c.layout), tv(c.b, c.hkv, c.lk, c.D, c.layout);
    Tensor4 to(c.b, c.hq, c.lq, c.D, 0);
    Dev dq(tq.elems * 2), dk(tk.elems * 2), dv(tv.elems * 2), dout(to.elems * 2), dlse((size_t)c.b * c.hq * c.lq * 4);
    auto hq = random_dev(c.dt, dq, tq.elems), hk = random_dev(c.dt, dk, tk.elems), hv = random_dev(c.dt, dv, tv.elems);
    CK(cudaMemset(dout.p, 0xff, to.elems * 2));
    CK(cudaMemset(dlse.p, 0xff, (size_t)c.b * c.hq * c.lq * 4));
    AttentionArgs a;
    a.dtype = c.dt; a.q = dq.p; a.k = dk.p; a.v = dv.p; a.out = dout.p; a.lse = static_cast<float*>(dlse.p);
    a.batch = c.b; a.q_heads = c.hq; a.kv_heads = c.hkv; a.q_len = c.lq; a.kv_len = c.lk; a.head_dim = c.D;
    for (int d = 0; d < 3; ++d) { a.q_stride[d] = tq.s[d]; a.k_stride[d] = tk.s[d]; a.v_stride[d] = tv.s[d]; a.out_stride[d] = to.s[d]; }
    a.lse_stride[0] = (long long)c.hq * c.lq; a.lse_stride[1] = c.lq; a.lse_stride[2] = 1;
    a.scale = float(scale); a.causal = c.causal; a.window_left = c.left; a.window_right = c.right;
    detail::attention_cuda_kernel(a, 0, {}, c.kernel, c.splits);
    CK(cudaDeviceSynchronize());
    std::vector<std::uint16_t> ho(to.elems);
    std::vector<float> hl((size_t)c.b * c.hq * c.lq);
    CK(cudaMemcpy(ho.data(), dout.p, ho.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hl.data(), dlse.p, hl.size() * 4, cudaMemcpyDeviceToHost));
    auto Q = tq.decode(c.dt, hq), K = tk.decode(c.dt, hk), V = tv.decode(c.dt, hv), O = to.decode(c.dt, ho);
    std::vector<double> R(O.size()), RL(hl.size()), GL(hl.begin(), hl.end());
    ref_attention(Q, K, V, R, RL, c.b, c.hq, c.hkv, c.lq, c.lk, c.D, scale, c.causal, c.left, c.right);
    e = compare(O, R, GL, RL);
  } else {
    std::vector<int> cq{0}, ck{0};
    for (size_t i = 0; i < c.vq.size(); ++i) { cq.push_back(cq.back() + c.vq[i]); ck.push_back(ck.back() + c.vk[i]); }
    const int tq = cq.back(), tk = ck.back();
    const int mq = *std::max_element(c.vq.begin(), c.vq.end()), mk = *std::max_element(c.vk.begin(), c.vk.end());
    Dev dq((size_t)tq * c.hq * c.D * 2), dk((size_t)tk * c.hkv * c.D * 2), dv((size_t)tk * c.hkv * c.D * 2),
        dout((size_t)tq * c.hq * c.D * 2), dlse((size_t)tq * c.hq * 4), dcq(cq.size() * 4), dck(ck.size() * 4);
    auto hq = random_dev(c.dt, dq, (long long)tq * c.hq * c.D), hk = random_dev(c.dt, dk, (long long)tk * c.hkv * c.D),
         hv = random_dev(c.dt, dv, (long long)tk * c.hkv * c.D);
    CK(cudaMemcpy(dcq.p, cq.data(), cq.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dck.p, ck.data(), ck.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout.p, 0xff, (size_t)tq * c.hq * c.D * 2));
    CK(cudaMemset(dlse.p, 0xff, (size_t)tq * c.hq * 4));
    AttentionArgs a;
    a.dtype = c.dt; a.q = dq.p; a.k = dk.p; a.v = dv.p; a.out = dout.p; a.lse = static_cast<float*>(dlse.p);
    a.batch = nb; a.q_heads = c.hq; a.kv_heads = c.hkv; a.q_len = mq; a.kv_len = mk; a.head_dim = c.D;
    const long long qs[3] = {0, c.D, (long long)c.hq * c.D}, ks[3] = {0, c.D, (long long)c.hkv * c.D};
    for (int d = 0; d < 3; ++d) { a.q_stride[d] = qs[d]; a.out_stride[d] = qs[d]; a.k_stride[d] = ks[d]; a.v_stride[d] = ks[d]; }
    a.lse_stride[0] = 0; a.lse_stride[1] = tq; a.lse_stride[2] = 1;
    a.cu_q = static_cast<const std::int32_t*>(dcq.p); a.cu_k = static_cast<const std::int32_t*>(dck.p);
    a.scale = float(scale); a.causal = c.causal; a.window_left = c.left; a.window_right = c.right;
    detail::attention_cuda_kernel(a, 0, {}, c.kernel, c.splits);
    CK(cudaDeviceSynchronize());
    std::vector<std::uint16_t> ho((size_t)tq * c.hq * c.D);
    std::vector<float> hl((size_t)tq * c.hq);
    CK(cudaMemcpy(ho.data(), dout.p, ho.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hl.data(), dlse.p, hl.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<double> O, R, GL, RL;
    for (int s = 0; s < nb; ++s) {  // per sequence: gather to BHLD, reference, compare jointly
      const int lq = c.vq[s], lk = c.vk[s];
      std::vector<double> Q((size_t)c.hq * lq * c.D), K((size_t)c.hkv * lk * c.D), V(K.size()), Os(Q.size()),
          Rs(Q.size()), RLs((size_t)c.hq * lq), GLs(RLs.size());
      for (int h = 0; h < c.hq; ++h)
        for (int i = 0; i < lq; ++i) {
          for (int d = 0; d < c.D; ++d) {
            const size_t src = ((size_t)(cq[s] + i) * c.hq + h) * c.D + d, dst = ((size_t)h * lq + i) * c.D + d;
            Q[dst] = dec(c.dt, hq[src]);
            Os[dst] = dec(c.dt, ho[src]);
          }
          GLs[(size_t)h * lq + i] = hl[(size_t)h * tq + cq[s] + i];
        }
      for (int h = 0; h < c.hkv; ++h)
        for (int j = 0; j < lk; ++j)
          for (int d = 0; d < c.D; ++d) {
            const size_t src = ((size_t)(ck[s] + j) * c.hkv + h) * c.D + d, dst = ((size_t)h * lk + j) * c.D + d;
            K[dst] = dec(c.dt, hk[src]);
            V[dst] = dec(c.dt, hv[src]);
          }
      ref_attention(Q, K, V, Rs, RLs, 1, c.hq, c.hkv, lq, lk, c.D, scale, c.causal, c.left, c.right);
      O.insert(O.end(), Os.begin(), Os.end()); R.insert(R.end(), Rs.begin(), Rs.end());
      GL.insert(GL.end(), GLs.begin(), GLs.end()); RL.insert(RL.end(), RLs.begin(), RLs.end());
    }
    e = compare(O, R, GL, RL);
  }
  const double tol = c.dt == DType::bf16 ? 1.5e-2 : 3e-3;
  ok = !e.nan && !e.inf_mismatch && e.rel <= tol && e.lse_abs <= 2e-2;
  std::printf("%-5s %-34s %-4s D%-3d %-6s rel %.2e lse %.1e%s%s\n", ok ? "ok" : "FAIL", c.name,
              c.dt == DType::bf16 ? "bf16" : "f16", c.D, kname(c.kernel), e.rel, e.lse_abs, e.nan ? " NaN" : "",
              e.inf_mismatch ? " -inf mismatch" : "");
  return ok;
}

static bool check_merge() {  // merge_attention_states: two halves of a key range → the whole
  bool ok = true;
  for (DType t : {DType::f32, DType::bf16}) {
    const int rows = 37, D = 72;
    std::vector<float> o1(rows * D), o2(rows * D), l1(rows), l2(rows);
    std::vector<double> ref(rows * D), rl(rows);
    for (int r = 0; r < rows; ++r) {
      l1[r] = r % 7 == 0 ? -INFINITY : std::sin(r) * 3; l2[r] = r % 5 == 0 ? -INFINITY : std::cos(r) * 3;
      const double m = std::max(l1[r], l2[r]);
      const double w1 = std::isinf(l1[r]) ? 0 : std::exp(l1[r] - m), w2 = std::isinf(l2[r]) ? 0 : std::exp(l2[r] - m);
      rl[r] = std::isinf(m) && m < 0 ? -INFINITY : m + std::log(w1 + w2);
      for (int c = 0; c < D; ++c) {
        o1[r * D + c] = std::sin(r + 0.1 * c); o2[r * D + c] = std::cos(r * 0.3 + c);
        if (t == DType::bf16) { o1[r * D + c] = to_float(to_bfloat16(o1[r * D + c])); o2[r * D + c] = to_float(to_bfloat16(o2[r * D + c])); }
        ref[r * D + c] = w1 + w2 > 0 ? (w1 * o1[r * D + c] + w2 * o2[r * D + c]) / (w1 + w2) : 0;
      }
    }
    const size_t es = t == DType::f32 ? 4 : 2;
    std::vector<unsigned char> b1(rows * D * es), b2(rows * D * es);
    for (int i = 0; i < rows * D; ++i) {
      if (t == DType::f32) { std::memcpy(&b1[i * 4], &o1[i], 4); std::memcpy(&b2[i * 4], &o2[i], 4); }
      else { auto x = to_bfloat16(o1[i]), y = to_bfloat16(o2[i]); std::memcpy(&b1[i * 2], &x, 2); std::memcpy(&b2[i * 2], &y, 2); }
    }
    Dev d1(b1.size()), d2(b2.size()), dl1(rows * 4), dl2(rows * 4);
    CK(cudaMemcpy(d1.p, b1.data(), b1.size(), cudaMemcpyHostToDevice)); CK(cudaMemcpy(d2.p, b2.data(), b2.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dl1.p, l1.data(), rows * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dl2.p, l2.data(), rows * 4, cudaMemcpyHostToDevice));
    detail::MergeArgs m;  // in place: out = o1, lse_out = lse1
    m.dtype = t; m.rows = rows; m.head_dim = D; m.o1 = d1.p; m.o2 = d2.p; m.out = d1.p;
    m.o1_stride = m.o2_stride = m.out_stride = D;
    m.lse1 = static_cast<float*>(dl1.p); m.lse2 = static_cast<float*>(dl2.p); m.lse_out = static_cast<float*>(dl1.p);
    m.lse1_stride = m.lse2_stride = m.lse_out_stride = 1;
    detail::merge_attention_states_cuda(m, 0, {});
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(b1.data(), d1.p, b1.size(), cudaMemcpyDeviceToHost)); CK(cudaMemcpy(l1.data(), dl1.p, rows * 4, cudaMemcpyDeviceToHost));
    double err = 0, lerr = 0;
    bool bad = false;
    for (int i = 0; i < rows * D; ++i) {
      float g;
      if (t == DType::f32) std::memcpy(&g, &b1[i * 4], 4);
      else { BFloat16 x; std::memcpy(&x, &b1[i * 2], 2); g = to_float(x); }
      if (std::isnan(g)) bad = true;
      err = std::max(err, std::fabs(g - ref[i]));
    }
    for (int r = 0; r < rows; ++r) {
      if (std::isinf(rl[r])) bad |= l1[r] != rl[r];
      else lerr = std::max(lerr, std::fabs(l1[r] - rl[r]));
    }
    const bool k = !bad && err <= (t == DType::f32 ? 1e-5 : 1e-2) && lerr <= 1e-5;
    std::printf("%-5s merge_attention_states in place %-4s max err %.1e lse %.1e\n", k ? "ok" : "FAIL",
                t == DType::f32 ? "f32" : "bf16", err, lerr);
    ok &= k;
  }
  return ok;
}

static std::vector<Case> check_cases(bool small) {
  std::vector<Case> v;
  const Kernel prefill[] = {Kernel::prefill_wgmma_tma, Kernel::prefill_wgmma_pp, Kernel::prefill_wgmma, Kernel::prefill_mma};
  for (Kernel k : prefill) {
    for (int D : {64, 96, 128, 256}) {
      if (k == Kernel::prefill_wgmma && D == 96) continue;
      if (k == Kernel::prefill_wgmma_pp && D != 64 && D != 128) continue;
      if (k == Kernel::prefill_wgmma_tma && D == 96) continue;
      for (DType t : {DType::bf16, DType::f16}) {
        Case c{"dense 2x2 lq=lk=200"}; c.dt = t; c.D = D; c.b = 2; c.hq = 2; c.hkv = 2; c.lq = 200; c.lk = 200; c.kernel = k;
        v.push_back(c);
      }
      Case c{"causal GQA 4:1 lq=300 lk=1000"}; c.D = D; c.hq = 4; c.hkv = 1; c.lq = 300; c.lk = 1000; c.causal = true; c.kernel = k;
      v.push_back(c);
    }
    if (small) continue;
    for (int L : {1, 17, 128, 1000, 4097}) {
      Case c{"len"}; c.D = 64; c.lq = L; c.lk = L; c.kernel = k; c.name = "lq=lk (1/17/128/1000/4097)";
      v.push_back(c);
      c.causal = true; c.name = "causal lq=lk";
      v.push_back(c);
    }
    {
      Case c{"causal lq=1000 > lk=17 (rows see nothing)"}; c.D = 128; c.lq = 1000; c.lk = 17; c.causal = true; c.kernel = k; v.push_back(c);
      Case d{"causal lq=17 lk=4097 D256"}; d.D = 256; d.hq = 2; d.hkv = 1; d.lq = 17; d.lk = 4097; d.causal = true; d.kernel = k; v.push_back(d);
      Case w{"window (100,20) lq=lk=1000"}; w.D = 128; w.lq = 1000; w.lk = 1000; w.left = 100; w.right = 20; w.kernel = k; v.push_back(w);
      Case w2{"window left 64 causal lq=128 lk=4097"}; w2.D = 128; w2.lq = 128; w2.lk = 4097; w2.left = 64; w2.causal = true; w2.kernel = k; v.push_back(w2);
      Case w3{"window (0,0) lq=lk=300"}; w3.D = 64; w3.lq = 300; w3.lk = 300; w3.left = 0; w3.right = 0; w3.kernel = k; v.push_back(w3);
      Case m{"MQA 8:1 BLHD lq=129 lk=777"}; m.D = 128; m.hq = 8; m.hkv = 1; m.lq = 129; m.lk = 777; m.layout = 1; m.kernel = k; v.push_back(m);
      Case pd{"padded heads b3 lq=250 lk=250 causal"}; pd.D = 128; pd.b = 3; pd.hq = 2; pd.hkv = 2; pd.lq = 250; pd.lk = 250; pd.layout = 2; pd.causal = true; pd.kernel = k; v.push_back(pd);
      Case vl{"varlen causal {1,17,0,300,129}/{5,17,9,300,1000}"}; vl.D = 128; vl.hq = 4; vl.hkv = 2; vl.causal = true; vl.kernel = k;
      vl.vq = {1, 17, 0, 300, 129}; vl.vk = {5, 17, 9, 300, 1000}; v.push_back(vl);
      Case v2{"varlen dense {200,64}/{0,333}"}; v2.D = 64; v2.hq = 2; v2.hkv = 2; v2.kernel = k; v2.vq = {200, 64}; v2.vk = {0, 333};
      v.push_back(v2);
    }
  }
  // Decode (q_len ≤ 16): splits forced and automatic
  for (int D : {64, 96, 128, 256})
    for (int splits : {1, 7, 0}) {
      Case c{"decode GQA 8:1 lq=1 lk=4097"}; c.D = D; c.b = 2; c.hq = 16; c.hkv = 2; c.lq = 1; c.lk = 4097; c.kernel = Kernel::decode; c.splits = splits;
      if (small && splits != 7) continue;
      v.push_back(c);
    }
  if (!small) {
    Case c{"decode lq=16 causal GQA 8:1 lk=1000"}; c.hq = 16; c.hkv = 2; c.lq = 16; c.lk = 1000; c.causal = true; c.kernel = Kernel::decode; v.push_back(c);
    Case d{"decode lq=3 causal window 50 f16"}; d.dt = DType::f16; d.hq = 8; d.hkv = 1; d.lq = 3; d.lk = 1000; d.causal = true; d.left = 50; d.kernel = Kernel::decode; v.push_back(d);
    Case e{"decode lq=5 lk=3 causal (rows see nothing)"}; e.hq = 4; e.hkv = 4; e.lq = 5; e.lk = 3; e.causal = true; e.kernel = Kernel::decode; v.push_back(e);
    Case f{"decode varlen {1,2,1}/{1000,0,70000}"}; f.hq = 8; f.hkv = 1; f.causal = true; f.vq = {1, 2, 1}; f.vk = {1000, 0, 70000}; f.kernel = Kernel::decode; v.push_back(f);
    Case g{"decode BLHD lq=1 lk=32768 auto"}; g.D = 128; g.hq = 32; g.hkv = 4; g.lq = 1; g.lk = 32768; g.layout = 1; v.push_back(g);
    Case h{"auto lq=16 lk=16 causal"}; h.hq = 2; h.lq = 16; h.lk = 16; h.causal = true; v.push_back(h);
  }
  return v;
}

// ---- Timing ------------------------------------------------------------------------------------

template <class F> static float median_ms(F&& f, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f(i);
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a)); f(i); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

static void bench_prefill(int D, int seq, bool causal, const std::vector<Kernel>& kernels) {
  const int heads = 16, batch = std::max(1, 16384 / seq);
  const long long n = (long long)batch * heads * seq * D;
  Dev q(n * 2), k(n * 2), v(n * 2), o(n * 2), lse((size_t)batch * heads * seq * 4);
  for (Dev* d : {&q, &k, &v}) fill_random<<<1024, 256>>>(static_cast<std::uint16_t*>(d->p), n, g_seed += 11, true);
  AttentionArgs a;
  a.dtype = DType::bf16; a.q = q.p; a.k = k.p; a.v = v.p; a.out = o.p; a.lse = static_cast<float*>(lse.p);
  a.batch = batch; a.q_heads = a.kv_heads = heads; a.q_len = a.kv_len = seq; a.head_dim = D;
  const long long st[3] = {(long long)heads * seq * D, (long long)seq * D, D};
  for (int d = 0; d < 3; ++d) a.q_stride[d] = a.k_stride[d] = a.v_stride[d] = a.out_stride[d] = st[d];
  a.lse_stride[0] = (long long)heads * seq; a.lse_stride[1] = seq; a.lse_stride[2] = 1;
  a.scale = 1.0f / std::sqrt(float(D)); a.causal = causal;
  const double flops = 4.0 * batch * heads * double(seq) * seq * D / (causal ? 2 : 1);
  for (Kernel kn : kernels) {
    if (kn == Kernel::prefill_wgmma && D == 96) continue;
    if (kn == Kernel::prefill_wgmma_pp && D != 64 && D != 128) continue;
    if (kn == Kernel::prefill_wgmma_tma && D == 96) continue;
    const float ms = median_ms([&](int) { detail::attention_cuda_kernel(a, 0, {}, kn, 0); }, 10);
    CK(cudaGetLastError());
    std::printf("prefill bf16 D%-3d seq %-5d b%-2d h16 %-6s %-6s %8.3f ms %7.1f TFLOP/s\n", D, seq, batch,
                causal ? "causal" : "full", kname(kn), ms, flops / ms * 1e-9);
  }
}

static double copy_gbps() {
  const size_t bytes = size_t(1) << 31;
  Dev a(bytes), b(bytes);
  const float ms = median_ms([&](int) { CK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice)); }, 10);
  return 2.0 * bytes / ms * 1e-6;
}

// splits_list: explicit split counts to time (0 = the library's automatic choice); each gets
// its own stream and graph figure over the same rotating cache copies.
static void bench_decode(int batch, int lk, int lq, double copy, const std::vector<int>& splits_list = {0}) {
  const int D = 128, hkv = 8, hq = 64;
  const long long kv = (long long)batch * hkv * lk * D;
  const long long set_bytes = 2 * kv * 2;
  const int sets = int(std::max<long long>(1, (512LL << 20) / set_bytes + 1));  // rotate past the L2
  std::vector<Dev*> ks, vs;
  for (int s = 0; s < sets; ++s) {
    ks.push_back(new Dev(kv * 2)); vs.push_back(new Dev(kv * 2));
    fill_random<<<1024, 256>>>(static_cast<std::uint16_t*>(ks.back()->p), kv, g_seed += 3, true);
    fill_random<<<1024, 256>>>(static_cast<std::uint16_t*>(vs.back()->p), kv, g_seed += 3, true);
  }
  const long long nq = (long long)batch * hq * lq * D;
  Dev q(nq * 2), o(nq * 2), lse((size_t)batch * hq * lq * 4);
  fill_random<<<1024, 256>>>(static_cast<std::uint16_t*>(q.p), nq, g_seed += 5, true);
  AttentionArgs a;
  a.dtype = DType::bf16; a.q = q.p; a.out = o.p; a.lse = static_cast<float*>(lse.p);
  a.batch = batch; a.q_heads = hq; a.kv_heads = hkv; a.q_len = lq; a.kv_len = lk; a.head_dim = D;
  const long long qs[3] = {(long long)hq * lq * D, (long long)lq * D, D}, kst[3] = {(long long)hkv * lk * D, (long long)lk * D, D};
  for (int d = 0; d < 3; ++d) { a.q_stride[d] = a.out_stride[d] = qs[d]; a.k_stride[d] = a.v_stride[d] = kst[d]; }
  a.lse_stride[0] = (long long)hq * lq; a.lse_stride[1] = lq; a.lse_stride[2] = 1;
  a.scale = 1.0f / std::sqrt(float(D)); a.causal = true;
  for (const int splits : splits_list) {
  const float ms = median_ms([&](int i) {
    a.k = ks[i % sets]->p; a.v = vs[i % sets]->p;
    detail::attention_cuda_kernel(a, 0, {}, Kernel::automatic, splits);
  }, 20);
  // The same calls replayed from a CUDA graph (no host launch gaps): 2·sets calls per replay.
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  const int calls = 2 * sets;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) {
    a.k = ks[i % sets]->p; a.v = vs[i % sets]->p;
    detail::attention_cuda_kernel(a, 0, Stream{st}, Kernel::automatic, splits);
  }
  CK(cudaStreamEndCapture(st, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  std::vector<float> tg;
  for (int r = 0; r < 12; ++r) {
    CK(cudaEventRecord(e0, st)); CK(cudaGraphLaunch(exec, st)); CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float x; CK(cudaEventElapsedTime(&x, e0, e1)); tg.push_back(x / calls);
  }
  std::sort(tg.begin() + 2, tg.end());
  const float gms = tg[2 + (tg.size() - 2) / 2];
  CK(cudaGraphExecDestroy(exec)); CK(cudaGraphDestroy(graph)); CK(cudaStreamDestroy(st));
  const double gbps = set_bytes / ms * 1e-6, ggbps = set_bytes / gms * 1e-6;
  sixfold::detail::attn::Problem pr{};
  pr.batch = batch; pr.kv_heads = hkv; pr.group = hq / hkv; pr.q_len = lq; pr.kv_len = lk;
  const int used = splits > 0 ? splits : sixfold::detail::attn::decode_splits(pr, 0);
  std::printf("decode bf16 D128 b%d hq64 hkv8 lq %-2d lk %-6d splits %4d%s stream %8.4f ms %5.1f%% | graph %8.4f ms %6.0f GB/s %5.1f%% of copy\n",
              batch, lq, lk, used, splits > 0 ? "  " : "a ", ms, 100 * gbps / copy, gms, ggbps, 100 * ggbps / copy);
  std::fflush(stdout);
  }
  for (auto* d : ks) delete d;
  for (auto* d : vs) delete d;
}

// Host time of one decode call (b8 hq64 hkv8 kv8192 d128, bf16): calls queued back to back
// without synchronizing, timed on the host — what the GPU waits for when it is idle at the call.
// Also the pieces: a stream-ordered scratch allocation + free, and an empty kernel launch.
__global__ void empty_kernel() {}
static void host_cost_decode() {
  const int batch = 8, lk = 8192, D = 128, hkv = 8, hq = 64;
  const long long kv = (long long)batch * hkv * lk * D, nq = (long long)batch * hq * D;
  Dev k(kv * 2), v(kv * 2), q(nq * 2), o(nq * 2);
  AttentionArgs a;
  a.dtype = DType::bf16; a.q = q.p; a.k = k.p; a.v = v.p; a.out = o.p;
  a.batch = batch; a.q_heads = hq; a.kv_heads = hkv; a.q_len = 1; a.kv_len = lk; a.head_dim = D;
  const long long qs[3] = {(long long)hq * D, D, D}, kst[3] = {(long long)hkv * lk * D, (long long)lk * D, D};
  for (int d = 0; d < 3; ++d) { a.q_stride[d] = a.out_stride[d] = qs[d]; a.k_stride[d] = a.v_stride[d] = kst[d]; }
  a.scale = 1.0f / std::sqrt(float(D)); a.causal = true;
  auto per_call_us = [](auto&& f, int n) {
    CK(cudaDeviceSynchronize());
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) f();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
    CK(cudaDeviceSynchronize());
    return us;
  };
  for (int r = 0; r < 2; ++r) {
    const double call = per_call_us([&] { detail::attention_cuda_kernel(a, 0, {}, Kernel::automatic, 0); }, 50);
    const double alloc = per_call_us([&] { void* p; CK(cudaMallocAsync(&p, 4 << 20, 0)); CK(cudaFreeAsync(p, 0)); }, 200);
    const double launch = per_call_us([&] { empty_kernel<<<1, 32>>>(); }, 200);
    std::printf("host per call: decode %.2f us | cudaMallocAsync+Free %.2f us | empty launch %.2f us\n", call, alloc, launch);
  }
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (mode == "info") return 0;
  if (mode == "check" || mode == "small") {
    int fails = 0, n = 0;
    for (const Case& c : check_cases(mode == "small")) {
      try { fails += !run_case(c); } catch (const std::exception& e) { std::printf("FAIL  %s: exception %s\n", c.name, e.what()); ++fails; }
      ++n;
    }
    fails += !check_merge();
    std::printf("%d of %d cases failed\n", fails, n + 1);
    return fails ? 1 : 0;
  }
  if (mode == "decode1") {  // one decode shape (b8 kv8192), for a profiler; then host cost per call
    const double copy = copy_gbps();
    bench_decode(8, 8192, 1, copy, {0});
    host_cost_decode();
    return 0;
  }
  if (mode == "decode") {
    // Split sweep: for each shape, the automatic count (a) and 1, 2, 3, 4, 6 and 8 waves of
    // resident blocks (132 SMs × 2 blocks of 128 threads for D 128).
    const double copy = copy_gbps();
    std::printf("device-to-device copy %.0f GB/s\n", copy);
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    // `decode split` instead: explicit counts 2..48 (≤ 16 merge inside a cluster unless
    // SIXFOLD_ATTENTION_CUDA_DECODE_MERGE=global) on the three bench shapes and two more.
    const bool by_count = argc > 2 && std::string(argv[2]) == "split";
    for (auto [batch, lk] : {std::pair<int, int>{8, 8192}, {2, 32768}, {1, 131072}, {1, 8192}, {1, 32768},
                             {8, 32768}, {8, 131072}}) {
      if (by_count && batch == 8 && lk > 8192) continue;
      const int blocks = batch * 8, resident = 2 * sms;
      std::vector<int> sl{0};
      if (by_count) {
        for (int n : {2, 4, 8, 12, 16, 24, 33, 48})
          if (n <= lk / 256) sl.push_back(n);
      } else {
        for (double w : {1.0, 2.0, 3.0, 4.0, 6.0, 8.0})
          sl.push_back(std::clamp(int(w * resident / blocks), 1, std::min(1024, lk / 256)));
        sl.erase(std::unique(sl.begin() + 1, sl.end()), sl.end());
      }
      bench_decode(batch, lk, 1, copy, sl);
    }
    return 0;
  }
  if (mode == "bench") {
    const double copy = copy_gbps();
    std::printf("device-to-device copy %.0f GB/s\n", copy);
    const std::vector<Kernel> both{Kernel::prefill_wgmma_tma, Kernel::prefill_wgmma_pp, Kernel::prefill_wgmma,
                                   Kernel::prefill_mma};
    for (bool causal : {false, true})
      for (int seq : {512, 2048, 8192, 16384}) bench_prefill(128, seq, causal, both);
    for (int D : {64, 96, 256})
      for (bool causal : {false, true}) bench_prefill(D, 4096, causal, both);
    for (int batch : {1, 8})
      for (int lk : {8192, 32768, 131072}) bench_decode(batch, lk, 1, copy);
    bench_decode(8, 32768, 16, copy);
  }
  return 0;
}
