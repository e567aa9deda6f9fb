// CPU backend of the norm backward passes: each row of x (or y) and dy read from memory once,
// dx written once, 16 f32 lanes at a time (rows_cpu.hpp), the same pass structure as the forward
// (norm_cpu.cpp):
//
//   rms/layer:  x̂ = (x − μ)·r,  g = dy·w,  dx = r·(g − mean(g) − x̂·mean(g·x̂))   (μ = 0 for rms)
//               dw = Σ_rows dy·x̂,  db = Σ_rows dy
//     pass A (memory): Σx, Σg (layer) or Σx², Σg·x (rms);  pass B (cache, layer): Σ(x − μ)²,
//     Σg·(x − μ);  pass C (cache): dx;  dw/db: each run of up to 16 rows added into the row
//     group's partials after its pass C, column chunk by column chunk (RunGrads; in pass C,
//     row by row, for in-place calls and rows too long for a run); dw alone: in pass C, which
//     walks a run in column blocks so that the block's partial stays in L1 (run_beside).
//     With the forward's saved statistics (a.mean / a.rstd): pass A alone gives Σg (layer) and
//     Σg·(x − μ) (Σg·x for rms) about the saved μ, then pass C — no statistics of x.
//     A thread's rows are pipelined: pass C of a row runs beside pass A of the next
//     (write_row_beside, backward_rows), so reads from memory and dx's stores overlap.
//   softmax:    dx = y·(dy − Σ dy·y);   log_softmax: dx = dy − exp(y)·Σ dy   (pass A, pass C)
//
// Sums: f32 lanes over blocks of 1024 elements, blocks added in f64 (as the forward). Every pass
// reads and writes in pair order (rows_cpu.hpp: bf16 as even / odd elements, the dw / db
// partials and the f32 weight copy kept in that order); dx is written with kNanLowZero
// (write_rows_pairs, write_row_beside) for the forward's reason (norm_cpu.cpp).
// dw/db are a Sum over rows, reduced deterministically: the rows are cut into a fixed number of
// consecutive groups (a function of rows and n only, never of the thread count), each group
// sums its rows in order into its own f32 partial, and the partials are added in group order
// in f64.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

#include "norm_entries.hpp"
#include "rows_cpu.hpp"
#include "sixfold/runtime/dtype.hpp"

namespace sixfold::detail {
namespace {

struct Row {
  const void* x;   // x (rms/layer) or y (softmax kinds)
  const void* dy;
  void* dx;
  std::int64_t r;  // row index (saved statistics)
};

// A row's terms of pass C: dx = rs·(g − mean_g − (x − mf)·k) (mf and mean_g 0 for rms).
struct RowTerms {
  float mf = 0.f, rs = 0.f, k = 0.f, mean_g = 0.f;
};

// Pass A of one rms / layer row: the two sums it reads from memory, chunk by chunk (sums: the
// chunk at i with m lanes, as row_sums calls it), and the row's terms from them (terms, which
// runs pass B from cache first where the kind needs it). Saved: from the forward's mean / rstd,
// Σg and Σg·(x − μ) (rms: μ = 0, Σg not needed); otherwise Σx and Σg (layer), Σx² and Σg·x (rms).
template <DType T, DType Wt, bool Split, bool Layer, bool Saved>
struct PassA {
  // x and dy are prefetched 2 KB ahead into L1, where the forward's one stream goes 4 KB ahead.
  // Dev box (Intel Xeon, 2 cores, copy 49.8 GB/s), bf16, saved statistics, 4 KB → 2 KB ahead,
  // the two CLIs alternating, four rounds, % of copy: layer 16384×8192 69.5–72.6 → 72.7–74.7,
  // 4096×4096 66.4–70.5 → 68.9–71.4, 65536×1024 78.9–81.0 → 79.8–82.3; rms 65536×1024
  // 86.2–88.4 → 88.2–90.3, at the two larger shapes unchanged (78–83). In a knob sweep 1 and 3 KB
  // read like 2 KB; 0.5 and 8 KB were slower, and into L2 (prefetcht1) slower by 6–10.
  static constexpr int kAhead = 2048;
  const NormBackwardArgs* a;
  Row row;
  const void* w;
  float mf = 0.f;  // the saved mean (Layer && Saved)

