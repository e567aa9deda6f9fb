// sixfold/ops/attention.hpp — exact softmax attention without the N×N score matrix.
//
// The online-softmax state (m, l, acc) of one query row is a monoid (OnlineSoftmax in
// algebra/instances.hpp): key/value tiles can be folded in any grouping, so the scores live only
// in fast memory, one tile at a time (associativity + locality). merge_attention_states exposes
// the same monoid on finished partial results: (o, lse) over disjoint key sets combine into the
// exact attention over their union (split-KV decoding, attention across devices).
//
// Shapes (element strides, any, except a unit last dimension):
//   q   (batch, q_heads,  q_len,  head_dim)      BHLD; a BLHD tensor passes as its permuted view
//   k,v (batch, kv_heads, kv_len, head_dim)      q_heads % kv_heads == 0 (GQA; MQA: kv_heads 1)
//   out (batch, q_heads,  q_len,  head_dim)      the dtype of q
//   lse (batch, q_heads,  q_len) f32, optional   natural-log log-sum-exp of the scaled scores
// Varlen (attention_varlen): sequences packed along the token axis, no padding:
//   q (total_q, q_heads, head_dim), k/v (total_k, kv_heads, head_dim), out like q,
//   lse (q_heads, total_q) f32 optional; cu_seqlens_q / cu_seqlens_k: int32 (batch + 1),
//   non-decreasing, starting at 0, ending at total_q / total_k. Each sequence is attended on its own.
//
// Semantics per (batch, head, query i): key j is visible iff
//   causal:        j <= i + (kv_len − q_len)                       (bottom-right aligned)
//   window (l, r): i + (kv_len − q_len) − l <= j <= i + (kv_len − q_len) + r   (−1: unbounded)
// (causal is the window (l, 0); causal together with a right window other than 0 or −1 is an
// error). out_i = Σ_j softmax_j(scale · q_i·k_j) v_j over visible j, scale defaulting to
// 1/sqrt(head_dim). A row that sees no key gives out_i = 0 and lse_i = −inf.
//
// dtypes: CPU f32 and bf16 (f32 compute); CUDA bf16 and f16 on tensor cores, f32 accumulation.
// Head dims 64, 96, 128, 256 (CPU: any 1..256). Backend follows the tensors (CUDA: in `stream`,
// asynchronous).
//
// Validation (sixfold::Error naming the argument; nothing is written): ranks and shapes, head
// dims equal across q/k/v/out, q_heads % kv_heads, dtypes and one device for all tensors, unit
// last stride and non-negative strides, out/lse overlapping neither each other, themselves nor
// any input (no in-place attention), causal with window_right > 0, windows < −1, a non-finite
// scale, cu_seqlens that are not int32 (batch + 1), contiguous, 0 … total and non-decreasing.
// CUDA also needs 16-byte aligned base pointers and strides that are multiples of 8 elements
// (every BHLD/BLHD view of a supported head dim is). attention_varlen on CUDA tensors copies the
// batch + 1 offsets to the host to check them: a synchronous copy, so that call cannot be
// captured in a CUDA graph (attention and merge_attention_states can).
// NaN/Inf: finite inputs never give NaN; a NaN in q, k or v makes NaN the rows that read it (a
// masked key that shares a tile with visible ones may be read).
#pragma once

#include <cstdint>

#include "sixfold/runtime/tensor.hpp"

namespace sixfold {

struct AttentionParams {
  float scale = 0.0f;              // 0: 1/sqrt(head_dim)
  bool causal = false;             // bottom-right aligned when q_len != kv_len
  std::int64_t window_left = -1;   // −1: unbounded
  std::int64_t window_right = -1;  // −1: unbounded
};

// lse may be an empty TensorView (not wanted).
void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, const AttentionParams& params = {}, Stream stream = {});

void attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& cu_seqlens_q, const TensorView& cu_seqlens_k,
                      const TensorView& out, const TensorView& lse,
                      const AttentionParams& params = {}, Stream stream = {});

// (o1, lse1) ⊕ (o2, lse2) → (out, lse_out): o (..., head_dim) in f32/bf16/f16, lse (...) f32 with
// the same leading shape. A side with lse −inf contributes nothing; both −inf gives 0 and −inf.
// out may alias o1 or o2 and lse_out lse1 or lse2 (in place). lse_out may be empty.
void merge_attention_states(const TensorView& o1, const TensorView& lse1, const TensorView& o2,
                            const TensorView& lse2, const TensorView& out, const TensorView& lse_out,
                            Stream stream = {});

// The kernel-facing description of one validated call (both entry points fill it).
struct AttentionArgs {
  DType dtype = DType::bf16;        // q, k, v, out
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;             // optional
  std::int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0;
  // Element strides of [batch, head, token] (the last dimension is unit). Varlen: batch strides
  // are unused, tokens of sequence b start at cu_q[b] / cu_k[b], q_len / kv_len are the maxima.
  std::int64_t q_stride[3] = {}, k_stride[3] = {}, v_stride[3] = {}, out_stride[3] = {};
  std::int64_t lse_stride[3] = {};  // [batch, head, token]
  const std::int32_t* cu_q = nullptr;  // varlen only (batch + 1 entries, on the tensors' device)
  const std::int32_t* cu_k = nullptr;
  float scale = 0.0f;               // resolved (never 0)
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
};

}  // namespace sixfold
