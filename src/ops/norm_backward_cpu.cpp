// CPU backend of the norm backward passes: each row of x (or y) and dy read from memory once,
// dx written once, 16 f32 lanes at a time (rows_cpu.hpp), the same pass structure as the forward
// (norm_cpu.cpp):
//
//   rms/layer:  x̂ = (x − μ)·r,  g = dy·w,  dx = r·(g − mean(g) − x̂·mean(g·x̂))   (μ = 0 for rms)
//               dw = Σ_rows dy·x̂,  db = Σ_rows dy
//     pass A (memory): Σx, Σg (layer) or Σx², Σg·x (rms);  pass B (cache, layer): Σ(x − μ)²,
//     Σg·(x − μ);  pass C (cache): dx, and dw/db accumulated into the row group's partials.
//     With the forward's saved statistics (a.mean / a.rstd): pass A alone gives Σg (layer) and
//     Σg·(x − μ) (Σg·x for rms) about the saved μ, then pass C — no statistics of x.
//   softmax:    dx = y·(dy − Σ dy·y);   log_softmax: dx = dy − exp(y)·Σ dy   (pass A, pass C)
//
// Sums: f32 lanes over blocks of 1024 elements, blocks added in f64 (as the forward). Every pass
// reads and writes in pair order (rows_cpu.hpp: bf16 as even / odd elements, the dw / db
// partials and the f32 weight copy kept in that order); dx is written with
// write_rows_pairs<T, R, true> for the forward's reason (norm_cpu.cpp).
// dw/db are a Sum over rows, reduced deterministically: the rows are cut into a fixed number of
// consecutive groups (a function of rows and n only, never of the thread count), each group
// sums its rows in order into its own f32 partial, and the partials are added in group order
// in f64.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "norm_entries.hpp"
#include "rows_cpu.hpp"
#include "sixfold/runtime/dtype.hpp"

