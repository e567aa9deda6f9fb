// src/cuda/norm.cu — RMSNorm, LayerNorm, softmax and log-softmax over the rows of a (ROWS, N)
// tensor on the GPU: x read once, out written once, statistics and arithmetic in f32.
//
//   rms_norm:    y = x · 1/sqrt(Σx²/n + eps) · w         state Σx²            (Sum<float>)
//   layer_norm:  y = (x − μ) · 1/sqrt(M2/n + eps) · w + b  state (count, μ, M2)  (Welford<float>)
//   softmax:     y = exp(x − m) / l                        state (m, l)         (LogSumExp<float>)
//   log_softmax: y = x − m − log l                         with l = Σ exp(x − m)
//
// Every row statistic is a monoid, and associativity is what licenses cutting a row anywhere.
// Rows held in registers (short rows) reduce plain floats, each statistic its own monoid and
// pass over the registers: Σx² (rms); Σx, then Σ(x − μ)² (layer); max, then Σ exp(x − max)
// (softmax kinds) — butterflies of a commutative + or max give every lane the same bits. Rows
// split over the blocks of a cluster merge whole states instead (Welford, LogSumExp) through
// distributed shared memory. Locality makes it one read and one write: the row stays in
// registers (as raw 16-byte packs) or in shared memory (long rows) between the fold and the
// rewrite.
//
// Kernels by row length n, with K = items per thread (4 packs of 16 bytes when rows are 16-byte
// aligned and n is a multiple of the pack; else 16 scalars):
//   norm_rows_group    n ≤ 32·K     g = 1..32 lanes per row, 256/g rows per block, no barriers;
//                                   g = 32: a kernel with the width a constant, one row a block
//   norm_rows_block    n ≤ 1024·K   one block of 32..1024 threads per row, one __syncthreads
//                                   per reduction
//   norm_rows_stream   longer RMSNorm / LayerNorm rows (16-byte packs, no residual add) whose 8192-column
//                                   tiles are all resident at once: one pass, x read once, the
//                                   tiles' states met through release / acquire counters (fv15)
//   norm_split_*       rows of ≥ 16 slices (bf16: 1M elements) of rms and the fused adds, and
//                                   add_rms_norm's long rows: chunk states, the rows'
//                                   coefficients, then the rewrite (x re-read), three kernels
//                                   chained by PDL; layer / softmax rows of ≥ 16 slices:
//                                   norm_rows_cluster's grid form (blocks of a row meet across a
//                                   grid barrier; a cooperative launch)
//   norm_rows_cluster  longer       a cluster of 1..16 blocks per row (slices ≤ 128 KB; with
//                                   the residual add ≤ 64 KB); each block folds its slice,
//                                   caching up to 104 KB of it in shared memory; the cluster
//                                   combines block states through DSMEM, then each block
//                                   rewrites its slice (the uncached rest re-read, from L2)
// bf16 K = 32: group up to n = 1024, block up to 32768. f32 K = 16: 512 and 16384.
// exp for 16-bit dtypes: 2^(x·log2 e) on the SFU (ex2.approx); f32: the accurate expf.
//
// Fused residual add (add_rms_norm / add_layer_norm, template flag kAdd): every path loads x and
// residual together, writes s = x + residual (rounded to T) to sum_out as it folds, and
// normalizes the stored s; the cluster path caches s and re-reads its uncached tail from sum_out.
//
// Saved statistics (rms / layer, where a.mean / a.rstd are set): the f32 mean and
// 1/sqrt(var + eps) the rewrite used, one store per row by the row's first thread.
//
// In place (out == x, sum_out == residual, ...) is safe: every element is read, before it is
// written, by the thread that writes it, and slices of a row never overlap.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "../ops/norm_entries.hpp"
#include "norm_common.cuh"
#include "sixfold/algebra/instances.hpp"
#include "sixfold/parallel/cuda.cuh"

namespace sixfold::detail {
namespace {

namespace cg = cooperative_groups;
constexpr const char* kWhere = "sixfold::norm (cuda)";

// ---- exp ------------------------------------------------------------------------------------

// 2^x on the SFU (one MUFU.EX2; −inf → 0, results below 2^−126 flushed to 0).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
constexpr float kLog2e = 1.4426950408889634f;

// 16-bit outputs take exp from the SFU (≈ 2 ulp of f32, far below their rounding); f32 keeps
// the accurate expf.
template <class T>
inline constexpr bool kFastExp = sizeof(T) == 2;

// ---- Per-op statistics -----------------------------------------------------------------------
// fold: the state of one thread's tile v (S packs of W values; ok[s]: pack s is in the row).
// coef: what the rewrite needs from the row's state. rewrite: one output value. (The long-row
// path; the register paths reduce plain floats, below.)

// Σ v and Σ (v − c)² over a thread's tile, one independent chain per pack (FMA latency hidden).
template <int S, int W>
__device__ __forceinline__ float tile_sum(const float (&v)[S][W], const bool (&ok)[S]) {
  float part[S];
#pragma unroll
  for (int s = 0; s < S; ++s) {
    part[s] = 0.f;
    if (ok[s])
#pragma unroll
      for (int k = 0; k < W; ++k) part[s] += v[s][k];
  }
  float sum = 0.f;
#pragma unroll
  for (int s = 0; s < S; ++s) sum += part[s];
  return sum;
}

template <int S, int W>
__device__ __forceinline__ float tile_sq_dev(const float (&v)[S][W], const bool (&ok)[S], float c) {
  float part[S];
#pragma unroll
  for (int s = 0; s < S; ++s) {
    part[s] = 0.f;
    if (ok[s])
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float d = v[s][k] - c;
        part[s] = fmaf(d, d, part[s]);
      }
  }
  float sum = 0.f;
#pragma unroll
  for (int s = 0; s < S; ++s) sum += part[s];
  return sum;
}

struct Coef {
  float a, b;
};

template <NormKind K> struct Stats;

template <> struct Stats<NormKind::rms> {
  using Monoid = algebra::Sum<float>;
  using State = float;
  template <bool, int S, int W>
  __device__ __forceinline__ static State fold(float (&v)[S][W], const bool (&ok)[S]) {
    return tile_sq_dev(v, ok, 0.f);
  }
  __device__ __forceinline__ static Coef coef(State row, std::int64_t n, float eps) {
    return {1.0f / sqrtf(row / float(n) + eps), 0.f};
  }
};

template <> struct Stats<NormKind::layer> {
  using Monoid = algebra::Welford<float>;
  using State = algebra::WelfordState<float>;
  // Two passes over the registers: the tile's mean, then M2 about it; Chan's merge does the rest.
  template <bool, int S, int W>
  __device__ __forceinline__ static State fold(float (&v)[S][W], const bool (&ok)[S]) {
    int count = 0;
#pragma unroll
    for (int s = 0; s < S; ++s) count += ok[s] ? W : 0;
    if (count == 0) return Monoid{}.identity();
    const float mean = tile_sum(v, ok) / float(count);
    return {count, mean, tile_sq_dev(v, ok, mean)};
  }
  __device__ __forceinline__ static Coef coef(State row, std::int64_t n, float eps) {
    return {1.0f / sqrtf(row.m2 / float(n) + eps), row.mean};
  }
};

// fmaxf as a monoid (NaN loses to a number; a softmax row's NaN reaches l through its exp).
struct FMax {
  using value_type = float;
  __device__ __forceinline__ float combine(float a, float b) const { return fmaxf(a, b); }
};

// softmax and log_softmax. A tile's state is (its max m_t, Σ exp(x − m_t)); a tile of only −inf
// (or of no elements) sums to 0 with m_t = −inf, the identity, instead of exp(−inf + inf) = NaN.
// kFast (16-bit dtypes): exp(x − m_t) as 2^((x − m_t)·log2e) on the SFU.
struct StatsLogSumExp {
  using Monoid = algebra::LogSumExp<float>;
  using State = algebra::LogSumExpState<float>;
  template <bool kFast, int S, int W>
  __device__ __forceinline__ static State fold(float (&v)[S][W], const bool (&ok)[S]) {
    const float mx = tile_max(v, ok);
    return {mx, tile_exp_sum<kFast>(v, ok, mx)};
  }
  // The tile's max (−inf for a tile of only −inf or of no elements).
  template <int S, int W>
  __device__ __forceinline__ static float tile_max(const float (&v)[S][W], const bool (&ok)[S]) {
    float mx = -algebra::math::infinity<float>();
#pragma unroll
    for (int s = 0; s < S; ++s)
      if (ok[s]) {
#pragma unroll
        for (int k = 0; k < W; ++k) mx = fmaxf(mx, v[s][k]);
      }
    return mx;
  }
  // Σ exp(x − mx) over the tile, mx ≥ every element (0 shift for mx = −inf).
  template <bool kFast, int S, int W>
  __device__ __forceinline__ static float tile_exp_sum(const float (&v)[S][W], const bool (&ok)[S], float mx) {
    const float shift = mx == -algebra::math::infinity<float>() ? 0.f : mx;
    float part[S];
#pragma unroll
    for (int s = 0; s < S; ++s) {
      part[s] = 0.f;
      if (ok[s]) {
#pragma unroll
        for (int k = 0; k < W; ++k) {
          // NaN inputs make l NaN: they propagate
          part[s] += kFast ? ex2((v[s][k] - shift) * kLog2e) : expf(v[s][k] - shift);
        }
      }
    }
    float l = 0.f;
#pragma unroll
    for (int s = 0; s < S; ++s) l += part[s];
    return l;
  }
};

template <> struct Stats<NormKind::softmax> : StatsLogSumExp {
  // A row of only −inf has l = 0: exp(−inf + inf) · (1/0) gives NaN, as torch does.
  __device__ __forceinline__ static Coef coef(State row, std::int64_t, float) {
    return {row.m, 1.0f / row.l};
  }
};

template <> struct Stats<NormKind::log_softmax> : StatsLogSumExp {
  __device__ __forceinline__ static Coef coef(State row, std::int64_t, float) {
    return {row.m, logf(row.l)};
  }
};

// One output of the long-row rewrite from the row's coefficients.
template <NormKind K, bool kFast>
__device__ __forceinline__ float rewrite(float v, Coef c, float w, float b) {
  if constexpr (K == NormKind::rms) return v * c.a * w;
  else if constexpr (K == NormKind::layer) return fmaf((v - c.b) * c.a, w, b);
  else if constexpr (K == NormKind::softmax)
    return (kFast ? ex2((v - c.a) * kLog2e) : expf(v - c.a)) * c.b;
  else return (v - c.a) - c.b;
}

// The weight and bias packs of elements [i, i + W) as raw packs (loaded where the kind has them
// and they are given), and their values: weight (or 1) and bias (or 0).
template <class T, NormKind K, int W>
__device__ __forceinline__ void load_affine_packs(const T* w, const T* b, std::int64_t i,
                                                  Pack<T, W>& wp, Pack<T, W>& bp) {
  if constexpr (K == NormKind::rms || K == NormKind::layer)
    if (w) wp = Pack<T, W>::load_read_only(w + i);
  if constexpr (K == NormKind::layer)
    if (b) bp = Pack<T, W>::load_read_only(b + i);
}
template <class T, NormKind K, int W>
__device__ __forceinline__ void unpack_affine(const T* w, const T* b, const Pack<T, W>& wp,
                                              const Pack<T, W>& bp, float (&wv)[W], float (&bv)[W]) {
#pragma unroll
  for (int k = 0; k < W; ++k) wv[k] = 1.f, bv[k] = 0.f;
  if constexpr (K == NormKind::rms || K == NormKind::layer)
    if (w) wp.unpack(wv);
  if constexpr (K == NormKind::layer)
    if (b) bp.unpack(bv);
}
// weight (or 1) and bias (or 0) for elements [i, i + W). Written out rather than through the
// two functions above: composed from them, nvcc 13 gave the f16 cluster kernels 5–8 more
// registers and norm_split_rewrite 16–59 more (its 32×1048576 rows 60 → 57% of copy, add_layer
// 66 → 56%, H200).
template <class T, NormKind K, int W>
__device__ __forceinline__ void load_affine(const T* w, const T* b, std::int64_t i,
                                            float (&wv)[W], float (&bv)[W]) {
#pragma unroll
  for (int k = 0; k < W; ++k) wv[k] = 1.f, bv[k] = 0.f;
  if constexpr (K == NormKind::rms || K == NormKind::layer)
    if (w) Pack<T, W>::load_read_only(w + i).unpack(wv);
  if constexpr (K == NormKind::layer)
    if (b) Pack<T, W>::load_read_only(b + i).unpack(bv);
}

// v += q, rounded to T and stored at `dst` (with an L2 policy where `policy` is set: a sum read
// again); returns the stored pack (v holds its values).
template <class T, int W>
__device__ __forceinline__ Pack<T, W> add_and_store(const Pack<T, W>& q, float (&v)[W], T* dst,
                                                    const std::uint64_t* policy = nullptr) {
  float u[W];
  q.unpack(u);
#pragma unroll
  for (int k = 0; k < W; ++k) v[k] += u[k];
  const auto sp = Pack<T, W>::pack(v);
  if (policy) sp.store_hint(dst, *policy);
  else sp.store(dst);
  if constexpr (!std::is_same_v<T, float>) sp.unpack(v);
  return sp;
}

// ---- Rows held in registers ------------------------------------------------------------------
// Thread t of the p threads of a row holds packs s·p + t, s < S: (S, W) values, element
// (s·p + t)·W + k, kept as the raw packs (W elements of T in one word) and unpacked to f32 at
// each pass over them: 16 registers for a 16-bit thread tile instead of 32 floats, so more rows
// fit an SM. Consecutive threads read consecutive packs (coalesced).
//
// The row statistics are reduced with plain float operations, each its own monoid (Sum, Max):
//   rms:         Σx²                               → 1/sqrt(Σx²/n + eps)
//   layer:       Σx → mean, then Σ(x − mean)²       (two exact passes over the registers)
//   softmax:     max → M, then Σ exp(x − M)         (the row max first: each exponential once,
//   log_softmax:                                     no per-thread rescaling, no exp in the tree)
// A butterfly of a commutative operation (a + b, fmaxf) gives every lane the same bits (fmaxf up
// to the sign of a zero maximum, which changes no output), so no lane-ordered select is needed.
// H200, bf16 softmax, block kernel: LogSumExp states merged up the tree with floats kept and
// accurate expf — 1183 SASS instructions per thread, 77% of copy at 16384×8192; this layout with
// 2^x on the SFU — 558 instructions, 95% (docs/perf/norm.md, dev/norm/README.md).

struct AddOp {
  static constexpr float kIdentity = 0.f;
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  static constexpr float kIdentity = -algebra::math::infinity<float>();
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Over aligned groups of `width` lanes (a power of two ≤ 32); every lane of a group gets the
// same bits. All 32 lanes must call it.
template <class Op>
__device__ __forceinline__ float group_all(float s, int width, Op op) {
  for (int off = 1; off < width; off <<= 1) s = op(s, __shfl_xor_sync(0xffffffffu, s, off));
  return s;
}

// Over the whole block (blockDim.x a multiple of 32); every thread gets the same bits. `slots`:
// (32) floats of shared memory, one array per reduction of a launch (no second barrier).
template <class Op>
__device__ __forceinline__ float block_all(float s, Op op, float* slots) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  s = group_all(s, 32, op);
  if (warps == 1) return s;
  if (lane == 0) slots[warp] = s;
  __syncthreads();
  return group_all(lane < warps ? slots[lane] : Op::kIdentity, 32, op);
}

// Loads the tile: all packs in flight before the first use. kAdd: r = x + res rounded to T, as
// stored to `sum` (the normalized value is the stored one). x and res are read with the L2
// policy evict-last, as torch.compile's kernels read a row they come back to, although these rows
// are read once: H200, bf16, same process, two rounds, % of copy in graph replay, plain loads ->
// evict-last: rms 16384x8192 96.2 -> 99.4, softmax 97.7 -> 99.7, layer 96.6 -> 97.6, add_rms /
// add_layer 96.0-96.3 -> 99.4-99.9; 4096x4096 rms 83.0 -> 85.3, layer 80.9 -> 83.9, softmax
// 83.8 -> 86.4, add_rms 90.2 -> 92.5, add_layer 86.3 -> 87.9; 65536x1024 +1.1 to +1.8.
// Evict-first (or .cs) loads of x lost 4% at 16384x8192 (dev/norm/hint_probe.cu); why evict-last
// helps rows read once is not established (docs/perf/norm.md, session 18).
template <class T, int S, int W, bool kAdd, bool kFull = false>
__device__ __forceinline__ void load_tile(const T* x, const T* res, T* sum, int t, int p, int n,
                                          bool live, Pack<T, W> (&r)[S], bool (&ok)[S]) {
  using P = Pack<T, W>;
  P q[S];
  const int off = t * W;
  const int rem = live ? n - t * W : 0;  // pack s is in the row iff s·p·W < rem
  const std::uint64_t last = l2_evict_last();
#pragma unroll
  for (int s = 0; s < S; ++s) {
    ok[s] = kFull || s * p * W < rem;
    if (ok[s]) r[s] = P::load_hint(x + off + s * p * W, last);
    if (kAdd && ok[s]) q[s] = P::load_hint(res + off + s * p * W, last);
  }
  if constexpr (kAdd) {
#pragma unroll
    for (int s = 0; s < S; ++s)
      if (ok[s]) {
        float v[W];
        r[s].unpack(v);
        r[s] = add_and_store(q[s], v, sum + off + s * p * W);
      }
  }
}

// Calls out(s, weight values, bias values) for each pack s of the tile that is in the row
// (weight 1 and bias 0 where there are none), one pack's loads at a time (all packs' loads
// together raised LayerNorm's group kernel from 40 to 110 registers). Whether there is a weight
// or a bias is decided once, around the loop: tested per pack, it cost a predicated unpack and a
// default move on every element (bf16 LayerNorm: ~13 instructions an element in the rewrite).
template <class T, int W>
__device__ __forceinline__ void affine_values(const T* src, int i, float /*fill*/,
                                              std::bool_constant<true>, float (&v)[W]) {
  Pack<T, W>::load_read_only(src + i).unpack(v);
}
template <class T, int W>
__device__ __forceinline__ void affine_values(const T*, int, float fill,
                                              std::bool_constant<false>, float (&v)[W]) {
#pragma unroll
  for (int k = 0; k < W; ++k) v[k] = fill;
}

template <int W, class T, int S, class Out>
__device__ __forceinline__ void rewrite_affine(const T* w, const T* b, int t, int p,
                                               const bool (&ok)[S], Out&& out) {
  const auto run = [&](auto has_w, auto has_b) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      if (!ok[s]) continue;
      float wv[W], bv[W];
      affine_values<T, W>(w, (s * p + t) * W, 1.f, has_w, wv);
      affine_values<T, W>(b, (s * p + t) * W, 0.f, has_b, bv);
      out(s, wv, bv);
    }
  };
  using yes = std::bool_constant<true>;
  using no = std::bool_constant<false>;
  if (w && b) run(yes{}, yes{});
  else if (w) run(yes{}, no{});
  else if (b) run(no{}, yes{});
  else run(no{}, no{});
}

