// CPU backend of the norm ops: rows spread over all cores (static contiguous ranges), each row
// read from memory once and rewritten from L1/L2, 16 f32 lanes at a time (rows_cpu.hpp):
//
//   pass A (memory → registers, software prefetch 4 KB ahead and the RowStream one row ahead):
//           the streaming statistic — Σx² (rms), Σx and Σx² (layer), max (softmax kinds); with
//           a residual, s = x + r is rounded to the dtype, written to sum_out and kept as f32
//           in a per-thread row buffer;
//   pass B (from cache): the statistic that needs pass A's — exp(x − max) and its sum
//           (softmax: kept in the row buffer up to 65536 elements), Σexp(x − max) (log), and
//           for layer only where Σx² − nμ² would cancel too much (moments_enough), Σ(x − mf)
//           and Σ(x − mf)² about the one-pass mean (exact_moments);
//   pass C (from cache → memory): the output, converted and written once (non-temporal stores
//           for outputs of 8 MB and more); the row's mean / rstd saved first where asked.
//
// Every row is written with write_row<T, true>: the outputs' NaNs come from x, the residual or
// the weights (all of x's dtype) through f32 arithmetic, or are the default NaN, so for bf16 they
// have zero low halves and the rounding needs no NaN select (bf16_round_hi in rows_cpu.hpp).
//
// Sums: f32 lanes over blocks of 1024 elements (≤ 64 adds per lane), blocks added in f64, so
// 1M-element rows keep f32-level accuracy; the result depends on the row only (not on threads,
// alignment or stride).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "norm_entries.hpp"
#include "rows_cpu.hpp"
#include "sixfold/runtime/dtype.hpp"
#include "sixfold/runtime/vec_math.hpp"

