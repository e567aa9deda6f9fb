// CPU backend of the norm backward passes: dx row by row (each row of x/y and dy read once into
// per-thread f32 buffers, dx written once), row statistics in blocked f32 lanes summed in f64.
//
//   rms/layer:  x̂ = (x − μ)·r,  g = dy·w,  dx = r·(g − mean(g) − x̂·mean(g·x̂))   (μ = 0 for rms)
//               dw = Σ_rows dy·x̂,  db = Σ_rows dy
//   softmax:    dx = y·(dy − Σ dy·y);   log_softmax: dx = dy − exp(y)·Σ dy
//
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
#include "sixfold/runtime/vec_math.hpp"

namespace sixfold::detail {
namespace {

const void* row_ptr(const RowsView& v, DType t, std::int64_t r) {
  return static_cast<const char*>(v.data) +
         std::size_t(r * v.row_stride) * std::size_t(dtype_bits(t) / 8);
}

// One row: dx into `x` (overwritten); dw/db partials accumulated when given. w: n weights (ones
// when the op has none).
void backward_row(const NormBackwardArgs& a, float* x, const float* d, const float* w, float* dw,
                  float* db) {
  const std::int64_t n = a.x.n;
  switch (a.kind) {
    case NormKind::rms:
    case NormKind::layer: {
      const float mf =
          a.kind == NormKind::layer ? float(lane_sum(n, [x](std::int64_t i) { return x[i]; }) / double(n)) : 0.f;
      const double ss = lane_sum(n, [x, mf](std::int64_t i) { return (x[i] - mf) * (x[i] - mf); });
      const float rs = float(1.0 / std::sqrt(ss / double(n) + double(a.eps)));
      const double sgx = lane_sum(n, [x, d, w, mf](std::int64_t i) { return d[i] * w[i] * (x[i] - mf); });
      const double sg =
          a.kind == NormKind::layer ? lane_sum(n, [d, w](std::int64_t i) { return d[i] * w[i]; }) : 0.0;
      const float mean_g = float(sg / double(n));
      const float k = float(sgx / double(n)) * rs * rs;  // mean(g·x̂)·r
      if (dw)
        for (std::int64_t i = 0; i < n; ++i) dw[i] += d[i] * ((x[i] - mf) * rs);
      if (db)
        for (std::int64_t i = 0; i < n; ++i) db[i] += d[i];
      for (std::int64_t i = 0; i < n; ++i) {
        const float xc = x[i] - mf;
        x[i] = rs * (d[i] * w[i] - mean_g - xc * k);
      }
      break;
    }
    case NormKind::softmax: {
      const float s = float(lane_sum(n, [x, d](std::int64_t i) { return d[i] * x[i]; }));
      for (std::int64_t i = 0; i < n; ++i) x[i] = x[i] * (d[i] - s);
      break;
    }
    case NormKind::log_softmax: {
      const float s = float(lane_sum(n, [d](std::int64_t i) { return d[i]; }));
      for (std::int64_t i = 0; i < n; ++i) x[i] = d[i] - exp_f32(x[i]) * s;
      break;
    }
  }
}

}  // namespace

void norm_backward_cpu(const NormBackwardArgs& a) {
  const std::int64_t n = a.x.n, rows = a.x.rows;
  std::vector<float> w(static_cast<std::size_t>(n), 1.0f);
  if (a.weight) load_row(a.dtype, a.weight, w.data(), n);
  const bool grads = a.dweight || a.dbias;
  // Fixed row groups: at most 64, and at most 2^21 partial elements per gradient.
  const std::int64_t groups =
      grads ? std::max<std::int64_t>(1, std::min<std::int64_t>({rows, 64, (std::int64_t(1) << 21) / n}))
            : std::max<std::int64_t>(1, rows);
  const std::int64_t per_group = rows == 0 ? 0 : (rows + groups - 1) / groups;
  std::vector<float> pdw(a.dweight ? std::size_t(groups * n) : 0, 0.0f);
  std::vector<float> pdb(a.dbias ? std::size_t(groups * n) : 0, 0.0f);
  const bool parallel = groups > 1 && rows * n >= (1 << 15);
#pragma omp parallel if (parallel)
  {
    std::vector<float> xb(static_cast<std::size_t>(n)), db(static_cast<std::size_t>(n));
#pragma omp for schedule(static)
    for (std::int64_t gi = 0; gi < groups; ++gi) {
      float* dw = a.dweight ? pdw.data() + gi * n : nullptr;
      float* dbp = a.dbias ? pdb.data() + gi * n : nullptr;
      for (std::int64_t r = gi * per_group; r < std::min(rows, (gi + 1) * per_group); ++r) {
        load_row(a.dtype, row_ptr(a.x, a.dtype, r), xb.data(), n);
        load_row(a.dtype, row_ptr(a.dy, a.dtype, r), db.data(), n);
        backward_row(a, xb.data(), db.data(), w.data(), dw, dbp);
        store_row(a.dtype, xb.data(), const_cast<void*>(row_ptr(a.dx, a.dtype, r)), n);
      }
    }
  }
  // Partials summed in group order, in f64.
  std::vector<float> out(static_cast<std::size_t>(n));
  for (auto [partial, dst] : {std::pair{&pdw, a.dweight}, std::pair{&pdb, a.dbias}}) {
    if (!dst) continue;
    for (std::int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (std::int64_t gi = 0; gi < groups; ++gi) s += double((*partial)[std::size_t(gi * n + i)]);
      out[std::size_t(i)] = float(s);
    }
    store_row(a.grad_dtype, out.data(), dst, n);
  }
}

}  // namespace sixfold::detail
