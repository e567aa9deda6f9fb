// CPU backend of attention: exact softmax attention, one (query tile × key tile) block at a time.
//
//   S = scale · Q Kᵀ,  P = exp(S − m),  O = P V / Σ P,  lse = m + log Σ P      (per query row)
//
// The online-softmax state (m, l, O) of a row is a monoid (associativity): key tiles are folded
// in one at a time, the scores of a tile never leave the L1/L2 cache (locality), and nothing of
// size q_len × kv_len is ever allocated. When there are too few query tiles to keep every core
// busy (decoding: q_len 1…16), the key range is split across threads and the partial states
// merged with the same monoid (flash-decoding).
//
// Layout: a tile holds M = 16·NV query "lanes" that share one kv head — lane r of kv head h is
// query row r / g of q head h·g + r % g (g = q_heads / kv_heads), so GQA decoding puts the g
// heads of a group side by side and K/V are read once for all of them. Everything is kept with
// the lanes innermost, transposed: Qᵀ (head_dim, M), Sᵀ/Pᵀ (block_k, M), Oᵀ (head_dim, M), so the
// softmax (max, exp, sum, rescale) is purely vertical SIMD, and K and V are read in their
// natural row layout (each element broadcast against M lanes) — no packing of K or V, f32
// inputs are read in place, bf16 rows are widened once per tile.
//
// Both products are register-blocked micro-GEMMs: R rows × NV vectors of 16 lanes in
// registers (R·NV = 24 accumulators of the 32 zmm registers), written with GCC vector
// extensions so they compile to AVX-512 FMAs fed by broadcast loads here and to narrower SIMD
// (or scalar code) elsewhere.
//
// Work order: OpenMP over lane tiles (dynamic, heaviest first), or — with >= 2 heads per
// thread — over whole kv heads whose lane tiles all fold one L2-sized chunk of K/V before the
// next chunk (run_head), so K/V come from L2 rather than L3. Measurements: docs/perf/attention.md.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "attention_entries.hpp"
#include "vec16.hpp"
#include "rows_cpu.hpp"
#include "sixfold/runtime/vec_math.hpp"