// rewrite_affine without a bias, with the weight packs loaded beforehand (wp; kAff = 1 below).
template <int W, class T, int S, class Out>
__device__ __forceinline__ void rewrite_affine_loaded(const Pack<T, W> (&wp)[S], bool has_w,
                                                      const bool (&ok)[S], Out&& out) {
  const auto run = [&](auto weighted) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      if (!ok[s]) continue;
      float wv[W], bv[W];
#pragma unroll
      for (int k = 0; k < W; ++k) wv[k] = 1.f, bv[k] = 0.f;
      if constexpr (decltype(weighted)::value) wp[s].unpack(wv);
      out(s, wv, bv);
    }
  };
  if (has_w) run(std::bool_constant<true>{});
  else run(std::bool_constant<false>{});
}

// kAff = 2 (LayerNorm, 16-byte packs; the block kernel and the warp-row kernel): the thread's
// weight and bias packs copied into shared memory by cp.async as the row is loaded — early, as
// kAff = 1, but in flight without registers — and read back from there in the rewrite. Stage
// layout per row (2, S, p) packs: weight, then bias; each thread reads only what it copied (no
// barrier).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}
template <int W, class T, int S>
__device__ __forceinline__ void stage_affine(const T* w, const T* b, int t, int p, const bool (&ok)[S],
                                             uint4* stage) {
  static_assert(W * sizeof(T) == 16);
#pragma unroll
  for (int s = 0; s < S; ++s) {
    if (w && ok[s]) cp_async16(stage + s * p + t, w + (s * p + t) * W);
    if (b && ok[s]) cp_async16(stage + (S + s) * p + t, b + (s * p + t) * W);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int W, class T, int S, class Out>
__device__ __forceinline__ void rewrite_affine_staged(const uint4* stage, bool has_w, bool has_b, int t,
                                                      int p, const bool (&ok)[S], Out&& out) {
  asm volatile("cp.async.wait_all;" ::: "memory");
  const auto run = [&](auto weighted, auto biased) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      if (!ok[s]) continue;
      float wv[W], bv[W];
#pragma unroll
      for (int k = 0; k < W; ++k) wv[k] = 1.f, bv[k] = 0.f;
      if constexpr (decltype(weighted)::value) Pack<T, W>{stage[s * p + t]}.unpack(wv);
      if constexpr (decltype(biased)::value) Pack<T, W>{stage[(S + s) * p + t]}.unpack(bv);
      out(s, wv, bv);
    }
  };
  using yes = std::bool_constant<true>;
  using no = std::bool_constant<false>;
  if (has_w && has_b) run(yes{}, yes{});
  else if (has_w) run(yes{}, no{});
  else if (has_b) run(no{}, yes{});
  else run(no{}, no{});
}

// One row's statistics and rewrite, for the p threads that hold it. red(value, op, pass): the
// op-reduction of value over those threads (pass 0 or 1: which shared slots). kStats: the
// thread with `saver` set writes the row's statistics (a.mean / a.rstd where set) at `row`.
// kAff = 1 (RMSNorm; both register kernels without the add, the block kernel with it): the
// weight packs are loaded with the row, before the reduction, instead of pack by pack in the
// rewrite after it (16 more registers), so the rewrite does not wait on their L1/L2 round trips.
template <class T, NormKind K, int S, int W, bool kAdd, bool kStats, int kAff = 0,
          bool kKeep = false, bool kFull = false, class Red>
