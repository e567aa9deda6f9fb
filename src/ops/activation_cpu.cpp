// CPU backend of the activations: one streaming pass, 16 f32 lanes at a time (rows_cpu.hpp):
// each input element is read once (software prefetch ahead of the stream), transformed in
// registers and written once (non-temporal stores for outputs larger than the cache). Rows of
// contiguous tensors are one flat range, cut evenly over the cores (a bias indexed by a running
// column); otherwise rows are spread over the cores in static contiguous ranges.
//
//   gelu (erf):  u/2 · (1 + erf(u/√2)), erf(z) = z·P(z²)/Q(z²) on |z| <= 4 (±1 beyond; P, Q of
//                degree 5, a weighted least-squares fit to the minimax error: |error| <= 4e-7
//                evaluated in f32, against the 1-ulp libm erf that cost 9 ns per element here),
//                evaluated in u directly with its scale folded in (GeluErfFolded)
//   gelu (tanh): u/2 · (1 + tanh(t)) = u·sigmoid(2t),  t = √(2/π)·(u + 0.044715u³)
//   silu_gate:   a·sigmoid(a)·b
// bf16 / f16 outputs (AVX-512) take both GELU forms from GTable instead: u·G(u), G(−|u|) by 32
// cubics looked up with vpermt2ps (12 vector instructions per 16 elements against 22).
// (exp: vexp with the polynomial degree of the dtype; 1/q: vrcp, rows_cpu.hpp.) NaN propagates;
// gelu(+inf) = +inf, gelu(−inf) = NaN (0·inf in both forms), silu(−inf) = NaN.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "activation_entries.hpp"
#include "rows_cpu.hpp"