// The 64-byte vector type stays inside this file (internal linkage, inlined); without AVX-512
// GCC notes that passing it by value has another ABI, which does not matter here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace sixfold::detail {
namespace {

using vf = vf16;  // 16 f32 lanes (vec16.hpp)
constexpr int kLanes = 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline vf vload(const float* p) { return vload_bytes<vf>(p); }
inline void vstore(float* p, vf v) { vstore_bytes(p, v); }

// exp(x) for the probabilities p = exp(s − m): x <= 0 or −inf (NaN need not survive here: a NaN
// score already made m, alpha and l NaN). Same reduction and polynomial as vexp_f32, but the
// exponent is applied by vscalefps and arguments below −104 give exactly 0 (masked keys must
// add nothing, so an all-masked tile leaves l at 0).
inline vf vexp_nonpositive(vf x) {
#if defined(__AVX512F__)
  const vf xc = vmax16(x, vsplat(-110.0f));
  const vf k = (vf)_mm512_roundscale_ps((__m512)(xc * 1.44269504088896341f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const vf p = exp_reduced(xc, k);
  return (vf)_mm512_scalef_ps((__m512)p, (__m512)k);
#else
  return vexp_f32(x);
#endif
}

// Tuning (measured on the 2-core Xeon (AVX-512) this was written on, f32, head_dim 64/128,
// seq 2048; see docs/perf/attention.md): keys per tile, and when to split the key range.
struct CpuTuning {
  int block_k;           // keys per tile: Sᵀ is block_k × M f32 (32 KiB for 128 × 64)
  int tasks_per_thread;  // split key ranges until there are this many work items per thread
  int min_split_keys;    // never split a key range into pieces shorter than this
};
constexpr CpuTuning kTuning{128, 4, 512};

// ---- micro-GEMMs -------------------------------------------------------------------------
// Sᵀ rows [0, R): st[j] = Σ_c k[j·ks + c] · qt[c]   (k: R rows of d; qt: (d, M); st: (R, M));
// mx (NV vectors) takes the running max over the rows (the softmax's tile max, for free).
template <int NV, int R>
inline void scores_rows(const float* k, std::int64_t ks, const float* qt, std::int64_t d,
                        float* st, vf* mx) {
  constexpr int M = kLanes * NV;
  vf acc[R][NV] = {};
  for (std::int64_t c = 0; c < d; ++c) {
    vf q[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) q[v] = vload(qt + c * M + v * kLanes);
#pragma GCC unroll 24
    for (int r = 0; r < R; ++r) {
      const float x = k[r * ks + c];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] += x * q[v];
    }
  }
#pragma GCC unroll 24
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      vstore(st + r * M + v * kLanes, acc[r][v]);
      mx[v] = vmax16(mx[v], acc[r][v]);
    }
}

// Oᵀ rows [0, R) (head_dim columns c0…c0+R of the output): ot[c] = alpha ⊙ ot[c] + Σ_j v[j·vs + c] · p[j]
template <int NV, int R>
inline void pv_rows(const float* v, std::int64_t vs, const float* p, std::int64_t nk,
                    const float* alpha, float* ot) {
  constexpr int M = kLanes * NV;
  vf acc[R][NV];
  vf al[NV];
#pragma GCC unroll 4
  for (int u = 0; u < NV; ++u) al[u] = vload(alpha + u * kLanes);
#pragma GCC unroll 24
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int u = 0; u < NV; ++u) acc[r][u] = vload(ot + r * M + u * kLanes) * al[u];
  for (std::int64_t j = 0; j < nk; ++j) {
    vf pj[NV];
#pragma GCC unroll 4
    for (int u = 0; u < NV; ++u) pj[u] = vload(p + j * M + u * kLanes);
#pragma GCC unroll 24
    for (int r = 0; r < R; ++r) {
      const float x = v[j * vs + r];
#pragma GCC unroll 4
      for (int u = 0; u < NV; ++u) acc[r][u] += x * pj[u];
    }
  }
#pragma GCC unroll 24
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int u = 0; u < NV; ++u) vstore(ot + r * M + u * kLanes, acc[r][u]);
}

// Row blocks of R = 24 / NV, then the remainder in power-of-two pieces.
template <int NV>
constexpr int kRows = 24 / NV;

template <int NV, int R>
void scores_tail(const float* k, std::int64_t ks, const float* qt, std::int64_t d, float* st,
                 std::int64_t n, vf* mx) {
  constexpr int M = kLanes * NV;
  if constexpr (R >= 1) {
    if (n & R) {
      scores_rows<NV, R>(k, ks, qt, d, st, mx);
      k += R * ks, st += R * M;
    }
    scores_tail<NV, R / 2>(k, ks, qt, d, st, n, mx);
  }
}

template <int NV>
void scores(const float* k, std::int64_t ks, const float* qt, std::int64_t d, float* st,
            std::int64_t nk, vf* mx) {
  constexpr int M = kLanes * NV, R = kRows<NV>;
  std::int64_t j = 0;
  for (; j + R <= nk; j += R) scores_rows<NV, R>(k + j * ks, ks, qt, d, st + j * M, mx);
  scores_tail<NV, std::bit_floor(unsigned(R - 1))>(k + j * ks, ks, qt, d, st + j * M, nk - j, mx);
}

template <int NV, int R>
void pv_tail(const float* v, std::int64_t vs, const float* p, std::int64_t nk,
             const float* alpha, float* ot, std::int64_t n) {
  constexpr int M = kLanes * NV;
  if constexpr (R >= 1) {
    if (n & R) {
      pv_rows<NV, R>(v, vs, p, nk, alpha, ot);
      v += R, ot += R * M;
    }
    pv_tail<NV, R / 2>(v, vs, p, nk, alpha, ot, n);
  }
}

template <int NV>
void pv(const float* v, std::int64_t vs, const float* p, std::int64_t nk, const float* alpha,
        float* ot, std::int64_t d) {
  constexpr int M = kLanes * NV, R = kRows<NV>;
  std::int64_t c = 0;
  for (; c + R <= d; c += R) pv_rows<NV, R>(v + c, vs, p, nk, alpha, ot + c * M);
  pv_tail<NV, std::bit_floor(unsigned(R - 1))>(v + c, vs, p, nk, alpha, ot + c * M, d - c);
}