__device__ __forceinline__ void norm_tile(const NormArgs& a, const T* x, const T* res, T* sum,
                                          T* y, int t, int p, bool live, Red&& red,
                                          std::int64_t row, bool saver, uint4* stage = nullptr) {
  Pack<T, W> r[S];
  bool ok[S];
  const int n = int(a.x.n);
  const T* w = static_cast<const T*>(a.weight);
  const T* b = static_cast<const T*>(a.bias);
  constexpr bool kEarly = kAff == 1;
  static_assert(!kEarly || K == NormKind::rms);
  Pack<T, W> wp[kEarly ? S : 1];
  if constexpr (kEarly) {
    const int rem = live ? n - t * W : 0;
#pragma unroll
    for (int s = 0; s < S; ++s) {
      wp[s].raw = {};
      if (w && (kFull || s * p * W < rem)) wp[s] = Pack<T, W>::load_read_only(w + (s * p + t) * W);
    }
  }
  load_tile<T, S, W, kAdd, kFull>(x, res, sum, t, p, n, live, r, ok);
  constexpr bool kStaged = kAff == 2;  // `stage`: this row's (2, S, p) packs of shared memory
  static_assert(!kStaged || K == NormKind::layer);
  if constexpr (kStaged) stage_affine<W, T, S>(w, b, t, p, ok, stage);
  // The values of pack s: kKeep unpacks the tile once and keeps the floats (32 registers for a
  // 16-bit tile); otherwise each pass unpacks the raw packs again, the later passes behind
  // opaque() so that the compiler does not keep the floats across the reductions after all.
  float xv[kKeep ? S : 1][W];
  if constexpr (kKeep) {
#pragma unroll
    for (int s = 0; s < S; ++s)
      if (ok[s]) r[s].unpack(xv[s]);
  }
  const auto vals = [&](int s, bool first, float (&v)[W]) {
    if constexpr (kKeep) {
#pragma unroll
      for (int k = 0; k < W; ++k) v[k] = xv[s][k];
    } else {
      (first ? r[s] : opaque(r[s])).unpack(v);
    }
  };
  // Σ f(x) over the tile's packs, one chain per pack (FMA latency hidden).
  const auto fold = [&](bool first, auto&& f) {
    float part[S];
#pragma unroll
    for (int s = 0; s < S; ++s) {
      part[s] = 0.f;
      if (ok[s]) {
        float v[W];
        vals(s, first, v);
#pragma unroll
        for (int k = 0; k < W; ++k) part[s] += f(v[k]);
      }
    }
    float sum = 0.f;
#pragma unroll
    for (int s = 0; s < S; ++s) sum += part[s];
    return sum;
  };
  const auto affine = [&](auto&& out) {
    if constexpr (kEarly)
      rewrite_affine_loaded<W>(wp, w != nullptr, ok, out);
    else if constexpr (kStaged)
      rewrite_affine_staged<W, T, S>(stage, w != nullptr, b != nullptr, t, p, ok, out);
    else if constexpr (K == NormKind::rms)
      rewrite_affine<W>(w, static_cast<const T*>(nullptr), t, p, ok, out);
    else
      rewrite_affine<W>(w, b, t, p, ok, out);
  };
  const auto store = [&](int s, const float (&o)[W]) {
    Pack<T, W>::pack(o).store(y + (s * p + t) * W);
  };
  if constexpr (K == NormKind::rms) {
    const float ss = red(fold(true, [](float v) { return v * v; }), AddOp{}, 0);
    const float rs = 1.0f / sqrtf(ss / float(n) + a.eps);
    if constexpr (kStats)
      if (saver && a.rstd) a.rstd[row] = rs;
    affine([&](int s, const float (&wv)[W], const float (&)[W]) {
      float v[W], o[W];
      vals(s, false, v);
#pragma unroll
      for (int k = 0; k < W; ++k) o[k] = v[k] * rs * wv[k];
      store(s, o);
    });
  } else if constexpr (K == NormKind::layer) {
    const float inv_n = 1.0f / float(n);
    const float mean = red(fold(true, [](float v) { return v; }), AddOp{}, 0) * inv_n;
    const float m2 = red(fold(false, [&](float v) { return (v - mean) * (v - mean); }),
                         AddOp{}, 1);
    const float rs = 1.0f / sqrtf(m2 * inv_n + a.eps);
    if constexpr (kStats) {
      if (saver && a.mean) a.mean[row] = mean;
      if (saver && a.rstd) a.rstd[row] = rs;
    }
    affine([&](int s, const float (&wv)[W], const float (&bv)[W]) {
      float v[W], o[W];
      vals(s, false, v);
#pragma unroll
      for (int k = 0; k < W; ++k) o[k] = fmaf((v[k] - mean) * rs, wv[k], bv[k]);
      store(s, o);
    });
  } else {
    // The row max M; a row of only −inf (or a +inf entry) gives exp(−inf + inf) = NaN, and so
    // NaN outputs, as torch does; a NaN entry makes l, and so the row, NaN.
    float mx = MaxOp::kIdentity;
#pragma unroll
    for (int s = 0; s < S; ++s)
      if (ok[s]) {
        float v[W];
        vals(s, true, v);
#pragma unroll
        for (int k = 0; k < W; ++k) mx = fmaxf(mx, v[k]);
      }
    const float m = red(mx, MaxOp{}, 0);
    // exp(x − M). 16-bit softmax: 2^(x·log2e − M·log2e), one FFMA and one EX2 (the rounding of
    // M·log2e is one constant factor on every exponential of the row and cancels in e / Σe);
    // log_softmax keeps the shift x − M exact (l enters its output); f32: the accurate expf.
    const float shift = m * kLog2e;
    const auto ex = [&](float v) {
      if constexpr (!kFastExp<T>) return expf(v - m);
      else if constexpr (K == NormKind::softmax) return ex2(fmaf(v, kLog2e, -shift));
      else return ex2((v - m) * kLog2e);
    };
    if constexpr (K == NormKind::softmax && kFastExp<T>) {
      // The exponentials kept as floats for the rewrite (32 more registers for a 16-bit tile).
      float e[S][W], part[S];
#pragma unroll
      for (int s = 0; s < S; ++s) {
        part[s] = 0.f;
        float v[W];
        if (ok[s]) vals(s, false, v);
#pragma unroll
        for (int k = 0; k < W; ++k) {
          e[s][k] = ok[s] ? ex(v[k]) : 0.f;
          part[s] += e[s][k];
        }
      }
      float l = 0.f;
#pragma unroll
      for (int s = 0; s < S; ++s) l += part[s];
      const float inv = 1.0f / red(l, AddOp{}, 1);
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (!ok[s]) continue;
        float o[W];
#pragma unroll
        for (int k = 0; k < W; ++k) o[k] = e[s][k] * inv;
        store(s, o);
      }
    } else {
      // Recomputed in the rewrite from the raw packs.
      const float l = red(fold(false, ex), AddOp{}, 1);
      const float c = K == NormKind::softmax ? 1.0f / l : logf(l);
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (!ok[s]) continue;
        float v[W], o[W];
        vals(s, false, v);
#pragma unroll
        for (int k = 0; k < W; ++k) o[k] = K == NormKind::softmax ? ex(v[k]) * c : (v[k] - m) - c;
        store(s, o);
      }
    }
  }
}

// Threads of norm_rows_group: kGroupBlock (256/g rows per block), or with a warp per row (kWarp =
// 1) kWarpBlock: one row per block, so that a finished row frees its slot at once. H200, bf16
// 65536x1024, same process, two rounds, % of copy in graph replay, 256 -> 32 threads: rms 95.0-95.2
// -> 96.0-96.2, layer 93.5-93.8 -> 94.4-94.8, softmax 95.0 -> 95.8-96.0, add_rms 96.8 -> 97.5,
// add_layer 96.0 -> 96.9 (64 threads: within 0.3 of 32). Dev flag "wb=N": N threads.
constexpr int kGroupBlock = 256, kWarpBlock = 32;

// Row r of the residual / of sum_out (null without the fused add).
template <class T, bool kAdd>
__device__ __forceinline__ const T* residual_row(const NormArgs& a, std::int64_t r) {
  return kAdd ? static_cast<const T*>(a.residual.data) + r * a.residual.row_stride : nullptr;
}
template <class T, bool kAdd>
__device__ __forceinline__ T* sum_row(const NormArgs& a, std::int64_t r) {
  return kAdd ? static_cast<T*>(a.sum_out.data) + r * a.sum_out.row_stride : nullptr;
}

// One row per aligned group of g = 2^log2_g lanes; n ≤ g·S·W. No shared memory, no barriers.
// kStats (rms / layer, a.mean or a.rstd set): the row's statistics saved by its first lane.
// kWarp = 1 (rows of a whole warp, g = 32: 16-bit rows of 513..1024): the width a constant, so
// pack offsets become immediates and the butterflies unroll; the tile unpacked once and its floats
// kept between passes (kKeep); blocks of full rows without per-pack tests (kFull). Nsight Compute,
// H200, bf16 65536x1024: torch.compile's Triton kernels issue 264 (rms) / 390 (layer)
// instructions a row; this kernel 491 / 665 with the width read at run time (kWarp = 0), ~320 /
// ~410 with kWarp = 1 (counted in its SASS; docs/perf/norm.md, session 12).
template <class T, NormKind K, int S, int W, bool kAdd, bool kStats, int kAff = 0, int kWarp = 0>
__global__ void __launch_bounds__(kGroupBlock) norm_rows_group(NormArgs a, int log2_g) {
  parallel::cuda::chain_head();
  const int g = 1 << log2_g;
  const std::int64_t row =
      std::int64_t(blockIdx.x) * (blockDim.x >> log2_g) + (threadIdx.x >> log2_g);
  const bool live = row < a.x.rows;  // dead groups still shuffle (full-warp masks)
  const std::int64_t r = live ? row : 0;
  const T* x = static_cast<const T*>(a.x.data) + r * a.x.row_stride;  // (N)
  T* y = static_cast<T*>(a.out.data) + r * a.out.row_stride;          // (N)
  static_assert(kAff != 2 || kWarp == 1);
  extern __shared__ uint4 affine_stage[];  // kAff = 2: (rows of the block, 2, S, 32) packs
  const auto tile = [&](auto width, auto keep, auto full) {
    const int p = width, t = int(threadIdx.x) & (p - 1);
    norm_tile<T, K, S, W, kAdd, kStats, kAff, decltype(keep)::value, decltype(full)::value>(
        a, x, residual_row<T, kAdd>(a, r), sum_row<T, kAdd>(a, r), y, t, p, live,
        [&](float v, auto op, int) { return group_all(v, p, op); }, r, live && t == 0,
        affine_stage + (threadIdx.x >> log2_g) * (2 * S * p));
  };
  constexpr std::integral_constant<int, 32> kWarpWidth{};
  // kFull: every pack of every row of the block in bounds (no per-pack tests).
  const bool full = a.x.n == 32 * S * W &&
                    std::int64_t(blockIdx.x + 1) * (blockDim.x >> log2_g) <= a.x.rows;
  using yes = std::true_type;
  using no = std::false_type;
  if constexpr (kWarp == 0) {
    tile(g, no{}, no{});
  } else if (full) {
    tile(kWarpWidth, yes{}, yes{});
  } else {
    tile(kWarpWidth, yes{}, no{});
  }
}

// One row per block of blockDim.x (a multiple of 32, ≤ 1024) threads; n ≤ blockDim.x·S·W.
// kAff (the weight loads, norm_tile): 0 per pack in the rewrite, 1 with the row (rms; at most
// kEarlyThreads threads: the registers of the packs).
constexpr int kEarlyThreads = 256;
// kFast (n = blockDim.x·S·W, every pack in the row): the tile unpacked once and its floats kept
// between passes, no per-pack tests.
template <class T, NormKind K, int S, int W, bool kAdd, bool kStats, int kAff, bool kFast = false>
__global__ void __launch_bounds__(kAff ? kEarlyThreads : 1024) norm_rows_block(NormArgs a) {
  parallel::cuda::chain_head();
  __shared__ float slots[2][32];
  extern __shared__ uint4 affine_stage[];  // kAff = 2: (2, S, blockDim.x) packs
  const std::int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(a.x.data) + row * a.x.row_stride;  // (N)
  T* y = static_cast<T*>(a.out.data) + row * a.out.row_stride;          // (N)
  norm_tile<T, K, S, W, kAdd, kStats, kAff, kFast, kFast>(
      a, x, residual_row<T, kAdd>(a, row), sum_row<T, kAdd>(a, row), y, int(threadIdx.x),
      int(blockDim.x), true,
      [&](float v, auto op, int pass) { return block_all(v, op, slots[pass]); }, row,
      threadIdx.x == 0, affine_stage);
}

// ---- Long rows: a cluster of blocks per row ------------------------------------------------

constexpr int kClusterBlock = 512;
constexpr int kMaxCluster = 16;                          // non-portable above 8 (Hopper allows 16)
// Widest slice before a cluster is widened. H200 runs 2–3, 256×262144 bf16: 128 KB (4 blocks per
// row; 62 clusters resident = all 264 block slots) against 64 KB (8; 30 resident = 240 slots):
// rms / layer / softmax 61 / 40 / 53 → 64 / 45 / 63% of copy; the fused residual add lost at 128
// KB (62 / 66 → 56 / 62%: its uncached tail is re-read without prefetches), so it keeps 64 KB.
constexpr std::int64_t kSliceBytes = 128 << 10, kSliceBytesAdd = 64 << 10;
constexpr std::int64_t kMinSliceBytes = 8 << 10;         // when widening clusters for few rows
constexpr std::int64_t kCacheBytes = 104 << 10;          // 2 blocks/SM fit 228 KB with statics