namespace sixfold::detail {
namespace {

constexpr std::int64_t kBlock = 1024;
constexpr std::int64_t kSoftmaxBufferMax = 65536;  // longer rows recompute exp (no row buffer)
constexpr std::int64_t kSplitRowBytes = 1 << 20;   // rows this long are split over the threads

// Softmax's exp(x − m) as 2^(x·log2 e − m·log2 e): one FMA instead of a subtraction and a
// product (the rounding of m·log2 e is one factor on every exponential of the row and cancels in
// e / Σe; log_softmax, whose output holds log Σe, keeps the exact x − m). Dev box, bf16,
// same-session A/B, the row-buffer path: 16384x8192 24.10–24.37 → 23.06–23.60 ms, 65536x1024
// 12.83–12.87 → 12.39–12.56 ms.
template <DType T>
auto softmax_exp(float m) {
  const float ml = m * kLog2e;
  return [ml](vf16 v) { return vexp2_nonpositive<exp_degree<T>>(v * kLog2e - ml); };
}

// The 32 elements from i of a row into two vectors (lane order unspecified, as sums need), with
// the software prefetch ahead when the row streams from memory.
template <DType S, bool Prefetch>
inline void stream32(const void* x, std::int64_t i, vf16& v0, vf16& v1) {
  if constexpr (Prefetch) {
    prefetch_ahead(at<S>(x, i));
    if constexpr (kElemBytes<S> == 4) prefetch_ahead(at<S>(x, i + 16));
  }
  vload2_unordered<S>(at<S>(x, i), v0, v1);
}

// Σ f(v) over the n elements of the row at x (element type S); padded lanes hold `pad`, and
// f(pad) must be 0. Prefetch: 4 KB ahead, when the row comes from memory (pass A).
template <DType S, bool Prefetch, class F>
double row_sum(const void* x, std::int64_t n, float pad, F f, RowStream* next, double* blocks = nullptr) {
  double total = 0;
  for (std::int64_t b = 0; b < n; b += kBlock) {
    const std::int64_t m = std::min(kBlock, n - b);
    // Four accumulators: with two, the adds' latency (4 cycles a chain) set the loop's pace
    // (dev box, bf16 rms_norm 4096×4096: 79 → 82–84% of copy; layer_norm +3–5 points).
    vf16 a0{}, a1{}, a2{}, a3{};
    std::int64_t i = 0;
    for (; i + 64 <= m; i += 64) {
      vf16 v0, v1, v2, v3;
      stream32<S, Prefetch>(x, b + i, v0, v1);
      stream32<S, Prefetch>(x, b + i + 32, v2, v3);
      a0 += f(v0), a1 += f(v1), a2 += f(v2), a3 += f(v3);
    }
    for (; i + 32 <= m; i += 32) {
      vf16 v0, v1;
      stream32<S, Prefetch>(x, b + i, v0, v1);
      a0 += f(v0), a1 += f(v1);
    }
    if (next) next->step(m);
    if (i + 16 <= m) a2 += f(vload<S>(at<S>(x, b + i))), i += 16;
    if (i < m) a3 += f(vload_part<S>(at<S>(x, b + i), int(m - i), pad));
    const double block = double(hsum16((a0 + a1) + (a2 + a3)));
    total += block;
    if (blocks) blocks[b / kBlock] = block;
  }
  return total;
}

// Σv and Σv² over the row (as row_sum, both at once), v = x − k where Shift (padded lanes hold k).
template <DType S, bool Prefetch, bool Shift = false>
void row_sum2(const void* x, std::int64_t n, float k, double& s1, double& s2, RowStream* next,
              double* b1 = nullptr, double* b2 = nullptr) {
  for (std::int64_t b = 0; b < n; b += kBlock) {
    const std::int64_t m = std::min(kBlock, n - b);
    vf16 a0{}, a1{}, q0{}, q1{}, a2{}, a3{}, q2{}, q3{};  // four chains each, as row_sum
    std::int64_t i = 0;
    for (; i + 64 <= m; i += 64) {
      vf16 v0, v1, v2, v3;
      stream32<S, Prefetch>(x, b + i, v0, v1);
      stream32<S, Prefetch>(x, b + i + 32, v2, v3);
      if constexpr (Shift) v0 -= k, v1 -= k, v2 -= k, v3 -= k;
      a0 += v0, a1 += v1, q0 += v0 * v0, q1 += v1 * v1;
      a2 += v2, a3 += v3, q2 += v2 * v2, q3 += v3 * v3;
    }
    a0 += a2, a1 += a3, q0 += q2, q1 += q3;
    for (; i + 32 <= m; i += 32) {
      vf16 v0, v1;
      stream32<S, Prefetch>(x, b + i, v0, v1);
      if constexpr (Shift) v0 -= k, v1 -= k;
      a0 += v0, a1 += v1, q0 += v0 * v0, q1 += v1 * v1;
    }
    if (next) next->step(m);
    for (; i < m; i += 16) {
      vf16 v = ld<S>(x, b + i, int(std::min<std::int64_t>(16, m - i)), k);
      if constexpr (Shift) v -= k;
      a0 += v, q0 += v * v;
    }
    s1 += double(hsum16(a0 + a1)), s2 += double(hsum16(q0 + q1));
    if (b1) b1[b / kBlock] = double(hsum16(a0 + a1)), b2[b / kBlock] = double(hsum16(q0 + q1));
  }
}

// max of the row (from memory), NaN elements skipped: a NaN still makes the row NaN through
// exp(NaN − max) in the sum that follows (vexp_nonpositive keeps NaN).
template <DType S>
float row_max(const void* x, std::int64_t n, RowStream* next) {
  const vf16 ninf = vsplat(-INFINITY);
  vf16 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;  // four chains, as row_sum's accumulators
  std::int64_t i = 0;
  while (i + 32 <= n) {
    const std::int64_t start = i, stop = i + std::min<std::int64_t>(kBlock, (n - i) / 32 * 32);
    for (; i + 64 <= stop; i += 64) {
      vf16 v0, v1, v2, v3;
      stream32<S, true>(x, i, v0, v1);
      stream32<S, true>(x, i + 32, v2, v3);
      m0 = vmax16(v0, m0), m1 = vmax16(v1, m1), m2 = vmax16(v2, m2), m3 = vmax16(v3, m3);
    }
    for (; i < stop; i += 32) {
      vf16 v0, v1;
      stream32<S, true>(x, i, v0, v1);
      m0 = vmax16(v0, m0), m1 = vmax16(v1, m1);
    }
    next->step(stop - start);
  }
  for (; i < n; i += 16) m2 = vmax16(ld<S>(x, i, int(std::min<std::int64_t>(16, n - i)), -INFINITY), m2);
  return hmax16(vmax16(vmax16(m0, m1), vmax16(m2, m3)));
}

// s = x + residual rounded to T: written to sum_out and to buf (f32, in pair order: rows_cpu.hpp).
template <DType T, bool Split>
[[gnu::flatten]] void add_pass(const void* x, const void* r, void* sum_out, float* buf, std::int64_t n, bool nt, RowStream* next) {
  void* const dst[1] = {sum_out};
  write_rows_pairs<T, 1, true, true, Split>(dst, n, nt, [=](std::int64_t i, int m, vf16 (&out)[1][2]) {
    if (m == 32) prefetch_pair<T>(x, i), prefetch_pair<T>(r, i);
    else if (m == 16) prefetch_ahead(at<T>(x, i)), prefetch_ahead(at<T>(r, i));  // in order
    vf16 xv[2], rv[2];
    ld_chunk<T, Split>(x, i, m, xv), ld_chunk<T, Split>(r, i, m, rv);
    for (int h = 0; h < chunk_vectors(m); ++h) out[0][h] = vround_pair<T>(xv[h] + rv[h]);
    st_chunk(buf, i, m, out[0]);
  }, next);
}

struct Ctx {
  const void* w;  // n weights (ones when absent), rms/layer: f32, or T for long rows
  const void* b;  // n biases (zeros when absent), layer: the same type
  float eps;
  bool nt;
  float* mean = nullptr;  // saved statistics (rows), when asked
  float* rstd = nullptr;
  bool pipe = false;  // every output row on a 64-byte boundary or nt off: rows pipelined
  // Row r's statistics as the rewrite uses them.
  void save(std::int64_t r, float mf, float rs) const {
    if (mean) mean[r] = mf;
    if (rstd) rstd[r] = rs;
  }
};

// LayerNorm's variance from one pass over the row, Σx and Σx² with no shift: E[x²] − μ²
// multiplies the sums' relative error by 1 + μ²/var. Taken where μ² ≤ kC·var (kC: 1 for f32
// values, at most a doubling, as the shifted sums this replaced allowed; 8 for 16-bit values,
// whose outputs hold 8–11 bits); other rows (and NaN / inf rows) take exact_moments from cache.
// The shift this replaced (K, the mean of the row's first 64 elements) cost a subtraction a
// vector: on AVX2, where pass A is bound by its operations, bf16 layer_norm went 76–78 → 80–87%
// of copy (docs/perf/norm.md, session 33).
template <DType T>
bool moments_enough(double mean, double var) {
  constexpr double kC = kElemBytes<T> == 4 ? 1.0 : 8.0;
  return mean * mean <= kC * var;
}

// Where moments_enough fails, the exact moments from cache about mf, the mean the one-pass sums
// gave: Σ(x − mf) corrects the mean (a constant row's mean comes out exactly its value, so its
// x̂ is exactly 0), Σ(x − mf)²/n − d² is the variance with nothing left to cancel. blocks: the
// split path's per-block sums (b1, b2), its threads each summing a slice.
template <DType S>
void exact_moments(const void* x, std::int64_t n, float mf, double& s1, double& s2, double* b1 = nullptr,
                   double* b2 = nullptr) {
  s1 = 0, s2 = 0;
  row_sum2<S, false, true>(x, n, mf, s1, s2, nullptr, b1, b2);
}
inline void correct_moments(double d_sum, double sq_sum, std::int64_t n, float& mf, double& var) {
  const double d = d_sum / double(n);
  var = sq_sum / double(n) - d * d;
  mf = float(double(mf) + d);
}

// LayerNorm's x̂ = (x − μ)·r as one FMA, x·r − μ·r: rounding μ·r adds at most |μ·r|·2^−24 to x̂,
// kShift ulp of the row's scale where μ is within kShift standard deviations of 0 (kShift: 1 for
// f32 outputs, 256 for 16-bit ones) and var ≥ eps (x̂ then has an RMS of at least 0.7), below the
// output's precision. Other rows, where it would show (constant rows, whose x̂ is exactly 0; rows
// far from 0), keep (x − μ)·r. (The backward's dx and dw in that form measured within the host's
// noise: docs/perf/norm.md, session 33.)
template <DType Out>
bool centre_by_fma(float mean, float rstd, float eps) {
  constexpr float kShift = kElemBytes<Out> == 4 ? 1.f : 256.f;
  return std::isfinite(rstd) && 2.f * eps * rstd * rstd <= 1.f && std::fabs(mean * rstd) <= kShift;
}

// The scaled row x̂ of rms (x·r) and layer ((x − μ)·r, as one FMA where centre_by_fma allows).
// On AVX2 the rewrite is bound by its operations, and the FMA form is one a vector
// fewer: bf16 layer_norm 66–74 → 74–78% of copy. Every path of a row takes the same
// form, so a row's output does not depend on its path.
struct Scale {
  float r;
  vf16 operator()(vf16 x) const { return x * r; }
};
struct Centre {
  float m, r;
  vf16 operator()(vf16 x) const { return (x - m) * r; }
};
struct CentreFma {
  float r, nmr;
  vf16 operator()(vf16 x) const { return vfma(x, r, nmr); }
};
template <DType T, bool Layer, class F>
void with_xhat(float mean, float rstd, float eps, F&& f) {
  if constexpr (!Layer) {
    f(Scale{rstd});
  } else {
    if (centre_by_fma<T>(mean, rstd, eps))
      f(CentreFma{rstd, -(mean * rstd)});
    else
      f(Centre{mean, rstd});
  }
}

// rms / layer norm of one row whose values are at src (element type S: the input row, or the
// f32 buffer of s = x + residual), in T's pair order (rows_cpu.hpp: the f32 weights, bias and
// buffer are kept in it).
template <DType T, DType S, DType W, bool FromMemory, bool Split>
[[gnu::flatten]] void norm_row(NormKind kind, const Ctx& c, const void* src, void* dst, std::int64_t n, RowStream* next,
              std::int64_t row) {
  const void* w = c.w;
  if (kind == NormKind::rms) {
    const double ss = row_sum<S, FromMemory>(src, n, 0.0f, [](vf16 v) { return v * v; }, next);
    const float rs = float(1.0 / std::sqrt(ss / double(n) + double(c.eps)));
    c.save(row, 0.f, rs);
    void* const out1[1] = {dst};
    write_rows_pairs<T, 1, true, false, Split>(out1, n, c.nt, [=](std::int64_t i, int m, vf16 (&out)[1][2]) {
      vf16 xv[2], wv[2];
      ld_chunk<S, Split>(src, i, m, xv), ld_chunk<W, Split>(w, i, m, wv);
      for (int h = 0; h < chunk_vectors(m); ++h) out[0][h] = xv[h] * rs * wv[h];
    }, next);
  } else {
    // One pass from memory, Σx and Σx², where it is exact enough (moments_enough); otherwise
    // the exact moments from cache.
    double s1 = 0, s2 = 0;
    row_sum2<S, FromMemory>(src, n, 0.f, s1, s2, next);
    const double mean = s1 / double(n);
    double var = s2 / double(n) - mean * mean;
    float mf = float(mean);
    if (!moments_enough<T>(mean, var)) {  // also NaN / inf rows: the exact pass propagates them
      exact_moments<S>(src, n, mf, s1, s2);
      correct_moments(s1, s2, n, mf, var);
    }
    const float rs = float(1.0 / std::sqrt(var + double(c.eps)));
    c.save(row, mf, rs);
    const void* b = c.b;
    void* const out1[1] = {dst};
    with_xhat<T, true>(mf, rs, c.eps, [&](auto xhat) {
      write_rows_pairs<T, 1, true, false, Split>(out1, n, c.nt, [=](std::int64_t i, int m, vf16 (&out)[1][2]) {
        vf16 xv[2], wv[2], bv[2];
        ld_chunk<S, Split>(src, i, m, xv), ld_chunk<W, Split>(w, i, m, wv), ld_chunk<W, Split>(b, i, m, bv);
        for (int h = 0; h < chunk_vectors(m); ++h) out[0][h] = xhat(xv[h]) * wv[h] + bv[h];
      }, next);
    });
  }
}

// One vector of a forward row into its sums: Σv² (rms), or Σv and Σv² (layer). A fused-add row's
// sums are made in the same order as those of a row read, so add_layer_norm's statistics are
// layer_norm's of its sum.
template <bool Layer>
inline void add_sums(vf16 v, vf16 (&a)[2]) {
  if constexpr (Layer) a[0] += v, a[1] += v * v;
  else a[0] += v * v;
}

// Pass A of a forward rms / layer row read from memory, in row_sums' chunks: Σx² (rms), or Σx
// and Σx² (layer).
template <DType T, bool Split, bool Layer>
struct FwdSums {
  const void* x;
  explicit FwdSums(const void* row) : x(row) {}
  void operator()(std::int64_t i, int m, vf16 (&acc)[2][2]) const {
    const auto add = [&](vf16 v, vf16 (&a)[2]) { add_sums<Layer>(v, a); };
    vf16 v[2];
    if (m == 32) {
      // The next row's lines 4 KB ahead: into L1 for LayerNorm, into L2 for RMSNorm (dev box,
      // bf16, same-session A/B, % of copy: rms 16384×8192 89–90 → 95–100, 4096×4096 91–94 →
      // 95–97, 65536×1024 equal; layer the other way: −3 / +3 / −1.5).
      if constexpr (Layer) prefetch_pair<T>(x, i);
      else for (int h = 0; h < kElemBytes<T> / 2; ++h) prefetch_ahead<4096, 2>(at<T>(x, i + 16 * h));
      ld_chunk<T, Split>(x, i, 32, v);
      add(v[0], acc[0]), add(v[1], acc[Layer ? acc_row(1) : 1]);  // rms: one sum, registers enough
    } else {
      ld_chunk<T, Split>(x, i, m, v);  // padded lanes add 0
      add(v[0], acc[0]);
    }
  }
};

// A forward rms / layer row's (mean, rstd) from its FwdSums or AddSums (layer: the exact moments
// from the row x, of element type S, where moments_enough<T> fails, as norm_row; T: the values'
// dtype).
template <DType T, DType S, bool Layer>
std::pair<float, float> fwd_stats(const void* x, std::int64_t n, const double (&s)[2], float eps) {
  if constexpr (!Layer) {
    return {0.f, float(1.0 / std::sqrt(s[0] / double(n) + double(eps)))};
  } else {
    const double mean = s[0] / double(n);
    double var = s[1] / double(n) - mean * mean;
    float mf = float(mean);
    if (!moments_enough<T>(mean, var)) {
      double s1, s2;
      exact_moments<S>(x, n, mf, s1, s2);
      correct_moments(s1, s2, n, mf, var);
    }
    return {mf, float(1.0 / std::sqrt(var + double(eps)))};
  }
}

// The rms / layer rows [lo, hi) (no residual), pipelined as the backward's (norm_backward_cpu.cpp,
// backward_rows): the rewrite of each row (pass C) beside pass A of the next (write_row_beside),
// so that the next row's reads from memory overlap this row's work and stores. Rows whose
// output chunks start at the row's start only (rows_aligned64, or plain stores).
template <DType T, DType W, bool Split, bool Layer>
[[gnu::flatten]] void norm_rows_piped(const NormArgs& a, const Ctx& c, std::int64_t lo, std::int64_t hi) {
  const std::int64_t n = a.x.n;
  const auto row_x = [&](std::int64_t r) { return at<T>(a.x.data, r * a.x.row_stride); };
  if (lo >= hi) return;
  FwdSums<T, Split, Layer> cur(row_x(lo));
  double s[2];
  row_sums<2>(n, s, cur, nullptr);
  auto [mf, rs] = fwd_stats<T, T, Layer>(cur.x, n, s, c.eps);
  const void* w = c.w;
  const void* b = c.b;
  for (std::int64_t r = lo; r < hi; ++r) {
    c.save(r, mf, rs);
    const void* x = row_x(r);
    void* y = at<T>(a.out.data, r * a.out.row_stride);
    with_xhat<T, Layer>(mf, rs, c.eps, [&](auto xhat) {
      const auto chunk = [=](std::int64_t i, int m, vf16 (&out)[2]) {
        vf16 xv[2], wv[2], bv[2];
        ld_chunk<T, Split>(x, i, m, xv), ld_chunk<W, Split>(w, i, m, wv);
        if constexpr (Layer) ld_chunk<W, Split>(b, i, m, bv);
        for (int h = 0; h < chunk_vectors(m); ++h) {
          if constexpr (Layer) out[h] = xhat(xv[h]) * wv[h] + bv[h];
          else out[h] = xhat(xv[h]) * wv[h];
        }
      };
      if (r + 1 < hi) {
        const FwdSums<T, Split, Layer> nxt(row_x(r + 1));
        write_row_beside<T, true, Split>(y, n, c.nt, chunk, nxt, s);
        std::tie(mf, rs) = fwd_stats<T, T, Layer>(nxt.x, n, s, c.eps);
      } else {
        write_row_pairs<T, true, Split>(y, n, c.nt, chunk, nullptr);
      }
    });
  }
}

// Pass A of a fused-add row: s = x + residual rounded to T, written to sum_out (plain or
// non-temporal stores, as write_row_beside's) and to buf (f32, pair order), with its sums as
// FwdSums'.
template <DType T, bool Split, bool Layer>
struct AddSums {
  const void* x;
  const void* res;
  void* sum_out;
  float* buf;
  bool nt;
  AddSums(const void* xr, const void* rr, void* so, float* b, bool stream)
      : x(xr), res(rr), sum_out(so), buf(b), nt(stream) {}
  void operator()(std::int64_t i, int m, vf16 (&acc)[2][2]) const {
    const auto add = [&](vf16 v, vf16 (&a)[2]) { add_sums<Layer>(v, a); };
    vf16 xv[2], rv[2], s[2];
    if (m == 32) {
      prefetch_pair<T>(x, i), prefetch_pair<T>(res, i);
      ld_chunk<T, Split>(x, i, 32, xv), ld_chunk<T, Split>(res, i, 32, rv);
      s[0] = vround_pair<T>(xv[0] + rv[0]), s[1] = vround_pair<T>(xv[1] + rv[1]);
      if constexpr (kPairSplit<T, Split>) vstore_pair<T, true, true>(at<T>(sum_out, i), s[0], s[1], nt);
      else vstore2<T, true>(at<T>(sum_out, i), s[0], s[1], nt);
      add(s[0], acc[0]), add(s[1], acc[Layer ? acc_row(1) : 1]);
    } else {
      ld_chunk<T, Split>(x, i, m, xv), ld_chunk<T, Split>(res, i, m, rv);
      s[0] = vround_pair<T>(xv[0] + rv[0]);
      st_chunk(buf, i, m, s);
      if (m == 16) {
        vstore<T>(at<T>(sum_out, i), s[0]);
        add(s[0], acc[0]);
      } else {
        vstore_part<T>(at<T>(sum_out, i), m, s[0]);
        add(ld<DType::f32>(buf, i, m), acc[0]);  // padded lanes add 0
      }
      return;
    }
    st_chunk(buf, i, m, s);
  }
};

// The fused-add rows [lo, hi), pipelined as norm_rows_piped: the rewrite of row r from its f32
// buffer beside pass A of row r + 1 (AddSums: the add, sum_out, the other buffer, the sums).
template <DType T, DType W, bool Split, bool Layer>
[[gnu::flatten]] void add_rows_piped(const NormArgs& a, const Ctx& c, std::int64_t lo, std::int64_t hi) {
  const std::int64_t n = a.x.n;
  if (lo >= hi) return;
  std::vector<float> buffers(2 * std::size_t(n));
  const auto sums_of = [&](std::int64_t r, float* buf) {
    return AddSums<T, Split, Layer>(at<T>(a.x.data, r * a.x.row_stride), at<T>(a.residual.data, r * a.residual.row_stride),
                                    at<T>(a.sum_out.data, r * a.sum_out.row_stride), buf, c.nt);
  };
  float* cur = buffers.data();
  float* nxt = cur + n;
  const auto first = sums_of(lo, cur);
  double s[2];
  row_sums<2>(n, s, first, nullptr);
  auto [mf, rs] = fwd_stats<T, DType::f32, Layer>(cur, n, s, c.eps);
  const void* w = c.w;
  const void* b = c.b;
  for (std::int64_t r = lo; r < hi; ++r) {
    c.save(r, mf, rs);
    void* y = at<T>(a.out.data, r * a.out.row_stride);
    const float* src = cur;
    with_xhat<T, Layer>(mf, rs, c.eps, [&](auto xhat) {
      const auto chunk = [=](std::int64_t i, int m, vf16 (&out)[2]) {
        vf16 xv[2], wv[2], bv[2];
        ld_chunk<DType::f32, Split>(src, i, m, xv), ld_chunk<W, Split>(w, i, m, wv);
        if constexpr (Layer) ld_chunk<W, Split>(b, i, m, bv);
        for (int h = 0; h < chunk_vectors(m); ++h) {
          if constexpr (Layer) out[h] = xhat(xv[h]) * wv[h] + bv[h];
          else out[h] = xhat(xv[h]) * wv[h];
        }
      };
      if (r + 1 < hi) {
        const auto next_row = sums_of(r + 1, nxt);
        write_row_beside<T, true, Split>(y, n, c.nt, chunk, next_row, s);
        std::tie(mf, rs) = fwd_stats<T, DType::f32, Layer>(nxt, n, s, c.eps);
        std::swap(cur, nxt);
      } else {
        write_row_pairs<T, true, Split>(y, n, c.nt, chunk, nullptr);
      }
    });
  }
}

template <DType T>
void softmax_row(NormKind kind, const Ctx& c, const void* x, void* dst, float* buf, std::int64_t n,
                 RowStream* next) {
  const float m = row_max<T>(x, n, next);
  if (kind == NormKind::softmax && n > kSoftmaxBufferMax) {
    // Long rows: exp computed twice (an f32 buffer of the row would take L2 from the rows).
    const auto e_of = softmax_exp<T>(m);
    const double s = row_sum<T, false>(x, n, -INFINITY, e_of, next);
    const float inv = float(1.0 / s);
    write_row<T, true>(dst, n, c.nt, [=](std::int64_t i, int m2) { return e_of(ld<T>(x, i, m2)) * inv; }, next);
  } else if (kind == NormKind::softmax) {
    // e = exp(x − m) into buf, Σe; then y = e / Σe (a NaN in the row makes Σe, so y, NaN).
    const auto e_of = softmax_exp<T>(m);
    double s = 0;
    for (std::int64_t b0 = 0; b0 < n; b0 += kBlock) {
      const std::int64_t end = b0 + std::min(kBlock, n - b0);
      // One vector a step and one accumulator: two of each left the AVX2 build short of
      // registers, and the accumulators went to the stack.
      vf16 a0{};
      std::int64_t i = b0;
      for (; i + 16 <= end; i += 16) {
        const vf16 e0 = e_of(vload<T>(at<T>(x, i)));
        vstore<DType::f32>(buf + i, e0);
        a0 += e0;
      }
      for (; i < end; i += 16) {
        const int k = int(std::min<std::int64_t>(16, end - i));
        const vf16 e = e_of(ld<T>(x, i, k, -INFINITY));
        if (k == 16) vstore<DType::f32>(buf + i, e);
        else vstore_part<DType::f32>(buf + i, k, e);
        a0 += e;
      }
      s += double(hsum16(a0));
      next->step(end - b0);
    }
    const float inv = float(1.0 / s);
    write_row<T, true>(dst, n, c.nt, [=](std::int64_t i, int m) { return ld<DType::f32>(buf, i, m) * inv; }, next);
  } else {
    const double s = row_sum<T, false>(x, n, -INFINITY, [m](vf16 v) { return vexp_nonpositive<exp_degree<T>>(v - m); }, next);
    const float shift = float(double(m) + std::log(s));
    write_row<T, true>(dst, n, c.nt, [=](std::int64_t i, int m) { return ld<T>(x, i, m) - shift; }, next);
  }
}

template <DType T, DType W, bool Split>
void norm_rows_with(const NormArgs& a, const Ctx& c) {
  const std::int64_t n = a.x.n, rows = a.x.rows;
  const bool norm = a.kind == NormKind::rms || a.kind == NormKind::layer;
  const bool add = a.residual.data != nullptr;
  const bool need_buf = add || (a.kind == NormKind::softmax && n <= kSoftmaxBufferMax);
  const bool parallel = rows > 1 && rows * n >= (1 << 15);
#pragma omp parallel if (parallel)
  {
    std::vector<float> buf(need_buf ? std::size_t(n) : 0);
    // Static contiguous row ranges; the rows ahead are prefetched while a row is worked on.
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const std::int64_t lo = rows * t / nt, hi = rows * (t + 1) / nt;
    RowStream next;
    next.base[0] = static_cast<const char*>(a.x.data), next.stride[0] = a.x.row_stride * kElemBytes<T>;
    if (add) {
      next.base[1] = static_cast<const char*>(a.residual.data);
      next.stride[1] = a.residual.row_stride * kElemBytes<T>;
    }
    next.row_bytes = n * kElemBytes<T>;
    // Passes over a row that step the prefetch (see norm_row, softmax_row, add_pass).
    next.per_row = n * (2 + (a.kind == NormKind::softmax || a.kind == NormKind::log_softmax ? 1 : 0) + (add ? 1 : 0));
    next.start(lo, hi);
    if (norm && c.pipe) {
      if (add && a.kind == NormKind::layer) add_rows_piped<T, W, Split, true>(a, c, lo, hi);
      else if (add) add_rows_piped<T, W, Split, false>(a, c, lo, hi);
      else if (a.kind == NormKind::layer) norm_rows_piped<T, W, Split, true>(a, c, lo, hi);
      else norm_rows_piped<T, W, Split, false>(a, c, lo, hi);
    } else
    for (std::int64_t r = lo; r < hi; ++r) {
      const void* x = at<T>(a.x.data, r * a.x.row_stride);
      void* y = at<T>(a.out.data, r * a.out.row_stride);
      if (add) {
        add_pass<T, Split>(x, at<T>(a.residual.data, r * a.residual.row_stride),
                    at<T>(a.sum_out.data, r * a.sum_out.row_stride), buf.data(), n, c.nt, &next);
        norm_row<T, DType::f32, W, false, Split>(a.kind, c, buf.data(), y, n, &next, r);
      } else if (norm) {
        norm_row<T, T, W, true, Split>(a.kind, c, x, y, n, &next, r);
      } else {
        softmax_row<T>(a.kind, c, x, y, buf.data(), n, &next);
      }
    }
    if (c.nt) stream_fence();
  }
}

// Rows of at least kSplitRowBytes (longer than a core's L2 can keep while it works on them),
// without a residual: every row is cut at 1024-element blocks into one slice per thread; each
// thread reduces its slice from memory into per-block sums, the threads meet at a barrier, and
// each adds all the blocks in row order (the monoid's merge: the same f64 additions, so the same
// bits, as one thread working on the whole row), then rewrites its slice from its own L2.
template <DType T, DType W>
void split_rows(const NormArgs& a, const Ctx& c) {
  const std::int64_t n = a.x.n, rows = a.x.rows, nb = (n + kBlock - 1) / kBlock;
  std::vector<double> p1[2] = {std::vector<double>(std::size_t(nb)), std::vector<double>(std::size_t(nb))};
  std::vector<double> p2[2] = {std::vector<double>(std::size_t(nb)), std::vector<double>(std::size_t(nb))};
  std::vector<float> maxes[2];
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#pragma omp single
    maxes[0].assign(std::size_t(nt), 0.0f), maxes[1].assign(std::size_t(nt), 0.0f);
    const std::int64_t c0 = std::min(n, nb * t / nt * kBlock), c1 = std::min(n, nb * (t + 1) / nt * kBlock);
    const std::int64_t len = c1 - c0, b0 = c0 / kBlock;
    const void* w = c.w ? at<W>(c.w, c0) : nullptr;
    const void* bias = c.b ? at<W>(c.b, c0) : nullptr;
    RowStream next;
    next.base[0] = static_cast<const char*>(at<T>(a.x.data, c0)), next.stride[0] = a.x.row_stride * kElemBytes<T>;
    next.row_bytes = std::max<std::int64_t>(len, 1) * kElemBytes<T>;
    next.per_row = std::max<std::int64_t>(len, 1) * 2;
    next.start(0, rows);
    auto total = [nb](const std::vector<double>& p) {
      double s = 0;
      for (std::int64_t b = 0; b < nb; ++b) s += p[std::size_t(b)];
      return s;
    };
    for (std::int64_t r = 0; r < rows; ++r) {
      const int par = int(r & 1);
      const void* xr = at<T>(a.x.data, r * a.x.row_stride);
      const void* x = at<T>(xr, c0);
      void* y = at<T>(at<T>(a.out.data, r * a.out.row_stride), c0);
      double* q1 = p1[par].data() + b0;
      double* q2 = p2[par].data() + b0;
      if (a.kind == NormKind::rms) {
        row_sum<T, true>(x, len, 0.0f, [](vf16 v) { return v * v; }, &next, q1);
#pragma omp barrier
        const float rs = float(1.0 / std::sqrt(total(p1[par]) / double(n) + double(c.eps)));
        if (t == 0) c.save(r, 0.f, rs);
        write_row<T, true>(y, len, c.nt, [=](std::int64_t i, int m) { return ld<T>(x, i, m) * rs * ld<W>(w, i, m); }, &next);
      } else if (a.kind == NormKind::layer) {
        double s1 = 0, s2 = 0;
        row_sum2<T, true>(x, len, 0.f, s1, s2, &next, q1, q2);
#pragma omp barrier
        const double mean = total(p1[par]) / double(n);
        double var = total(p2[par]) / double(n) - mean * mean;
        float mf = float(mean);
        if (!moments_enough<T>(mean, var)) {  // the exact moments, as norm_row (all threads take this branch)
#pragma omp barrier
          exact_moments<T>(x, len, mf, s1, s2, q1, q2);
#pragma omp barrier
          correct_moments(total(p1[par]), total(p2[par]), n, mf, var);
#pragma omp barrier
        }
        const float rs = float(1.0 / std::sqrt(var + double(c.eps)));
        if (t == 0) c.save(r, mf, rs);
        with_xhat<T, true>(mf, rs, c.eps, [&](auto xhat) {
          write_row<T, true>(y, len, c.nt, [=](std::int64_t i, int m) {
            return xhat(ld<T>(x, i, m)) * ld<W>(w, i, m) + ld<W>(bias, i, m);
          }, &next);
        });
      } else {
        maxes[par][std::size_t(t)] = len > 0 ? row_max<T>(x, len, &next) : -INFINITY;
#pragma omp barrier
        float m = -INFINITY;
        for (float v : maxes[par]) m = v > m ? v : m;
        const auto e_of = softmax_exp<T>(m);
        if (a.kind == NormKind::softmax) row_sum<T, false>(x, len, -INFINITY, e_of, nullptr, q1);
        else row_sum<T, false>(x, len, -INFINITY, [m](vf16 v) { return vexp_nonpositive<exp_degree<T>>(v - m); }, nullptr, q1);
#pragma omp barrier
        const double s = total(p1[par]);
        if (a.kind == NormKind::softmax) {
          const float inv = float(1.0 / s);
          write_row<T, true>(y, len, c.nt, [=](std::int64_t i, int m2) { return e_of(ld<T>(x, i, m2)) * inv; }, &next);
        } else {
          const float shift = float(double(m) + std::log(s));
          write_row<T, true>(y, len, c.nt, [=](std::int64_t i, int m2) { return ld<T>(x, i, m2) - shift; }, &next);
        }
      }
    }
    if (c.nt) stream_fence();
  }
}

// split: the rms / layer rows in pair order (rows_cpu.hpp; see norm_rows).
template <DType T, DType W>
void norm_rows_dispatch(const NormArgs& a, const Ctx& c, bool split) {
  if (!a.residual.data && a.x.n * kElemBytes<T> >= kSplitRowBytes && omp_get_max_threads() > 1)
    return split_rows<T, W>(a, c);
  if constexpr (kPairSplit<T>)
    if (split) return norm_rows_with<T, W, true>(a, c);
  norm_rows_with<T, W, false>(a, c);
}

template <DType T>
void norm_rows(const NormArgs& a) {
  const std::int64_t n = a.x.n, rows = a.x.rows;
  const bool norm = a.kind == NormKind::rms || a.kind == NormKind::layer;
  const bool add = a.residual.data != nullptr;
  // Pair order, and rows pipelined (Ctx::pipe), unless the outputs stream, a row of them starts
  // off a 64-byte boundary and the in-order path is the faster there (output_plan, rows_cpu.hpp).
  const auto [nt, split] =
      output_plan(stream_output(rows * n * kElemBytes<T> * (add ? 2 : 1)),
                  rows_aligned64<T>(a.out.data, a.out.row_stride, rows) &&
                      (!add || rows_aligned64<T>(a.sum_out.data, a.sum_out.row_stride, rows)),
                  norm);
  // Weight and bias as f32, converted once per call (ones / zeros when absent); for long rows
  // they stay in T (an f32 copy of 1M weights and biases would take L2 from the rows).
  if (norm && n > kF32WeightsMax && T != DType::f32) {
    std::vector<std::uint16_t> ones, zeros;
    const void* w = a.weight;
    const void* b = a.bias;
    if (!w) ones.assign(std::size_t(n), T == DType::bf16 ? 0x3f80 : 0x3c00), w = ones.data();
    if (!b) zeros.assign(std::size_t(n), 0), b = zeros.data();
    return norm_rows_dispatch<T, T>(a, Ctx{w, b, a.eps, nt, a.mean, a.rstd, split}, split);
  }
  std::vector<float> w, b;
  if (norm) {
    w.assign(std::size_t(n), 1.0f);
    if (a.weight) load_row(a.dtype, a.weight, w.data(), n);
    if (a.kind == NormKind::layer) {
      b.assign(std::size_t(n), 0.0f);
      if (a.bias) load_row(a.dtype, a.bias, b.data(), n);
    }
    // As norm_row reads them (no-ops for the split path's rows, which take T's weights).
    if (split) to_pair_order<T>(w.data(), n);
    if (split && !b.empty()) to_pair_order<T>(b.data(), n);
  }
  norm_rows_dispatch<T, DType::f32>(a, Ctx{w.data(), b.data(), a.eps, nt, a.mean, a.rstd, split}, split);
}

}  // namespace

void norm_cpu(const NormArgs& a) {
  with_float_dtype(a.dtype, [&]<DType T>() { norm_rows<T>(a); });
}

}  // namespace sixfold::detail