// ---- geometry ----------------------------------------------------------------------------
// One sequence of the batch: its lengths and where its tokens start.
struct Seq {
  std::int64_t lq, lk;
  const char* q;  // element (b, head 0, token 0) of each tensor, in bytes
  const char* k;
  const char* v;
  char* out;
  float* lse;
};

Seq seq_of(const AttentionArgs& a, std::int64_t b) {
  const std::int64_t es = dtype_bits(a.dtype) / 8;
  std::int64_t q0 = b * a.q_stride[0], k0 = b * a.k_stride[0], v0 = b * a.v_stride[0];
  std::int64_t o0 = b * a.out_stride[0], l0 = b * a.lse_stride[0];
  Seq s{a.q_len, a.kv_len, nullptr, nullptr, nullptr, nullptr, nullptr};
  if (a.cu_q) {  // varlen: batch strides are unused, tokens start at the offsets
    s.lq = a.cu_q[b + 1] - a.cu_q[b];
    s.lk = a.cu_k[b + 1] - a.cu_k[b];
    q0 = a.cu_q[b] * a.q_stride[2], o0 = a.cu_q[b] * a.out_stride[2];
    l0 = a.cu_q[b] * a.lse_stride[2];
    k0 = a.cu_k[b] * a.k_stride[2], v0 = a.cu_k[b] * a.v_stride[2];
  }
  s.q = static_cast<const char*>(a.q) + q0 * es;
  s.k = static_cast<const char*>(a.k) + k0 * es;
  s.v = static_cast<const char*>(a.v) + v0 * es;
  s.out = static_cast<char*>(a.out) + o0 * es;
  s.lse = a.lse ? a.lse + l0 : nullptr;
  return s;
}

// Keys visible to query row i: [lo, hi] (empty when hi < lo), bottom-right aligned.
struct KeyRange {
  std::int64_t lo, hi;
};
KeyRange visible(const AttentionArgs& a, std::int64_t i, std::int64_t lq, std::int64_t lk) {
  const std::int64_t diag = i + (lk - lq);
  std::int64_t lo = 0, hi = lk - 1;
  if (a.window_left >= 0) lo = std::max<std::int64_t>(lo, diag - a.window_left);
  if (a.causal) hi = std::min(hi, diag);
  if (a.window_right >= 0) hi = std::min(hi, diag + a.window_right);
  return {lo, hi};
}

// One work item: lanes [r0, r0 + nr) of kv head `kvh` of sequence b, keys [j0, j1).
struct Item {
  std::int64_t b, kvh, r0, nr, j0, j1;
  int nv;          // lane vectors (M = 16·nv)
  int split;       // index among the pieces of its tile's key range
  int nsplit;      // pieces of its tile's key range (1: writes the output directly)
  std::int64_t partial;  // first float of its partial result in the split workspace
};

// Per-thread scratch, sized for M = 64 lanes.
struct Scratch {
  explicit Scratch(std::int64_t d) : head_dim(d) {
    const std::int64_t m = 4 * kLanes, bk = kTuning.block_k;
    const std::int64_t n = d * m * 2 + bk * m + 2 * bk * d + 8 * m + d;
    mem = std::shared_ptr<float>(static_cast<float*>(std::aligned_alloc(64, std::size_t((n * 4 + 127) / 64 * 64))),
                                 [](float* p) { std::free(p); });
    float* p = mem.get();
    qt = p, p += d * m;
    ot = p, p += d * m;
    st = p, p += bk * m;
    kbuf = p, p += bk * d;
    vbuf = p, p += bk * d;
    m_run = p, p += m;
    l_run = p, p += m;
    alpha = p, p += m;
    row = p;
  }
  std::shared_ptr<float> mem;
  std::int64_t head_dim;
  float *qt, *ot, *st, *kbuf, *vbuf, *m_run, *l_run, *alpha, *row;
};

// The calling thread's scratch, kept between calls (OpenMP threads persist): a fresh one per call
// cost its page faults every time (1% of a seq-2048 call, more for decoding).
Scratch& thread_scratch(std::int64_t d) {
  thread_local std::unique_ptr<Scratch> s;
  if (!s || s->head_dim < d) s = std::make_unique<Scratch>(d);
  return *s;
}