// One sweep of a chunk by one thread: its first element `base` (slice-relative) and how many
// elements from there on are in the slice / in the cache, clamped to 32 bits.
struct Sweep {
  std::int64_t base;
  int rem, rem_cached;
  __device__ __forceinline__ Sweep(std::int64_t b, std::int64_t len, std::int64_t cached)
      : base(b), rem(clamp32(len - b)), rem_cached(clamp32(cached - b)) {}
  __device__ __forceinline__ static int clamp32(std::int64_t v) {
    return int(v < -1 ? -1 : v > (1 << 30) ? (1 << 30) : v);
  }
};

// A row state written by another SM, read through L2 (ld.cg), word by word.
template <class State>
__device__ __forceinline__ State load_state_l2(const State* p) {
  static_assert(sizeof(State) % 4 == 0);
  State s;
  const auto* src = reinterpret_cast<const unsigned*>(p);
  auto* dst = reinterpret_cast<unsigned*>(&s);
#pragma unroll
  for (int i = 0; i < int(sizeof(State) / 4); ++i) dst[i] = __ldcg(src + i);
  return s;
}

// Block `rank` of the row's cluster owns elements [rank·slice, rank·slice + slice) ∩ [0, n), and
// caches the first `cached` of them (both multiples of W) in dynamic shared memory.
// kGrid: the same kernel without clusters, for rows too long for a cluster's shared memory (the
// split path's shapes, e.g. 32×1048576 bf16): `grid_blocks` consecutive blocks share a row, the
// grid is resident at once (a cooperative launch), and the blocks' states meet in global memory
// (grid_states) across a grid barrier instead of through distributed shared memory. x is read
// once, its slices' heads cached in shared memory and their tails, read last, re-read newest
// first while L2 still holds them — where the split path reads all of x twice.
template <class T, NormKind K, int S, int W, bool kAdd, bool kStats, bool kGrid = false>
__global__ void __launch_bounds__(kClusterBlock, 2)
norm_rows_cluster(NormArgs a, std::int64_t slice, std::int64_t cached, bool prefetch,
                  typename Stats<K>::State* grid_states, int grid_blocks) {
  using St = Stats<K>;
  using State = typename St::State;
  using P = Pack<T, W>;
  constexpr int kStride = kClusterBlock * W;                             // between a thread's packs
  constexpr std::int64_t kChunk = std::int64_t(kStride) * S;             // (S, kClusterBlock, W)
  // Packs per fold: the whole sweep, except LayerNorm, which folds 8 elements at a time so that
  // its two-pass tile fold does not hold the sweep's 32 values next to the 16 raw words (spills).
  constexpr int kFold = K == NormKind::layer ? (W >= 8 ? 1 : 8 / W) : S;
  static_assert(S % kFold == 0);
  extern __shared__ uint4 cache_words[];  // (cached) elements of T: the head of the slice
  __shared__ State warp_states[32];
  __shared__ State block_state;
  T* cache = reinterpret_cast<T*>(cache_words);
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned blocks = kGrid ? unsigned(grid_blocks) : cluster.num_blocks();
  const unsigned rank = kGrid ? blockIdx.x % blocks : cluster.block_rank();
  const std::int64_t row = blockIdx.x / blocks, n = a.x.n;
  const std::int64_t lo = std::min<std::int64_t>(rank * slice, n);
  const std::int64_t len = std::min<std::int64_t>(slice, n - lo);
  const T* x = static_cast<const T*>(a.x.data) + row * a.x.row_stride + lo;  // (len)
  T* y = static_cast<T*>(a.out.data) + row * a.out.row_stride + lo;          // (len)
  const T* res = kAdd ? residual_row<T, kAdd>(a, row) + lo : nullptr;       // (len)
  T* sum = kAdd ? sum_row<T, kAdd>(a, row) + lo : nullptr;                  // (len)
  const T* src = kAdd ? sum : x;  // what the rewrite re-reads beyond the cache
  const T* w = a.weight ? static_cast<const T*>(a.weight) + lo : nullptr;
  const T* b = a.bias ? static_cast<const T*>(a.bias) + lo : nullptr;
  const int t = threadIdx.x;
  const typename St::Monoid m;

  // Fold the slice chunk by chunk, copying its head into shared memory on the way. `prefetch`
  // (set where the slice is longer than the cache; 16-byte packs without residual only —
  // elsewhere it added spills): the next chunk is asked into L2 while this one is loaded.
  const bool use_prefetch = !kAdd && W * int(sizeof(T)) == 16 && prefetch;
  State acc = m.identity();
  for (std::int64_t c0 = 0; c0 < len; c0 += kChunk) {
    const Sweep sw(c0 + t * W, len, cached);
    P r[S], q[S];
    bool ok[S];
    if (use_prefetch) {
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (kStride * s + kChunk >= sw.rem) continue;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(x + sw.base + kChunk + kStride * s));
      }
    }
#pragma unroll
    for (int s = 0; s < S; ++s) {  // all loads in flight first
      ok[s] = kStride * s < sw.rem;
      if (ok[s]) r[s] = P::load(x + sw.base + kStride * s);
      if (kAdd && ok[s]) q[s] = P::load(res + sw.base + kStride * s);
    }
#pragma unroll
    for (int s0 = 0; s0 < S; s0 += kFold) {
      float v[kFold][W];
      bool ok_tile[kFold];
#pragma unroll
      for (int s = s0; s < s0 + kFold; ++s) {
        ok_tile[s - s0] = ok[s];
        if (ok[s]) {
          r[s].unpack(v[s - s0]);
          if constexpr (kAdd) r[s] = add_and_store(q[s], v[s - s0], sum + sw.base + kStride * s);
          if (kStride * s < sw.rem_cached) r[s].store(cache + sw.base + kStride * s);
        } else {
#pragma unroll
          for (int k = 0; k < W; ++k) v[s - s0][k] = 0.f;
        }
      }
      acc = m.combine(acc, St::template fold<kFastExp<T>>(v, ok_tile));
    }
  }

  // Row state: warps, then this block, then the cluster's blocks in rank order (every warp of
  // every block computes the same bits).
  acc = block_reduce(acc, m, warp_states);
  const int lane = t & 31;
  State part = m.identity();
  if constexpr (kGrid) {
    if (t == 0) grid_states[blockIdx.x] = acc;
    cg::this_grid().sync();
    if (lane < int(blocks)) part = load_state_l2(grid_states + row * blocks + lane);
  } else {
    if (t == 0) block_state = acc;
    cluster.sync();
    if (lane < int(blocks)) part = *cluster.map_shared_rank(&block_state, lane);
  }
  const State total = group_reduce(part, 32, m);
  const auto rewrite_row = [&] {
    const Coef c = St::coef(total, n, a.eps);
    if constexpr (kStats) {  // the row's statistics, where asked
      if (rank == 0 && t == 0) {
        if (a.rstd) a.rstd[row] = c.a;
        if (K == NormKind::layer && a.mean) a.mean[row] = c.b;
      }
    }

    // Rewrite, newest chunks first: the uncached tail was read last, so it is likeliest in L2.
    // `prefetch`: the chunk's weight / bias lines and its uncached x asked into L1 first (no
    // registers), so that the one-pack-at-a-time loads below do not wait on L2 in turn.
    for (std::int64_t c0 = (len - 1) / kChunk * kChunk; c0 >= 0 && len > 0; c0 -= kChunk) {
      const Sweep sw(c0 + t * W, len, cached);
      if (use_prefetch) {
#pragma unroll
        for (int s = 0; s < S; ++s) {
          if (kStride * s >= sw.rem) continue;
          const std::int64_t i = sw.base + kStride * s;
          if ((K == NormKind::rms || K == NormKind::layer) && w)
            asm volatile("prefetch.global.L1 [%0];" ::"l"(w + i));
          if (K == NormKind::layer && b) asm volatile("prefetch.global.L1 [%0];" ::"l"(b + i));
          if (kStride * s >= sw.rem_cached) asm volatile("prefetch.global.L1 [%0];" ::"l"(src + i));
        }
      }
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (kStride * s >= sw.rem) continue;
        const std::int64_t i = sw.base + kStride * s;
        const P r = kStride * s < sw.rem_cached ? P::load(cache + i) : P::load(src + i);
        float v[W], wv[W], bv[W], o[W];
        r.unpack(v);
        load_affine<T, K, W>(w, b, i, wv, bv);
#pragma unroll
        for (int k = 0; k < W; ++k) o[k] = rewrite<K, kFastExp<T>>(v[k], c, wv[k], bv[k]);
        P::pack(o).store_streaming(y + i);
      }
    }
  };
  if constexpr (kGrid) {
    rewrite_row();
  } else {
    auto read_done = cluster.barrier_arrive();  // block_state must outlive the other blocks' reads
    rewrite_row();
    cluster.barrier_wait(std::move(read_done));
  }
}

// ---- Long rows in one pass, streamed (fv15) ----------------------------------------------------
// norm_rows_stream: the forward form of the backward's bwd_rows_stream (norm_backward.cu, v14).
// A cooperative launch of row_groups × col_tiles blocks, all resident (one an SM): block (g, c)
// owns columns [c·tw, c·tw + tw) of the rows of group g (tw ≤ 8192: 16 elements for each of its
// 512 row threads). The row threads walk those rows through kFwdSlots cp.async stages: row i's
// stage is asked kFwdLead rows ahead; when it lands they fold it into a Stats<K> state, which
// thread 0 stores at states[i·col_tiles + c] before a release add on count[i]. kFwdCoefWarps more
// warps wait (acquire) until count[i] = col_tiles, merge the row's states in column order — every
// block the same bits — into its Coef (and, block 0 of the row, its saved statistics) and leave
// it in a shared-memory ring flagged with a release store; kFwdLag rows after the fold the row
// threads rewrite the tile from the same stage. So x is read from memory once: the cluster and
// grid forms cache at most 104 KB of a slice and re-read the rest, the split path re-reads all
// of x. A block publishes row i before it waits on row i − kFwdLag, so with every block
// resident no wait closes a cycle; a ring slot is written for row i only after the row threads
// folded it, by which time they finished row i − 1 − kFwdLag (kStreamRing > kFwdLag). Weight and
// bias sit in shared memory (the coefficient warps cap a thread at 96 registers).
constexpr int kFwdCoefWarps = 2;
template <class T>
inline constexpr int kFwdLead = sizeof(T) == 2 ? 2 : 1;
template <class T>
inline constexpr int kFwdLag = sizeof(T) == 2 ? 3 : 2;
template <class T>
inline constexpr int kFwdSlots = kFwdLead<T> + kFwdLag<T> + 1;
// The stages, then the weight and bias tiles: bf16 128 KB, f32 192 KB.
template <class T>
constexpr std::size_t fwd_stream_smem() {
  return std::size_t(kFwdSlots<T> + 2) * std::size_t(kStreamTile) * sizeof(T);
}

