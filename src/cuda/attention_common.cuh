// src/cuda/attention_common.cuh — pieces shared by the attention kernels: the kernel parameter
// block, per-sequence offsets (dense and varlen), the visibility band of a query row, the
// online-softmax step on mma fragments, and thin PTX wrappers (cp.async, ldmatrix, mma.sync).
//
// Masking reduces to one band per query row i of a sequence (q_len lq, kv_len lk):
//   diag = i + lk − lq,  lo(i) = max(0, diag − left) (left ≥ 0),  hi(i) = min(lk − 1, diag + right)
// with right = 0 for causal; key j is visible iff lo(i) ≤ j ≤ hi(i). lo and hi are non-decreasing
// in i, so the keys a tile of rows [i0, i1] can see lie in [lo(i0), hi(i1)] (tiles outside are
// skipped) and a key tile inside [lo(i1), hi(i0)] needs no per-element mask.
//
// Scores are kept in the log2 domain (x = s · scale · log2 e) so each exponential is one ex2.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ptx_sync.cuh"

namespace sixfold::detail::attn {

using i64 = long long;

// Which kernel serves a call (automatic: by q_len, head dim and layout; forcing one is for dev/
// and tests — every kernel computes every supported case, falling back where it lacks a head dim).
enum class Kernel { automatic, decode, prefill_mma, prefill_wgmma, prefill_wgmma_pp, prefill_wgmma_tma };

// Everything a kernel needs, by value (≈ 220 bytes of kernel parameters).
struct Problem {
  const void* q; const void* k; const void* v; void* out; float* lse;
  i64 qs[3], ks[3], vs[3], os[3], ls[3];  // element strides of [batch, head, token]
  const int* cu_q; const int* cu_k;       // varlen: (batch + 1) token offsets, else null
  int batch, q_heads, kv_heads, group, q_len, kv_len;  // varlen: q_len / kv_len are maxima
  float scale_log2;                        // scale · log2(e)
  int left, right;                         // band half-widths, −1 unbounded (causal: right 0)
  // Split-KV (decode): split z of num_splits writes normalized partial rows (f32) and their
  // natural-log lse to part_o / part_lse at [z][batch][q_heads][q_len] (q_len: the maximum).
  int num_splits;
  float* part_o; float* part_lse;
};

struct Seq {
  int lq, lk;
  i64 q_off, k_off, v_off, o_off, l_off;  // element offsets of the sequence's first token
};

__device__ __forceinline__ Seq seq_of(const Problem& p, int b) {
  Seq s;
  if (p.cu_q) {
    const int q0 = p.cu_q[b], k0 = p.cu_k[b];
    s.lq = p.cu_q[b + 1] - q0;
    s.lk = p.cu_k[b + 1] - k0;
    s.q_off = q0 * p.qs[2]; s.k_off = k0 * p.ks[2]; s.v_off = k0 * p.vs[2];
    s.o_off = q0 * p.os[2]; s.l_off = q0 * p.ls[2];
  } else {
    s.lq = p.q_len; s.lk = p.kv_len;
    s.q_off = b * p.qs[0]; s.k_off = b * p.ks[0]; s.v_off = b * p.vs[0];
    s.o_off = b * p.os[0]; s.l_off = b * p.ls[0];
  }
  return s;
}

// The visible key band [lo, hi] of query row i (empty when lo > hi).
struct Band {
  int lq, lk, left, right;
  __device__ __forceinline__ int lo(int i) const {
    return left < 0 ? 0 : max(0, i + (lk - lq) - left);
  }
  __device__ __forceinline__ int hi(int i) const {
    return right < 0 ? lk - 1 : min(lk - 1, i + (lk - lq) + right);
  }
};

// Scores enter the softmax raw and are scaled inside one FFMA, which needs scale > 0 (the max
// of raw scores is then the max of scaled ones). A negative scale is applied up front instead.
struct ScoreScale {
  float fold, pre;  // softmax scale, factor applied while masking (1 unless scale < 0)
  __device__ __forceinline__ explicit ScoreScale(float scale_log2)
      : fold(scale_log2 > 0.0f ? scale_log2 : 1.0f), pre(scale_log2 > 0.0f ? 1.0f : scale_log2) {}
};

// ---- PTX wrappers (shared-memory addresses, mbarriers, named barriers: ptx_sync.cuh) -----------

using namespace ::sixfold::detail::ptx;

// 16 bytes global → shared; bytes beyond src_bytes (0 or 16) are zero-filled.
__device__ __forceinline__ void cp_async_16(std::uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// D (16×8 f32) += A (16×16) · B (16×8), bf16 or f16 operands.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats → one register of two T (lower address first).
template <class T> __device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  std::uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    r = *reinterpret_cast<std::uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    r = *reinterpret_cast<std::uint32_t*>(&v);
  }
  return r;
}