// Widens rows [j0, j0 + n) of a K or V head to f32 (f32 inputs are used in place).
const float* rows_f32(const AttentionArgs& a, const char* head, std::int64_t stride, std::int64_t j0,
                      std::int64_t n, float* buf, std::int64_t* out_stride) {
  const std::int64_t es = dtype_bits(a.dtype) / 8;
  if (a.dtype == DType::f32) {
    *out_stride = stride;
    return reinterpret_cast<const float*>(head) + j0 * stride;
  }
  for (std::int64_t j = 0; j < n; ++j)
    load_row(a.dtype, head + (j0 + j) * stride * es, buf + j * a.head_dim, a.head_dim);
  *out_stride = a.head_dim;
  return buf;
}

// Sets the scores of keys a lane does not see to −inf (tiles that straddle a mask edge).
template <int NV>
void mask_tile(float* st, std::int64_t nk, std::int64_t j0, const std::int64_t* lo,
               const std::int64_t* hi) {
  constexpr int M = kLanes * NV;
  vi16 a[NV], b[NV];  // the lane's range relative to the tile, clamped to int32
  for (int u = 0; u < NV; ++u)
    for (int l = 0; l < kLanes; ++l) {
      const std::int64_t n = u * kLanes + l;
      a[u][l] = std::int32_t(std::clamp<std::int64_t>(lo[n] - j0, -1, nk + 1));
      b[u][l] = std::int32_t(std::clamp<std::int64_t>(hi[n] - j0, -1, nk + 1));
    }
  for (std::int32_t j = 0; j < std::int32_t(nk); ++j)
    for (int u = 0; u < NV; ++u) {
      const vf s = vload(st + j * M + u * kLanes);
      vstore(st + j * M + u * kLanes, vselect((a[u] <= j) & (b[u] >= j), s, vsplat(kNegInf)));
    }
}

// The online-softmax state of one tile of lanes: Qᵀ (d, M) pre-scaled, Oᵀ (d, M), m, l, alpha
// (M each), and the lanes' visible key ranges.
struct TileState {
  float *qt, *ot, *m_run, *l_run, *alpha;
  std::int64_t lo[4 * kLanes], hi[4 * kLanes];
  std::int64_t lo_max, hi_min;  // every lane sees [lo_max, hi_min]
};

// Builds Qᵀ and the key ranges of the tile's lanes (padding lanes see every key), empty state.
template <int NV>
void tile_setup(const AttentionArgs& a, const Seq& s, const Item& it, TileState& ts, float* row) {
  constexpr int M = kLanes * NV;
  const std::int64_t d = a.head_dim, g = a.q_heads / a.kv_heads;
  const std::int64_t es = dtype_bits(a.dtype) / 8;
  for (int l = 0; l < M; ++l) {
    if (l >= it.nr) {
      for (std::int64_t c = 0; c < d; ++c) ts.qt[c * M + l] = 0.0f;
      ts.lo[l] = 0, ts.hi[l] = s.lk - 1;
      continue;
    }
    const std::int64_t r = it.r0 + l, i = r / g, h = it.kvh * g + r % g;
    const char* src = s.q + (h * a.q_stride[1] + i * a.q_stride[2]) * es;
    const float* q = reinterpret_cast<const float*>(src);  // f32: read in place
    if (a.dtype != DType::f32) load_row(a.dtype, src, row, d), q = row;
    for (std::int64_t c = 0; c < d; ++c) ts.qt[c * M + l] = q[c] * a.scale;
    const KeyRange kr = visible(a, i, s.lq, s.lk);
    ts.lo[l] = kr.lo, ts.hi[l] = kr.hi;
  }
  // Lanes in row order: the first real lane has the smallest range ends, the last the largest.
  ts.lo_max = ts.lo[it.nr - 1], ts.hi_min = ts.hi[0];
  for (int l = 0; l < M; ++l) ts.m_run[l] = kNegInf, ts.l_run[l] = 0.0f;
  std::fill(ts.ot, ts.ot + d * M, 0.0f);
}