template <class T, NormKind K, int S, int W, bool kStats>
__global__ void __launch_bounds__(kStreamThreads + 32 * kFwdCoefWarps, 1)
norm_rows_stream(NormArgs a, typename Stats<K>::State* states, int* count, int col_tiles,
                 std::int64_t tile_width, std::int64_t rows_per_group) {
  using St = Stats<K>;
  using State = typename St::State;
  using P = Pack<T, W>;
  static_assert(S * W == kStreamElems && W * sizeof(T) == 16);
  constexpr int kLead = kFwdLead<T>, kLag = kFwdLag<T>, kSlots = kFwdSlots<T>, p = kStreamThreads;
  static_assert(kStreamRing > kLag);
  extern __shared__ uint4 fwd_stream_words[];
  T* const stages = reinterpret_cast<T*>(fwd_stream_words);
  __shared__ float block_slots[2][2][32];  // a row's (up to) two block reductions, by row parity
  __shared__ Coef coef_ring[kStreamRing];
  __shared__ int coef_row[kStreamRing];  // 1 + the group row whose Coef the slot holds
  const int t = threadIdx.x, lane = t & 31;
  const std::int64_t n = a.x.n, g = blockIdx.x / col_tiles;
  const int c = int(blockIdx.x % col_tiles);
  const std::int64_t c0 = c * tile_width;
  const int tile_count = int(std::min<std::int64_t>(tile_width, n - c0));  // the tile's columns
  const int rem = tile_count - t * W;
  const std::int64_t r0 = g * rows_per_group, rows = std::min(a.x.rows, r0 + rows_per_group) - r0;
  const typename St::Monoid m;
  if (t < kStreamRing) coef_row[t] = 0;
  __syncthreads();

  if (t >= p) {  // coefficient warp w: rows w, w + kFwdCoefWarps, ...
    const int w = (t - p) >> 5;
    for (std::int64_t j = w; j < rows; j += kFwdCoefWarps) {
      const std::int64_t r = r0 + j;
      while (ptx::ld_acquire_gpu(count + r) < col_tiles) {
      }
      const State* st = states + r * col_tiles;
      const Coef cf = St::coef(merge_in_order(col_tiles, lane, m, [&](int i) { return load_state_l2(st + i); }),
                               n, a.eps);
      if (lane == 0) {
        if constexpr (kStats) {
          if (c == 0) {
            if (a.rstd) a.rstd[r] = cf.a;
            if (K == NormKind::layer && a.mean) a.mean[r] = cf.b;
          }
        }
        coef_ring[j % kStreamRing] = cf;
        ptx::st_release_cta(coef_row + j % kStreamRing, int(j + 1));
      }
    }
    return;
  }

  T* const wtile = stages + std::int64_t(kSlots) * kStreamTile + t * W;  // (S, p, W), then bias
  if constexpr (K == NormKind::rms || K == NormKind::layer) {
    const T* w = a.weight ? static_cast<const T*>(a.weight) + c0 : nullptr;
    const T* b = a.bias ? static_cast<const T*>(a.bias) + c0 : nullptr;
#pragma unroll
    for (int s = 0; s < S; ++s) {
      if (s * p * W >= rem) continue;
      float wv[W], bv[W];
      load_affine<T, K, W>(w, b, t * W + s * p * W, wv, bv);
      P::pack(wv).store(wtile + s * p * W);
      if constexpr (K == NormKind::layer) P::pack(bv).store(wtile + kStreamTile + s * p * W);
    }
  }
  const auto stage_row = [&](std::int64_t i) {  // group row i into its slot, one commit group
    const T* x = static_cast<const T*>(a.x.data) + (r0 + i) * a.x.row_stride + c0 + t * W;
    T* sm = stages + (i % kSlots) * kStreamTile + t * W;
#pragma unroll
    for (int s = 0; s < S; ++s)
      if (s * p * W < rem) cp_async16_cg(sm + s * p * W, x + s * p * W);
    cp_async_commit();
  };
  const auto read_row = [&](std::int64_t i, float (&v)[S][W], bool (&ok)[S]) {
    const T* sm = stages + (i % kSlots) * kStreamTile + t * W;
#pragma unroll
    for (int s = 0; s < S; ++s) {
      ok[s] = s * p * W < rem;
      if (ok[s]) P::load(sm + s * p * W).unpack(v[s]);
      else
#pragma unroll
        for (int k = 0; k < W; ++k) v[s][k] = 0.f;
    }
  };
#pragma unroll
  for (int i = 0; i < kLead; ++i) {
    if (i < rows) stage_row(i);
    else cp_async_commit();
  }
  for (std::int64_t i = 0; i < rows + kLag; ++i) {
    if (i + kLead < rows) stage_row(i + kLead);
    else cp_async_commit();
    if (i < rows) {  // row i landed (all but the kLead newest groups): fold and publish its state
      cp_async_wait<kLead>();
      float v[S][W];
      bool ok[S];
      read_row(i, v, ok);
      // The block's whole tile reduced with a float monoid (named barrier 1, slots by row parity):
      // LayerNorm and softmax as two such reductions each, where a Welford or LogSumExp tree
      // took a division or an exp and three shuffles a level.
      const auto block_all_of = [&](float x, float (&slots)[2][32], auto op, float identity) {
        x = group_reduce(x, 32, op);
        if (lane == 0) slots[i & 1][t >> 5] = x;
        ptx::named_bar_sync(1, p);
        return group_reduce(lane < p / 32 ? slots[i & 1][lane] : identity, 32, op);
      };
      const algebra::Sum<float> sum;
      State acc;
      if constexpr (K == NormKind::layer) {  // the tile's mean, then M2 about it
        const float mean = block_all_of(tile_sum(v, ok), block_slots[0], sum, 0.f) / float(tile_count);
        acc = {tile_count, mean, block_all_of(tile_sq_dev(v, ok, mean), block_slots[1], sum, 0.f)};
      } else if constexpr (K == NormKind::softmax || K == NormKind::log_softmax) {
        // The tile's max, then Σ exp(x − max). A tile of only −inf: (−inf, 0).
        const float mx = block_all_of(St::tile_max(v, ok), block_slots[0], FMax{}, -algebra::math::infinity<float>());
        acc = {mx, block_all_of(St::template tile_exp_sum<kFastExp<T>>(v, ok, mx), block_slots[1], sum, 0.f)};
      } else {  // rms: the Sum of squares
        acc = block_all_of(St::template fold<kFastExp<T>>(v, ok), block_slots[0], m, m.identity());
      }
      if (t == 0) {
        states[(r0 + i) * col_tiles + c] = acc;
        ptx::red_add_release_gpu(count + r0 + i, 1);  // orders the state's store before it
      }
    }
    if (i >= kLag) {  // row j = i − kLag, once its Coef is in the ring
      const std::int64_t j = i - kLag;
      const int slot = int(j % kStreamRing);
      while (ptx::ld_acquire_cta(coef_row + slot) != int(j + 1)) {
      }
      const Coef cf = coef_ring[slot];
      float v[S][W];
      bool ok[S];
      read_row(j, v, ok);
      T* y = static_cast<T*>(a.out.data) + (r0 + j) * a.out.row_stride + c0 + t * W;
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (!ok[s]) continue;
        float wv[W], bv[W], o[W];
#pragma unroll
        for (int k = 0; k < W; ++k) wv[k] = 1.f, bv[k] = 0.f;
        if constexpr (K == NormKind::rms || K == NormKind::layer) P::load(wtile + s * p * W).unpack(wv);
        if constexpr (K == NormKind::layer) P::load(wtile + kStreamTile + s * p * W).unpack(bv);
#pragma unroll
        for (int k = 0; k < W; ++k) o[k] = rewrite<K, kFastExp<T>>(v[s][k], cf, wv[k], bv[k]);
        P::pack(o).store_streaming(y + s * p * W);
      }
    }
  }
}

// ---- Long rows, split over several kernels ----------------------------------------------------
// Few rows longer than a cluster's shared memory (32×1048576 bf16: 2 MB rows against 16 × 104 KB)
// leave most of the GPU idle in the cluster kernels: 16-block clusters, 14 resident at once, run
// 32 rows in three waves, the last a quarter full. Here the row is cut into chunks, one block
// each: norm_split_fold folds its chunk into a state (kAdd: writing s = x + r as it goes); then
// norm_split_coef and norm_split_apply (below; the default) or norm_split_rewrite (dev flag
// "norewrite-short"), which merges the row's chunk states in chunk order (every block of the
// row the same bits) and rewrites its chunk from x (or s) read again. The re-read costs bytes
// (x: 6 instead of 4 per element, the add: 10 instead of 8) but every SM is busy in both passes,
// and the rewrite walks the blocks in reverse, so its first chunks are those the fold read last,
// still in L2.
constexpr int kSplitBlock = 256;

template <class T, NormKind K, int S, int W, bool kAdd>
__global__ void __launch_bounds__(kSplitBlock)
norm_split_fold(NormArgs a, typename Stats<K>::State* states, int chunks, std::int64_t chunk) {
  using St = Stats<K>;
  using State = typename St::State;
  using P = Pack<T, W>;
  constexpr int kStride = kSplitBlock * W;
  constexpr std::int64_t kSweep = std::int64_t(kStride) * S;
  constexpr int kFold = S;  // LayerNorm too: one two-pass fold of the sweep's values, one merge
  __shared__ State warp_states[32];
  const std::int64_t row = blockIdx.x / chunks, lo = (blockIdx.x % chunks) * chunk;
  const std::int64_t len = std::min(chunk, a.x.n - lo);
  const T* x = static_cast<const T*>(a.x.data) + row * a.x.row_stride + lo;
  const T* res = kAdd ? residual_row<T, kAdd>(a, row) + lo : nullptr;
  T* sum = kAdd ? sum_row<T, kAdd>(a, row) + lo : nullptr;
  const int t = threadIdx.x;
  const typename St::Monoid m;
  // The rewrite may be scheduled now: its blocks take the slots this grid's last wave leaves,
  // load their first x, and wait (griddepcontrol.wait) for this grid's states.
  parallel::cuda::launch_dependents();
  // With the add, x and the residual are read as evict-last and s stored so (s is read again
  // by the rewrite, as evict-first). H200, bf16, graph replay, % of copy: add_rms 32×1048576
  // 74.3 -> 74.8, 256×262144 75.9 -> 76.5; the same hints on RMSNorm's x here (without the
  // add) lost 61.8 -> 59.0 at 32×1048576, so its x is read plainly (docs/perf/norm.md, session 18).
  const std::uint64_t last = l2_evict_last();
  State acc = m.identity();
  for (std::int64_t c0 = 0; c0 < len; c0 += kSweep) {
    const Sweep sw(c0 + t * W, len, 0);
    P r[S], q[S];
    bool ok[S];
#pragma unroll
    for (int s = 0; s < S; ++s) {  // all loads in flight first
      ok[s] = kStride * s < sw.rem;
      if (ok[s]) r[s] = kAdd ? P::load_hint(x + sw.base + kStride * s, last) : P::load(x + sw.base + kStride * s);
      if (kAdd && ok[s]) q[s] = P::load_hint(res + sw.base + kStride * s, last);
    }
#pragma unroll
    for (int s0 = 0; s0 < S; s0 += kFold) {
      float v[kFold][W];
      bool ok_tile[kFold];
#pragma unroll
      for (int s = s0; s < s0 + kFold; ++s) {
        ok_tile[s - s0] = ok[s];
        if (ok[s]) {
          r[s].unpack(v[s - s0]);
          if constexpr (kAdd) add_and_store(q[s], v[s - s0], sum + sw.base + kStride * s, &last);
        } else {
#pragma unroll
          for (int k = 0; k < W; ++k) v[s - s0][k] = 0.f;
        }
      }
      acc = m.combine(acc, St::template fold<kFastExp<T>>(v, ok_tile));
    }
  }
  acc = block_reduce(acc, m, warp_states);
  if (t == 0) states[blockIdx.x] = acc;
}

// A row's coefficients from its chunk states, by one warp: lane l folds chunks l, l + 32, ...
// in order, then the lanes in lane order — the same bits in every warp that calls it. kStats:
// `write_stats` (one lane of one warp of the row) saves rstd (and LayerNorm's mean).
template <NormKind K, bool kStats>
__device__ __forceinline__ Coef row_coef(const NormArgs& a, const typename Stats<K>::State* states,
                                         std::int64_t row, int chunks, int lane, bool write_stats) {
  using St = Stats<K>;
  const typename St::Monoid m;
  typename St::State part = m.identity();
  for (int i = lane; i < chunks; i += 32) part = m.combine(part, states[row * chunks + i]);
  const Coef c = St::coef(group_reduce(part, 32, m), a.x.n, a.eps);
  if constexpr (kStats) {
    if (write_stats) {
      if (a.rstd) a.rstd[row] = c.a;
      if (K == NormKind::layer && a.mean) a.mean[row] = c.b;
    }
  }
  return c;
}

