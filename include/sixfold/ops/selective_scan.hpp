// sixfold/ops/selective_scan.hpp — Mamba's selective scan (S6) and its one-step decoding update.
//
// Per (batch b, channel c) and state s < n, with Δ = softplus?(delta + delta_bias):
//   h_t[s] = exp(Δ_t · A[c,s]) · h_{t−1}[s] + Δ_t · B_t[s] · u_t       (h_{−1} = initial state or 0)
//   y_t    = Σ_s C_t[s] · h_t[s] + D[c] · u_t,      out_t = y_t · silu(z_t)   (z optional)
// the semantics of mamba-ssm's selective_scan_fn (real A). The recurrence is a product of affine
// maps h -> a·h + b, and affine maps compose associatively (Affine in algebra/instances.hpp): a
// sequence may be cut into chunks that are scanned in parallel and joined by composing their
// maps (associativity); the discretization, the scan and the output projection are fused so
// every input is read once and out written once (locality).
//
// Shapes (element strides; the time dimension L must have unit stride, the others any):
//   u, delta, z, out  (batch, d, L)               z optional; out has u's dtype
//   A                 (d, n) f32, contiguous      real; n = d_state, 1..256
//   B, C              (d, n) f32 contiguous ("fixed"), or (batch, groups, n, L) in u's dtype
//                     ("input-dependent"); channel c uses group c / (d / groups)
//   D, delta_bias     (d) f32, contiguous, optional
//   initial_state     (batch, d, n) f32, contiguous, optional (zeros when absent)
//   final_state       (batch, d, n) f32, contiguous, optional output: h after the last step
// Varlen (selective_scan_varlen): sequences packed along L with no padding, batch absent:
//   u, delta, z, out (d, total), B/C (groups, n, total) or fixed, cu_seqlens int32 (nseq + 1),
//   non-decreasing from 0 to total; initial/final state (nseq, d, n). The state restarts at
//   every sequence boundary (from initial_state[seq] or 0). A CUDA cu_seqlens is copied to the
//   host to be validated (nseq + 1 ints, synchronous: not capturable in a CUDA graph).
// softplus(x) = log(1 + e^x), taken as x above 20 (as mamba-ssm and torch.nn.functional.softplus).
//
// dtypes: u, delta, z, out and input-dependent B/C all f32, bf16 or f16 (the same); the state,
// the arithmetic and A, D, delta_bias, fixed B/C in f32. Outputs must not overlap inputs.
// Determinism: results are the same bits on every run with the same inputs and shapes.
// Backend follows the tensors (host: all CPU cores; CUDA: the tensors' device, in `stream`,
// asynchronous, no allocation, graph-capturable). Bad input raises sixfold::Error naming the
// argument, before anything is written.
#pragma once

#include <cstdint>

#include "sixfold/runtime/tensor.hpp"

namespace sixfold {

inline constexpr int kSelectiveScanMaxState = 256;

struct SelectiveScanParams {
  bool delta_softplus = false;
};

// Optional tensors are empty TensorViews (data == nullptr, rank 0).
struct SelectiveScanTensors {
  TensorView u, delta, A, B, C;
  TensorView D, z, delta_bias, initial_state;
};

void selective_scan(const SelectiveScanTensors& in, const TensorView& out,
                    const TensorView& final_state = {}, SelectiveScanParams params = {},
                    Stream stream = {});

void selective_scan_varlen(const SelectiveScanTensors& in, const TensorView& cu_seqlens,
                           const TensorView& out, const TensorView& final_state = {},
                           SelectiveScanParams params = {}, Stream stream = {});

// One decoding step against a cached state (updated in place), mamba-ssm's
// selective_state_update:  Δ = softplus?(dt + dt_bias);  state = exp(Δ·A)·state + Δ·B·x;
// out = Σ_s state·C + D·x, times silu(z).
//   state (batch, d, n) f32 contiguous (read and written); x, dt, z, out (batch, d) with any
//   strides; B, C (batch, groups, n) with unit stride along n; A (d, n), D, dt_bias (d) f32
//   contiguous; x, dt, z, B, C, out of one dtype (f32, bf16, f16).
struct StateUpdateTensors {
  TensorView x, dt, A, B, C;
  TensorView D, z, dt_bias;
};

void selective_state_update(const TensorView& state, const StateUpdateTensors& in,
                            const TensorView& out, SelectiveScanParams params = {},
                            Stream stream = {});

// ---- The kernel-facing description of one validated call ----------------------------------
// Element strides; t has unit stride everywhere. Varlen: batch strides are 0, sequence b covers
// t in [cu_seqlens[b], cu_seqlens[b+1]) of the packed axis, and `len` is unused.
struct SelectiveScanArgs {
  DType dtype = DType::f32;             // u, delta, z, out, input-dependent B/C
  std::int64_t batch = 0, d = 0, n = 0, len = 0, groups = 1;
  const void* u = nullptr;
  const void* delta = nullptr;
  const void* z = nullptr;              // optional
  void* out = nullptr;
  std::int64_t u_stride[2] = {}, delta_stride[2] = {}, z_stride[2] = {}, out_stride[2] = {};
  const float* A = nullptr;             // (d, n)
  const float* D = nullptr;             // optional (d)
  const float* delta_bias = nullptr;    // optional (d)
  bool var_B = false, var_C = false;
  const void* B = nullptr;              // fixed: f32 (d, n); var: (batch, groups, n, L)
  const void* C = nullptr;
  std::int64_t B_stride[3] = {}, C_stride[3] = {};  // var: [batch, group, state]
  const float* initial_state = nullptr; // optional (batch, d, n)
  float* final_state = nullptr;         // optional (batch, d, n)
  const std::int32_t* cu_seqlens = nullptr;  // varlen only, on the tensors' device
  bool delta_softplus = false;
};

struct StateUpdateArgs {
  DType dtype = DType::f32;             // x, dt, z, B, C, out
  std::int64_t batch = 0, d = 0, n = 0, groups = 1;
  float* state = nullptr;               // (batch, d, n)
  const void* x = nullptr; const void* dt = nullptr; const void* z = nullptr; void* out = nullptr;
  std::int64_t x_stride[2] = {}, dt_stride[2] = {}, z_stride[2] = {}, out_stride[2] = {};
  const void* B = nullptr; const void* C = nullptr;
  std::int64_t B_stride[2] = {}, C_stride[2] = {};  // [batch, group]; unit along n
  const float* A = nullptr; const float* D = nullptr; const float* dt_bias = nullptr;
  bool dt_softplus = false;
};

}  // namespace sixfold