// Folds keys [j0, j1) of kv head it.kvh into the tile's state, one tile of block_k keys at a time.
template <int NV>
void tile_fold(const AttentionArgs& a, const Seq& s, const Item& it, TileState& ts, Scratch& w,
               std::int64_t jb, std::int64_t je) {
  constexpr int M = kLanes * NV;
  const std::int64_t d = a.head_dim;
  const std::int64_t es = dtype_bits(a.dtype) / 8;
  const char* kh = s.k + it.kvh * a.k_stride[1] * es;
  const char* vh = s.v + it.kvh * a.v_stride[1] * es;
  float* m_run = ts.m_run;
  float* l_run = ts.l_run;
  float* alpha = ts.alpha;
  // Key tiles aligned to the top of the range (the state is a commutative monoid, so any order
  // gives the same result): with a causal mask only the top tile straddles the diagonal and the
  // ragged remainder lands at the bottom, where no lane is masked. Each thread walks them
  // top-down and bottom-up in turn: its next range then starts on the keys it has just read,
  // still in L2, instead of on the ones evicted longest ago (same direction every time).
  thread_local bool upward = false;
  upward = !upward;
  const std::int64_t bk = kTuning.block_k, ntiles = (je - jb + bk - 1) / bk;
  for (std::int64_t t = 0; t < ntiles; ++t) {
    const std::int64_t j1 = je - (upward ? ntiles - 1 - t : t) * bk;
    const std::int64_t j0 = std::max(jb, j1 - bk), nk = j1 - j0;
    std::int64_t ks = 0, vs = 0;
    const float* kp = rows_f32(a, kh, a.k_stride[2], j0, nk, w.kbuf, &ks);
    // Online softmax, vertical over the lanes: m' = max(m, max_j s_j), alpha = exp(m − m'),
    // p_j = exp(s_j − m'), l' = alpha·l + Σ p_j (Oᵀ is rescaled by alpha inside pv).
    vf mx[NV], msafe[NV], sum[NV];
    for (int u = 0; u < NV; ++u) mx[u] = vsplat(kNegInf), sum[u] = vf{};
    float* st = w.st;
    if (ts.lo_max <= j0 && j0 + nk - 1 <= ts.hi_min) {  // every lane sees the whole tile
      scores<NV>(kp, ks, ts.qt, d, st, nk, mx);
    } else {
      vf unused[NV];
      for (int u = 0; u < NV; ++u) unused[u] = vsplat(kNegInf);
      scores<NV>(kp, ks, ts.qt, d, st, nk, unused);
      mask_tile<NV>(st, nk, j0, ts.lo, ts.hi);
      for (std::int64_t j = 0; j < nk; ++j)
#pragma GCC unroll 4
        for (int u = 0; u < NV; ++u) mx[u] = vmax16(mx[u], vload(st + j * M + u * kLanes));
    }
#pragma GCC unroll 4
    for (int u = 0; u < NV; ++u) {
      const vf mold = vload(m_run + u * kLanes);
      const vf mn = vmax16(mold, mx[u]);
      msafe[u] = vselect(mn == kNegInf, vf{}, mn);  // no key seen yet: exp(−inf − 0) = 0
      vstore(alpha + u * kLanes, vexp_f32(mold - msafe[u]));
      vstore(m_run + u * kLanes, mn);
    }
    for (std::int64_t j = 0; j < nk; ++j)
#pragma GCC unroll 4
      for (int u = 0; u < NV; ++u) {
        const vf p = vexp_nonpositive(vload(st + j * M + u * kLanes) - msafe[u]);
        vstore(st + j * M + u * kLanes, p);
        sum[u] += p;
      }
#pragma GCC unroll 4
    for (int u = 0; u < NV; ++u)
      vstore(l_run + u * kLanes, vload(l_run + u * kLanes) * vload(alpha + u * kLanes) + sum[u]);
    const float* vp = rows_f32(a, vh, a.v_stride[2], j0, nk, w.vbuf, &vs);
    pv<NV>(vp, vs, st, nk, alpha, ts.ot, d);
  }
}