namespace sixfold::detail {
namespace {

constexpr std::int64_t kBlock = 1024;

// Σ over the row's chunks in pair order (rows_cpu.hpp, ld_chunk): f(i, m, acc) adds the terms
// of the chunk at i (m == 32: a pair; m <= 16: in order, zero in lanes ≥ m) into acc[h][k] for
// its vectors h < chunk_vectors(m); f32 lanes per block of 1024 elements, blocks added in f64.
// K sums at once.
template <int K, class F>
void row_sums(std::int64_t n, double (&out)[K], F f, RowStream* next) {
  for (int k = 0; k < K; ++k) out[k] = 0;
  for (std::int64_t b = 0; b < n; b += kBlock) {
    const std::int64_t end = b + std::min(kBlock, n - b);
    vf16 acc[2][K] = {};
    std::int64_t i = b;
    for (; i + 32 <= end; i += 32) f(i, 32, acc);
    for (; i < end; i += 16) f(i, int(std::min<std::int64_t>(16, end - i)), acc);
    next->step(end - b);
    for (int k = 0; k < K; ++k) out[k] += double(hsum16(acc[0][k] + acc[1][k]));
  }
}

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

// Pass A (and B): the row's terms, from the saved statistics or from x.
template <DType T, DType Wt, bool Split>
[[gnu::flatten]] RowTerms backward_terms(const NormBackwardArgs& a, const Row& row, const void* w, RowStream* next) {
  const std::int64_t n = a.x.n;
  const void* x = row.x;
  const void* dy = row.dy;
  const bool layer = a.kind == NormKind::layer;
  RowTerms t;
  if (a.rstd) {  // saved statistics: one pass, Σg and Σg·(x − μ) (rms: μ = 0, Σg not needed)
    t.rs = a.rstd[row.r];
    t.mf = layer ? a.mean[row.r] : 0.f;
    const float mf = t.mf;
    double s[2];
    row_sums<2>(n, s, [=](std::int64_t i, int m, vf16 (&acc)[2][2]) {
      if (m == 32) prefetch_pair<T>(x, i), prefetch_pair<T>(dy, i);
      vf16 xv[2], dv[2], wv[2];
      ld_chunk<T, Split>(x, i, m, xv), ld_chunk<T, Split>(dy, i, m, dv), ld_chunk<Wt, Split>(w, i, m, wv);
      for (int h = 0; h < chunk_vectors(m); ++h) {
        vf16 xc = xv[h];
        if (layer) xc -= mf;
        const vf16 g = dv[h] * wv[h];
        if (layer) acc[h][0] += g;
        acc[h][1] += g * xc;
      }
    }, next);
    t.mean_g = float(s[0] / double(n));
    t.k = float(s[1] / double(n)) * t.rs * t.rs;
  } else if (layer) {
    double s[2];  // Σx, Σg
    row_sums<2>(n, s, [=](std::int64_t i, int m, vf16 (&acc)[2][2]) {
      if (m == 32) prefetch_pair<T>(x, i), prefetch_pair<T>(dy, i);
      vf16 xv[2], dv[2], wv[2];
      ld_chunk<T, Split>(x, i, m, xv), ld_chunk<T, Split>(dy, i, m, dv), ld_chunk<Wt, Split>(w, i, m, wv);
      for (int h = 0; h < chunk_vectors(m); ++h) acc[h][0] += xv[h], acc[h][1] += dv[h] * wv[h];
    }, next);
    const float mf = float(s[0] / double(n));
    t.mf = mf;
    t.mean_g = float(s[1] / double(n));
    double c[2];  // Σ(x − μ)², Σg·(x − μ)
    row_sums<2>(n, c, [=](std::int64_t i, int m, vf16 (&acc)[2][2]) {
      vf16 xv[2], dv[2], wv[2];
      ld_chunk<T, Split>(x, i, m, xv, mf), ld_chunk<T, Split>(dy, i, m, dv), ld_chunk<Wt, Split>(w, i, m, wv);
      for (int h = 0; h < chunk_vectors(m); ++h) {
        const vf16 xc = xv[h] - mf;
        acc[h][0] += xc * xc;
        acc[h][1] += dv[h] * wv[h] * xc;
      }
    }, next);
    t.rs = float(1.0 / std::sqrt(c[0] / double(n) + double(a.eps)));
    t.k = float(c[1] / double(n)) * t.rs * t.rs;  // mean(g·x̂)·r
  } else {
    double s[2];  // Σx², Σg·x
    row_sums<2>(n, s, [=](std::int64_t i, int m, vf16 (&acc)[2][2]) {
      if (m == 32) prefetch_pair<T>(x, i), prefetch_pair<T>(dy, i);
      vf16 xv[2], dv[2], wv[2];
      ld_chunk<T, Split>(x, i, m, xv), ld_chunk<T, Split>(dy, i, m, dv), ld_chunk<Wt, Split>(w, i, m, wv);
      for (int h = 0; h < chunk_vectors(m); ++h) {
        acc[h][0] += xv[h] * xv[h];
        acc[h][1] += dv[h] * wv[h] * xv[h];
      }
    }, next);
    t.rs = float(1.0 / std::sqrt(s[0] / double(n) + double(a.eps)));
    t.k = float(s[1] / double(n)) * t.rs * t.rs;
  }
  return t;
}

// Pass C of rms/layer over R rows of one row group at once: dx = rs·(g − mean_g − (x − mf)·k),
// dw += dy·(x − mf)·rs, db += dy, with the group's dw / db partials and w loaded and stored once
// per chunk for all R rows. Each element's updates come in row order, so any R gives the bits of
// row by row (R = 1).
template <DType T, DType Wt, int R, bool Layer, bool Dw, bool Db, bool Split>
[[gnu::flatten]] void backward_write(const Row (&rows)[R], const RowTerms (&t)[R], const void* w, float* dw, float* db,
                    std::int64_t n, bool nt, RowStream* next) {
  // Copies the lambda holds by value (no reloads after each store to dw / db, which the
  // compiler could not tell apart from them).
  void* dst[R];
  const void* xs[R];
  const void* dys[R];
  float mf[R], rs[R], k[R], krs[R], c[R];
  for (int j = 0; j < R; ++j) {
    dst[j] = rows[j].dx, xs[j] = rows[j].x, dys[j] = rows[j].dy;
    mf[j] = t[j].mf, rs[j] = t[j].rs, k[j] = t[j].k, krs[j] = t[j].k * t[j].rs, c[j] = -t[j].rs * t[j].mean_g;
  }
  // In pair order: the dw / db partials are kept in it (norm_backward_rows puts them back).
  write_rows_pairs<T, R, true, false, Split>(dst, n, nt, [=](std::int64_t i, int m, vf16 (&out)[R][2]) {
    vf16 dwv[2] = {}, dbv[2] = {}, wv[2];
    if constexpr (Dw) ld_chunk<DType::f32>(dw, i, m, dwv);
    if constexpr (Db) ld_chunk<DType::f32>(db, i, m, dbv);
    ld_chunk<Wt, Split>(w, i, m, wv);
#pragma GCC unroll 4
    for (int j = 0; j < R; ++j) {
      vf16 xv[2], dv[2];
      ld_chunk<T, Split>(xs[j], i, m, xv), ld_chunk<T, Split>(dys[j], i, m, dv);
      for (int h = 0; h < chunk_vectors(m); ++h) {
        const vf16 d = dv[h];
        if constexpr (Db) dbv[h] = dbv[h] + d;
        vf16 xc = xv[h];
        if constexpr (Layer) xc -= mf[j];  // exact where x is near the mean
        if constexpr (Dw) dwv[h] = dwv[h] + d * (xc * rs[j]);
        // Layer: rs·(g − mean_g − xc·k) = g·rs + (c − xc·krs), c = −rs·mean_g, krs = k·rs: 4
        // operations for dx where the factored form took 5 (rms, mean_g = 0: 3 either way).
        if constexpr (Layer) out[j][h] = (d * wv[h]) * rs[j] + (c[j] - xc * krs[j]);
        else out[j][h] = rs[j] * (d * wv[h] - xc * k[j]);
      }
    }
    if constexpr (Dw) st_chunk(dw, i, m, dwv);
    if constexpr (Db) st_chunk(db, i, m, dbv);
  }, next);
}

// R rows of one row group (R = 1: row by row; kBatch: LayerNorm batches, see
// norm_backward_rows): pass A of each, then one pass C.
constexpr int kBatch = 4;
template <DType T, DType Wt, int R, bool Split>
void norm_backward_pass(const NormBackwardArgs& a, const Row (&rows)[R], const void* w, float* dw, float* db,
                        bool nt, RowStream* next) {
  const std::int64_t n = a.x.n;
  RowTerms t[R];
  for (int j = 0; j < R; ++j) t[j] = backward_terms<T, Wt, Split>(a, rows[j], w, next);
  const int grads = (dw ? 1 : 0) | (db ? 2 : 0);
  if (a.kind == NormKind::layer) {
    switch (grads) {
      case 0: return backward_write<T, Wt, R, true, false, false, Split>(rows, t, w, dw, db, n, nt, next);
      case 1: return backward_write<T, Wt, R, true, true, false, Split>(rows, t, w, dw, db, n, nt, next);
      case 2: return backward_write<T, Wt, R, true, false, true, Split>(rows, t, w, dw, db, n, nt, next);
      default: return backward_write<T, Wt, R, true, true, true, Split>(rows, t, w, dw, db, n, nt, next);
    }
  }
  if constexpr (R == 1) {  // rms: row by row only
    if (dw) return backward_write<T, Wt, 1, false, true, false, Split>(rows, t, w, dw, db, n, nt, next);
    backward_write<T, Wt, 1, false, false, false, Split>(rows, t, w, dw, db, n, nt, next);
  }
}

template <DType T, bool Split>
[[gnu::flatten]] void softmax_backward_row(const NormBackwardArgs& a, const Row& row, bool nt, RowStream* next) {
  const std::int64_t n = a.x.n;
  const void* y = row.x;
  const void* dy = row.dy;
  void* const dst[1] = {row.dx};
  double s[1];
  if (a.kind == NormKind::softmax) {
    row_sums<1>(n, s, [=](std::int64_t i, int m, vf16 (&acc)[2][1]) {
      if (m == 32) prefetch_pair<T>(y, i), prefetch_pair<T>(dy, i);
      vf16 yv[2], dv[2];
      ld_chunk<T, Split>(y, i, m, yv), ld_chunk<T, Split>(dy, i, m, dv);
      for (int h = 0; h < chunk_vectors(m); ++h) acc[h][0] += dv[h] * yv[h];
    }, next);
    const float sf = float(s[0]);
    write_rows_pairs<T, 1, true, false, Split>(dst, n, nt, [=](std::int64_t i, int m, vf16 (&out)[1][2]) {
      vf16 yv[2], dv[2];
      ld_chunk<T, Split>(y, i, m, yv), ld_chunk<T, Split>(dy, i, m, dv);
      for (int h = 0; h < chunk_vectors(m); ++h) out[0][h] = yv[h] * (dv[h] - sf);
    }, next);
  } else {
    row_sums<1>(n, s, [=](std::int64_t i, int m, vf16 (&acc)[2][1]) {
      if (m == 32) prefetch_pair<T>(y, i), prefetch_pair<T>(dy, i);
      vf16 dv[2];
      ld_chunk<T, Split>(dy, i, m, dv);
      for (int h = 0; h < chunk_vectors(m); ++h) acc[h][0] += dv[h];
    }, next);
    const float sf = float(s[0]);
    write_rows_pairs<T, 1, true, false, Split>(dst, n, nt, [=](std::int64_t i, int m, vf16 (&out)[1][2]) {
      vf16 yv[2], dv[2];
      ld_chunk<T, Split>(y, i, m, yv), ld_chunk<T, Split>(dy, i, m, dv);
      for (int h = 0; h < chunk_vectors(m); ++h) out[0][h] = dv[h] - vexp(yv[h]) * sf;
    }, next);
  }
}

// nt: dx streams (non-temporal stores); Split: pair order (rows_cpu.hpp); both chosen by
// norm_backward_cpu.
template <DType T, DType Wt, bool Split>
void norm_backward_rows(const NormBackwardArgs& a, bool nt) {
  const std::int64_t n = a.x.n, rows = a.x.rows;
  const bool norm = a.kind == NormKind::rms || a.kind == NormKind::layer;
  std::vector<float> wf(norm && Wt == DType::f32 ? std::size_t(n) : 0, 1.0f);
  if (norm && a.weight && Wt == DType::f32) load_row(a.dtype, a.weight, wf.data(), n);
  to_pair_order<T, Split>(wf.data(), std::int64_t(wf.size()));  // as the passes read it (ld_chunk)
  const void* w = Wt == DType::f32 ? static_cast<const void*>(wf.data()) : a.weight;
  const bool grads = a.dweight || a.dbias;
  // Fixed row groups: at most 64, and at most 2^21 partial elements per gradient.
  const std::int64_t groups =
      grads ? std::max<std::int64_t>(1, std::min<std::int64_t>({rows, 64, (std::int64_t(1) << 21) / n}))
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
  // LayerNorm rows in batches of kBatch where that measured faster on this box (bf16, quiet,
  // same-session A/B: 16384×8192 55–57 → 64%, 4096×4096 57–60 → 64% of the copy roofline), and
  // while the batch's x and dy stay in L2 (2 MB per core here) from pass A to pass C. Not for
  // rms (71 → 63–69%, 76 → 69%, 85–88 → 74%) nor rows of 1024 (layer 78–80 → 67–70%): not
  // understood yet (register pressure of the four rows' terms is the first suspect).
  const bool batch = a.kind == NormKind::layer && n >= 4096 && kBatch * n * 2 * kElemBytes<T> <= (std::int64_t(1) << 20);
  const bool parallel = groups > 1 && rows * n >= (1 << 15);
#pragma omp parallel if (parallel)
  {
    // Static contiguous ranges of groups (so of rows); the rows ahead are prefetched.
    const int t = omp_get_thread_num(), nth = omp_get_num_threads();
    const std::int64_t glo = groups * t / nth, ghi = groups * (t + 1) / nth;
    RowStream next;
    next.base[0] = static_cast<const char*>(a.x.data), next.stride[0] = a.x.row_stride * kElemBytes<T>;
    next.base[1] = static_cast<const char*>(a.dy.data), next.stride[1] = a.dy.row_stride * kElemBytes<T>;
    next.row_bytes = n * kElemBytes<T>;
    next.per_row = n * (a.kind == NormKind::layer && !a.rstd ? 3 : 2);
    next.start(std::min(rows, glo * per_group), std::min(rows, ghi * per_group));
    for (std::int64_t gi = glo; gi < ghi; ++gi) {
      float* dw = a.dweight ? pdw.data() + gi * n : nullptr;
      float* db = a.dbias ? pdb.data() + gi * n : nullptr;
      if (dw) std::fill(dw, dw + n, 0.0f);
      if (db) std::fill(db, db + n, 0.0f);
      const std::int64_t end = std::min(rows, (gi + 1) * per_group);
      auto row_at = [&](std::int64_t r) {
        return Row{at<T>(a.x.data, r * a.x.row_stride), at<T>(a.dy.data, r * a.dy.row_stride),
                   at<T>(a.dx.data, r * a.dx.row_stride), r};
      };
      std::int64_t r = gi * per_group;
      if (batch)
        for (; r + kBatch <= end; r += kBatch) {
          const Row batch_rows[kBatch] = {row_at(r), row_at(r + 1), row_at(r + 2), row_at(r + 3)};
          norm_backward_pass<T, Wt, kBatch, Split>(a, batch_rows, w, dw, db, nt, &next);
        }
      for (; r < end; ++r) {
        const Row one[1] = {row_at(r)};
        if (norm) norm_backward_pass<T, Wt, 1, Split>(a, one, w, dw, db, nt, &next);
        else softmax_backward_row<T, Split>(a, one[0], nt, &next);
      }
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
    // Pair order unless dx streams and a row of it starts off a 64-byte boundary (see norm_rows
    // in norm_cpu.cpp).
    const bool nt = stream_output(a.x.rows * a.x.n * kElemBytes<T>);
    const bool split = !nt || rows_aligned64<T>(a.dx.data, a.dx.row_stride, a.x.rows);
    const auto run = [&]<DType Wt>() {
      if constexpr (kPairSplit<T>)
        if (split) return norm_backward_rows<T, Wt, true>(a, nt);
      norm_backward_rows<T, Wt, false>(a, nt);
    };
    if constexpr (T != DType::f32)
      if (norm && a.weight && a.x.n > kF32WeightsMax) return run.template operator()<T>();
    run.template operator()<DType::f32>();
  });
}

}  // namespace sixfold::detail