template <class T, NormKind K, int S, int W, bool kAdd, bool kStats>
__global__ void __launch_bounds__(kSplitBlock)
norm_split_rewrite(NormArgs a, const typename Stats<K>::State* states, int chunks,
                   std::int64_t chunk) {
  using P = Pack<T, W>;
  constexpr int kStride = kSplitBlock * W;
  constexpr std::int64_t kSweep = std::int64_t(kStride) * S;
  const std::int64_t blk = gridDim.x - 1 - std::int64_t(blockIdx.x);  // the fold's last first
  const std::int64_t row = blk / chunks;
  const int j = int(blk % chunks);
  const std::int64_t lo = j * chunk, len = std::min(chunk, a.x.n - lo);
  const int t = threadIdx.x, lane = t & 31;
  const T* src = kAdd ? sum_row<T, kAdd>(a, row) + lo
                      : static_cast<const T*>(a.x.data) + row * a.x.row_stride + lo;
  const std::uint64_t s_policy = kAdd ? l2_evict_first() : 0;  // s read for the last time (the fold stored it evict-last)
  const auto load_sweep = [&](const Sweep& sw, P (&r)[S]) {  // all loads in flight first
#pragma unroll
    for (int s = 0; s < S; ++s)
      if (kStride * s < sw.rem)
        r[s] = kAdd ? P::load_hint(src + sw.base + kStride * s, s_policy) : P::load(src + sw.base + kStride * s);
  };
  // Launched as a programmatic dependent of the fold: x does not depend on it, so the first
  // sweep of x is loaded before waiting for the fold's states (s, with the add, is its output).
  P first[S];
  if constexpr (!kAdd) load_sweep(Sweep(t * W, len, 0), first);
  parallel::cuda::wait_dependencies();
  // Every warp of every block of the row computes the same bits.
  const Coef c = row_coef<K, kStats>(a, states, row, chunks, lane, j == 0 && t == 0);
  T* y = static_cast<T*>(a.out.data) + row * a.out.row_stride + lo;
  const T* w = a.weight ? static_cast<const T*>(a.weight) + lo : nullptr;
  const T* b = a.bias ? static_cast<const T*>(a.bias) + lo : nullptr;
  for (std::int64_t c0 = 0; c0 < len; c0 += kSweep) {
    const Sweep sw(c0 + t * W, len, 0);
    P r[S];
    if (!kAdd && c0 == 0) {
#pragma unroll
      for (int s = 0; s < S; ++s) r[s] = first[s];
    } else {
      load_sweep(sw, r);
    }
#pragma unroll
    for (int s = 0; s < S; ++s) {
      if (kStride * s >= sw.rem) continue;
      const std::int64_t i = sw.base + kStride * s;
      float v[W], wv[W], bv[W], o[W];
      r[s].unpack(v);
      load_affine<T, K, W>(w, b, i, wv, bv);
#pragma unroll
      for (int k = 0; k < W; ++k) o[k] = rewrite<K, kFastExp<T>>(v[k], c, wv[k], bv[k]);
      P::pack(o).store_streaming(y + i);
    }
  }
}

// The rewrite as two short kernels (the split path's default; dev flag "norewrite-short" for
// norm_split_rewrite). norm_split_coef: one warp a row merges the row's chunk states (lane l
// folds chunks l, l + 32, ... in order, then the lanes in lane order: the bits of
// norm_split_rewrite) into the row's coefficients. norm_split_apply: every thread one 16-byte
// pack (bf16: 8 elements, 2048 a block), ~30 registers and 8 blocks an SM instead of 64 and 4;
// x (without the add) and the weight / bias are in flight before it waits on the fold, and after
// it one load of the row's coefficients, so no block waits on a merge. Blocks run last-first, as
// the fold's last chunks are those L2 still holds. ncu, H200, rms 32×1048576 bf16:
// norm_split_rewrite 35.3–36.7 µs at 43% warps active against torch.compile's pointwise
// kernel, 32 µs at 81% (its row coefficients come from a kernel of their own, as here).
constexpr int kApplyElems = 8;  // elements a thread
constexpr int kApplyBlockElems = kSplitBlock * kApplyElems;
constexpr int kCoefRowsPerBlock = kSplitBlock / 32;

template <NormKind K, bool kStats>
__global__ void __launch_bounds__(kSplitBlock)
norm_split_coef(NormArgs a, const typename Stats<K>::State* states, Coef* coefs, int chunks) {
  // The apply may be scheduled now: it loads x and the weight, then waits for this grid.
  parallel::cuda::launch_dependents();
  const std::int64_t row = std::int64_t(blockIdx.x) * kCoefRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  parallel::cuda::wait_dependencies();
  if (row >= a.x.rows) return;
  const Coef c = row_coef<K, kStats>(a, states, row, chunks, lane, lane == 0);
  if (lane == 0) coefs[row] = c;
}

template <class T, NormKind K, int W, bool kAdd>
__global__ void __launch_bounds__(kSplitBlock)
norm_split_apply(NormArgs a, const Coef* coefs, int per_row) {
  using P = Pack<T, W>;
  constexpr int S = kApplyElems / W;  // packs a thread (bf16: 1; f32: 2; scalars: 8)
  static_assert(S * W == kApplyElems);
  const std::int64_t blk = gridDim.x - 1 - std::int64_t(blockIdx.x);  // the fold's last first
  const std::int64_t row = blk / per_row;
  const std::int64_t lo = (blk % per_row) * kApplyBlockElems;
  const int t = threadIdx.x;
  const std::int64_t n = a.x.n;
  // Pack s of this thread: elements lo + (s·kSplitBlock + t)·W … + W (coalesced across threads).
  const auto at = [&](int s) { return lo + (std::int64_t(s) * kSplitBlock + t) * W; };
  const T* w = a.weight ? static_cast<const T*>(a.weight) : nullptr;
  const T* b = a.bias ? static_cast<const T*>(a.bias) : nullptr;
  P r[S], wp[S], bp[S];
#pragma unroll
  for (int s = 0; s < S; ++s) {  // everything that does not depend on the fold, in flight first
    if (at(s) >= n) continue;
    if (!kAdd) r[s] = P::load(static_cast<const T*>(a.x.data) + row * a.x.row_stride + at(s));
    load_affine_packs<T, K, W>(w, b, at(s), wp[s], bp[s]);
  }
  parallel::cuda::wait_dependencies();
  if constexpr (kAdd) {
    const T* src = sum_row<T, kAdd>(a, row);
    const std::uint64_t first = l2_evict_first();  // s's last read (the fold stored it evict-last)
#pragma unroll
    for (int s = 0; s < S; ++s)
      if (at(s) < n) r[s] = P::load_hint(src + at(s), first);
  }
  const Coef c = coefs[row];
  T* y = static_cast<T*>(a.out.data) + row * a.out.row_stride;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    if (at(s) >= n) continue;
    float v[W], wv[W], bv[W], o[W];
    r[s].unpack(v);
    unpack_affine<T, K, W>(w, b, wp[s], bp[s], wv, bv);
#pragma unroll
    for (int k = 0; k < W; ++k) o[k] = rewrite<K, kFastExp<T>>(v[k], c, wv[k], bv[k]);
    P::pack(o).store_streaming(y + at(s));
  }
}

// ---- Host side -------------------------------------------------------------------------------

// Dev switches for side-by-side timing, SIXFOLD_NORM_FWD=<names>: "cw=N" — N blocks per long
// row; "chunks=N" — about N chunks per row on the split path (each at least 8192 elements);
// "nopfw" — no prefetches on the long-row path; "norewrite-short" — the split path's rewrite as
// norm_split_rewrite (chunk-sized blocks) instead of norm_split_apply; "nopdl" — its rewrite launched
// plainly, not as a programmatic dependent of its fold; "nogrid" / "gridall" / "nostream" /
// "streamall" — see launch_rows; "verbose" — the long-row launch shape and
// how many of its clusters are resident at once, on stderr.
const char* fwd_dev_flags() {  // read on every call, so that tests can switch them
  return std::getenv("SIXFOLD_NORM_FWD");
}
bool fwd_dev_flag(const char* name) {
  return fwd_dev_flags() && std::strstr(fwd_dev_flags(), name);
}
// "cw=N": N blocks per row on the long-row path (0 when absent).
int fwd_dev_int(const char* name) {
  const char* at = fwd_dev_flags() ? std::strstr(fwd_dev_flags(), name) : nullptr;
  return at && at[std::strlen(name)] == '=' ? std::atoi(at + std::strlen(name) + 1) : 0;
}

// Calls launch(b) for consecutive batches b of at most max_rows rows.
template <class T, class F>
void for_row_batches(const NormArgs& a, std::int64_t max_rows, F&& launch) {
  for (std::int64_t r0 = 0; r0 < a.x.rows; r0 += max_rows) {
    NormArgs b = a;
    b.x.rows = b.out.rows = std::min(max_rows, a.x.rows - r0);
    b.x.data = static_cast<T*>(a.x.data) + r0 * a.x.row_stride;
    b.out.data = static_cast<T*>(a.out.data) + r0 * a.out.row_stride;
    if (a.mean) b.mean = a.mean + r0;
    if (a.rstd) b.rstd = a.rstd + r0;
    if (a.residual.data) {
      b.residual.data = static_cast<T*>(a.residual.data) + r0 * a.residual.row_stride;
      b.sum_out.data = static_cast<T*>(a.sum_out.data) + r0 * a.sum_out.row_stride;
    }
    launch(b);
  }
}

// Cluster width: slices of ≤ slice_bytes; widened while few rows leave SMs idle.
int cluster_width(std::int64_t rows, std::int64_t row_bytes, std::int64_t slice_bytes, int sms) {
  std::int64_t c = std::min<std::int64_t>(kMaxCluster, ceil_div(row_bytes, slice_bytes));
  if (rows * c < 2 * sms)
    c = std::max(c, std::min<std::int64_t>({kMaxCluster, ceil_div(2 * sms, rows),
                                            row_bytes / kMinSliceBytes}));
  return int(std::max<std::int64_t>(c, 1));
}

// Function attributes of a cluster kernel (or its grid form: clusters false), set once per device
// (`done` belongs to the kernel): clusters of up to 16 blocks, up to kCacheBytes of dynamic
// shared memory.
void configure_cluster_kernel(const void* kernel, int device, std::atomic<std::uint64_t>& done,
                              bool clusters = true) {
  const std::uint64_t bit = device < 64 ? std::uint64_t(1) << device : 0;  // bit d: device d
  if (bit && (done.load(std::memory_order_acquire) & bit)) return;
  if (clusters)
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
               kWhere);
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(kCacheBytes)),
             kWhere);
  done.fetch_or(bit, std::memory_order_release);
}

// Long rows as two kernels (launch_split) instead of a cluster per row: rows that need the
// widest clusters (≥ 16 slices) and the fused residual add with RMSNorm; dev hooks "split" /
// "nosplit" force one or the other. H200, bf16, same process, two rounds, % of copy per call /
// graph replay, cluster → split: 32×1048576 rms 46 / 50 → 45 / 52, layer 34 / 37 → 40 / 45,
// softmax 46 / 51 → 45 / 52, add_rms 46 / 48 → 60-62 / 67, add_layer 50 / 53 → 59-60 / 65;
// 256×262144 add_rms 62-63 / 64 → 67 / 71, but rms 62-63 / 66-67 → 52 / 56, softmax 63 / 66 →
// 48 / 52, add_layer 66-67 / 69 → 61 / 64, layer equal (docs/perf/norm.md, session 9).
template <class T, NormKind K, bool kAdd>
bool long_rows_split(std::int64_t n) {
  if (fwd_dev_flag("nosplit")) return false;
  return fwd_dev_flag("split") || (kAdd && K == NormKind::rms) ||
         n * std::int64_t(sizeof(T)) >= kMaxCluster * kSliceBytes;
}

// The split path: chunks of at least kSplitChunkMin elements, enough of them for ~4 blocks per SM
// (RMSNorm: 32; at most kMaxSplitChunks per row).
constexpr std::int64_t kSplitChunkMin = 8192;
constexpr int kMaxSplitChunks = 1024;