// Writes the tile's finished rows (nsplit 1) or its normalized partial (o, lse) per lane.
template <int NV>
void tile_finish(const AttentionArgs& a, const Seq& s, const Item& it, const TileState& ts,
                 float* row, float* partials) {
  constexpr int M = kLanes * NV;
  const std::int64_t d = a.head_dim, g = a.q_heads / a.kv_heads;
  const std::int64_t es = dtype_bits(a.dtype) / 8;
  for (std::int64_t l = 0; l < it.nr; ++l) {
    const bool empty = ts.l_run[l] == 0.0f;
    const float inv = empty ? 0.0f : 1.0f / ts.l_run[l];
    const float lse = empty ? kNegInf : ts.m_run[l] + std::log(ts.l_run[l]);
    for (std::int64_t c = 0; c < d; ++c) row[c] = ts.ot[c * M + l] * inv;
    if (it.nsplit > 1) {  // partial: (o (d), lse) per lane
      float* p = partials + it.partial + l * (d + 1);
      std::memcpy(p, row, std::size_t(d) * 4);
      p[d] = lse;
      continue;
    }
    const std::int64_t r = it.r0 + l, i = r / g, h = it.kvh * g + r % g;
    store_row(a.dtype, row, s.out + (h * a.out_stride[1] + i * a.out_stride[2]) * es, d);
    if (s.lse) s.lse[h * a.lse_stride[1] + i * a.lse_stride[2]] = lse;
  }
}

// One tile of lanes over keys [it.j0, it.j1).
template <int NV>
void run_item(const AttentionArgs& a, const Item& it, Scratch& w, float* partials) {
  const Seq s = seq_of(a, it.b);
  TileState ts;
  ts.qt = w.qt, ts.ot = w.ot, ts.m_run = w.m_run, ts.l_run = w.l_run, ts.alpha = w.alpha;
  tile_setup<NV>(a, s, it, ts, w.row);
  tile_fold<NV>(a, s, it, ts, w, it.j0, it.j1);
  tile_finish<NV>(a, s, it, ts, w.row, partials);
}

// Keys per chunk of the head-major order: K and V of a chunk take 512 KiB in f32, a quarter of
// the 2 MiB L2, whatever the head dim.
std::int64_t head_chunk_keys(std::int64_t d) {
  return std::max<std::int64_t>(kTuning.block_k, (65536 / d) / kTuning.block_k * kTuning.block_k);
}

// All the 64-lane tiles of one (sequence, kv head) — tiles[0 … n) — with the key range outside:
// every tile folds one chunk of keys before any tile moves to the next, so the chunk's K and V
// stay in L2 across the tiles (tile by tile, K and V of a head were streamed from L3 once per
// tile from d 128 at seq 2048). The tiles' states live in `arena` (O(rows · d) floats).
void run_head(const AttentionArgs& a, const Item* tiles, std::size_t n, Scratch& w,
              std::vector<float>& arena) {
  constexpr int M = 4 * kLanes;
  const std::int64_t d = a.head_dim;
  const std::int64_t per_tile = 2 * d * M + 3 * M;
  arena.resize(n * std::size_t(per_tile));
  std::vector<TileState> states(n);
  const Seq s = seq_of(a, tiles[0].b);
  std::int64_t jb = s.lk, je = 0;
  for (std::size_t t = 0; t < n; ++t) {
    float* p = arena.data() + t * std::size_t(per_tile);
    TileState& ts = states[t];
    ts.qt = p, ts.ot = p + d * M, ts.m_run = p + 2 * d * M, ts.l_run = ts.m_run + M, ts.alpha = ts.l_run + M;
    tile_setup<4>(a, s, tiles[t], ts, w.row);
    jb = std::min(jb, tiles[t].j0), je = std::max(je, tiles[t].j1);
  }
  const std::int64_t chunk = head_chunk_keys(d);
  for (std::int64_t c0 = jb; c0 < je; c0 += chunk)
    for (std::size_t t = 0; t < n; ++t) {
      const std::int64_t j0 = std::max(c0, tiles[t].j0), j1 = std::min(c0 + chunk, tiles[t].j1);
      if (j0 < j1) tile_fold<4>(a, s, tiles[t], states[t], w, j0, j1);
    }
  for (std::size_t t = 0; t < n; ++t) tile_finish<4>(a, s, tiles[t], states[t], w.row, nullptr);
}

