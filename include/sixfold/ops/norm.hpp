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

void rms_norm(const TensorView& x, const TensorView& weight, const TensorView& out,
              NormParams params = {}, Stream stream = {});
void layer_norm(const TensorView& x, const TensorView& weight, const TensorView& bias,
                const TensorView& out, NormParams params = {}, Stream stream = {});
void softmax(const TensorView& x, const TensorView& out, Stream stream = {});
void log_softmax(const TensorView& x, const TensorView& out, Stream stream = {});

// The kernel-facing description of one call, filled by the validated entry points.
enum class NormKind { rms, layer, softmax, log_softmax };
struct NormArgs {
  NormKind kind = NormKind::rms;
  DType dtype = DType::f32;
  RowsView x, out;
  const void* weight = nullptr;  // (n) or null
  const void* bias = nullptr;    // (n) or null
  float eps = 1e-6f;
};

}  // namespace sixfold