template <class T, NormKind K, int S, int W, bool kAdd, bool kStats>
void launch_split(const NormArgs& a, cudaStream_t stream, int device) {
  using State = typename Stats<K>::State;
  const int sms = parallel::cuda::sm_count(device, kWhere);
  const std::int64_t n = a.x.n;
  // Blocks per SM: RMSNorm's fold is cheap, and its rows gain from short blocks; LayerNorm's
  // and softmax's folds do not. H200, bf16, 32×1048576, % of copy in graph replay at 16 / 32 /
  // 64 / 128 chunks per row: rms 52 / 53 / 58 / 60, add_rms 68 / 69 / 71 / 74, softmax 52 / 55 /
  // 54 / 47, layer 46 / 46 / 44 / 38, add_layer 65 / 64 / 62 / 57.
  const std::int64_t per_sm = K == NormKind::rms ? 32 : 4;
  std::int64_t want = std::max<std::int64_t>(1, ceil_div(per_sm * sms, a.x.rows));
  if (const int forced = fwd_dev_int("chunks"); forced > 0) want = forced;  // dev: chunks per row
  std::int64_t chunk =
      std::max(kSplitChunkMin, ceil_div(n, std::min<std::int64_t>(want, kMaxSplitChunks)));
  chunk = ceil_div(chunk, std::int64_t(kSplitBlock) * S * W) * (std::int64_t(kSplitBlock) * S * W);
  const int chunks = int(ceil_div(n, chunk));
  const bool short_rewrite = !fwd_dev_flag("norewrite-short");
  const int per_row = int(ceil_div(n, std::int64_t(kApplyBlockElems)));  // norm_split_apply's blocks
  for_row_batches<T>(a, kMaxGrid / std::max(chunks, per_row), [&](const NormArgs& b) {
    const std::size_t state_bytes =  // rounded up to whole Coefs, which follow the states
        std::size_t(ceil_div(b.x.rows * chunks * std::int64_t(sizeof(State)), std::int64_t(sizeof(Coef)))) *
        sizeof(Coef);
    parallel::cuda::detail::Scratch ws(state_bytes + std::size_t(b.x.rows) * sizeof(Coef), stream,
                                       kWhere);
    auto* states = static_cast<State*>(ws.get());
    auto* coefs = reinterpret_cast<Coef*>(static_cast<char*>(ws.get()) + state_bytes);
    const auto blocks = unsigned(b.x.rows * chunks);
    norm_split_fold<T, K, S, W, kAdd><<<blocks, kSplitBlock, 0, stream>>>(b, states, chunks, chunk);
    check_cuda(cudaGetLastError(), kWhere);
    // Programmatic dependents, each of the one before (dev flag "nopdl": plain launches).
    const bool pdl = !fwd_dev_flag("nopdl");
    if (short_rewrite) {
      parallel::cuda::launch_dependent(norm_split_coef<K, kStats>,
                                       dim3(unsigned(ceil_div(b.x.rows, std::int64_t(kCoefRowsPerBlock)))),
                                       dim3(kSplitBlock), 0, stream, pdl, kWhere, b, states, coefs,
                                       chunks);
      parallel::cuda::launch_dependent(norm_split_apply<T, K, W, kAdd>,
                                       dim3(unsigned(b.x.rows * per_row)), dim3(kSplitBlock), 0,
                                       stream, pdl, kWhere, b, static_cast<const Coef*>(coefs), per_row);
    } else
      parallel::cuda::launch_dependent(norm_split_rewrite<T, K, S, W, kAdd, kStats>, dim3(blocks),
                                       dim3(kSplitBlock), 0, stream, pdl, kWhere, b, states, chunks,
                                       chunk);
  });
}

template <class T, NormKind K, int S, int W, bool kAdd, bool kStats>
void launch_cluster(const NormArgs& a, cudaStream_t stream, int device) {
  const auto kernel = norm_rows_cluster<T, K, S, W, kAdd, kStats>;
  static std::atomic<std::uint64_t> configured{0};
  configure_cluster_kernel(reinterpret_cast<const void*>(kernel), device, configured);
  const int sms = parallel::cuda::sm_count(device, kWhere);
  const std::int64_t n = a.x.n;
  int c = cluster_width(a.x.rows, n * std::int64_t(sizeof(T)),
                        kAdd ? kSliceBytesAdd : kSliceBytes, sms);
  if (const int forced = fwd_dev_int("cw"); forced >= 1 && forced <= kMaxCluster) c = forced;
  std::int64_t slice = 0, cached = 0;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  cudaLaunchConfig_t cfg{};
  cfg.blockDim = dim3(kClusterBlock);
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  for (;;) {  // above 8 blocks (non-portable), narrow the cluster until the device co-schedules it
    slice = ceil_div(ceil_div(n, c), W) * W;
    cached = std::min<std::int64_t>(slice, kCacheBytes / std::int64_t(sizeof(T)));
    cfg.dynamicSmemBytes = std::size_t(cached) * sizeof(T);
    attr.val.clusterDim.x = unsigned(c);
    attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    cfg.gridDim = dim3(unsigned(c));
    if (c <= 8) break;  // portable: 8 blocks at 2 per SM need 4 SMs of one GPC
    int active = 0;
    // A refused query counts as "does not fit"; its error is cleared, not thrown.
    if (cudaOccupancyMaxActiveClusters(&active, kernel, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();
      active = 0;
    }
    if (active > 0) break;
    c = 8;
  }
  static std::atomic<std::int64_t> shown{-1};  // "verbose": once per row length in a row
  if (fwd_dev_flag("verbose") && shown.exchange(n) != n) {  // launch shape, clusters resident
    int active = 0;
    cfg.gridDim = dim3(unsigned(std::min<std::int64_t>(a.x.rows, kMaxGrid / c) * c));
    if (cudaOccupancyMaxActiveClusters(&active, kernel, &cfg) != cudaSuccess)
      (void)cudaGetLastError();
    std::fprintf(stderr,
                 "norm cluster: rows %lld n %lld: %d blocks per row, slice %lld, cached %lld, "
                 "%d clusters resident at once\n",
                 (long long)a.x.rows, (long long)n, c, (long long)slice, (long long)cached, active);
  }
  // Prefetches pay where part of the slice is re-read (H200 run 2: 32×1048576 rms / layer
  // 44.0 / 31.2 → 47.3 / 35.4% of copy) and cost where all of it is cached (256×262144 at 8
  // blocks per row: 62.9 / 42.3 → 60.9 / 39.6%).
  const bool prefetch = cached < slice && !fwd_dev_flag("nopfw");
  for_row_batches<T>(a, kMaxGrid / c, [&](const NormArgs& b) {
    cfg.gridDim = dim3(unsigned(b.x.rows * c));
    check_cuda(cudaLaunchKernelEx(&cfg, kernel, b, slice, cached, prefetch,
                                  static_cast<typename Stats<K>::State*>(nullptr), 0),
               kWhere);
  });
}

// The grid form of norm_rows_cluster for the split path's long rows: as many blocks per row as
// the device holds at once (up to 32), all resident, one cooperative launch per batch of rows.
// False (nothing launched) where fewer than 2 blocks per row would fit.
template <class T, NormKind K, int S, int W, bool kAdd, bool kStats>
bool launch_grid_rows(const NormArgs& a, cudaStream_t stream, int device) {
  using State = typename Stats<K>::State;
  const auto kernel = norm_rows_cluster<T, K, S, W, kAdd, kStats, true>;
  static std::atomic<std::uint64_t> configured{0};
  configure_cluster_kernel(reinterpret_cast<const void*>(kernel), device, configured, false);
  const int sms = parallel::cuda::sm_count(device, kWhere);
  // Blocks per SM at the most shared memory a block asks for, asked once per device (the query
  // costs host time on every call otherwise).
  static std::atomic<int> fits[64] = {};
  int per_sm = device < 64 ? fits[device].load(std::memory_order_relaxed) : 0;
  if (per_sm == 0) {
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kClusterBlock,
                                                             std::size_t(kCacheBytes)),
               kWhere);
    if (device < 64) fits[device].store(per_sm, std::memory_order_relaxed);
  }
  const std::int64_t n = a.x.n, cap_elems = kCacheBytes / std::int64_t(sizeof(T));
  const std::int64_t capacity = std::int64_t(per_sm) * sms;
  const std::int64_t per_row = std::min<std::int64_t>({32, capacity / std::max<std::int64_t>(a.x.rows, 1),
                                                       ceil_div(n, W)});
  if (per_row < 2) return false;
  const std::int64_t slice = ceil_div(ceil_div(n, per_row), W) * W;
  const std::int64_t cached = std::min<std::int64_t>(slice, cap_elems);
  const int bpr = int(ceil_div(n, slice));
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  cudaLaunchConfig_t cfg{};
  cfg.blockDim = dim3(kClusterBlock);
  cfg.dynamicSmemBytes = std::size_t(cached) * sizeof(T);
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  const bool prefetch = cached < slice && !fwd_dev_flag("nopfw");
  for_row_batches<T>(a, capacity / bpr, [&](const NormArgs& b) {
    parallel::cuda::detail::Scratch ws(std::size_t(b.x.rows * bpr) * sizeof(State), stream, kWhere);
    cfg.gridDim = dim3(unsigned(b.x.rows * bpr));
    check_cuda(cudaLaunchKernelEx(&cfg, kernel, b, slice, cached, prefetch, static_cast<State*>(ws.get()), bpr),
               kWhere);
  });
  return true;
}

// fv15 where every column tile of a row is resident at once (1M bf16 columns: 128 tiles of 8192
// against the H100's 132 SMs); false where not.
template <class T, NormKind K, int W, bool kStats>
bool launch_stream_rows(const NormArgs& a, cudaStream_t stream, int device) {
  using State = typename Stats<K>::State;
  constexpr int S = kStreamElems / W;
  const auto kernel = norm_rows_stream<T, K, S, W, kStats>;
  constexpr std::size_t smem = fwd_stream_smem<T>();
  constexpr int threads = kStreamThreads + 32 * kFwdCoefWarps;
  // Blocks per SM, set up and asked once per device (0: does not fit).
  static std::atomic<int> fits[64] = {};
  int per_sm = device < 64 ? fits[device].load(std::memory_order_relaxed) : 0;
  if (per_sm == 0) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess) {
      (void)cudaGetLastError();
      per_sm = 0;
    }
    per_sm = std::max(per_sm, 0);
    if (device < 64) fits[device].store(per_sm > 0 ? per_sm : -1, std::memory_order_relaxed);
  }
  if (per_sm <= 0) return false;
  const std::int64_t rows = a.x.rows;
  const StreamGrid sg =
      stream_grid(rows, a.x.n, W, std::int64_t(per_sm) * parallel::cuda::sm_count(device, kWhere));
  if (sg.col_tiles == 0) return false;
  const std::size_t count_bytes = std::size_t(ceil_div(rows * 4, std::int64_t(256)) * 256);
  parallel::cuda::detail::Scratch ws(count_bytes + std::size_t(rows * sg.col_tiles) * sizeof(State), stream, kWhere);
  auto* count = static_cast<int*>(ws.get());
  auto* states = reinterpret_cast<State*>(static_cast<char*>(ws.get()) + count_bytes);
  check_cuda(cudaMemsetAsync(count, 0, std::size_t(rows) * sizeof(int), stream), kWhere);
  launch_cooperative(kernel, sg.groups * sg.col_tiles, threads, smem, stream, kWhere, a, states, count,
                     int(sg.col_tiles), sg.tile_width, sg.per_group);
  return true;
}