  PassA(const NormBackwardArgs& args, const Row& r, const void* weight) : a(&args), row(r), w(weight) {
    if constexpr (Layer && Saved) mf = args.mean[r.r];
  }
  // Pair: m == 32 (the vectors a chunk holds known to the compiler, so that acc stays in registers).
  template <bool Pair>
  void sums(std::int64_t i, int m, vf16 (&acc)[2][2]) const {
    if constexpr (Pair) prefetch_pair<T, kAhead>(row.x, i), prefetch_pair<T, kAhead>(row.dy, i), m = 32;
    vf16 xv[2], dv[2], wv[2];
    ld_chunk<T, Split>(row.x, i, m, xv), ld_chunk<T, Split>(row.dy, i, m, dv), ld_chunk<Wt, Split>(w, i, m, wv);
    for (int h = 0; h < (Pair ? 2 : 1); ++h) {
      if constexpr (Saved) {
        vf16 xc = xv[h];
        if constexpr (Layer) xc -= mf;
        const vf16 g = dv[h] * wv[h];
        if constexpr (Layer) acc[acc_row(h)][0] += g;
        acc[acc_row(h)][1] += g * xc;
      } else if constexpr (Layer) {
        acc[acc_row(h)][0] += xv[h], acc[acc_row(h)][1] += dv[h] * wv[h];
      } else {
        acc[acc_row(h)][0] += xv[h] * xv[h];
        acc[acc_row(h)][1] += dv[h] * wv[h] * xv[h];
      }
    }
  }
  RowTerms terms(const double (&s)[2], RowStream* next) const {
    const std::int64_t n = a->x.n;
    RowTerms t;
    if constexpr (Saved) {
      t.rs = a->rstd[row.r];
      t.mf = mf;
      t.mean_g = float(s[0] / double(n));
      t.k = float(s[1] / double(n)) * t.rs * t.rs;
    } else if constexpr (Layer) {
      const float m = float(s[0] / double(n));
      t.mf = m;
      t.mean_g = float(s[1] / double(n));
      double c[2];  // pass B: Σ(x − μ)², Σg·(x − μ)
      const void* x = row.x;
      const void* dy = row.dy;
      const void* wt = w;
      row_sums<2>(n, c, [=](std::int64_t i, int mm, vf16 (&acc)[2][2]) {
        vf16 xv[2], dv[2], wv[2];
        ld_chunk<T, Split>(x, i, mm, xv, m), ld_chunk<T, Split>(dy, i, mm, dv), ld_chunk<Wt, Split>(wt, i, mm, wv);
        for (int h = 0; h < chunk_vectors(mm); ++h) {
          const vf16 xc = xv[h] - m;
          acc[acc_row(h)][0] += xc * xc;
          acc[acc_row(h)][1] += dv[h] * wv[h] * xc;
        }
      }, next);
      t.rs = float(1.0 / std::sqrt(c[0] / double(n) + double(a->eps)));
      t.k = float(c[1] / double(n)) * t.rs * t.rs;  // mean(g·x̂)·r
    } else {
      t.rs = float(1.0 / std::sqrt(s[0] / double(n) + double(a->eps)));
      t.k = float(s[1] / double(n)) * t.rs * t.rs;
    }
    return t;
  }
};

// Pass A (and B) of a row on its own: the row's terms.
template <class A>
[[gnu::flatten]] RowTerms row_terms(const A& pa, RowStream* next) {
  double s[2];
  row_sums<2>(pa.a->x.n, s, [&](std::int64_t i, int m, vf16 (&acc)[2][2]) {
    if (m == 32) pa.template sums<true>(i, m, acc);
    else pa.template sums<false>(i, m, acc);
  }, next);
  return pa.terms(s, next);
}

// One vector's dw / db terms, dy·((x − mf)·rs) and dy, added into dwv / dbv (xc = x − mf, or x
// for rms): pass C and RunGrads both, so either way a partial adds the same values.
template <bool Dw, bool Db>
SIXFOLD_VEC void add_grads(vf16& dwv, vf16& dbv, vf16 d, vf16 xc, float rs) {
  if constexpr (Db) dbv = dbv + d;
  if constexpr (Dw) dwv = vfma(d, xc * rs, dwv);
}

// dw / db of a run of consecutive rows of one row group, added into the group's partial rows
// after pass C has written the run's dx: column chunk by column chunk, each partial element
// loaded and stored once for the run, the run's rows read again from cache (kRunBytes of x and
// dy). Adding them in pass C loaded and stored the partials once a row: the sum's adds are
// cheap, those loads and stores were not (AVX2 host, bf16, % of copy, rms / layer backward at
// 16384×8192: 60 / 47 with dw / db in pass C, 77 / 78 with no gradients at all; 67 / 53 by
// runs). Each element
// still adds the rows in order, with pass C's terms (add_grads), so the partials hold the same
// sums a row at a time would. Sweeping a run chunk by chunk beside pass C of the
// next run, to fill the cycles pass C waits on memory, was slower than sweeping it after
// (docs/perf/norm.md, session 32).
constexpr std::int64_t kRunBytes = 256 << 10;
constexpr int kRunMax = 16;
// Rows a run takes: as many as fit kRunBytes of x and dy, at most kRunMax; 0 (dw / db in pass C)
// where fewer than 4 fit.
template <DType T>
int run_rows(std::int64_t n) {
  const std::int64_t r = kRunBytes / std::max<std::int64_t>(1, 2 * n * kElemBytes<T>);
  return r < 4 ? 0 : int(std::min<std::int64_t>(r, kRunMax));
}

// Dev hook: SIXFOLD_NORM_CPU_SWEEP set takes the sweep (RunGrads) for dw-only runs too, as
// before run_beside; read per call, so that one process can alternate the two
// (dev/norm/cpu_bwd_runs_ab.cpp). Both give the same bits.
inline bool dev_sweep_from_env() { return std::getenv("SIXFOLD_NORM_CPU_SWEEP") != nullptr; }
template <DType T, bool Layer, bool Dw, bool Db, bool Split>
struct RunGrads {
  Row rows[kRunMax];
  float mf[kRunMax], rs[kRunMax];
  int held = 0;