// Combines the nsplit partials of the tile whose first piece is `first` and writes its rows.
void merge_partials(const AttentionArgs& a, const Item& first, const float* partials, float* row) {
  const std::int64_t d = a.head_dim, g = a.q_heads / a.kv_heads;
  const std::int64_t es = dtype_bits(a.dtype) / 8;
  const std::int64_t piece = first.nr * (d + 1);
  const Seq s = seq_of(a, first.b);
  for (std::int64_t l = 0; l < first.nr; ++l) {
    float m = kNegInf;
    for (int p = 0; p < first.nsplit; ++p)
      m = std::max(m, partials[first.partial + p * piece + l * (d + 1) + d]);
    std::fill(row, row + d, 0.0f);
    float total = 0.0f;
    if (m != kNegInf) {
      for (int p = 0; p < first.nsplit; ++p) {
        const float* o = partials + first.partial + p * piece + l * (d + 1);
        const float wgt = exp_f32(o[d] - m);
        total += wgt;
        for (std::int64_t c = 0; c < d; ++c) row[c] += wgt * o[c];
      }
      const float inv = 1.0f / total;
      for (std::int64_t c = 0; c < d; ++c) row[c] *= inv;
    }
    const std::int64_t r = first.r0 + l, i = r / g, h = first.kvh * g + r % g;
    store_row(a.dtype, row, s.out + (h * a.out_stride[1] + i * a.out_stride[2]) * es, d);
    if (s.lse) s.lse[h * a.lse_stride[1] + i * a.lse_stride[2]] = m == kNegInf ? m : m + std::log(total);
  }
}

}  // namespace

