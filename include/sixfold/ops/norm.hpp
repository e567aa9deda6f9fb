// sixfold/ops/norm.hpp — fused row normalizations and softmax: one read, one write.
//
// Each op reduces a row to statistics, then rewrites the row with them. Unfused, every step is a
// pass over memory; fused, the row is read once and written once. The statistics are monoids —
// sum of squares (RMSNorm), Welford's (count, mean, M2) with Chan's merge (LayerNorm), the
// online (max, sum-of-exp) pair (softmax) — so a row split across threads, warps or blocks is
// still reduced exactly (associativity), and kept in registers/cache while it is rewritten
// (locality).
//
//   rms_norm:    y = x / sqrt(mean(x²) + eps) · w
//   layer_norm:  y = (x − mean) / sqrt(var + eps) · w + b         (biased variance, as torch)
//   softmax:     y = exp(x − max) / Σ exp(x − max)
//   log_softmax: y = x − max − log Σ exp(x − max)
//   add_rms_norm / add_layer_norm: s = x + residual; y = norm(s); both s and y are written
//                (the pre-norm transformer block). s is rounded to the dtype before it is
//                normalized, so y == rms_norm(s) of the stored s.
//
// Saved row statistics (NormStats, optional, as torch's native_layer_norm returns and takes
// them): the forward of layer_norm / add_layer_norm can also write mean = μ and
// rstd = 1/sqrt(var + eps) per row, rms_norm / add_rms_norm rstd = 1/sqrt(mean(x²) + eps) — the
// f32 values the normalization itself used (add_*: those of s). The backward given them skips
// the statistics pass: one reduction per row (Σg·x̂ for rms; Σg and Σg·x̂ together for layer)
// instead of recomputing μ and r from x (two reductions and barriers per row for layer), and
// params.eps is not used. Each is a contiguous f32 tensor of R elements, one per row of x (any
// shape of R elements: [R], x's leading dimensions, those and a trailing 1), on x's device; an
// empty TensorView means not written / not given. rms has no mean (it must be absent); the
// layer backward takes both or neither.
//
// Backward (one read of each input row, one write of dx; statistics recomputed from x unless
// given):
//   rms_norm:    x̂ = x·r, r = 1/sqrt(mean(x²)+eps), g = dy·w
//                dx = r·(g − x̂·mean(g·x̂)),   dw = Σ_rows dy·x̂
//   layer_norm:  x̂ = (x−μ)·r, dx = r·(g − mean(g) − x̂·mean(g·x̂)),  dw = Σ dy·x̂,  db = Σ dy
//   softmax:     dx = y·(dy − Σ dy·y)          (from the forward output y)
//   log_softmax: dx = dy − exp(y)·Σ dy         (from the forward output y)
// dweight/dbias are reduced across rows deterministically: rows are cut into a fixed number of
// row groups (a function of the shape and, on CUDA, of the device's SM count), each group's
// partial sums are formed in a fixed order, then the groups are summed in index order — no
// floating-point atomics, so repeated calls give identical bits on the same device.
//
// Shapes: x is (..., n): the last dimension is the row and must have unit stride; the leading
// dimensions must collapse into one row stride (any row stride: strided rows are read in place).
// out has x's shape (its own row stride allowed). weight and bias are (n), contiguous, optional
// (an empty TensorView, data == nullptr and rank 0, means absent). Rows of any length 1..2^31.
// dtypes: x and out f32, bf16 or f16 (the same), weight/bias the dtype of x; statistics and
// arithmetic in f32. out may alias x exactly (in place); partial overlaps are rejected.
// NaN/Inf: they propagate as in the formulas; a softmax row of all −inf gives NaN (0/0), the
// same as torch.softmax; log_softmax of it gives NaN.
// Backend follows the tensors (host: all CPU cores; CUDA: the tensors' device, in `stream`,
// asynchronous, no allocation). CUDA, rows longer than 32768 (bf16/f16) or 16384 (f32)
// elements: the first such call on a device sets kernel attributes, so make it outside CUDA-graph
// capture (later calls capture fine).
#pragma once

#include "sixfold/ops/rows.hpp"
#include "sixfold/runtime/tensor.hpp"