namespace sixfold::detail {
namespace {

// Φ(−a) for a ≥ 2, where 1/2 + u·P̂/Q̂ cancels (at u = −5.4 it kept no correct digit of a
// result of −1.7e-7): a·erfc(a/√2)·e^(a²/2) is a degree-7 polynomial M in s = 1/a (least squares,
// weighted for relative error, on [0, 1/2]: dev/activation/erf_tail_fit.cpp), and
// Φ(−a) = M(s)·s·e^(−a²/2)/2, relative error ≤ 5e-6 for a < 13 (e^(−a²/2)'s argument rounds).
// a = +inf gives 0.
SIXFOLD_VEC vf16 phi_far_tail(vf16 a) {
  constexpr float m[8] = {7.978851795e-01f, -1.823188504e-04f, -7.890898585e-01f, -1.650689542e-01f,
                          3.939515829e+00f, -7.778289318e+00f, 6.980919838e+00f, -2.522224665e+00f};
  const vf16 s = 1.0f / a;
  vf16 p = s * m[7] + m[6];
  for (int k = 5; k >= 0; --k) p = p * s + m[k];
  return p * s * vexp_nonpositive<5>(a * a * -0.5f) * 0.5f;
}

// u·Φ(u) by the folded fit (GeluErfFolded): Φ = 1/2 + u·P̂(w)/Q̂(w) clamped to [0, 1]; below
// kFarTail<T> (in vectors that have such lanes), Φ from phi_far_tail. The fit's error in Φ is
// ~3e-8 absolute: relative 1.3e-6 at u = −2 for f32 outputs, 1.3e-4 at −3.5 for 16-bit ones (a
// 60th of a bf16 ulp, an 8th of an f16 one), where only 0.02% of N(0, 1) inputs lie beyond.
template <DType T>
constexpr float kFarTail = T == DType::f32 ? -2.0f : -3.5f;
template <DType T>
SIXFOLD_VEC vf16 gelu_erf(vf16 u) {
  constexpr GeluErfFolded c = gelu_erf_folded();
  const vf16 u2 = u * u;
  const vf16 w = vselect(u2 < GeluErfFolded::kWMax, u2, vsplat(GeluErfFolded::kWMax));
  vf16 p = w * c.p[0] + c.p[1];
  vf16 q = w * c.q[0] + c.q[1];
  for (int k = 2; k < 6; ++k) {
    p = p * w + c.p[k];
    q = q * w + c.q[k];
  }
  vf16 phi = u * p * vrcp(q) + 0.5f;
  phi = vselect(phi < 1.0f, phi, vsplat(1.0f));
  const vi16 far = u < kFarTail<T>;
  if (vany(far)) phi = vselect(far, phi_far_tail(-u), phi);
  return u * vmax16(phi, vf16{});
}

#if defined(__AVX512F__) && defined(__AVX512DQ__)
// 16-bit outputs: both GELU forms are u·G(u) with G(−a) = 1 − G(a) (Φ for erf; sigmoid(2t(u))
// for tanh, t odd), so G(−a) on a = |u| ∈ [0, 8) suffices. It is held as 32 cubics, one per
// interval of width 1/4 about k/4 (k = 0..31), each in e = a − k/4 ∈ [−1/8, 1/8], fitted once
// (double, least squares on 48 Chebyshev nodes weighted by 1/G: relative error, also deep in the
// tail) and looked up by vpermt2ps with k = rint(4a), the low bits of a + 1.5·2^21; e is one
// vreduceps (a less a rounded to 2 fraction bits: exact, same rounding). The last interval,
// a ≥ 7.625, is 0 (G(−7.625) = 1.2e-14 for erf), so gelu(−inf) stays −inf·0 = NaN. 12 vector
// instructions per 16 elements (the rational fit took 22). Every finite bf16 / f16 input with
// |u| < 12, against the correctly rounded float64 value: f16 within 1 ulp everywhere, bf16 off by
// 2+ ulps only below u = −5.8 (|y| < 5e-10) and 0 from −7.625 down (dev/activation/ulp_probe.cpp;
// docs/perf/activation.md). f32 outputs keep the rational fit (|error| <= 4e-7).
struct GTable {
  static constexpr float kScale = 4.0f;   // intervals a quarter wide: vreduceps with 2 fraction bits
  static constexpr float kAMax = 7.874f;  // |u| clamp: rint(kScale·kAMax) = 31, the last interval
  static_assert(kScale * kAMax < 31.5f);
  alignas(64) float c[4][32];  // c[j][k]: coefficient of e^j on interval k
};
template <ActivationKind K>
const GTable& g_table() {
  static const GTable table = [] {
    GTable t{};
    const auto g_neg = [](double a) {  // G(−a)
      if constexpr (K == ActivationKind::gelu_erf) return 0.5 * std::erfc(a / std::sqrt(2.0));
      const double u = -a, m = 2.0 * double(ActivationMath::kSqrt2OverPi) * (u + 0.044715 * u * u * u);
      return 1.0 / (1.0 + std::exp(-m));
    };
    constexpr int kNodes = 48;
    for (int k = 0; k < 31; ++k) {
      double ata[4][5] = {};  // normal equations, weighted by 1/G²
      for (int j = 0; j < kNodes; ++j) {
        const double e = 0.5 / GTable::kScale * std::cos(M_PI * (j + 0.5) / kNodes);
        const double f = g_neg(k / double(GTable::kScale) + e), wgt = 1.0 / (f * f);
        const double pw[4] = {1.0, e, e * e, e * e * e};
        for (int r = 0; r < 4; ++r) {
          for (int c = 0; c < 4; ++c) ata[r][c] += wgt * pw[r] * pw[c];
          ata[r][4] += wgt * pw[r] * f;
        }
      }
      for (int col = 0; col < 4; ++col)  // Gauss–Jordan (the matrix is positive definite)
        for (int r = 0; r < 4; ++r) {
          if (r == col) continue;
          const double q = ata[r][col] / ata[col][col];
          for (int c = col; c < 5; ++c) ata[r][c] -= q * ata[col][c];
        }
      for (int j = 0; j < 4; ++j) t.c[j][k] = float(ata[j][4] / ata[j][j]);
    }
    return t;  // interval 31: zeros
  }();
  return table;
}

// u·G(u) from the table (see GTable). NaN propagates (vrangeps keeps it, the cubic of a NaN is
// NaN); u = +inf gives +inf (G = 1), u = −inf gives NaN (−inf·0), as the rational fit does.
struct GLookup {
  __m512 lo[4], hi[4];
  explicit GLookup(const GTable& t) {
    for (int j = 0; j < 4; ++j) lo[j] = _mm512_load_ps(t.c[j]), hi[j] = _mm512_load_ps(t.c[j] + 16);
  }
  // G(−a) for a = min(|u|, kAMax), which is returned too.
  __m512 tail(__m512 u, __m512& a) const {
    constexpr float kMagic = 3145728.0f;  // 1.5·2^21: rint(4x) in the low mantissa bits of x + kMagic
    static_assert(GTable::kScale == 4.0f);
    // a = min(|u|, kAMax): the operand of smaller magnitude, sign cleared (imm 0b1010)
    a = _mm512_range_ps(u, _mm512_set1_ps(GTable::kAMax), 0b1010);
    const __m512i k = _mm512_castps_si512(_mm512_add_ps(a, _mm512_set1_ps(kMagic)));
    // e = a − rint(4a)/4: vreduceps keeping 2 fraction bits, round to nearest even (as the add),
    // precision exception suppressed (imm 0x28)
    const __m512 e = _mm512_reduce_ps(a, 0x28);
    __m512 g = _mm512_permutex2var_ps(lo[3], k, hi[3]);
    g = _mm512_fmadd_ps(g, e, _mm512_permutex2var_ps(lo[2], k, hi[2]));
    g = _mm512_fmadd_ps(g, e, _mm512_permutex2var_ps(lo[1], k, hi[1]));
    return _mm512_fmadd_ps(g, e, _mm512_permutex2var_ps(lo[0], k, hi[0]));
  }
  // u·G(u) from g = G(−|u|): G(u) = 1 − g for u > 0.
  static vf16 times_g(__m512 u, __m512 g) {
    const __mmask16 pos = _mm512_cmp_ps_mask(u, _mm512_setzero_ps(), _CMP_GT_OQ);
    return (vf16)_mm512_mul_ps(u, _mm512_mask_sub_ps(g, pos, _mm512_set1_ps(1.0f), g));
  }
  // The same as max(u, 0) − a·g in two instructions (one rounding where u > 0, bit for bit
  // times_g where u < 0), for finite u with a nonzero result: u = −inf gives 0 here, not
  // times_g's −inf·0 = NaN (the bf16 steps redo steps with a zero output by times_g).
  static vf16 relu_less(__m512 u, __m512 a, __m512 g) {
    return (vf16)_mm512_fnmadd_ps(a, g, _mm512_max_ps(_mm512_setzero_ps(), u));
  }
  vf16 operator()(vf16 u) const {
    __m512 a;
    const __m512 g = tail((__m512)u, a);
    return times_g((__m512)u, g);
  }
};
#endif

// v·sigmoid(a) = v / (1 + 2^t) given t = −a·log2 e; sigmoid is exactly 0 for a < −80 (so −inf
// gives −inf·0 = NaN, as the formula does). AVX-512: t is clamped below only (a = +inf: 2^−160
// rounds away, sigmoid 1), 2^t may overflow to +inf where the mask drops it, and the reciprocal
// is vrcp14ps alone for bf16 (relative error 2^−14, a 64th of a bf16 ulp, beside the degree-3
// exp's 1e-4) and with one Newton step for f16 / f32: 13 vector instructions per 16 bf16
// elements where the clamped, twice-compared form took 20.
template <DType T>
SIXFOLD_VEC vf16 times_sigmoid(vf16 v, vf16 t) {
#if defined(__AVX512F__)
  const __m512 tc = _mm512_max_ps(_mm512_set1_ps(-160.0f), (__m512)t);  // NaN stays NaN
  const __mmask16 keep = _mm512_cmp_ps_mask(tc, _mm512_set1_ps(80.0f * kLog2e), _CMP_LE_OQ);
  const __m512 k = _mm512_roundscale_ps(tc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 p = (__m512)exp2_poly<exp_degree<T>>((vf16)_mm512_sub_ps(tc, k));
  const __m512 q = _mm512_add_ps(_mm512_scalef_ps(p, k), _mm512_set1_ps(1.0f));
  __m512 r;
  if constexpr (T == DType::bf16) {
    r = _mm512_maskz_rcp14_ps(keep, q);
  } else {
    r = _mm512_rcp14_ps(q);
    r = _mm512_maskz_mul_ps(keep, r, _mm512_fnmadd_ps(q, r, _mm512_set1_ps(2.0f)));  // q = +inf: NaN, dropped
  }
  return v * (vf16)r;
#elif defined(__AVX2__)
  // t clamped to [−64, 80·log2 e] (below −64, 1 + 2^t is 1 in f32 either way), so 2^t is one
  // factor 2^k (k + 127 in [63, 243]: normal): 15 instructions per 8 lanes where vexp's clamps,
  // two factors and conversion took 28.
  constexpr float kTop = 80.0f * kLog2e;
  const vf16 e = exp2_biased<exp_degree<T>, 0>(vclamp(t, -64.0f, kTop));  // NaN stays NaN
  return v * vselect(t > kTop, vf16{}, vrcp(1.0f + e));
#else
  const vf16 na = t * (1.0f / kLog2e);
  const vf16 s = vrcp(1.0f + vexp<exp_degree<T>>(vselect(na < 80.0f, na, vsplat(80.0f))));
  return v * vselect(na > 80.0f, vf16{}, s);
#endif
}

// u/2·(1 + tanh t) = u·sigmoid(2t), t = √(2/π)·(u + 0.044715u³): −2t·log2 e = u·(c0 + c1·u²).
template <DType T>
SIXFOLD_VEC vf16 gelu_tanh(vf16 u) {
  constexpr float c0 = -2.0f * ActivationMath::kSqrt2OverPi * kLog2e, c1 = c0 * 0.044715f;
  return times_sigmoid<T>(u, u * (u * u * c1 + c0));
}

template <DType T>
SIXFOLD_VEC vf16 silu(vf16 a) { return times_sigmoid<T>(a, a * -kLog2e); }

// Whether the GELU of dtype T takes GTable (16-bit outputs on AVX-512), and what apply() is
// handed for it: a GLookup, or an unused int.
#if defined(__AVX512F__) && defined(__AVX512DQ__)
template <DType T, ActivationKind K>
constexpr bool kTableGelu = T != DType::f32 && K != ActivationKind::silu_gate;
template <DType T, ActivationKind K>
auto make_gelu16() {
  if constexpr (kTableGelu<T, K>) return GLookup(g_table<K>());
  else return 0;
}
#else
template <DType T, ActivationKind K>
constexpr bool kTableGelu = false;
template <DType T, ActivationKind K>
int make_gelu16() { return 0; }
#endif

// The GELUs' input is prefetched kGeluAhead bytes ahead into L2 (prefetcht1), silu_gate's two
// streams 4 KB ahead into L1. The hardware prefetchers of the session-21 host (Intel Xeon, KVM)
// do little: without software prefetch bias_gelu 16384x8192 bf16 ran at 18% of copy. Into L1 4
// KB ahead (until session 21) the GELUs ran at 49-53%, into L2 at 58-63% (4-16 KB ahead alike);
// silu_gate into L2: 62-66% against 62-72% into L1, so it keeps L1.
constexpr int kGeluAhead = 8192;

// y = f(x + bias) (gelu) or f(x)·b (silu_gate) for elements [i, i + m) of one row (or range).
template <DType T, ActivationKind K, bool kPrefetch = true, class Gelu16>
SIXFOLD_VEC vf16 apply(const void* x, const void* b, const float* bias, std::int64_t i, std::int64_t bi, int m,
                  const Gelu16& gelu16) {
  if (kPrefetch && m == 16) {
    if constexpr (K == ActivationKind::silu_gate) {
      prefetch_ahead(at<T>(x, i));
      prefetch_ahead(at<T>(b, i));
    } else {
      prefetch_ahead<kGeluAhead, 2>(at<T>(x, i));
    }
  }
  vf16 u = ld<T>(x, i, m);
  if constexpr (K == ActivationKind::silu_gate) {
    return silu<T>(u) * ld<T>(b, i, m);
  } else {
    if (bias) u += ld<DType::f32>(bias, bi, m);
    if constexpr (kTableGelu<T, K>) return gelu16(u);
    else return K == ActivationKind::gelu_erf ? gelu_erf<T>(u) : gelu_tanh<T>(u);
  }
}

// The flat range's bias + GELU for bf16 with GTable (AVX-512 BF16 builds), 32 elements a step
// where the generic loop takes two of 16: the input is widened by two zero-masking vpermw (word
// j into the high half of lane j, no shift: 2 instructions per 32 against 4), the bias is read
// from the running column, one prefetch goes out per 64-byte line, and the 32 outputs are
// rounded by one vcvtne2ps2bf16. That conversion reads f32 denormals as zero; where one of the
// 32 outputs comes out ±0 (an exact zero, or a denormal y, which needs |u| < 2^-125) the step is
// stored again by vstore2, whose exact rounding keeps the denormal (one test a step against two
// class tests). col: the column of x[0]; bias: n + 32 columns, wrapped. next: where the input
// goes on after x[count) (a column tile's next segment, or nullptr: x + count), so that the
// prefetch runs into it.
#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
constexpr bool kGeluBf16Steps = true;
template <ActivationKind K>
void gelu_bf16_steps(const std::uint16_t* x, std::uint16_t* y, std::int64_t count, bool nt, const float* bias,
                     std::int64_t col, std::int64_t n, const GLookup g,  // g by value: its table stays in registers across the stores
                     const std::uint16_t* next = nullptr) {
  auto generic = [&](std::int64_t from, std::int64_t to) {  // [from, to), 16 at a time, plain stores
    std::int64_t c = (col + from) % n;
    write_row<DType::bf16>(y + from, to - from, false, [&](std::int64_t i, int m) {
      const vf16 v = apply<DType::bf16, K>(x + from, nullptr, bias, i, c, m, g);
      if ((c += m) >= n) c %= n;
      return v;
    }, nullptr);
  };
  const std::int64_t head = nt ? head_to_align<DType::bf16>(y, count) : 0;
  const std::int64_t stop = head + (count - head) / 32 * 32;
  generic(0, head);
  alignas(64) static constexpr std::uint16_t kWiden[2][32] = {  // word j to word 2j + 1
      {0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7, 0, 8, 0, 9, 0, 10, 0, 11, 0, 12, 0, 13, 0, 14, 0, 15},
      {0, 16, 0, 17, 0, 18, 0, 19, 0, 20, 0, 21, 0, 22, 0, 23, 0, 24, 0, 25, 0, 26, 0, 27, 0, 28, 0, 29, 0, 30, 0, 31}};
  const __m512i lo = _mm512_load_si512(kWiden[0]), hi = _mm512_load_si512(kWiden[1]);
  constexpr __mmask32 kOdd = 0xAAAAAAAAu;
  std::int64_t c = (col + head) % n;
  // Two loops, so that the step itself has no select: the prefetch from x until it would pass
  // x[count), then from next.
  constexpr std::int64_t kAhead = kGeluAhead / 2;
  const std::int64_t split = next ? std::clamp(count - kAhead, head, stop) : stop;
  auto step = [&](std::int64_t i, const std::uint16_t* pf) __attribute__((always_inline)) {
    __builtin_prefetch(pf, 0, 2);
    const __m512i raw = _mm512_loadu_si512(x + i);
    vf16 u0 = (vf16)_mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(kOdd, lo, raw));
    vf16 u1 = (vf16)_mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(kOdd, hi, raw));
    if (bias) {
      u0 += ld<DType::f32>(bias, c, 16);
      u1 += ld<DType::f32>(bias, c + 16, 16);
      if ((c += 32) >= n && (c -= n) >= n) c %= n;  // a division only for rows shorter than 32
    }
    __m512 a0, a1;
    const __m512 g0 = g.tail((__m512)u0, a0), g1 = g.tail((__m512)u1, a1);
    const vf16 y0 = GLookup::relu_less((__m512)u0, a0, g0), y1 = GLookup::relu_less((__m512)u1, a1, g1);
    const __m512i h = (__m512i)_mm512_cvtne2ps_pbh((__m512)y1, (__m512)y0);
    if (_mm512_testn_epi16_mask(h, _mm512_set1_epi16(0x7fff)) != 0)
      vstore2<DType::bf16>(y + i, GLookup::times_g((__m512)u0, g0), GLookup::times_g((__m512)u1, g1), nt);
    else if (nt) _mm512_stream_si512(reinterpret_cast<__m512i*>(y + i), h);
    else _mm512_storeu_si512(y + i, h);
  };
  std::int64_t i = head;
  for (; i < split; i += 32) step(i, x + i + kAhead);
  for (; i < stop; i += 32) step(i, next + (i + kAhead - count));
  generic(stop, count);
}
#else
constexpr bool kGeluBf16Steps = false;
#endif

// Rows longer than kBiasTileCols with a bias are walked in column tiles: every row's segment of
// one tile, then the next tile, so that the tile's bias (f32) stays in L2. Whole rows read the
// bias again from beyond L2 for every row: at 32×1048576 bf16, 4 MB of f32 beside the row's 2 MB
// in and 2 MB out. Segments are cut over the threads in that order; the prefetch runs from a
// segment's end into the thread's next segment, and each thread converts the bias of the tile it
// is in (no n-column f32 copy of the bias per call). Dev box (Intel Xeon, 2 cores, copy 49.8
// GB/s), bias_gelu bf16, two rounds, % of copy at 256×262144 / 32×1048576: whole rows 66–68 /
// 46–49; tiles of 16384 columns 64–65 / 59–63, 32768 63–64 / 55–61, 65536 72–74 / 67–69,
// 131072 **75 / 75–76**, 262144 68–69 / 65 (the 16384×8192 rows, whole, 77–84 in the same runs).
constexpr std::int64_t kBiasTileCols = std::int64_t(1) << 17;

template <DType T, ActivationKind K>
void activation_tiles(const ActivationArgs& a, bool nt) {
  const std::int64_t n = a.x.n, rows = a.x.rows, tiles = (n + kBiasTileCols - 1) / kBiasTileCols;
  const std::int64_t total = rows * tiles;
#pragma omp parallel
  {
    const auto gelu16 = make_gelu16<T, K>();
    const int t = omp_get_thread_num(), nth = omp_get_num_threads();
    const std::int64_t lo = total * t / nth, hi = total * (t + 1) / nth;
    std::vector<float> bias(static_cast<std::size_t>(kBiasTileCols));  // segments never cross a row: no wrap
    std::int64_t have = -1;  // the tile whose bias is in `bias`
    const auto segment = [&](std::int64_t k) {  // tile k / rows of row k % rows: its first column
      return std::pair{k % rows, k / rows * kBiasTileCols};
    };
    for (std::int64_t k = lo; k < hi; ++k) {
      const auto [r, c0] = segment(k);
      const std::int64_t count = std::min(kBiasTileCols, n - c0);
      if (c0 != have) {
        load_row(a.dtype, at<T>(a.bias, c0), bias.data(), count);
        have = c0;
      }
      const void* x = at<T>(a.x.data, r * a.x.row_stride + c0);
      void* y = at<T>(a.out.data, r * a.out.row_stride + c0);
      const void* next = nullptr;
      if (k + 1 < hi) {
        const auto [r1, c1] = segment(k + 1);
        next = at<T>(a.x.data, r1 * a.x.row_stride + c1);
      }
      if constexpr (kGeluBf16Steps && T == DType::bf16 && kTableGelu<T, K>) {
        gelu_bf16_steps<K>(static_cast<const std::uint16_t*>(x), static_cast<std::uint16_t*>(y), count, nt,
                           bias.data(), 0, count, gelu16, static_cast<const std::uint16_t*>(next));
      } else {
        constexpr std::int64_t kAhead = kGeluAhead / kElemBytes<T>;
        write_row<T>(y, count, nt, [&](std::int64_t i, int m) {
          if (m == 16) {
            const std::int64_t f = i + kAhead;
            if (f < count) __builtin_prefetch(at<T>(x, f), 0, 2);
            else if (next) __builtin_prefetch(at<T>(next, f - count), 0, 2);
          }
          return apply<T, K, false>(x, nullptr, bias.data(), i, i, m, gelu16);
        }, nullptr);
      }
    }
    if (nt) stream_fence();
  }
}

template <DType T, ActivationKind K>
void activation_rows(const ActivationArgs& a) {
  const std::int64_t n = a.x.n, rows = a.x.rows;
  const bool nt = stream_output(rows * n * kElemBytes<T>);
  if (K != ActivationKind::silu_gate && a.bias && n > kBiasTileCols) return activation_tiles<T, K>(a, nt);
  // The bias in f32, followed by its first 32 columns again (wrapping as often as a short row
  // needs): a 16- or 32-lane chunk of the flat range that crosses into the next row reads on past n.
  std::vector<float> bias;
  if (a.bias) {
    bias.resize(std::size_t(n + 32));
    load_row(a.dtype, a.bias, bias.data(), n);
    for (std::int64_t j = n; j < n + 32; ++j) bias[std::size_t(j)] = bias[std::size_t(j % n)];
  }
  const float* bp = a.bias ? bias.data() : nullptr;
  const bool gate = K == ActivationKind::silu_gate;
  // One flat range when every row follows the previous one: a bias is then indexed by a column
  // counter that the chunk calls advance (write_rows makes them once each, in order of i).
  // Otherwise rows one by one, which cost 20–35% more here at 1024-element rows.
  const bool flat = a.x.row_stride == n && a.out.row_stride == n && (!gate || a.b.row_stride == n);
  const bool parallel = rows * n >= (1 << 15);
#pragma omp parallel if (parallel)
  {
    const auto gelu16 = make_gelu16<T, K>();  // the table is fitted once, by the first caller
    const int t = omp_get_thread_num(), nth = omp_get_num_threads();
    if (flat) {
      // Cut at multiples of 32 elements, so every thread's writes start on the same alignment.
      const std::int64_t total = rows * n, chunks = (total + 31) / 32;
      const std::int64_t lo = std::min(total, chunks * t / nth * 32), hi = std::min(total, chunks * (t + 1) / nth * 32);
      if (hi > lo) {
        const void* x = at<T>(a.x.data, lo);
        const void* b = gate ? at<T>(a.b.data, lo) : nullptr;
        if constexpr (kGeluBf16Steps && T == DType::bf16 && kTableGelu<T, K>) {
          gelu_bf16_steps<K>(static_cast<const std::uint16_t*>(x), static_cast<std::uint16_t*>(at<T>(a.out.data, lo)),
                             hi - lo, nt, bp, lo % n, n, gelu16);
        } else {
          write_row<T>(at<T>(a.out.data, lo), hi - lo, nt,
                       [=, col = bp ? lo % n : 0](std::int64_t i, int m) mutable {
                         const vf16 v = apply<T, K>(x, b, bp, i, col, m, gelu16);
                         if (bp && (col += m) >= n) col %= n;
                         return v;
                       },
                       nullptr);
        }
      }
    } else {
      const std::int64_t lo = rows * t / nth, hi = rows * (t + 1) / nth;
      RowStream next;
      next.base[0] = static_cast<const char*>(a.x.data), next.stride[0] = a.x.row_stride * kElemBytes<T>;
      if (gate) next.base[1] = static_cast<const char*>(a.b.data), next.stride[1] = a.b.row_stride * kElemBytes<T>;
      next.row_bytes = n * kElemBytes<T>, next.per_row = n;
      next.start(lo, hi);
      for (std::int64_t r = lo; r < hi; ++r) {
        const void* x = at<T>(a.x.data, r * a.x.row_stride);
        const void* b = gate ? at<T>(a.b.data, r * a.b.row_stride) : nullptr;
        write_row<T>(at<T>(a.out.data, r * a.out.row_stride), n, nt,
                     [=](std::int64_t i, int m) { return apply<T, K>(x, b, bp, i, i, m, gelu16); }, &next);
      }
    }
    if (nt) stream_fence();
  }
}

template <DType T>
void activation_dtype(const ActivationArgs& a) {
  switch (a.kind) {
    case ActivationKind::gelu_erf: return activation_rows<T, ActivationKind::gelu_erf>(a);
    case ActivationKind::gelu_tanh: return activation_rows<T, ActivationKind::gelu_tanh>(a);
    case ActivationKind::silu_gate: return activation_rows<T, ActivationKind::silu_gate>(a);
  }
}

}  // namespace

void activation_cpu(const ActivationArgs& a) {
  with_float_dtype(a.dtype, [&]<DType T>() { activation_dtype<T>(a); });
}

}  // namespace sixfold::detail