void attention_cpu(const AttentionArgs& a) {
  const std::int64_t g = a.q_heads / a.kv_heads, d = a.head_dim;
  const int threads = omp_get_max_threads();
  // Tiles: per (sequence, kv head), the g·lq lanes in tiles of M; the key range each needs.
  std::vector<Item> tiles;
  double work = 0;
  for (std::int64_t b = 0; b < a.batch; ++b) {
    const Seq s = seq_of(a, b);
    const std::int64_t rows = g * s.lq;
    if (rows == 0) continue;
    const int nv = rows <= 16 ? 1 : rows <= 32 ? 2 : 4;
    const std::int64_t m = kLanes * nv;
    for (std::int64_t kvh = 0; kvh < a.kv_heads; ++kvh)
      for (std::int64_t r0 = ((rows - 1) / m) * m; r0 >= 0; r0 -= m) {  // heaviest (causal) first
        const std::int64_t nr = std::min(m, rows - r0);
        const KeyRange first = visible(a, r0 / g, s.lq, s.lk);
        const KeyRange last = visible(a, (r0 + nr - 1) / g, s.lq, s.lk);
        const std::int64_t j0 = std::max<std::int64_t>(first.lo, 0);
        const std::int64_t j1 = std::max(j0, std::min(last.hi, s.lk - 1) + 1);
        tiles.push_back({b, kvh, r0, nr, j0, j1, nv, 0, 1, 0});
        work += double(m) * double(j1 - j0 + 1);
      }
  }
  if (tiles.empty()) return;
  // Head-major order (run_head) where every (sequence, kv head) has several 64-lane tiles, the
  // heads divide among the threads without a long tail (whole heads are the unit of work), and
  // the key range spans several chunks.
  const std::int64_t heads = a.batch * a.kv_heads;
  bool head_major = !a.cu_q && heads >= 2 * threads && (heads % threads == 0 || heads >= 8 * threads) &&
                    a.kv_len >= 2 * head_chunk_keys(d);
  for (const Item& t : tiles) head_major = head_major && t.nv == 4 && g * a.q_len >= 2 * 4 * kLanes;
  if (head_major) {  // tiles are grouped by (b, kv head), in order
    std::vector<std::size_t> starts;
    for (std::size_t n = 0; n < tiles.size(); ++n)
      if (n == 0 || tiles[n].b != tiles[n - 1].b || tiles[n].kvh != tiles[n - 1].kvh) starts.push_back(n);
    starts.push_back(tiles.size());
    const std::size_t nheads = starts.size() - 1;
#pragma omp parallel
    {
      Scratch& w = thread_scratch(d);
      std::vector<float> arena;
#pragma omp for schedule(dynamic, 1)
      for (std::size_t h = 0; h < nheads; ++h)
        run_head(a, tiles.data() + starts[h], starts[h + 1] - starts[h], w, arena);
    }
    return;
  }
  // Split key ranges while there are fewer tiles than tasks_per_thread · threads.
  std::vector<Item> items;
  std::int64_t partial_floats = 0;
  const std::int64_t want = std::int64_t(kTuning.tasks_per_thread) * threads;
  const int max_split = tiles.size() >= std::size_t(want) ? 1 : int((want + tiles.size() - 1) / tiles.size());
  for (Item t : tiles) {
    const std::int64_t keys = t.j1 - t.j0;
    const std::int64_t bk = kTuning.block_k;
    int n = int(std::min<std::int64_t>(max_split, keys / kTuning.min_split_keys));
    if (n <= 1) {
      items.push_back(t);
      continue;
    }
    const std::int64_t chunk = ((keys + n - 1) / n + bk - 1) / bk * bk;
    n = int((keys + chunk - 1) / chunk);
    for (int p = 0; p < n; ++p) {
      Item piece = t;
      piece.j0 = t.j0 + p * chunk;
      piece.j1 = std::min(t.j1, piece.j0 + chunk);
      piece.split = p;
      piece.nsplit = n;
      piece.partial = partial_floats + p * t.nr * (d + 1);
      items.push_back(piece);
    }
    partial_floats += n * t.nr * (d + 1);
  }
  std::vector<float> partials(static_cast<std::size_t>(partial_floats));
  const bool parallel = items.size() > 1 && work * double(d) > 1e5;
#pragma omp parallel if (parallel)
  {
    Scratch& w = thread_scratch(d);
#pragma omp for schedule(dynamic, 1)
    for (std::size_t n = 0; n < items.size(); ++n) {
      const Item& it = items[n];
      if (it.nv == 1) run_item<1>(a, it, w, partials.data());
      else if (it.nv == 2) run_item<2>(a, it, w, partials.data());
      else run_item<4>(a, it, w, partials.data());
    }
#pragma omp for schedule(dynamic, 1)
    for (std::size_t n = 0; n < items.size(); ++n)
      if (items[n].nsplit > 1 && items[n].split == 0)
        merge_partials(a, items[n], partials.data(), w.row);
  }
}

// (o1, lse1) ⊕ (o2, lse2), row by row, f32 arithmetic.
void merge_attention_states_cpu(const MergeArgs& a) {
  const std::int64_t d = a.head_dim;
  const std::int64_t es = dtype_bits(a.dtype) / 8;
  const bool parallel = a.rows * d >= (1 << 15);
#pragma omp parallel if (parallel)
  {
    std::vector<float> x(static_cast<std::size_t>(d)), y(static_cast<std::size_t>(d));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < a.rows; ++r) {
      const float l1 = a.lse1[r * a.lse1_stride], l2 = a.lse2[r * a.lse2_stride];
      const float m = std::max(l1, l2);
      load_row(a.dtype, static_cast<const char*>(a.o1) + r * a.o1_stride * es, x.data(), d);
      load_row(a.dtype, static_cast<const char*>(a.o2) + r * a.o2_stride * es, y.data(), d);
      float lse = kNegInf;
      if (m == kNegInf) {  // neither side saw a key
        std::fill(x.begin(), x.end(), 0.0f);
      } else {
        const float w1 = exp_f32(l1 - m), w2 = exp_f32(l2 - m), inv = 1.0f / (w1 + w2);
        for (std::int64_t c = 0; c < d; ++c) x[c] = (w1 * x[c] + w2 * y[c]) * inv;
        lse = m + std::log(w1 + w2);
      }
      store_row(a.dtype, x.data(), static_cast<char*>(a.out) + r * a.out_stride * es, d);
      if (a.lse_out) a.lse_out[r * a.lse_out_stride] = lse;
    }
  }
}

}  // namespace sixfold::detail