namespace sixfold {

struct NormParams {
  float eps = 1e-6f;
};

// Per-row statistics of rms / layer norm: written by the forward, read by the backward.
struct NormStats {
  TensorView mean;  // (rows) f32, layer only
  TensorView rstd;  // (rows) f32
};

void rms_norm(const TensorView& x, const TensorView& weight, const TensorView& out,
              NormParams params = {}, Stream stream = {}, const NormStats& stats_out = {});
void layer_norm(const TensorView& x, const TensorView& weight, const TensorView& bias,
                const TensorView& out, NormParams params = {}, Stream stream = {},
                const NormStats& stats_out = {});
void softmax(const TensorView& x, const TensorView& out, Stream stream = {});
void log_softmax(const TensorView& x, const TensorView& out, Stream stream = {});

// Fused residual add + norm. x, residual, out and sum_out all have x's shape and dtype (each
// its own row stride). sum_out may alias x or residual exactly (in place, the usual
// `residual += x` of a pre-norm block); out may alias x or residual exactly, but out and
// sum_out must not overlap each other.
void add_rms_norm(const TensorView& x, const TensorView& residual, const TensorView& weight,
                  const TensorView& out, const TensorView& sum_out, NormParams params = {},
                  Stream stream = {}, const NormStats& stats_out = {});
void add_layer_norm(const TensorView& x, const TensorView& residual, const TensorView& weight,
                    const TensorView& bias, const TensorView& out, const TensorView& sum_out,
                    NormParams params = {}, Stream stream = {}, const NormStats& stats_out = {});

// Backward passes. dy and x (or y) have the same shape and dtype; dx is written with that shape
// (it may alias dy or x exactly). dweight / dbias: (n), the dtype of x or f32, optional (absent:
// not computed; dweight requires weight). params.eps must be the forward's. CUDA: takes a
// stream-ordered workspace (per-group partials of dweight/dbias; row statistics of rows longer
// than 8192 elements) from the device's default memory pool (cudaMallocAsync), so calls may be
// captured into CUDA graphs (allocation nodes; tests/test_norm_backward.cpp,
// CudaCapturedInAGraph).
// stats: the forward's saved statistics (NormStats above), or empty to recompute them from x.
void rms_norm_backward(const TensorView& dy, const TensorView& x, const TensorView& weight,
                       const TensorView& dx, const TensorView& dweight, NormParams params = {},
                       Stream stream = {}, const NormStats& stats = {});
void layer_norm_backward(const TensorView& dy, const TensorView& x, const TensorView& weight,
                         const TensorView& dx, const TensorView& dweight,
                         const TensorView& dbias, NormParams params = {}, Stream stream = {},
                         const NormStats& stats = {});
void softmax_backward(const TensorView& dy, const TensorView& y, const TensorView& dx,
                      Stream stream = {});
void log_softmax_backward(const TensorView& dy, const TensorView& y, const TensorView& dx,
                          Stream stream = {});

// The kernel-facing description of one call, filled by the validated entry points.
enum class NormKind { rms, layer, softmax, log_softmax };
struct NormArgs {
  NormKind kind = NormKind::rms;
  DType dtype = DType::f32;
  RowsView x, out;
  const void* weight = nullptr;  // (n) or null
  const void* bias = nullptr;    // (n) or null
  float eps = 1e-6f;
  // Fused residual add (data == nullptr when absent): x + residual is written to sum_out and
  // normalized.
  RowsView residual, sum_out;
  // Saved statistics to write (rms / layer; null when not asked): (rows) f32 each.
  float* mean = nullptr;  // layer only
  float* rstd = nullptr;
};

// One backward call. x holds the forward input (rms, layer) or the forward output y (softmax
// kinds). dweight/dbias are written in `grad_dtype` (dtype or f32), or skipped when null.
struct NormBackwardArgs {
  NormKind kind = NormKind::rms;
  DType dtype = DType::f32, grad_dtype = DType::f32;
  RowsView dy, x, dx;
  const void* weight = nullptr;  // (n) or null
  void* dweight = nullptr;       // (n) or null
  void* dbias = nullptr;         // (n) or null
  float eps = 1e-6f;
  // The forward's statistics (rms: rstd; layer: mean and rstd), (rows) f32, or null: recomputed.
  const float* mean = nullptr;
  const float* rstd = nullptr;
};

}  // namespace sixfold