template <class T, NormKind K, int W, bool kAdd, bool kStats>
void launch_register_rows(const NormArgs& a, cudaStream_t stream) {
  constexpr int S = W > 1 ? 4 : 16;  // 64 bytes (4 vector loads) or 16 scalar loads in flight
  constexpr std::int64_t kItems = S * W;
  const std::int64_t n = a.x.n;
  // Both kernels begin with chain_head: launched as programmatic dependents, their launch and
  // block scheduling overlap the end of the kernel before them in the stream.
  const bool chain = parallel::cuda::chain_launches();
  if (n <= 32 * kItems) {
    int log2_g = 0;
    while ((kItems << log2_g) < n) ++log2_g;
    const bool warp = log2_g == 5 && !fwd_dev_flag("nowarp");
    const int wb = fwd_dev_int("wb");  // dev: threads of the warp-row blocks
    const int threads = !warp ? kGroupBlock : wb >= 32 && wb <= kGroupBlock ? wb : kWarpBlock;
    const std::int64_t per_block = threads >> log2_g;
    for_row_batches<T>(a, per_block * kMaxGrid, [&](const NormArgs& b) {
      const auto blocks = unsigned(ceil_div(b.x.rows, per_block));
      // RMSNorm without the add: the weight with the row, as in the block kernel (64 registers
      // instead of 40). H200, bf16, 65536x1024, same process, four rounds: 93.1-93.3 -> 94.7-95.2%
      // of copy in graph replay, 86.2-87.3 -> 87.2-89.9% per call; with the add (87 registers)
      // 94 -> 81%; LayerNorm's weight and bias early (87 registers) 90 -> 57%. Dev hook: "wlate"
      // keeps the late loads.
      // Rows of a whole warp (log2_g = 5) take the kernel with the width a constant (kWarp = 1;
      // dev flag "nowarp": the run-time width kernel). H200, bf16 65536x1024, same process, two
      // rounds, % of copy in graph replay, nowarp -> default: layer 92.4 -> 93.5, add_rms 95.0 ->
      // 96.2, add_layer 94.3-94.7 -> 95.7, rms 94.5 -> 95.2-95.4, softmax 94.8 -> 94.5; the same
      // with the floats unpacked per pass (kKeep off, tried as a dev flag): layer 92.7, rms 94.3-94.8.
      const auto pick = [&](auto aff) {
        constexpr int kA = decltype(aff)::value;
        return warp ? norm_rows_group<T, K, S, W, kAdd, kStats, kA, 1>
                    : norm_rows_group<T, K, S, W, kAdd, kStats, kA, 0>;
      };
      auto kernel = pick(std::integral_constant<int, 0>{});
      if constexpr (!kAdd && K == NormKind::rms)
        if (!fwd_dev_flag("wlate")) kernel = pick(std::integral_constant<int, 1>{});
      // LayerNorm's weight and bias staged in shared memory (kAff = 2, as in the block kernel)
      // for rows of a whole warp. H200, bf16 65536x1024, same process, two rounds, % of copy in
      // graph replay: layer 94.6 -> 95.1, add_layer 96.8 -> 97.1-97.2. Dev flag "nostage": the
      // loads in the rewrite.
      std::size_t smem = 0;
      if constexpr (K == NormKind::layer && W * sizeof(T) == 16)
        if (warp && !fwd_dev_flag("nostage")) {
          kernel = norm_rows_group<T, K, S, W, kAdd, kStats, 2, 1>;
          smem = std::size_t(2 * S) * std::size_t(threads) * 16;
        }
      parallel::cuda::launch_dependent(kernel, dim3(blocks), dim3(unsigned(threads)), smem, stream,
                                       chain, kWhere, b, log2_g);
    });
  } else {
    const int threads = int(ceil_div(ceil_div(n, kItems), 32) * 32);
    // RMSNorm's weight loaded with the row (kAff = 1); dev hook: "wlate" in SIXFOLD_NORM_FWD keeps
    // the loads in the rewrite (the kernel before session 9). H200, bf16, same process, two
    // rounds: rms 4096x4096 graph replay 79.6-80.1 -> 84.5-84.6% of copy, add_rms per call
    // 74.8-75.7 -> 79.0-79.6%, 16384x8192 within noise. LayerNorm's weight and bias early (86
    // registers, 105 with the add) lost: layer 16384x8192 91-92 -> 54-55%, add_layer 4096x4096
    // graph 85 -> 77%; so did its loads issued 2 or 4 packs at a time in the rewrite (61 / 86
    // registers; 16384x8192 91.5 -> 78.7 / 57.0%, 4096x4096 60 -> 55 / 47% per call) and capping
    // its registers at 32 for 16 blocks per SM (4096x4096: no change); docs/perf/norm.md,
    // session 9.
    // Full rows (n = threads·S·W) of LayerNorm and add_rms_norm take the kernel that keeps the
    // tile's floats and tests no pack (kFast). H200, bf16, same process, two rounds, % of copy in
    // graph replay, without -> with: layer 4096x4096 73.3 -> 75.8, add_rms 4096x4096 89.2 -> 90.2,
    // 16384x8192 both within 0.3; rms, softmax and add_layer lost 0.6-0.7 at 16384x8192 (rms
    // 96.3 -> 95.7, softmax 96.9 -> 96.2, add_layer 95.9 -> 95.2), so they keep the plain kernel.
    // Dev flags: "bfast" / "nobfast" force it on / off.
    const bool full = n == std::int64_t(threads) * kItems;
    constexpr bool kFastRule = (K == NormKind::layer && !kAdd) || (K == NormKind::rms && kAdd);
    const bool fast = full && !fwd_dev_flag("nobfast") && (kFastRule || fwd_dev_flag("bfast"));
    const auto pick = [&](auto aff) {
      constexpr int kA = decltype(aff)::value;
      return fast ? norm_rows_block<T, K, S, W, kAdd, kStats, kA, true>
                  : norm_rows_block<T, K, S, W, kAdd, kStats, kA, false>;
    };
    auto kernel = pick(std::integral_constant<int, 0>{});
    std::size_t smem = 0;
    if (threads <= kEarlyThreads) {
      if constexpr (K == NormKind::rms)
        if (!fwd_dev_flag("wlate")) kernel = pick(std::integral_constant<int, 1>{});
      // LayerNorm's weight and bias staged in shared memory by cp.async (kAff = 2), 16-byte
      // packs. H200, bf16, same process, two rounds, % of copy in graph replay (per call), loads
      // in the rewrite -> staged: 4096x4096 75.0-75.2 (62.7-63.7) -> 80.7-80.9 (66.1-66.9),
      // 16384x8192 94.4-94.9 (89.9-90.8) -> 95.8-96.0 (92.8-93.0); with the fused add 4096x4096
      // lost (86.4-86.5 -> 84.1-84.5), 16384x8192 equal, so the add keeps the loads. Dev flag
      // "nostage": the loads in the rewrite.
      if constexpr (K == NormKind::layer && !kAdd && W * sizeof(T) == 16)
        if (!fwd_dev_flag("nostage")) {
          kernel = fast ? norm_rows_block<T, K, S, W, kAdd, kStats, 2, true>
                        : norm_rows_block<T, K, S, W, kAdd, kStats, 2, false>;
          smem = std::size_t(2 * S) * std::size_t(threads) * 16;
        }
    }
    for_row_batches<T>(a, kMaxGrid, [&](const NormArgs& b) {
      parallel::cuda::launch_dependent(kernel, dim3(unsigned(b.x.rows)), dim3(unsigned(threads)), smem,
                                       stream, chain, kWhere, b);
    });
  }
}

template <class T, NormKind K, int W, bool kAdd, bool kStats>
void launch_rows(const NormArgs& a, cudaStream_t stream, int device) {
  constexpr int S = W > 1 ? 4 : 16;
  if (a.x.n <= 1024 * S * W) return launch_register_rows<T, K, W, kAdd, kStats>(a, stream);
  // Rows past a cluster's reach: the grid form of the cluster kernel for LayerNorm and the
  // softmax kinds, the split path for RMSNorm. H200, bf16, 32x1048576, same process, two rounds,
  // % of copy in graph replay (per call), grid against split: softmax 59.1-59.3 (49.8-53.6)
  // against 53.3 (48.6-48.7), layer 47.4-47.5 (41.6-42.9) against 45.1-45.2 (41.6-41.8), rms
  // 58.3-58.9 (50.7-52.8) against 59.6-60.0 (53.5-54.4). The fused adds keep the split path
  // (through the grid form: add_layer 66.0 -> 64.0-64.5, add_rms 74 -> 59). Dev flags: "nogrid" —
  // the split path there too; "gridall" — the grid form for every long row without the add (tests).
  // RMSNorm's and LayerNorm's rows in one streamed pass (fv15) unless a dev flag asks for another
  // path: "nostream", or "split" / "gridall" (which the tests use to reach those kernels). H100,
  // bf16, same process, two rounds, ms in graph replay, cluster / grid path → fv15, 256x262144
  // and 32x1048576: rms 0.117 → 0.114 and 0.068 → 0.063; layer 0.139 → 0.205 and 0.082 → 0.108
  // with a Welford tree in the block (a division every merge), 0.140 → 0.130 and 0.082 → 0.072
  // with two block Sums (session 32). softmax: 0.111 → 0.179 and 0.069 → 0.093 with a LogSumExp
  // tree, → 0.143 and 0.076 with a block max and a block Sum: it keeps the cluster / grid
  // kernels; "streamall" forces fv15 on it (tests).
  if constexpr (!kAdd && W * sizeof(T) == 16)
    if ((K == NormKind::rms || K == NormKind::layer || fwd_dev_flag("streamall")) && !fwd_dev_flag("nostream") &&
        !fwd_dev_flag("split") && !fwd_dev_flag("gridall") && launch_stream_rows<T, K, W, kStats>(a, stream, device))
      return;
  const bool split = long_rows_split<T, K, kAdd>(a.x.n);
  const bool grid = fwd_dev_flag("gridall") ||
                    (K != NormKind::rms && split && a.x.n * std::int64_t(sizeof(T)) >= kMaxCluster * kSliceBytes);
  if (!kAdd && grid && !fwd_dev_flag("nogrid") && !fwd_dev_flag("split") &&
      launch_grid_rows<T, K, S, W, kAdd, kStats>(a, stream, device))
    return;
  if (split) return launch_split<T, K, S, W, kAdd, kStats>(a, stream, device);
  launch_cluster<T, K, S, W, kAdd, kStats>(a, stream, device);
}

// Statistics saved (rms / layer with a.mean or a.rstd set) or not: separate kernels, so that
// the kernels of calls that save nothing are those of a tree without the feature.
template <class T, NormKind K, int W, bool kAdd>
void launch_rows(const NormArgs& a, cudaStream_t stream, int device) {
  if constexpr (K == NormKind::rms || K == NormKind::layer)
    if (a.mean || a.rstd) return launch_rows<T, K, W, kAdd, true>(a, stream, device);
  launch_rows<T, K, W, kAdd, false>(a, stream, device);
}

// 16-byte packs need every row start, weight and bias 16-byte aligned and n a multiple of them.
template <class T, NormKind K, bool kAdd = false>
void launch_kind(const NormArgs& a, cudaStream_t stream, int device) {
  constexpr int W = 16 / int(sizeof(T));
  const bool uses_w = K == NormKind::rms || K == NormKind::layer, uses_b = K == NormKind::layer;
  const bool vec = a.x.n % W == 0 && aligned16(a.x.data) && aligned16(a.out.data) &&
                   (a.x.rows == 1 || (a.x.row_stride % W == 0 && a.out.row_stride % W == 0)) &&
                   (!uses_w || !a.weight || aligned16(a.weight)) &&
                   (!uses_b || !a.bias || aligned16(a.bias)) &&
                   (!kAdd || (aligned16(a.residual.data) && aligned16(a.sum_out.data) &&
                              (a.x.rows == 1 || (a.residual.row_stride % W == 0 &&
                                                 a.sum_out.row_stride % W == 0))));
  if (vec) launch_rows<T, K, W, kAdd>(a, stream, device);
  else launch_rows<T, K, 1, kAdd>(a, stream, device);
}

template <class T>
void launch_dtype(const NormArgs& a, cudaStream_t stream, int device) {
  switch (a.kind) {
    case NormKind::rms:
      if (a.residual.data) return launch_kind<T, NormKind::rms, true>(a, stream, device);
      return launch_kind<T, NormKind::rms>(a, stream, device);
    case NormKind::layer:
      if (a.residual.data) return launch_kind<T, NormKind::layer, true>(a, stream, device);
      return launch_kind<T, NormKind::layer>(a, stream, device);
    case NormKind::softmax: return launch_kind<T, NormKind::softmax>(a, stream, device);
    case NormKind::log_softmax: return launch_kind<T, NormKind::log_softmax>(a, stream, device);
  }
  throw_error(kWhere, "unknown norm kind");
}

}  // namespace

void norm_cuda(const NormArgs& a, int device, Stream stream) {
  if (a.x.rows == 0 || a.x.n == 0) return;
  DeviceGuard guard(device, kWhere);
  const auto s = static_cast<cudaStream_t>(stream.handle);
  switch (a.dtype) {
    case DType::f32: return launch_dtype<float>(a, s, device);
    case DType::bf16: return launch_dtype<__nv_bfloat16>(a, s, device);
    case DType::f16: return launch_dtype<__half>(a, s, device);
    default: throw_error(kWhere, "dtype must be f32, bf16 or f16");
  }
}

}  // namespace sixfold::detail
