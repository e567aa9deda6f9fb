// sixfold/ops/activation.hpp — fused element-wise activations: one read of each input, one
// write of the output, instead of one pass per operation (locality).
//
//   bias_gelu:  y = gelu(x + bias)
//               erf form:  gelu(u) = u/2 · (1 + erf(u/√2))                       (exact)
//               tanh form: gelu(u) = u/2 · (1 + tanh(√(2/π) · (u + 0.044715 u³)))  (approximate)
//   silu_gate:  y = silu(a) · b = a / (1 + exp(−a)) · b                           (SwiGLU's gate)
//
// Shapes: x (or a, b) are (..., n) with unit stride in the last dimension and leading dimensions
// that collapse into one row stride (strided rows are read in place); bias is (n), optional (an
// empty TensorView); out has the input's shape and may alias x (or a) exactly. dtypes f32, bf16,
// f16 (all tensors the same), f32 arithmetic. NaN propagates; gelu(±inf) = ±inf·(0 or 1) as the
// formulas give (+inf, and NaN for −inf in the erf form's 0·inf — documented, as in torch).
// Backend follows the tensors; CUDA runs asynchronously in `stream`.
#pragma once

#include "sixfold/ops/rows.hpp"
#include "sixfold/runtime/tensor.hpp"

namespace sixfold {

enum class GeluForm { erf, tanh };

struct GeluParams {
  GeluForm form = GeluForm::erf;
};

void bias_gelu(const TensorView& x, const TensorView& bias, const TensorView& out,
               GeluParams params = {}, Stream stream = {});
void silu_gate(const TensorView& a, const TensorView& b, const TensorView& out,
               Stream stream = {});

enum class ActivationKind { gelu_erf, gelu_tanh, silu_gate };

// The kernel-facing description of one validated call.
struct ActivationArgs {
  ActivationKind kind = ActivationKind::gelu_erf;
  DType dtype = DType::f32;
  RowsView x, b, out;           // b: silu_gate's second input, else empty
  const void* bias = nullptr;   // bias_gelu's (n) bias or null
};

}  // namespace sixfold