  void add(const Row& row, const RowTerms& t) { rows[held] = row, mf[held] = t.mf, rs[held] = t.rs, ++held; }
  // The run's dw / db into the partial rows dw / db (n columns, pair order); the run is emptied.
  [[gnu::flatten]] void sum_into(float* dw, float* db, std::int64_t n) {
    const auto chunk = [&](std::int64_t i, int m) {
      vf16 dwv[2] = {}, dbv[2] = {};
      if constexpr (Dw) ld_chunk<DType::f32>(dw, i, m, dwv);
      if constexpr (Db) ld_chunk<DType::f32>(db, i, m, dbv);
      for (int j = 0; j < held; ++j) {
        vf16 xv[2], dv[2];
        ld_chunk<T, Split>(rows[j].x, i, m, xv), ld_chunk<T, Split>(rows[j].dy, i, m, dv);
        for (int h = 0; h < chunk_vectors(m); ++h) {
          vf16 xc = xv[h];
          if constexpr (Layer) xc -= mf[j];
          add_grads<Dw, Db>(dwv[h], dbv[h], dv[h], xc, rs[j]);
        }
      }
      if constexpr (Dw) st_chunk(dw, i, m, dwv);
      if constexpr (Db) st_chunk(db, i, m, dbv);
    };
    std::int64_t i = 0;
    for (; i + 32 <= n; i += 32) chunk(i, 32);
    for (; i < n; i += 16) chunk(i, int(std::min<std::int64_t>(16, n - i)));
    held = 0;
  }
};

// Pass C's chunk function for one rms / layer row (write_rows_pairs' g for one row): the chunk
// of dx = rs·(g − mean_g − (x − mf)·k) at column i, with dw += dy·(x − mf)·rs and db += dy added
// into the partial rows dw / db (pair order: norm_backward_rows puts them back) where Dw / Db.
template <DType T, DType Wt, bool Layer, bool Dw, bool Db, bool Split>
SIXFOLD_VEC auto pass_c_chunk(const Row& row, const RowTerms& t, const void* w, float* dw, float* db) {
  // Copies the lambda holds by value (no reloads after each store to dw / db, which the
  // compiler could not tell apart from them).
  const void* x = row.x;
  const void* dy = row.dy;
  const float mf = t.mf, rs = t.rs, k = t.k, krs = t.k * t.rs, c = -t.rs * t.mean_g;
  return [=](std::int64_t i, int m, vf16 (&out)[2]) {
    vf16 dwv[2] = {}, dbv[2] = {}, wv[2], xv[2], dv[2];
    if constexpr (Dw) ld_chunk<DType::f32>(dw, i, m, dwv);
    if constexpr (Db) ld_chunk<DType::f32>(db, i, m, dbv);
    ld_chunk<Wt, Split>(w, i, m, wv);
    ld_chunk<T, Split>(x, i, m, xv), ld_chunk<T, Split>(dy, i, m, dv);
    for (int h = 0; h < chunk_vectors(m); ++h) {
      const vf16 d = dv[h];
      vf16 xc = xv[h];
      if constexpr (Layer) xc -= mf;  // exact where x is near the mean
      add_grads<Dw, Db>(dwv[h], dbv[h], d, xc, rs);
      // Layer: rs·(g − mean_g − xc·k) = g·rs + (c − xc·krs), c = −rs·mean_g, krs = k·rs: 4
      // operations for dx where the factored form took 5 (rms, mean_g = 0: 3 either way). The
      // FMAs are explicit (vfma): left to GCC's contraction, which product it fused differed
      // between the inlined copies of this chunk (a row's dx bits then depended on whether the
      // call streamed its output, or on the row's place in a thread's rows).
      if constexpr (Layer) out[h] = vfma(d * wv[h], vsplat(rs), vfma(xc, vsplat(-krs), vsplat(c)));
      else out[h] = rs * vfma(xc, vsplat(-k), d * wv[h]);
    }
    if constexpr (Dw) st_chunk(dw, i, m, dwv);
    if constexpr (Db) st_chunk(db, i, m, dbv);
  };
}

// Pass C of one rms / layer row (pass_c_chunk). HasNext: beside it, pass A of the next row (pa),
// whose terms are returned (write_row_beside: the next row's reads from memory overlap this
// row's work and stores).
template <DType T, DType Wt, bool Layer, bool Dw, bool Db, bool Split, bool HasNext, class A>
[[gnu::flatten]] RowTerms backward_write(const Row& row, const RowTerms& t, const void* w, float* dw, float* db,
                                         std::int64_t n, bool nt, RowStream* next, const A& pa) {
  const auto chunk = pass_c_chunk<T, Wt, Layer, Dw, Db, Split>(row, t, w, dw, db);
  if constexpr (HasNext) {
    double s[2];
    write_row_beside<T, true, Split>(row.dx, n, nt, chunk, [&](std::int64_t i, int m, vf16 (&acc)[2][2]) {
      if (m == 32) pa.template sums<true>(i, m, acc);
      else pa.template sums<false>(i, m, acc);
    }, s);
    return pa.terms(s, next);
  } else {
    write_row_pairs<T, true, Split>(row.dx, n, nt, chunk, next);
    return {};
  }
}

// Row r's row-group partial rows of dw / db (null where not wanted), zeroed at the group's
// first row, or at r = lo, the first row of a thread (whose ranges start at a group).
template <bool Dw, bool Db>
std::pair<float*, float*> group_partials(float* pdw, float* pdb, std::int64_t r, std::int64_t lo,
                                         std::int64_t per_group, std::int64_t n) {
  const std::int64_t gi = r / per_group;
  float* dw = Dw ? pdw + gi * n : nullptr;
  float* db = Db ? pdb + gi * n : nullptr;
  if (r == lo || r == gi * per_group) {
    if constexpr (Dw) std::fill_n(dw, n, 0.0f);
    if constexpr (Db) std::fill_n(db, n, 0.0f);
  }
  return {dw, db};
}

// Pass C of a run of rows of one row group (rows, their terms; count of them) in column blocks,
// dw added in it: block b (kSumBlock columns) of every row of the run, then block b + 1, so the
// block's dw partial (4 KB) stays in L1 while the run's rows add into them in row order, and the
// run's x and dy (read by pass A a run earlier) come from L2 once. Beside it, in the same loop,
// pass A of the next run (next, next_count), block after block of each row in row_sums' order:
// its sums, so its terms (into next_terms), have the bits row_terms gives, while its reads from
// memory overlap this run's work and dx's stores. The sweep this replaces (RunGrads) read the
// run from L2 a second time after its pass C.
template <DType T, DType Wt, bool Layer, bool Saved, bool Split>
[[gnu::flatten]] void run_beside(const NormBackwardArgs& a, const void* w, const Row* rows, const RowTerms* terms,
                                 int count, const Row* next, RowTerms* next_terms, int next_count, float* dw,
                                 bool nt) {
  using A = PassA<T, Wt, Split, Layer, Saved>;
  const std::int64_t n = a.x.n, nb = (n + kSumBlock - 1) / kSumBlock;
  const std::int64_t uc = count * nb, ua = next_count * nb;
  double s[2] = {0.0, 0.0};
  for (std::int64_t u = 0; u < std::max(uc, ua); ++u) {
    const int j = u < uc ? int(u % count) : 0, ja = u < ua ? int(u / nb) : 0;
    const std::int64_t cb = u < uc ? (u / count) * kSumBlock : 0, ab = u < ua ? (u % nb) * kSumBlock : 0;
    const std::int64_t lc = u < uc ? std::min(kSumBlock, n - cb) : 0, la = u < ua ? std::min(kSumBlock, n - ab) : 0;
    const Row& row = rows[j];
    const auto c = pass_c_chunk<T, Wt, Layer, true, false, Split>(row, terms[j], w, dw, nullptr);
    const A pa(a, u < ua ? next[ja] : row, w);  // (a valid row where pass A is done)
    vf16 acc[2][2] = {};
    const auto write = [&](std::int64_t i, int m) {
      vf16 v[2];
      c(cb + i, m, v);
      st_out_chunk<T, true, Split>(row.dx, cb + i, m, v, nt);
    };
    // Columns [i, len) of a block in row_sums' chunks: pairs of 32, then the tail by 16.
    const auto rest = [](std::int64_t i, std::int64_t len, auto&& f) {
      for (; i + 32 <= len; i += 32) f(i, 32);
      for (; i < len; i += 16) f(i, int(std::min<std::int64_t>(16, len - i)));
    };
    std::int64_t i = 0;
    for (; i + 32 <= lc && i + 32 <= la; i += 32) pa.template sums<true>(ab + i, 32, acc), write(i, 32);
    rest(i, la, [&](std::int64_t k, int m) {
      if (m == 32) pa.template sums<true>(ab + k, 32, acc);
      else pa.template sums<false>(ab + k, m, acc);
    });
    rest(i, lc, write);
    if (u < ua) {
      for (int q = 0; q < 2; ++q) s[q] += double(hsum16(acc[0][q] + acc[1][q]));
      if (u % nb == nb - 1) next_terms[ja] = pa.terms(s, nullptr), s[0] = s[1] = 0.0;
    }
  }
}

// The rms / layer rows [lo, hi) of one thread with dw (no db), pipelined (backward_rows' pipe),
// in runs of R rows that never cross a row group: each run's pass C beside the next run's pass A
// (run_beside); the thread's first run read by row_terms alone.
template <DType T, DType Wt, bool Split, bool Layer, bool Saved, class RowAt>
void backward_runs(const NormBackwardArgs& a, const void* w, float* pdw, std::int64_t lo, std::int64_t hi,
                   std::int64_t per_group, int R, bool nt, RowAt row_at) {
  using A = PassA<T, Wt, Split, Layer, Saved>;
  const std::int64_t n = a.x.n;
  const auto run_end = [&](std::int64_t r) { return std::min({r + R, hi, (r / per_group + 1) * per_group}); };
  Row rows[2][kRunMax];
  RowTerms terms[2][kRunMax];
  int cur = 0;
  std::int64_t r = lo, e = run_end(lo);
  for (std::int64_t q = r; q < e; ++q) rows[0][q - r] = row_at(q), terms[0][q - r] = row_terms(A(a, rows[0][q - r], w), nullptr);
  while (r < hi) {
    float* const dw = group_partials<true, false>(pdw, nullptr, r, lo, per_group, n).first;
    const std::int64_t e2 = e < hi ? run_end(e) : e;
    for (std::int64_t q = e; q < e2; ++q) rows[cur ^ 1][q - e] = row_at(q);
    run_beside<T, Wt, Layer, Saved, Split>(a, w, rows[cur], terms[cur], int(e - r), rows[cur ^ 1], terms[cur ^ 1],
                                           int(e2 - e), dw, nt);
    cur ^= 1, r = e, e = e2;
  }
}

// The rms / layer rows [lo, hi) of one thread. Pipelined where dx takes 32-element chunks from
// each row's start (write_row_beside: rows on a 64-byte boundary, or plain stores): pass C of
// each row runs beside pass A of the row after it, so the rows stream from memory while the
// one before is written; the RowStream's prefetch of the rows further ahead is then left out
// (dev box, bf16 16384×8192 rms without dw: 61 → 75% of copy without it; the two-pass form
// with it: 65%). Otherwise each row's passes run one after the other, the RowStream ahead.
// Row r's dw / db go to its group's partial rows (per_group rows a group), zeroed at the
// group's first row here: added a run of R rows at a time after the run's pass C (RunGrads),
// or with R = 0 in pass C row by row.
template <DType T, DType Wt, bool Split, bool Layer, bool Saved, bool Dw, bool Db, class RowAt>
void backward_rows(const NormBackwardArgs& a, const void* w, float* pdw, float* pdb, std::int64_t lo,
                   std::int64_t hi, std::int64_t per_group, bool nt, bool pipe, RowStream* next, RowAt row_at) {
  using A = PassA<T, Wt, Split, Layer, Saved>;
  const std::int64_t n = a.x.n;
  if (pipe) next = nullptr;
  // 0: dw / db in pass C (also where dx is written over x or dy, which a run reads after it)
  const bool in_place = a.dx.data == a.x.data || a.dx.data == a.dy.data;
  const int R = (Dw || Db) && !in_place ? run_rows<T>(n) : 0;
  // dweight alone (rms; layer without a bias) on rows of more than one block: pass C in column
  // blocks beside the next run's pass A (backward_runs). AMD EPYC VM (Zen 5, AVX-512), bf16
  // rms, against the sweep: 1.09–1.10× at 16384×8192, 0.98–1.09× at 4096², 0.96–1.12× at
  // 65536×1024 (one block a row: left to the sweep). With dbias too, the two partials a row
  // loads and stores from L1 cost more than the sweep saves (layer 32768×2048: 0.8×), so those
  // runs keep the sweep (docs/perf/norm.md, session 35).
  if constexpr (Dw && !Db)
    if (pipe && R && n > kSumBlock && !dev_sweep_from_env())
      return backward_runs<T, Wt, Split, Layer, Saved>(a, w, pdw, lo, hi, per_group, R, nt, row_at);
  RunGrads<T, Layer, Dw, Db, Split> run;
  RowTerms t;
  for (std::int64_t r = lo; r < hi; ++r) {
    const auto [dw, db] = group_partials<Dw, Db>(pdw, pdb, r, lo, per_group, n);
    const Row row = row_at(r);
    const A here(a, row, w);
    if (!pipe || r == lo) t = row_terms(here, next);
    if (R) {
      run.add(row, t);
      if (pipe && r + 1 < hi)
        t = backward_write<T, Wt, Layer, false, false, Split, true>(row, t, w, dw, db, n, nt, next, A(a, row_at(r + 1), w));
      else
        backward_write<T, Wt, Layer, false, false, Split, false>(row, t, w, dw, db, n, nt, next, here);
      if (run.held == R || r + 1 == hi || (r + 1) % per_group == 0) run.sum_into(dw, db, n);
    } else if (pipe && r + 1 < hi) {
      t = backward_write<T, Wt, Layer, Dw, Db, Split, true>(row, t, w, dw, db, n, nt, next, A(a, row_at(r + 1), w));
    } else {
      backward_write<T, Wt, Layer, Dw, Db, Split, false>(row, t, w, dw, db, n, nt, next, here);
    }
  }
}

// Pass A of a softmax-kind row: Σdy·y (softmax) or Σdy (log_softmax), in row_sums' chunks.
template <DType T, bool Split, bool Log>
struct SoftmaxSums {
  const void* y;
  const void* dy;
  void operator()(std::int64_t i, int m, vf16 (&acc)[2][2]) const {
    vf16 yv[2], dv[2];
    if (m == 32) {
      prefetch_pair<T>(dy, i);
      if constexpr (!Log) prefetch_pair<T>(y, i);
    }
    ld_chunk<T, Split>(dy, i, m, dv);
    if constexpr (!Log) ld_chunk<T, Split>(y, i, m, yv);
    if (m == 32) {
      for (int h = 0; h < 2; ++h) acc[h][0] += Log ? dv[h] : dv[h] * yv[h];
    } else {
      acc[0][0] += Log ? dv[0] : dv[0] * yv[0];
    }
  }
};

// The softmax-kind rows [lo, hi) of one thread, pipelined as backward_rows: dx = y·(dy − Σdy·y)
// (softmax) or dy − exp(y)·Σdy (log_softmax) of each row beside pass A of the next.
template <DType T, bool Split, bool Log, class RowAt>
[[gnu::flatten]] void softmax_backward_rows(std::int64_t n, std::int64_t lo, std::int64_t hi, bool nt, RowStream* next,
                                            bool pipe, RowAt row_at) {
  using A = SoftmaxSums<T, Split, Log>;
  double s[2] = {0.0, 0.0};  // written by row_sums before use (GCC 12 could not see it)
  if (pipe) next = nullptr;
  for (std::int64_t r = lo; r < hi; ++r) {
    const Row row = row_at(r);
    if (!pipe || r == lo) row_sums<2>(n, s, A{row.x, row.dy}, next);
    const float sf = float(s[0]);
    const void* y = row.x;
    const void* dy = row.dy;
    const auto chunk = [=](std::int64_t i, int m, vf16 (&out)[2]) {
      vf16 yv[2], dv[2];
      ld_chunk<T, Split>(y, i, m, yv), ld_chunk<T, Split>(dy, i, m, dv);
      for (int h = 0; h < chunk_vectors(m); ++h) {
        if constexpr (Log) out[h] = dv[h] - vexp(yv[h]) * sf;
        else out[h] = yv[h] * (dv[h] - sf);
      }
    };
    if (pipe && r + 1 < hi) {
      const Row after = row_at(r + 1);
      write_row_beside<T, true, Split>(row.dx, n, nt, chunk, A{after.x, after.dy}, s);
    } else {
      write_row_pairs<T, true, Split>(row.dx, n, nt, chunk, next);
    }
  }
}

// The fewest rows a dw / db row group takes where there are rows enough. A group's partial rows
// are zeroed, accumulated into row by row and reduced at the end: with a group a row (the rule
// was only "at most 64 groups", so 64 rows made 64 groups) that costs more than the rows
// themselves. Dev box, bf16 layer with dw and db, 2 threads, ns an element, groups of 1 / 8 /
// 16 / 32 rows: 64×4096 0.52 / 0.24 / 0.19 / 0.21, 256×4096 0.26 / 0.23 / 0.19 / 0.18 (without
// the gradients 0.09–0.11); 1024 rows and more have 64 groups either way.
constexpr std::int64_t kGroupRows = 16;

// nt: dx streams (non-temporal stores); pipe: every row of dx starts on a 64-byte boundary or
// nt is off, so rows are pipelined (backward_rows); Split: pair order (rows_cpu.hpp), which
// bf16 takes where pipe holds. All chosen by norm_backward_cpu.
template <DType T, DType Wt, bool Split>
void norm_backward_rows(const NormBackwardArgs& a, bool nt, bool pipe) {
  const std::int64_t n = a.x.n, rows = a.x.rows;
  const bool norm = a.kind == NormKind::rms || a.kind == NormKind::layer;
  std::vector<float> wf(norm && Wt == DType::f32 ? std::size_t(n) : 0, 1.0f);
  if (norm && a.weight && Wt == DType::f32) load_row(a.dtype, a.weight, wf.data(), n);
  to_pair_order<T, Split>(wf.data(), std::int64_t(wf.size()));  // as the passes read it (ld_chunk)
  const void* w = Wt == DType::f32 ? static_cast<const void*>(wf.data()) : a.weight;
  const bool grads = a.dweight || a.dbias;
  // Fixed row groups: kGroupRows rows a group or more, but 8 groups where there are 8 rows (so
  // that few rows still have threads to go to); at most 64 groups, and at most 2^21 partial
  // elements per gradient.
  const std::int64_t wanted = std::max<std::int64_t>(std::min<std::int64_t>(rows, 8), (rows + kGroupRows - 1) / kGroupRows);
  const std::int64_t groups =
      grads ? std::max<std::int64_t>(1, std::min<std::int64_t>({wanted, 64, (std::int64_t(1) << 21) / n}))
            : std::max<std::int64_t>(1, rows);
  const std::int64_t per_group = rows == 0 ? 0 : (rows + groups - 1) / groups;
  // The partials live in the calling thread's scratch, kept between calls (grow-only, at most
  // 2^21 floats each): allocated fresh per call, their pages were faulted in and zeroed by the
  // kernel on every call (dev box, bf16 64×4096 one thread: 0.75 → 0.25 ms; 16384×8192 layer
  // with dw and db 33.6–34.7 → 31.8–32.8 ms). Each group zeroes its own partial rows in the
  // parallel region, just before it accumulates into them.
  thread_local std::vector<float> scratch_dw, scratch_db;
  std::vector<float>& pdw = scratch_dw;  // references: the region's threads share the caller's
  std::vector<float>& pdb = scratch_db;
  if (a.dweight && pdw.size() < std::size_t(groups * n)) pdw.resize(std::size_t(groups * n));
  if (a.dbias && pdb.size() < std::size_t(groups * n)) pdb.resize(std::size_t(groups * n));
  const bool parallel = groups > 1 && rows * n >= (1 << 15);
#pragma omp parallel if (parallel)
  {
    // Static contiguous ranges of groups (so of rows); the rows ahead are prefetched.
    const int t = omp_get_thread_num(), nth = omp_get_num_threads();
    const std::int64_t glo = groups * t / nth, ghi = groups * (t + 1) / nth;
    const std::int64_t lo = std::min(rows, glo * per_group), hi = std::min(rows, ghi * per_group);
    RowStream next;
    next.base[0] = static_cast<const char*>(a.x.data), next.stride[0] = a.x.row_stride * kElemBytes<T>;
    next.base[1] = static_cast<const char*>(a.dy.data), next.stride[1] = a.dy.row_stride * kElemBytes<T>;
    next.row_bytes = n * kElemBytes<T>;
    next.per_row = n * (a.kind == NormKind::layer && !a.rstd ? 3 : 2);
    next.start(lo, hi);
    // Groups past the last row (per_group rounds up) have no rows to zero their partials.
    for (std::int64_t gi = std::max(glo, per_group == 0 ? 0 : (rows + per_group - 1) / per_group); gi < ghi; ++gi) {
      if (a.dweight) std::fill_n(pdw.data() + gi * n, n, 0.0f);
      if (a.dbias) std::fill_n(pdb.data() + gi * n, n, 0.0f);
    }
    auto row_at = [&](std::int64_t r) {
      return Row{at<T>(a.x.data, r * a.x.row_stride), at<T>(a.dy.data, r * a.dy.row_stride),
                 at<T>(a.dx.data, r * a.dx.row_stride), r};
    };
    float* dw = pdw.data();
    float* db = pdb.data();
    const auto run = [&]<bool Layer, bool Saved, bool Dw, bool Db>() {
      backward_rows<T, Wt, Split, Layer, Saved, Dw, Db>(a, w, dw, db, lo, hi, per_group, nt, pipe, &next, row_at);
    };
    const auto with_grads = [&]<bool Layer, bool Saved>() {
      if constexpr (Layer) {
        if (a.dweight && a.dbias) return run.template operator()<Layer, Saved, true, true>();
        if (a.dbias) return run.template operator()<Layer, Saved, false, true>();
      }
      if (a.dweight) run.template operator()<Layer, Saved, true, false>();
      else run.template operator()<Layer, Saved, false, false>();
    };
    if (a.kind == NormKind::layer) {
      if (a.rstd) with_grads.template operator()<true, true>();
      else with_grads.template operator()<true, false>();
    } else if (a.kind == NormKind::rms) {
      if (a.rstd) with_grads.template operator()<false, true>();
      else with_grads.template operator()<false, false>();
    } else {
      if (a.kind == NormKind::softmax) softmax_backward_rows<T, Split, false>(n, lo, hi, nt, &next, pipe, row_at);
      else softmax_backward_rows<T, Split, true>(n, lo, hi, nt, &next, pipe, row_at);
    }
    if (nt) stream_fence();
  }
  // Partials summed in group order, in f64 (columns in parallel, each group's row read in order).
  std::vector<float> out(static_cast<std::size_t>(n));
  for (auto [partial, dst] : {std::pair{&pdw, a.dweight}, std::pair{&pdb, a.dbias}}) {
    if (!dst) continue;
    const float* p = partial->data();
    constexpr std::int64_t kCols = 512;
#pragma omp parallel for schedule(static) if (groups * n >= (1 << 18))
    for (std::int64_t c0 = 0; c0 < n; c0 += kCols) {
      const std::int64_t m = std::min(kCols, n - c0);
      double s[kCols] = {};
      for (std::int64_t gi = 0; gi < groups; ++gi)
        for (std::int64_t i = 0; i < m; ++i) s[i] += double(p[gi * n + c0 + i]);
      for (std::int64_t i = 0; i < m; ++i) out[std::size_t(c0 + i)] = float(s[i]);
    }
    from_pair_order<T, Split>(out.data(), n);  // the partials were kept in pair order (backward_write)
    store_row(a.grad_dtype, out.data(), dst, n);
  }
}

}  // namespace

void norm_backward_cpu(const NormBackwardArgs& a) {
  with_float_dtype(a.dtype, [&]<DType T>() {
    const bool norm = a.kind == NormKind::rms || a.kind == NormKind::layer;
    // Pair order and pipelined rows unless dx streams, a row of it starts off a 64-byte boundary
    // and the in-order path is the faster there (output_plan, rows_cpu.hpp).
    const auto [nt, split] = output_plan(stream_output(a.x.rows * a.x.n * kElemBytes<T>),
                                         rows_aligned64<T>(a.dx.data, a.dx.row_stride, a.x.rows), true);
    const auto run = [&]<DType Wt>() {
      if constexpr (kPairSplit<T>)
        if (split) return norm_backward_rows<T, Wt, true>(a, nt, split);
      norm_backward_rows<T, Wt, false>(a, nt, split);
    };
    if constexpr (T != DType::f32)
      if (norm && a.weight && a.x.n > kF32WeightsMax) return run.template operator()<T>();
    run.template operator()<DType::f32>();
  });
}

}  // namespace sixfold::detail