template <class T> __device__ __forceinline__ void store2(T* p, float a, float b) {
  *reinterpret_cast<std::uint32_t*>(p) = pack2<T>(a, b);
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

constexpr float kNegInf = -__builtin_huge_valf();
constexpr float kLn2 = 0.69314718055994530942f;

// Copies rows [0, rows) × D elements of a row-major tile into shared memory with a row pitch of
// `pitch` elements; rows at or beyond `valid` are zero-filled. row_ptr(r) gives row r's address.
// Every thread of the block calls it (nthreads threads, tid its index).
template <int D, class T, class RowPtr>
__device__ __forceinline__ void load_tile(T* smem, int pitch, int rows, int valid, RowPtr row_ptr,
                                          int tid, int nthreads) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  for (int c = tid; c < rows * kChunks; c += nthreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool ok = r < valid;
    const T* src = ok ? row_ptr(r) + col : row_ptr(0);
    cp_async_16(smem_u32(smem + r * pitch + col), src, ok ? 16 : 0);
  }
}

__device__ __forceinline__ float ex2(float x) {  // one MUFU.EX2; −inf → 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The online softmax on the two rows a thread holds in an m16 fragment (mma.sync, or one warp's
// 16 rows of a wgmma m64 fragment: same layout). s (NB n8-blocks × 4): raw scores, masked ones
// −inf; scale > 0 (scale · log2 e); m (in scaled units) and l: running max and thread-partial
// sum. Turns s into probabilities exp2(s·scale − m) — one FFMA and one EX2 per score — and
// returns in alpha the factor the accumulator must be rescaled by.
template <int NB>
__device__ __forceinline__ void softmax_probs(float (&s)[NB][4], float (&m)[2], float (&l)[2],
                                              float (&alpha)[2], float scale) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = kNegInf;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) mx = fmaxf(mx, fmaxf(s[nb][2 * h], s[nb][2 * h + 1]));
    mx = fmaxf(m[h], quad_max(mx) * scale);
    const float use = mx == kNegInf ? 0.0f : mx;  // a row with nothing visible yet stays at 0
    alpha[h] = ex2(m[h] - use);                   // m = −inf → 0
    m[h] = mx;
    float sum = 0.0f;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      s[nb][2 * h] = ex2(fmaf(s[nb][2 * h], scale, -use));
      s[nb][2 * h + 1] = ex2(fmaf(s[nb][2 * h + 1], scale, -use));
      sum += s[nb][2 * h] + s[nb][2 * h + 1];
    }
    l[h] = l[h] * alpha[h] + sum;
  }
}

// o *= alpha per row; skipped when no row of the warp changed its max (most tiles, once the
// running max has settled).
template <int OB>
__device__ __forceinline__ void rescale(float (&o)[OB][4], const float (&alpha)[2]) {
  if (!__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) return;
#pragma unroll
  for (int ob = 0; ob < OB; ++ob) {
    o[ob][0] *= alpha[0]; o[ob][1] *= alpha[0];
    o[ob][2] *= alpha[1]; o[ob][3] *= alpha[1];
  }
}

template <int NB, int OB>
__device__ __forceinline__ void softmax_step(float (&s)[NB][4], float (&m)[2], float (&l)[2],
                                             float (&o)[OB][4], float scale) {
  float alpha[2];
  softmax_probs(s, m, l, alpha, scale);
  rescale(o, alpha);
}

// P fragment for keys [16 kk, 16 kk + 16) of a score tile: the A operand of the next product.
template <class T, int NB>
__device__ __forceinline__ void pack_p(std::uint32_t (&a)[4], const float (&s)[NB][4], int kk) {
  a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
  a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
  a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// Writes a finished 16-row fragment: rows r_in and r_in + 8 of the tile starting at query i0.
template <class T, int OB>
__device__ __forceinline__ void store_rows(const Problem& p, const Seq& sq, int h, int i0, int r_in,
                                           float (&o)[OB][4], const float (&m)[2], const float (&l)[2]) {
  const int lane = threadIdx.x & 31;
  T* O = static_cast<T*>(p.out) + sq.o_off + h * p.os[1];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float sum = quad_sum(l[hh]);
    const int i = i0 + r_in + hh * 8;
    if (i >= sq.lq) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    T* row = O + i64(i) * p.os[2] + (lane & 3) * 2;
#pragma unroll
    for (int ob = 0; ob < OB; ++ob) store2<T>(row + ob * 8, o[ob][2 * hh] * inv, o[ob][2 * hh + 1] * inv);
    if (p.lse && (lane & 3) == 0)
      p.lse[sq.l_off + h * p.ls[1] + i64(i) * p.ls[2]] = sum > 0.0f ? (m[hh] + log2f(sum)) * kLn2 : kNegInf;
  }
}

}  // namespace sixfold::detail::attn
