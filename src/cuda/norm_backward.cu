// src/cuda/norm_backward.cu — backward passes of RMSNorm, LayerNorm, softmax and log-softmax on
// the GPU, statistics and arithmetic in f32.
//
//   rms:     r = 1/sqrt(Σx²/n + eps), g = dy·w     dx = r·g − x·(r³·Σg·x/n)       dw = Σ dy·x·r
//   layer:   μ, r from x;  x̂ = (x − μ)·r          dx = r·(g − Σg/n − (x − μ)·r²·Σg(x − μ)/n)
//                                                  dw = Σ dy·x̂,  db = Σ dy
//   softmax: dx = y·(dy − Σ dy·y);   log_softmax: dx = dy − exp(y)·Σ dy
//
// The row sums are Sum monoids (LayerNorm's chunk states a Welford-style merge that carries Σg
// and Σg(x − mean) about the chunk mean), so rows are cut anywhere; dw/db are a Sum over rows.
//
// With the forward's saved statistics (a.mean / a.rstd, template flag Saved): μ and r are read,
// not recomputed, so each row has one reduction — Σg·x (rms), Σg and Σg·(x − μ) together
// (layer) — and one barrier instead of two (layer); the long-row statistics pass reduces only
// those sums.
//
// Kernels, with E elements per thread in 16-byte packs (scalars when rows are not 16-byte
// aligned): E = 16 in bwd_rows_regs, 8 in the long-row kernels.
//   bwd_rows_regs   n ≤ 512·16   one block of 32..512 threads per row, the row of x and dy in
//                                registers: one read of x and dy, one write of dx. Blocks are
//                                persistent over a fixed group of consecutive rows and keep that
//                                group's dw/db for their columns in registers, with the weight;
//                                each row's loads (and saved statistics) are issued when the
//                                previous row starts (v7, the default for 16-bit rows: up to 128
//                                registers, one 512-thread block per SM). Dev variants: v4 (no
//                                prefetch), v5 (weight and dw/db in thread-private shared-memory
//                                slots, 64 registers, two blocks per SM), v6 (v5 in clusters of
//                                8 that add their slots through distributed shared memory).
//                                Per row: 16 elements, ~10 instructions each; the reductions are
//                                butterflies of plain adds (block_sum).
//   longer rows     bwd_rows_stream (v14, 16-byte rows whose 8192-column tiles are all resident
//                   at once: up to 132 tiles on an H100): one pass, each row's tile states met
//                   across blocks through release / acquire counters (see the kernel). Elsewhere
//                   bwd_stats_chunks (per 8192-element chunk: its state) → bwd_stats_finish (per
//                   row: chunk states merged in chunk order, then the coefficients) →
//                   bwd_rows_coef (dx, column chunks × row groups): x and dy are read twice.
// dw/db: each row group writes its (n) partial sums; bwd_grad_reduce adds the groups in index
// order, or (v9, rows ≤ 8192 where each block's share is one column tile) the row kernel's own
// blocks add them after a grid barrier, in a fixed tree. The groups depend only on the shape
// and the device's SM count and occupancy, so repeated calls give identical bits (no atomics on
// values anywhere; v14's counters only count).
//
// In place (dx == dy or dx == x) is safe: each element of dx is written by the thread that read
// that element of x and dy, after it read them (the long-row stats kernels finish first; v14
// writes a row after its stage landed).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "../ops/norm_entries.hpp"
#include "norm_common.cuh"

namespace sixfold::detail {
namespace {

constexpr const char* kWhere = "sixfold::norm backward (cuda)";

// ---- Monoids of the row sums -------------------------------------------------------------------

template <int N>
struct Sums {
  float v[N];
};

template <int N>
struct SumsMonoid {
  using value_type = Sums<N>;
  __device__ __forceinline__ value_type identity() const {
    value_type r;
#pragma unroll
    for (int i = 0; i < N; ++i) r.v[i] = 0.f;
    return r;
  }
  __device__ __forceinline__ value_type combine(value_type a, const value_type& b) const {
#pragma unroll
    for (int i = 0; i < N; ++i) a.v[i] += b.v[i];
    return a;
  }
};

// LayerNorm chunk state: count, mean and M2 of x (Chan's merge) with Σg and Σg·(x − mean) kept
// about the state's own mean: shifting to the merged mean m adds (mean − m)·Σg exactly.
struct LnState {
  float count, mean, m2, sg, sgx;
};

struct LnMonoid {
  using value_type = LnState;
  __device__ __forceinline__ LnState identity() const { return {0.f, 0.f, 0.f, 0.f, 0.f}; }
  __device__ __forceinline__ LnState combine(const LnState& a, const LnState& b) const {
    if (a.count == 0.f) return b;
    if (b.count == 0.f) return a;
    const float n = a.count + b.count, d = b.mean - a.mean;
    const float mean = a.mean + d * (b.count / n);
    return {n, mean, a.m2 + b.m2 + d * d * (a.count * b.count / n), a.sg + b.sg,
            a.sgx + (a.mean - mean) * a.sg + b.sgx + (b.mean - mean) * b.sg};
  }
};

template <NormKind K>
inline constexpr bool kHasGrads = K == NormKind::rms || K == NormKind::layer;

// ---- Tiles -------------------------------------------------------------------------------------
// Thread t of p holds packs s·p + t, s < S, of a row segment: (S, W) values at element
// off + (s·p + t)·W; pack s is in the segment iff s·p·W < rem, rem = segment length − t·W.

template <class T, int S, int W>
__device__ __forceinline__ void load_pair(const T* x, const T* d, int p, int rem, float (&xv)[S][W],
                                          float (&dv)[S][W], bool (&ok)[S]) {
  Pack<T, W> rx[S], rd[S];
#pragma unroll
  for (int s = 0; s < S; ++s) {  // all loads in flight first
    ok[s] = s * p * W < rem;
    if (ok[s]) {
      rx[s] = Pack<T, W>::load(x + s * p * W);
      rd[s] = Pack<T, W>::load(d + s * p * W);
    }
  }
#pragma unroll
  for (int s = 0; s < S; ++s) {
    if (ok[s]) {
      rx[s].unpack(xv[s]);
      rd[s].unpack(dv[s]);
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) xv[s][k] = dv[s][k] = 0.f;
    }
  }
}

template <class T, int S, int W>
__device__ __forceinline__ void load_weight(const T* w, int p, int rem, float (&wv)[S][W]) {
#pragma unroll
  for (int s = 0; s < S; ++s) {
#pragma unroll
    for (int k = 0; k < W; ++k) wv[s][k] = 1.f;
    if (w && s * p * W < rem) Pack<T, W>::load_read_only(w + s * p * W).unpack(wv[s]);
  }
}

template <class T, int S, int W>
__device__ __forceinline__ void store_tile(T* y, int p, const float (&o)[S][W], const bool (&ok)[S]) {
#pragma unroll
  for (int s = 0; s < S; ++s)
    if (ok[s]) Pack<T, W>::pack(o[s]).store(y + s * p * W);
}

// Per-row coefficients of dx (see the file header).
struct Coef {
  float a, b, c, d;  // rms: (r, r³·Σgx/n); layer: (r, μ, Σg/n, r²·Σg(x−μ)/n); softmax kinds: (S)
};

// dx into xv (in place: fewer live registers); dw/db accumulated.
template <NormKind K, int S, int W>
__device__ __forceinline__ void apply(const Coef& c, float (&xv)[S][W], const float (&dv)[S][W],
                                      const float (&wv)[S][W], const bool (&ok)[S],
                                      float (&dw)[S][W], float (&db)[S][W]) {
#pragma unroll
  for (int s = 0; s < S; ++s) {
    if (!ok[s]) continue;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float x = xv[s][k], d = dv[s][k];
      if constexpr (K == NormKind::rms) {
        xv[s][k] = c.a * (d * wv[s][k]) - x * c.b;
        dw[s][k] = fmaf(d, x * c.a, dw[s][k]);
      } else if constexpr (K == NormKind::layer) {
        const float xc = x - c.b;
        xv[s][k] = c.a * (d * wv[s][k] - c.c - xc * c.d);
        dw[s][k] = fmaf(d, xc * c.a, dw[s][k]);
        db[s][k] += d;
      } else if constexpr (K == NormKind::softmax) {
        xv[s][k] = x * (d - c.a);
      } else {
        xv[s][k] = d - expf(x) * c.a;
      }
    }
  }
}

// Writes a thread's dw/db columns of its row group's partial row: 16-byte stores where the
// columns are (every block writes its partial row at its end, all blocks at once: with 4-byte
// stores, thread stride 32 bytes, that tail was 12% of the kernel's L2 sectors; ncu, H200, layer
// 16384x8192), else one float at a time.
template <int S, int W>
__device__ __forceinline__ void store_partial(float* part, int p, const float (&acc)[S][W],
                                              const bool (&ok)[S]) {
  const bool vec = W % 4 == 0 && (reinterpret_cast<std::uintptr_t>(part) & 15) == 0;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    if (!ok[s]) continue;
    if (vec) {
#pragma unroll
      for (int k = 0; k + 3 < W; k += 4)
        *reinterpret_cast<float4*>(part + s * p * W + k) =
            make_float4(acc[s][k], acc[s][k + 1], acc[s][k + 2], acc[s][k + 3]);
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) part[s * p * W + k] = acc[s][k];
    }
  }
}

// ---- Rows staged through shared memory with cp.async ----------------------------------------
// A block walks its rows one after another, so without prefetching every row would wait a full
// memory latency. With 16-byte packs each thread copies its own packs of the next rows into
// shared memory (cp.async) while it works on the current one; it reads back only what it copied
// itself, so waiting for its own copy groups is enough (no barrier).


template <class T, int W>
inline constexpr bool kPipelined = W * int(sizeof(T)) == 16;

// Staging is not used in bwd_rows_regs: H200, bf16 (CLI bench, same build otherwise): staged
// rows made rms_norm_backward 16384x8192 0.377 -> 0.595 ms and 65536x1024 0.243 -> 0.293 ms
// (layer norm alike; softmax 5% slower). The long-row coefficient pass keeps it (softmax
// 32x1048576 0.140 -> 0.117 ms).
// Rows in flight per block: 3 for 16-bit dtypes (96 KB of stages at 512 threads), 2 for f32.
template <class T>
inline constexpr int kStages = sizeof(T) == 2 ? 3 : 2;

// Shared-memory stages: (kStages, 2 tensors, S, p, W) elements of T.
template <class T, int S, int W>
__device__ __forceinline__ void stage_row(T* sm, int stage, const T* x, const T* d, int p, int t,
                                          int rem) {
  T* sx = sm + std::int64_t(stage * 2 * S) * p * W + t * W;
  T* sd = sx + S * p * W;
#pragma unroll
  for (int s = 0; s < S; ++s)
    if (s * p * W < rem) {
      cp_async16_cg(sx + s * p * W, x + s * p * W);
      cp_async16_cg(sd + s * p * W, d + s * p * W);
    }
  cp_async_commit();
}

template <class T, int S, int W>
__device__ __forceinline__ void read_stage(const T* sm, int stage, int p, int t, int rem,
                                           float (&xv)[S][W], float (&dv)[S][W], bool (&ok)[S]) {
  const T* sx = sm + std::int64_t(stage * 2 * S) * p * W + t * W;
  const T* sd = sx + S * p * W;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    ok[s] = s * p * W < rem;
    if (ok[s]) {
      Pack<T, W>::load(sx + s * p * W).unpack(xv[s]);
      Pack<T, W>::load(sd + s * p * W).unpack(dv[s]);
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) xv[s][k] = dv[s][k] = 0.f;
    }
  }
}

// ---- Rows held in registers ------------------------------------------------------------------

constexpr int kRegsThreads = 512;  // the most threads per row; 128 registers each

// Sum of N floats over a warp, every lane gets the total: the butterfly of group_reduce (same
// tree, same order) without its operand selects. Both lanes of a pair add the same two values,
// and float addition is commutative, so they get the same bits. group_reduce's select of a
// Sums<2>/<3> state by lane compiled to ISETP/LOP3/MOV chains (bwd_rows_regs bf16 rms: 649
// instructions per row and thread, 20 of them shuffles; dev/norm/README.md v4).
template <int N>
__device__ __forceinline__ Sums<N> warp_sum(Sums<N> s) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1)
#pragma unroll
    for (int i = 0; i < N; ++i) s.v[i] += __shfl_xor_sync(0xffffffffu, s.v[i], off);
  return s;
}

// Block-wide sum in thread order (as block_reduce with SumsMonoid), every thread gets it.
// bar_threads > 0: only the block's first bar_threads threads take part, meeting at named
// barrier 1 instead of __syncthreads (bwd_rows_stream, whose coefficient warps do not).
template <int N>
__device__ __forceinline__ Sums<N> block_sum(Sums<N> s, Sums<N>* warp_sums, int bar_threads = 0) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (bar_threads ? bar_threads : int(blockDim.x)) >> 5;
  s = warp_sum(s);
  if (warps == 1) return s;
  if (lane == 0) warp_sums[warp] = s;
  if (bar_threads) ptx::named_bar_sync(1, bar_threads);
  else __syncthreads();
  Sums<N> w;
#pragma unroll
  for (int i = 0; i < N; ++i) w.v[i] = lane < warps ? warp_sums[lane].v[i] : 0.f;
  return warp_sum(w);
}

template <int N, bool Lean>
__device__ __forceinline__ Sums<N> row_sum(Sums<N> s, Sums<N>* scratch) {
  if constexpr (Lean) return block_sum(s, scratch);
  else return block_reduce(s, SumsMonoid<N>{}, scratch);
}

// Thread-private f32 slots in shared memory (SmemGrads): value k of pack s of thread t of p at
// float4 ((s·W + k)/4)·p + t when W is a multiple of 4, else at float (s·W + k)·p + t, so a
// warp's accesses are consecutive words (no bank conflicts) and each thread only ever touches
// its own slots (no barriers).
template <int W>
__device__ __forceinline__ void slot_load(const float* base, int p, int t, int s, float (&v)[W]) {
  if constexpr (W % 4 == 0) {
    const auto* b4 = reinterpret_cast<const float4*>(base);
#pragma unroll
    for (int h = 0; h < W / 4; ++h) {
      const float4 q = b4[(s * (W / 4) + h) * p + t];
      v[4 * h] = q.x, v[4 * h + 1] = q.y, v[4 * h + 2] = q.z, v[4 * h + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = base[(s * W + k) * p + t];
  }
}
template <int W>
__device__ __forceinline__ void slot_store(float* base, int p, int t, int s, const float (&v)[W]) {
  if constexpr (W % 4 == 0) {
    auto* b4 = reinterpret_cast<float4*>(base);
#pragma unroll
    for (int h = 0; h < W / 4; ++h)
      b4[(s * (W / 4) + h) * p + t] = make_float4(v[4 * h], v[4 * h + 1], v[4 * h + 2], v[4 * h + 3]);
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) base[(s * W + k) * p + t] = v[k];
  }
}

// f32 slot arrays of bwd_rows_regs<…, SmemGrads = true>: weight, dw, db (layer) — (S·W·p) each.
template <NormKind K>
inline constexpr int kSmemGradArrays = K == NormKind::layer ? 3 : 2;

// Two blocks per SM where the row fits 64 registers: the softmax kinds and SmemGrads, with
// 16-bit elements in 16-byte packs (f32 and scalar rows spill at 64).
template <class T, NormKind K, int W, bool SmemGrads>
inline constexpr int kRegsMinBlocks =
    (SmemGrads || !kHasGrads<K>) && sizeof(T) == 2 && W * sizeof(T) == 16 ? 2 : 1;

// GridReduce (v9): the dw/db partial rows of every group summed by the row kernel itself, after
// a grid-wide barrier (a cooperative launch: all groups are resident by construction), instead
// of by bwd_grad_reduce. Column tile b (cw columns of one gradient) goes to block b (the host
// sees to tiles ≤ blocks); in it thread (j, c) loads groups j, j + slices, … of column c
// (slices = threads / cw, at most kGridAcc of them: one round of loads), adds them pairwise,
// and the slices are added in a fixed tree: the order is a function of the shape and the
// launch, so repeated calls give the same bits. The partial rows were written by other SMs:
// read through L2 (ld.cg), not L1. red: (threads + threads / cw) floats of shared memory.
constexpr int kGridAcc = 32;

template <class T>
__device__ __forceinline__ void grid_reduce_grads(const NormBackwardArgs& a, const float* part_w,
                                                  const float* part_b, int cw, bool discard, float* red) {
  const float* p0 = a.dweight ? part_w : part_b;
  void* o0 = a.dweight ? a.dweight : a.dbias;
  const float* p1 = a.dweight && a.dbias ? part_b : nullptr;
  void* o1 = a.dweight && a.dbias ? a.dbias : nullptr;
  const int t = threadIdx.x, slices = int(blockDim.x) / cw, c = t % cw, j = t / cw;
  const std::int64_t n = a.x.n, groups = gridDim.x, col_tiles = (n + cw - 1) / cw;
  const std::int64_t tile = blockIdx.x;
  if (tile < col_tiles * (p1 ? 2 : 1)) {
    const bool second = tile >= col_tiles;
    const float* part = second ? p1 : p0;
    const std::int64_t i = (second ? tile - col_tiles : tile) * cw + c;
    float acc[kGridAcc];
#pragma unroll
    for (int k = 0; k < kGridAcc; ++k) acc[k] = 0.f;
    if (i < n)
#pragma unroll
      for (int k = 0; k < kGridAcc; ++k)
        if (j + k * slices < groups) acc[k] = __ldcg(part + (j + k * slices) * n + i);
#pragma unroll
    for (int w = 1; w < kGridAcc; w <<= 1)
#pragma unroll
      for (int k = 0; k < kGridAcc; k += 2 * w) acc[k] += acc[k + w];
    if (discard) {  // cw = 32: each warp load read one whole line, read by no other warp
      __syncwarp();
      if (c == 0)
#pragma unroll
        for (int k = 0; k < kGridAcc; ++k)
          if (j + k * slices < groups) parallel::cuda::discard_l2_line(part + (j + k * slices) * n + i);
    }
    red[j * (cw + 1) + c] = acc[0];
    for (int m = slices; m > 1;) {  // slices [h, m) onto [0, m − h): a fixed tree
      const int h = (m + 1) / 2;
      __syncthreads();
      if (j < m - h) red[j * (cw + 1) + c] += red[(j + h) * (cw + 1) + c];
      m = h;
    }
    if (j == 0 && i < n) {
      void* out = second ? o1 : o0;
      if (a.grad_dtype == DType::f32) static_cast<float*>(out)[i] = red[c];
      else static_cast<T*>(out)[i] = from_f32<T>(red[c]);
    }
  }
}

// Lean: the v4 arithmetic (block_sum, 1/n once, rsqrtf); !Lean: v0 as measured in runs C/D
// (block_reduce, IEEE divisions and sqrt per row and thread), kept for the comparison
// (SIXFOLD_NORM_BWD_KERNEL=regs0) until a GPU run has timed both.
// SmemGrads (rms / layer, v5): weight and dw/db in thread-private shared-memory slots, x and dy
// kept as raw packs and unpacked at each use, so the kernel fits 64 registers and two
// 512-thread blocks share an SM, as softmax_backward's do.
// Saved: the row's μ / r from a.mean / a.rstd (one reduction per row, see the file header).
// Prefetch: row r + 1's packs are loaded into registers when row r starts, so each row's loads
// wait behind the previous row's work instead of starting after it.
template <class T, NormKind K, int S, int W, bool Lean = true, bool SmemGrads = false,
          bool Saved = false, bool Prefetch = false, bool GridReduce = false>
__global__ void __launch_bounds__(kRegsThreads, kRegsMinBlocks<T, K, W, SmemGrads>)
bwd_rows_regs(NormBackwardArgs a, float* part_w, float* part_b, std::int64_t rows_per_group,
              int cluster, float inv_n, int reduce_cw, bool discard, int dev) {
  static_assert(!Saved || kHasGrads<K>);
  static_assert(!GridReduce || (kHasGrads<K> && !SmemGrads));
  // Two of each scratch array, alternating by row: a row's array is written again only two rows
  // later, after every thread has passed the next row's barrier (so has read it).
  __shared__ Sums<1> s1[2][32];
  __shared__ Sums<2> s2[2][32];
  __shared__ Sums<3> s3[2][32];
  extern __shared__ float4 slot_words[];  // SmemGrads: kSmemGradArrays<K> × (S·W·p) floats
  static_assert(!SmemGrads || kHasGrads<K>);
  // inv_n = 1/n comes from the host (IEEE division, the same bits as on the device): computed
  // here, the 64-register kernels spilled it and reloaded it after every row's barrier (ncu, H200,
  // layer 16384x8192 saved: 5% of the stall samples on the multiply that waited for the reload).
  const int t = threadIdx.x, p = blockDim.x, n = int(a.x.n), rem = n - t * W;
  const std::int64_t r0 = blockIdx.x * rows_per_group;
  const std::int64_t r1 = std::min(a.x.rows, r0 + rows_per_group);
  // The dw/db reduction may be scheduled now (it waits for this grid's end on the device).
  parallel::cuda::launch_dependents();
  float* const w_slots = reinterpret_cast<float*>(slot_words);
  float* const dw_slots = w_slots + S * W * p;
  float* const db_slots = dw_slots + S * W * p;
  // Registers mode: weight and dw/db here (SmemGrads: only at the start and the end).
  float wv[S][W], dw[S][W], db[S][W];
  bool ok[S];
#pragma unroll
  for (int s = 0; s < S; ++s) {
    ok[s] = s * p * W < rem;
#pragma unroll
    for (int k = 0; k < W; ++k) dw[s][k] = db[s][k] = 0.f;
  }
  if constexpr (kHasGrads<K>) {
    load_weight<T, S, W>(a.weight ? static_cast<const T*>(a.weight) + t * W : nullptr, p, rem, wv);
    if constexpr (SmemGrads) {
#pragma unroll
      for (int s = 0; s < S; ++s) {
        slot_store<W>(w_slots, p, t, s, wv[s]);
        slot_store<W>(dw_slots, p, t, s, dw[s]);
        if constexpr (K == NormKind::layer) slot_store<W>(db_slots, p, t, s, db[s]);
      }
    }
  }
  const auto weight_of = [&](int s, float (&w)[W]) {
    if constexpr (SmemGrads) {
      slot_load<W>(w_slots, p, t, s, w);
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) w[k] = wv[s][k];
    }
  };
  // All of a row's loads in flight at once (Saved: its statistics too); packs past the row
  // read as 0.
  const auto load_row = [&](std::int64_t r, Pack<T, W>(&px)[S], Pack<T, W>(&pd)[S], float& rstd,
                            float& mean) {
    if constexpr (Saved) {
      rstd = __ldg(a.rstd + r);
      if constexpr (K == NormKind::layer) mean = __ldg(a.mean + r);
    }
    const T* xr = static_cast<const T*>(a.x.data) + r * a.x.row_stride + t * W;
    const T* dr = static_cast<const T*>(a.dy.data) + r * a.dy.row_stride + t * W;
    const std::uint64_t last = l2_evict_last();  // as the forward's register rows (norm.cu)
#pragma unroll
    for (int s = 0; s < S; ++s) {
      px[s].raw = pd[s].raw = {};
      if (ok[s]) {
        px[s] = Pack<T, W>::load_hint(xr + s * p * W, last);
        pd[s] = Pack<T, W>::load_hint(dr + s * p * W, last);
      }
    }
  };
  Pack<T, W> nx[S], nd[S];  // Prefetch: the next row's packs and statistics
  float next_r = 0.f, next_mean = 0.f;
  if constexpr (Prefetch)
    if (r0 < r1) load_row(r0, nx, nd, next_r, next_mean);
  for (std::int64_t r = r0; r < r1; ++r) {
    const int par = int(r - r0) & 1;
    T* y = static_cast<T*>(a.dx.data) + r * a.dx.row_stride + t * W;
    Pack<T, W> rx[S], rd[S];
    float saved_r = 0.f, saved_mean = 0.f;  // Saved: the row's statistics
    if constexpr (Prefetch) {
#pragma unroll
      for (int s = 0; s < S; ++s) rx[s] = nx[s], rd[s] = nd[s];
      saved_r = next_r, saved_mean = next_mean;
      if (r + 1 < r1) load_row(r + 1, nx, nd, next_r, next_mean);
    } else {
      load_row(r, rx, rd, saved_r, saved_mean);
    }
    // Registers mode: the row unpacked once; SmemGrads: unpacked again at each use.
    float xv[S][W], dv[S][W];
#pragma unroll
    for (int s = 0; s < S; ++s) rx[s].unpack(xv[s]), rd[s].unpack(dv[s]);
    // Pack s of the row (r: the loaded packs, v: their unpacked values).
    const auto row_of = [&](const Pack<T, W>(&r)[S], const float (&v)[S][W], int s, float (&f)[W]) {
      if constexpr (SmemGrads) {
        opaque(r[s]).unpack(f);
      } else {
#pragma unroll
        for (int k = 0; k < W; ++k) f[k] = v[s][k];
      }
    };
    const auto x_of = [&](int s, float (&f)[W]) { row_of(rx, xv, s, f); };
    const auto dy_of = [&](int s, float (&f)[W]) { row_of(rd, dv, s, f); };
    Coef c{};
    if constexpr (Saved && K == NormKind::rms) {  // Σg·x; r saved
      Sums<1> part{{0.f}};
#pragma unroll
      for (int s = 0; s < S; ++s) {
        float x[W], d[W], w[W];
        x_of(s, x), dy_of(s, d), weight_of(s, w);
#pragma unroll
        for (int k = 0; k < W; ++k) part.v[0] = fmaf(d[k] * w[k], x[k], part.v[0]);
      }
      const Sums<1> tot = row_sum<1, Lean>(part, s1[par]);
      c.a = saved_r;
      c.b = c.a * c.a * c.a * (tot.v[0] * inv_n);
    } else if constexpr (Saved && K == NormKind::layer) {  // Σg and Σg·(x − μ); μ, r saved
      // Packs past the row hold x = dy = 0, so g = 0 there: no ok[] test needed.
      Sums<2> part{{0.f, 0.f}};
#pragma unroll
      for (int s = 0; s < S; ++s) {
        float x[W], d[W], w[W];
        x_of(s, x), dy_of(s, d), weight_of(s, w);
#pragma unroll
        for (int k = 0; k < W; ++k) {
          const float g = d[k] * w[k];
          part.v[0] += g;
          part.v[1] = fmaf(g, x[k] - saved_mean, part.v[1]);
        }
      }
      const Sums<2> tot = row_sum<2, Lean>(part, s2[par]);
      c.a = saved_r;
      c.b = saved_mean;
      c.c = tot.v[0] * inv_n;
      c.d = c.a * c.a * (tot.v[1] * inv_n);
    } else if constexpr (K == NormKind::rms) {
      Sums<2> part{{0.f, 0.f}};
#pragma unroll
      for (int s = 0; s < S; ++s) {
        float x[W], d[W], w[W];
        x_of(s, x), dy_of(s, d), weight_of(s, w);
#pragma unroll
        for (int k = 0; k < W; ++k) {
          part.v[0] = fmaf(x[k], x[k], part.v[0]);
          part.v[1] = fmaf(d[k] * w[k], x[k], part.v[1]);
        }
      }
      const Sums<2> tot = row_sum<2, Lean>(part, s2[par]);
      if constexpr (Lean) {
        c.a = rsqrtf(fmaf(tot.v[0], inv_n, a.eps));
        c.b = c.a * c.a * c.a * (tot.v[1] * inv_n);
      } else {
        c.a = 1.0f / sqrtf(tot.v[0] / float(n) + a.eps);
        c.b = c.a * c.a * c.a * tot.v[1] / float(n);
      }
    } else if constexpr (K == NormKind::layer) {
      Sums<1> sx{{0.f}};
#pragma unroll
      for (int s = 0; s < S; ++s) {
        float x[W];
        x_of(s, x);
#pragma unroll
        for (int k = 0; k < W; ++k) sx.v[0] += x[k];
      }
      const float mean = Lean ? row_sum<1, Lean>(sx, s1[par]).v[0] * inv_n
                              : row_sum<1, Lean>(sx, s1[par]).v[0] / float(n);
      Sums<3> part{{0.f, 0.f, 0.f}};
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (!ok[s]) continue;
        float x[W], d[W], w[W];
        x_of(s, x), dy_of(s, d), weight_of(s, w);
#pragma unroll
        for (int k = 0; k < W; ++k) {
          const float xc = x[k] - mean, g = d[k] * w[k];
          part.v[0] = fmaf(xc, xc, part.v[0]);
          part.v[1] += g;
          part.v[2] = fmaf(g, xc, part.v[2]);
        }
      }
      const Sums<3> tot = row_sum<3, Lean>(part, s3[par]);
      c.b = mean;
      if constexpr (Lean) {
        c.a = rsqrtf(fmaf(tot.v[0], inv_n, a.eps));
        c.c = tot.v[1] * inv_n;
        c.d = c.a * c.a * (tot.v[2] * inv_n);
      } else {
        c.a = 1.0f / sqrtf(tot.v[0] / float(n) + a.eps);
        c.c = tot.v[1] / float(n);
        c.d = c.a * c.a * tot.v[2] / float(n);
      }
    } else {
      Sums<1> part{{0.f}};
#pragma unroll
      for (int s = 0; s < S; ++s)
#pragma unroll
        for (int k = 0; k < W; ++k)
          part.v[0] += K == NormKind::softmax ? dv[s][k] * xv[s][k] : dv[s][k];
      c.a = row_sum<1, Lean>(part, s1[par]).v[0];
    }
    // dx, pack by pack, and dw/db accumulated (SmemGrads: read, updated and written back).
    const float neg_r_mean_g = -c.a * c.c;  // layer
#pragma unroll
    for (int s = 0; s < S; ++s) {
      if (!ok[s]) continue;
      float x[W], d[W], o[W];
      x_of(s, x), dy_of(s, d);
      if constexpr (kHasGrads<K>) {
        float w[W], gw[W], gb[W];
        weight_of(s, w);
        if constexpr (SmemGrads) {
          slot_load<W>(dw_slots, p, t, s, gw);
          if constexpr (K == NormKind::layer) slot_load<W>(db_slots, p, t, s, gb);
        } else {
#pragma unroll
          for (int k = 0; k < W; ++k) gw[k] = dw[s][k], gb[k] = db[s][k];
        }
#pragma unroll
        for (int k = 0; k < W; ++k) {
          if constexpr (K == NormKind::rms) {
            o[k] = c.a * (d[k] * w[k]) - x[k] * c.b;
            gw[k] = fmaf(d[k], x[k] * c.a, gw[k]);
          } else {  // x̂ = (x − μ)·r; dx = r·g − r·Σg/n − x̂·c.d (7 instructions, not 8). x̂ as
                    // fmaf(x, r, −μ·r) would carry the rounding of μ·r: not 0 where x = μ.
            const float xh = (x[k] - c.b) * c.a;
            o[k] = fmaf(-xh, c.d, fmaf(c.a, d[k] * w[k], neg_r_mean_g));
            gw[k] = fmaf(d[k], xh, gw[k]);
            gb[k] += d[k];
          }
        }
        if constexpr (SmemGrads) {
          slot_store<W>(dw_slots, p, t, s, gw);
          if constexpr (K == NormKind::layer) slot_store<W>(db_slots, p, t, s, gb);
        } else {
#pragma unroll
          for (int k = 0; k < W; ++k) dw[s][k] = gw[k], db[s][k] = gb[k];
        }
      } else {
#pragma unroll
        for (int k = 0; k < W; ++k)
          o[k] = K == NormKind::softmax ? x[k] * (d[k] - c.a) : d[k] - expf(x[k]) * c.a;
      }
      Pack<T, W>::pack(o).store(y + s * p * W);
    }
  }
  if constexpr (kHasGrads<K>) {
    if constexpr (SmemGrads) {
      static_assert(W % 4 == 0);
      if (cluster > 1) {
        // The blocks of a cluster add their dw/db slots in rank order through distributed shared
        // memory, rank q taking a 1/cluster share of the slot words, into one partial row per
        // cluster: cluster times fewer partial rows to write and to reduce (v6).
        namespace cg = cooperative_groups;
        const cg::cluster_group cl = cg::this_cluster();
        cl.sync();  // every block of the cluster is past its last row
        const int q = int(cl.block_rank()), total = S * (W / 4) * p;
        const int share = (total + cluster - 1) / cluster, end = std::min(total, (q + 1) * share);
        const std::int64_t first = std::int64_t(blockIdx.x / cluster) * a.x.n;
        for (int j = q * share + t; j < end; j += p) {
          // Word j = (s·W/4 + h)·p + u holds elements 4h..4h+3 of pack s of thread u.
          const int u = j % p, h = (j / p) % (W / 4), sp = j / (p * (W / 4));
          const std::int64_t col = std::int64_t(u) * W + std::int64_t(sp) * p * W + 4 * h;
          if (col >= a.x.n) continue;  // packs past the row (their slots hold zeros)
          for (int gi = 0; gi < (K == NormKind::layer ? 2 : 1); ++gi) {
            float* dst = gi == 0 ? part_w : part_b;
            if (!dst) continue;
            float4* mine = reinterpret_cast<float4*>(gi == 0 ? dw_slots : db_slots);
            float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int r = 0; r < cluster; ++r) {
              const float4 v = cl.map_shared_rank(mine, r)[j];
              sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
            }
            *reinterpret_cast<float4*>(dst + first + col) = sum;
          }
        }
        cl.sync();  // no block leaves while another reads its slots
        return;
      }
#pragma unroll
      for (int s = 0; s < S; ++s) {
        slot_load<W>(dw_slots, p, t, s, dw[s]);
        if constexpr (K == NormKind::layer) slot_load<W>(db_slots, p, t, s, db[s]);
      }
    }
    if (dev & 8) {  // dev, timing only (wrong dw / db): no partial rows, no reduction
      float live = 0.f;  // keeps the sums computed: a store that never happens
#pragma unroll
      for (int s = 0; s < S; ++s)
#pragma unroll
        for (int k = 0; k < W; ++k) live += dw[s][k] + db[s][k];
      if (live == 1234.5f) *static_cast<volatile float*>(a.dx.data) = 0.f;
      return;
    }
    if (part_w) store_partial<S, W>(part_w + blockIdx.x * a.x.n + t * W, p, dw, ok);
    if (part_b) store_partial<S, W>(part_b + blockIdx.x * a.x.n + t * W, p, db, ok);
    if (dev & 16) return;  // dev, timing only (dw / db not reduced): partial rows, no grid barrier
    if constexpr (GridReduce) {
      __shared__ float red[kRegsThreads + kRegsThreads / 8];
      cooperative_groups::this_grid().sync();  // every partial row written and visible
      grid_reduce_grads<T>(a, part_w, part_b, reduce_cw, discard, red);
    }
  }
}

// ---- Long rows ---------------------------------------------------------------------------------

constexpr int kChunkThreads = 256;

// The state of chunk c of row r (blockIdx.x = r·chunks + c): 5 floats at states + 5·blockIdx.x.
// Saved (rms / layer with the forward's statistics): only the sums, Σg·x (rms) or Σg and
// Σg·(x − μ) about the saved μ (layer), one block reduction.
// Block reduction buffers of chunk_state (one set per call in flight: a second call may start
// writing before a slow warp has read the first's totals).
struct ChunkScratch {
  Sums<3> s3[32];
  Sums<2> s2[32];
  Sums<1> s1[2][32];
};

// The state of a row segment held as (S, W) values a thread (len elements), written by thread 0
// to out[0..4]; every thread of the block takes part. Saved (rms / layer with the forward's
// statistics): only the sums, Σg·x (rms) or Σg and Σg·(x − μ) about the saved μ = `mean`
// (layer), one block reduction.
template <NormKind K, int S, int W, bool Saved>
__device__ __forceinline__ void chunk_state(const float (&xv)[S][W], const float (&dv)[S][W],
                                            const float (&wv)[S][W], const bool (&ok)[S], int len,
                                            float mean, ChunkScratch& sc, float* out,
                                            int bar_threads = 0) {
  const bool first = threadIdx.x == 0;
  if constexpr (Saved && K == NormKind::rms) {
    Sums<1> part{{0.f}};
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int k = 0; k < W; ++k) part.v[0] = fmaf(dv[s][k] * wv[s][k], xv[s][k], part.v[0]);
    const Sums<1> tot = block_sum(part, sc.s1[0], bar_threads);
    if (first) out[0] = tot.v[0];
  } else if constexpr (Saved && K == NormKind::layer) {
    Sums<2> part{{0.f, 0.f}};
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int k = 0; k < W; ++k) {  // g = 0 past the row (dy reads as 0 there)
        const float g = dv[s][k] * wv[s][k];
        part.v[0] += g;
        part.v[1] = fmaf(g, xv[s][k] - mean, part.v[1]);
      }
    const Sums<2> tot = block_sum(part, sc.s2, bar_threads);
    if (first) out[0] = tot.v[0], out[1] = tot.v[1];
  } else if constexpr (K == NormKind::rms) {
    Sums<2> part{{0.f, 0.f}};
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int k = 0; k < W; ++k) {
        part.v[0] = fmaf(xv[s][k], xv[s][k], part.v[0]);
        part.v[1] = fmaf(dv[s][k] * wv[s][k], xv[s][k], part.v[1]);
      }
    const Sums<2> tot = block_sum(part, sc.s2, bar_threads);
    if (first) out[0] = tot.v[0], out[1] = tot.v[1];
  } else if constexpr (K == NormKind::layer) {
    Sums<1> sx{{0.f}};
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int k = 0; k < W; ++k) sx.v[0] += xv[s][k];
    const float mu = block_sum(sx, sc.s1[0], bar_threads).v[0] * (1.0f / float(len));
    Sums<3> part{{0.f, 0.f, 0.f}};
#pragma unroll
    for (int s = 0; s < S; ++s) {
      if (!ok[s]) continue;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float xc = xv[s][k] - mu, g = dv[s][k] * wv[s][k];
        part.v[0] = fmaf(xc, xc, part.v[0]);
        part.v[1] += g;
        part.v[2] = fmaf(g, xc, part.v[2]);
      }
    }
    const Sums<3> tot = block_sum(part, sc.s3, bar_threads);
    if (first) out[0] = float(len), out[1] = mu, out[2] = tot.v[0], out[3] = tot.v[1], out[4] = tot.v[2];
  } else {
    Sums<1> part{{0.f}};
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int k = 0; k < W; ++k) part.v[0] += K == NormKind::softmax ? dv[s][k] * xv[s][k] : dv[s][k];
    const Sums<1> tot = block_sum(part, sc.s1[1], bar_threads);
    if (first) out[0] = tot.v[0];
  }
}

template <class T, NormKind K, int S, int W, bool Saved = false>
__global__ void __launch_bounds__(kChunkThreads)
bwd_stats_chunks(NormBackwardArgs a, float* states, int chunks) {
  __shared__ ChunkScratch scratch;
  constexpr int kChunk = kChunkThreads * S * W;
  const int t = threadIdx.x;
  const std::int64_t r = blockIdx.x / chunks, c0 = std::int64_t(blockIdx.x % chunks) * kChunk;
  const int len = int(std::min<std::int64_t>(kChunk, a.x.n - c0)), rem = len - t * W;
  const T* x = static_cast<const T*>(a.x.data) + r * a.x.row_stride + c0 + t * W;
  const T* d = static_cast<const T*>(a.dy.data) + r * a.dy.row_stride + c0 + t * W;
  float xv[S][W], dv[S][W], wv[S][W];
  bool ok[S];
  load_pair<T, S, W>(x, d, kChunkThreads, rem, xv, dv, ok);
  if constexpr (kHasGrads<K>)
    load_weight<T, S, W>(a.weight ? static_cast<const T*>(a.weight) + c0 + t * W : nullptr,
                         kChunkThreads, rem, wv);
  const float mean = Saved && K == NormKind::layer ? __ldg(a.mean + r) : 0.f;
  chunk_state<K, S, W, Saved>(xv, dv, wv, ok, len, mean, scratch, states + 5 * std::int64_t(blockIdx.x));
}

// The first N sums of a row's chunk states (5 floats each): lane l merges chunks l, l + 32, ...
// in order, then the lanes combine in lane order.
template <int N>
__device__ __forceinline__ Sums<N> chunk_sums(const float* st, int chunks, bool live, int lane) {
  return merge_in_order(live ? chunks : 0, lane, SumsMonoid<N>{}, [&](int i) {
    Sums<N> e;
#pragma unroll
    for (int j = 0; j < N; ++j) e.v[j] = __ldcg(st + 5 * i + j);
    return e;
  });
}

// A row's Coef from its chunk states (5 floats each, written by other blocks: read through L2),
// by one warp: lane l merges chunks l, l + 32, ... in order, then the lanes combine in lane order
// (group_reduce); every lane gets the same bits. Saved: the chunks hold sums only, and the row's
// μ / r are `mean` / `rstd`.
template <NormKind K, bool Saved>
__device__ __forceinline__ Coef row_coef(const float* st, int chunks, bool live, int lane,
                                         std::int64_t n, float eps, float mean, float rstd) {
  Coef c{};
  if constexpr (Saved) {
    const Sums<K == NormKind::layer ? 2 : 1> tot = chunk_sums<K == NormKind::layer ? 2 : 1>(st, chunks, live, lane);
    c.a = rstd;
    if constexpr (K == NormKind::layer) {
      c.b = mean;
      c.c = tot.v[0] / float(n);
      c.d = c.a * c.a * tot.v[1] / float(n);
    } else {
      c.b = c.a * c.a * c.a * tot.v[0] / float(n);
    }
  } else if constexpr (K == NormKind::layer) {
    const LnState tot = merge_in_order(live ? chunks : 0, lane, LnMonoid{}, [&](int i) {
      return LnState{__ldcg(st + 5 * i), __ldcg(st + 5 * i + 1), __ldcg(st + 5 * i + 2),
                     __ldcg(st + 5 * i + 3), __ldcg(st + 5 * i + 4)};
    });
    c.a = 1.0f / sqrtf(tot.m2 / float(n) + eps);
    c.b = tot.mean;
    c.c = tot.sg / float(n);
    c.d = c.a * c.a * tot.sgx / float(n);
  } else {
    constexpr int N = K == NormKind::rms ? 2 : 1;
    const Sums<N> tot = chunk_sums<N>(st, chunks, live, lane);
    if constexpr (K == NormKind::rms) {
      c.a = 1.0f / sqrtf(tot.v[0] / float(n) + eps);
      c.b = c.a * c.a * c.a * tot.v[N - 1] / float(n);
    } else {
      c.a = tot.v[0];
    }
  }
  return c;
}

// One warp per row; lane 0 writes the row's Coef.
template <NormKind K, bool Saved = false>
__global__ void __launch_bounds__(256)
bwd_stats_finish(const float* states, Coef* coefs, std::int64_t rows, int chunks, std::int64_t n,
                 float eps, const float* mean, const float* rstd) {
  const std::int64_t r = blockIdx.x * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  const bool live = r < rows;
  const float mu = Saved && K == NormKind::layer && live ? mean[r] : 0.f;
  const float rs = Saved && live ? rstd[r] : 0.f;
  const Coef c = row_coef<K, Saved>(states + 5 * (live ? r : 0) * chunks, chunks, live, lane, n, eps, mu, rs);
  if (live && lane == 0) coefs[r] = c;
}

// dx with the row coefficients known: block (g, c) = blockIdx.x = g·col_chunks + c covers
// columns [c·kChunk, (c + 1)·kChunk) of the rows of row group g, keeping their dw/db.
template <class T, NormKind K, int S, int W>
__global__ void __launch_bounds__(kChunkThreads)
bwd_rows_coef(NormBackwardArgs a, const Coef* coefs, float* part_w, float* part_b, int col_chunks,
              std::int64_t rows_per_group) {
  constexpr int kChunk = kChunkThreads * S * W;
  const int t = threadIdx.x;
  const std::int64_t g = blockIdx.x / col_chunks, c0 = std::int64_t(blockIdx.x % col_chunks) * kChunk;
  const int rem = int(std::min<std::int64_t>(kChunk, a.x.n - c0)) - t * W;
  const std::int64_t r0 = g * rows_per_group, r1 = std::min(a.x.rows, r0 + rows_per_group);
  float wv[S][W], dw[S][W], db[S][W];
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int k = 0; k < W; ++k) dw[s][k] = db[s][k] = 0.f;
  if constexpr (kHasGrads<K>)
    load_weight<T, S, W>(a.weight ? static_cast<const T*>(a.weight) + c0 + t * W : nullptr,
                         kChunkThreads, rem, wv);
  // The rows of the group stream through shared-memory stages as in bwd_rows_regs.
  constexpr bool kPipe = kPipelined<T, W>;
  constexpr int kSt = kStages<T>;
  __shared__ uint4 stage_words[kPipe ? kSt * 2 * S * kChunkThreads * W * int(sizeof(T)) / 16 : 1];
  T* stages = reinterpret_cast<T*>(stage_words);
  const auto x_row = [&](std::int64_t r) {
    return static_cast<const T*>(a.x.data) + r * a.x.row_stride + c0 + t * W;
  };
  const auto dy_row = [&](std::int64_t r) {
    return static_cast<const T*>(a.dy.data) + r * a.dy.row_stride + c0 + t * W;
  };
  if constexpr (kPipe) {
#pragma unroll
    for (int i = 0; i < kSt - 1; ++i) {
      if (r0 + i < r1) stage_row<T, S, W>(stages, i, x_row(r0 + i), dy_row(r0 + i), kChunkThreads, t, rem);
      else cp_async_commit();
    }
  }
  for (std::int64_t r = r0; r < r1; ++r) {
    T* y = static_cast<T*>(a.dx.data) + r * a.dx.row_stride + c0 + t * W;
    float xv[S][W], dv[S][W];
    bool ok[S];
    if constexpr (kPipe) {
      const int i = int(r - r0);
      const std::int64_t next = r + kSt - 1;
      if (next < r1)
        stage_row<T, S, W>(stages, (i + kSt - 1) % kSt, x_row(next), dy_row(next), kChunkThreads, t, rem);
      else cp_async_commit();
      cp_async_wait<kSt - 1>();
      read_stage<T, S, W>(stages, i % kSt, kChunkThreads, t, rem, xv, dv, ok);
    } else {
      load_pair<T, S, W>(x_row(r), dy_row(r), kChunkThreads, rem, xv, dv, ok);
    }
    apply<K, S, W>(coefs[r], xv, dv, wv, ok, dw, db);
    store_tile<T, S, W>(y, kChunkThreads, xv, ok);
  }
  if constexpr (kHasGrads<K>) {
    bool ok[S];
#pragma unroll
    for (int s = 0; s < S; ++s) ok[s] = s * kChunkThreads * W < rem;
    if (part_w) store_partial<S, W>(part_w + g * a.x.n + c0 + t * W, kChunkThreads, dw, ok);
    if (part_b) store_partial<S, W>(part_b + g * a.x.n + c0 + t * W, kChunkThreads, db, ok);
  }
}

// ---- Long rows in one pass (v14) ---------------------------------------------------------------
// bwd_rows_stream: a cooperative launch of row_groups × col_tiles blocks, all resident (one an
// SM). Block (g, c) owns columns [c·tw, c·tw + tw) of the rows of group g (tw ≤ 8192: 16
// elements for each of its 512 row threads) and walks those rows in order through kStreamSlots
// shared-memory stages (cp.async, each thread its own packs, as bwd_rows_coef):
//   the row threads ask for row i's stage kStreamLead rows ahead; when it lands they fold its
//   chunk state (chunk_state), and thread 0 writes it to states[i·col_tiles + c] and adds 1 to
//   count[i] with release semantics;
//   kCoefWarps more warps wait (acquire) until count[i] = col_tiles — every block of the row has
//   published — merge the row's states in column order (row_coef: every block the same bits)
//   and leave the row's Coef in a shared-memory ring, flagged with a release store;
//   kStreamLag rows after the fold, the row threads take the Coef and write their dx columns from
//   the same stage, adding dw/db in registers.
// So x and dy are read from memory once, where the three-kernel path (bwd_stats_chunks →
// bwd_stats_finish → bwd_rows_coef) reads them twice, and the waits on the other blocks (two L2
// round trips a row) run beside the row threads' work. A block publishes row i before it waits on
// row i − kStreamLag, so with every block resident no wait can close a cycle. A ring slot is
// written for row i only after this block published row i, by which time every row thread has
// finished row i − 1 − kStreamLag: kStreamRing > kStreamLag slots never overrun. count is zeroed
// before the launch (a memset node). dw/db: one row group writes them directly; more groups
// write partial rows, added in group order by bwd_grad_reduce.
constexpr int kMaxCoefWarps = 4;
constexpr int kStreamBlock = kStreamThreads + 32 * kMaxCoefWarps;
template <class T>
inline constexpr int kStreamLead = sizeof(T) == 2 ? 2 : 1;
template <class T>
inline constexpr int kStreamLag = sizeof(T) == 2 ? 3 : 1;
template <class T>
inline constexpr int kStreamSlots = kStreamLead<T> + kStreamLag<T> + 1;  // 192 KB either way
// Dynamic shared memory: the stages, then the block's weight columns (as T, read back by the
// thread that wrote them: in registers they pushed the LayerNorm kernel into spills, as the
// coefficient warps cap a thread at 96 registers).
template <class T>
constexpr std::size_t stream_smem_bytes() {
  return (std::size_t(kStreamSlots<T>) * 2 + 1) * std::size_t(kStreamTile) * sizeof(T);
}

template <class T, NormKind K, int S, int W, bool Saved>
__global__ void __launch_bounds__(kStreamBlock, 1)
bwd_rows_stream(NormBackwardArgs a, float* states, int* count, float* part_w, float* part_b,
                int col_tiles, std::int64_t tile_width, std::int64_t rows_per_group) {
  static_assert(S * W == kStreamElems && kPipelined<T, W>);
  constexpr int kLead = kStreamLead<T>, kLag = kStreamLag<T>, kSlots = kStreamSlots<T>;
  static_assert(kStreamRing > kLag);
  constexpr int p = kStreamThreads;
  extern __shared__ uint4 stream_words[];
  T* stages = reinterpret_cast<T*>(stream_words);
  __shared__ ChunkScratch scratch[2];
  __shared__ Coef coef_ring[kStreamRing];
  __shared__ int coef_row[kStreamRing];         // 1 + the group row whose Coef the slot holds
  const int t = threadIdx.x;
  const std::int64_t n = a.x.n, g = blockIdx.x / col_tiles;
  const int c = int(blockIdx.x % col_tiles);
  const std::int64_t c0 = c * tile_width;
  const int len = int(std::min<std::int64_t>(tile_width, n - c0)), rem = len - t * W;
  const std::int64_t r0 = g * rows_per_group, rows = std::min(a.x.rows, r0 + rows_per_group) - r0;
  if (t < kStreamRing) coef_row[t] = 0;
  __syncthreads();

  if (t >= kStreamThreads) {  // coefficient warp w of `warps`: rows w, w + warps, ...
    const int w = (t - kStreamThreads) >> 5, lane = t & 31, warps = (int(blockDim.x) - kStreamThreads) >> 5;
    for (std::int64_t j = w; j < rows; j += warps) {
      const std::int64_t r = r0 + j;
      const int slot = int(j % kStreamRing);
      while (ptx::ld_acquire_gpu(count + r) < col_tiles) {
      }
      const float mu = Saved && K == NormKind::layer ? __ldg(a.mean + r) : 0.f;
      const float rs = Saved ? __ldg(a.rstd + r) : 0.f;
      const Coef cf = row_coef<K, Saved>(states + 5 * r * col_tiles, col_tiles, true, lane, n, a.eps, mu, rs);
      if (lane == 0) {
        coef_ring[slot] = cf;
        ptx::st_release_cta(coef_row + slot, int(j + 1));
      }
    }
    return;
  }

  const auto x_row = [&](std::int64_t r) {
    return static_cast<const T*>(a.x.data) + r * a.x.row_stride + c0 + t * W;
  };
  const auto dy_row = [&](std::int64_t r) {
    return static_cast<const T*>(a.dy.data) + r * a.dy.row_stride + c0 + t * W;
  };
  float dw[S][W], db[S][W];
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int k = 0; k < W; ++k) dw[s][k] = db[s][k] = 0.f;
  T* const wtile = stages + std::int64_t(kSlots) * 2 * kStreamTile + t * W;  // (S, p, W)
  if constexpr (kHasGrads<K>) {
    float wv[S][W];
    load_weight<T, S, W>(a.weight ? static_cast<const T*>(a.weight) + c0 + t * W : nullptr, p, rem, wv);
#pragma unroll
    for (int s = 0; s < S; ++s) Pack<T, W>::pack(wv[s]).store(wtile + s * p * W);
  }
  const auto weights = [&](float (&wv)[S][W]) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      if constexpr (kHasGrads<K>) Pack<T, W>::load(wtile + s * p * W).unpack(wv[s]);
      else
#pragma unroll
        for (int k = 0; k < W; ++k) wv[s][k] = 1.f;
    }
  };
  // LayerNorm with saved statistics folds about the row's μ: loaded with the row's stage, kLead
  // rows ahead (a load per fold would put an L2 round trip on every row's path).
  constexpr bool kMean = Saved && K == NormKind::layer;
  float mean_ahead[kLead + 1];
#pragma unroll
  for (int i = 0; i <= kLead; ++i) mean_ahead[i] = 0.f;
#pragma unroll
  for (int i = 0; i < kLead; ++i) {
    if (i < rows) {
      stage_row<T, S, W>(stages, i, x_row(r0 + i), dy_row(r0 + i), p, t, rem);
      if (kMean) mean_ahead[i] = __ldg(a.mean + r0 + i);
    } else {
      cp_async_commit();
    }
  }
  for (std::int64_t i = 0; i < rows + kLag; ++i) {
    const std::int64_t ahead = i + kLead;
    if (ahead < rows) {
      stage_row<T, S, W>(stages, int(ahead % kSlots), x_row(r0 + ahead), dy_row(r0 + ahead), p, t, rem);
      if (kMean) mean_ahead[kLead] = __ldg(a.mean + r0 + ahead);
    } else {
      cp_async_commit();
    }
    if (i < rows) {  // row i landed (all but the kLead newest groups): fold its state
      cp_async_wait<kLead>();
      float xv[S][W], dv[S][W], wv[S][W];
      bool ok[S];
      read_stage<T, S, W>(stages, int(i % kSlots), p, t, rem, xv, dv, ok);
      weights(wv);
      const std::int64_t r = r0 + i;
      chunk_state<K, S, W, Saved>(xv, dv, wv, ok, len, mean_ahead[0], scratch[i & 1],
                                  states + 5 * (r * col_tiles + c), kStreamThreads);
      if (t == 0) ptx::red_add_release_gpu(count + r, 1);  // orders thread 0's state stores before it
    }
#pragma unroll
    for (int q = 0; q < kLead; ++q) mean_ahead[q] = mean_ahead[q + 1];
    if (i >= kLag) {  // row j = i − kLag, once its Coef is in the ring
      const std::int64_t j = i - kLag, r = r0 + j;
      const int slot = int(j % kStreamRing);
      while (ptx::ld_acquire_cta(coef_row + slot) != int(j + 1)) {
      }
      const Coef cf = coef_ring[slot];
      float xv[S][W], dv[S][W], wv[S][W];
      bool ok[S];
      read_stage<T, S, W>(stages, int(j % kSlots), p, t, rem, xv, dv, ok);
      weights(wv);
      apply<K, S, W>(cf, xv, dv, wv, ok, dw, db);
      store_tile<T, S, W>(static_cast<T*>(a.dx.data) + r * a.dx.row_stride + c0 + t * W, p, xv, ok);
    }
  }
  if constexpr (kHasGrads<K>) {
    if (gridDim.x == unsigned(col_tiles)) {  // one row group: dw/db are its sums
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (s * p * W >= rem) continue;
#pragma unroll
        for (int k = 0; k < W; ++k) {
          const std::int64_t i = c0 + t * W + s * p * W + k;
          if (a.dweight) {
            if (a.grad_dtype == DType::f32) static_cast<float*>(a.dweight)[i] = dw[s][k];
            else static_cast<T*>(a.dweight)[i] = from_f32<T>(dw[s][k]);
          }
          if (a.dbias) {
            if (a.grad_dtype == DType::f32) static_cast<float*>(a.dbias)[i] = db[s][k];
            else static_cast<T*>(a.dbias)[i] = from_f32<T>(db[s][k]);
          }
        }
      }
    } else {
      bool ok[S];
#pragma unroll
      for (int s = 0; s < S; ++s) ok[s] = s * p * W < rem;
      if (part_w) store_partial<S, W>(part_w + g * n + c0 + t * W, p, dw, ok);
      if (part_b) store_partial<S, W>(part_b + g * n + c0 + t * W, p, db, ok);
    }
  }
}

// out[i] = Σ_g part[g·n + i], rounded to G; blockIdx.y picks (part0, out0) or (part1, out1), so
// dw and db are one launch. Block (32 columns, `slices` slices): slice j sums groups j,
// j + slices, ... into kReduceAcc accumulators in turn (kReduceAcc loads in flight per thread),
// adds them pairwise, then slice 0 adds the slices in order — a fixed order (slices is a
// function of the group count), deterministic. 65536×1024 has 2112 groups and only 32 column
// blocks: one accumulator and 16 slices left each thread a chain of 132 dependent loads
// (~15 µs per gradient, ~10% of the backward; run E). Launched as a programmatic dependent of
// the row kernel: it waits on the device (griddepcontrol.wait; a no-op in a plain launch).
constexpr int kMaxReduceSlices = 32, kReduceAcc = 8;

inline int reduce_slices(std::int64_t groups) {
  return int(std::clamp<std::int64_t>(groups / (2 * kReduceAcc), 1, kMaxReduceSlices));
}

template <class G>
__global__ void __launch_bounds__(32 * kMaxReduceSlices)
bwd_grad_reduce(const float* part0, G* out0, const float* part1, G* out1, std::int64_t groups,
                std::int64_t n, int slices) {
  parallel::cuda::wait_dependencies();
  __shared__ float slice_sums[kMaxReduceSlices][33];
  const float* part = blockIdx.y ? part1 : part0;
  G* out = blockIdx.y ? out1 : out0;
  const int c = threadIdx.x & 31, j = threadIdx.x >> 5;
  const std::int64_t i = std::int64_t(blockIdx.x) * 32 + c;
  float acc[kReduceAcc];
#pragma unroll
  for (int k = 0; k < kReduceAcc; ++k) acc[k] = 0.f;
  if (i < n) {
    std::int64_t g = j;
    for (; g + (kReduceAcc - 1) * slices < groups; g += kReduceAcc * slices)
#pragma unroll
      for (int k = 0; k < kReduceAcc; ++k) acc[k] += part[(g + k * slices) * n + i];
#pragma unroll
    for (int k = 0; k < kReduceAcc - 1; ++k)  // fewer than kReduceAcc left
      if (g + k * slices < groups) acc[k] += part[(g + k * slices) * n + i];
  }
#pragma unroll
  for (int w = 1; w < kReduceAcc; w <<= 1)
#pragma unroll
    for (int k = 0; k < kReduceAcc; k += 2 * w) acc[k] += acc[k + w];
  slice_sums[j][c] = acc[0];
  __syncthreads();
  if (j == 0 && i < n) {
    float t = 0.f;
    for (int k = 0; k < slices; ++k) t += slice_sums[k][c];
    out[i] = from_f32<G>(t);
  }
}

// ---- Host side -------------------------------------------------------------------------------

// Scratch (dw/db partial rows, long-row states): stream-ordered memory from the device's default
// pool (parallel::cuda::detail::Scratch, as the scans and top-k use), which may be captured into
// a CUDA graph (an allocation node). Until session 8 this file kept a memory pool of its own
// (cudaMallocFromPoolAsync), and the backward failed under stream capture ("operation not
// permitted when stream is capturing").
using Workspace = parallel::cuda::detail::Scratch;

// cudaOccupancyMaxActiveBlocksPerMultiprocessor, remembered per (device, kernel, threads,
// shared memory): asked on every call it costs host time, which a short backward (4096×4096:
// ~30 µs) waits for.
int blocks_per_sm(const void* kernel, int threads, std::size_t smem, int device) {
  struct Entry {
    const void* kernel;
    int threads, device;
    std::size_t smem;
    int blocks;
  };
  static std::mutex mu;
  static Entry seen[128];
  static int used = 0;
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < used; ++i)
    if (seen[i].kernel == kernel && seen[i].threads == threads && seen[i].device == device &&
        seen[i].smem == smem)
      return seen[i].blocks;
  int blocks = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem), kWhere);
  blocks = std::max(blocks, 1);
  if (used < 128) seen[used++] = {kernel, threads, device, smem, blocks};
  return blocks;
}

// Blocks per cluster of the smem variant (v6), used where a block has fewer than
// kClusterBelowRows rows. SIXFOLD_NORM_BWD_KERNEL=smem1: never clusters (v5).
constexpr int kGradCluster = 8, kClusterBelowRows = 16;

// cudaOccupancyMaxActiveClusters for the launch `cfg` (its cluster size, block and shared
// memory), remembered per (device, kernel, threads, shared memory, cluster size); 0 where the
// query fails.
int clusters_resident(const void* kernel, const cudaLaunchConfig_t& cfg, int device) {
  struct Entry {
    const void* kernel;
    unsigned threads, cluster;
    int device;
    std::size_t smem;
    int clusters;
  };
  static std::mutex mu;
  static Entry seen[64];
  static int used = 0;
  const unsigned cluster = cfg.attrs[0].val.clusterDim.x;
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < used; ++i)
    if (seen[i].kernel == kernel && seen[i].threads == cfg.blockDim.x && seen[i].device == device &&
        seen[i].smem == cfg.dynamicSmemBytes && seen[i].cluster == cluster)
      return seen[i].clusters;
  cudaLaunchConfig_t q = cfg;
  q.gridDim = dim3(cluster);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &q) != cudaSuccess) {
    (void)cudaGetLastError();
    clusters = 0;
  }
  if (used < 64) seen[used++] = {kernel, cfg.blockDim.x, cluster, device, cfg.dynamicSmemBytes, clusters};
  return clusters;
}

template <class G>
void launch_reduce(const float* part0, void* out0, const float* part1, void* out1,
                   std::int64_t groups, std::int64_t n, cudaStream_t stream) {
  const int slices = reduce_slices(groups);
  auto* o0 = static_cast<G*>(out0);
  auto* o1 = static_cast<G*>(out1);
  // Dev hook for A/B timing: SIXFOLD_NORM_BWD_NO_PDL set → plain launch.
  static const bool pdl = std::getenv("SIXFOLD_NORM_BWD_NO_PDL") == nullptr;
  parallel::cuda::launch_dependent(bwd_grad_reduce<G>, dim3(unsigned(ceil_div(n, 32)), out1 ? 2u : 1u),
                                   dim3(unsigned(32 * slices)), 0, stream, pdl, kWhere, part0, o0, part1, o1,
                                   groups, n, slices);
}

template <class T>
void reduce_grads(const NormBackwardArgs& a, const float* part_w, const float* part_b,
                  std::int64_t groups, cudaStream_t stream) {
  // (part, out) pairs of the gradients asked for, dw first.
  const float* p0 = a.dweight ? part_w : part_b;
  void* o0 = a.dweight ? a.dweight : a.dbias;
  const float* p1 = a.dweight && a.dbias ? part_b : nullptr;
  void* o1 = a.dweight && a.dbias ? a.dbias : nullptr;
  if (!o0) return;
  if (a.grad_dtype == DType::f32) launch_reduce<float>(p0, o0, p1, o1, groups, a.x.n, stream);
  else launch_reduce<T>(p0, o0, p1, o1, groups, a.x.n, stream);
}

// Which variant of bwd_rows_regs the backward uses (n ≤ 8192; dev/norm/README.md has the
// versions). Dev hook, read per call: SIXFOLD_NORM_BWD_KERNEL = regspf (the default for rms /
// layer with 16-bit 16-byte rows: v7 = v4 with the next row's packs and statistics loaded when
// a row starts) | smem (v5 = weight and dw/db in shared memory, two 512-thread blocks per SM;
// v6 = v5 in clusters of 8 where blocks have few rows) | smem1 (v5 alone) | regs (v4: weight
// and dw/db in registers, one 512-thread block per SM; the default for f32 and scalar rows) |
// regs0 (v0, the kernel of runs C/D: v4's layout with the old reductions and divisions; bf16
// 16-byte rows only, else v4). The pipelined v1–v3 were removed after run D (commit 007b8e4
// has them). softmax / log_softmax keep their two-block kernel: with v7's prefetch (one block per
// SM) they measured within noise (dev/norm/README.md, session 8).
// H200, same process, bf16, % of copy (default v5/v6 → v7; saved statistics, recompute in
// brackets): rms 16384x8192 86.6 → 84.8–86.2 (83.3 → 87.7–87.9), 4096x4096 55.9–57.6 →
// 58.2–58.3, 65536x1024 76.8–78.3 → 80.9–81.4 (78 → 83); layer 16384x8192 80.9 → 83.3–83.7
// (69.0 → 81.8–82.0), 4096x4096 47.7–48.2 → 53.7–54.0, 65536x1024 72.4–72.7 → 77.7–78.1
// (65.3 → 80.4); docs/perf/norm.md, session 8.
enum class RegsVariant { pf, smem, smem1, regs, regs0 };

// v9 (GridReduce) where the default kernel runs: the row kernel sums the dw/db partial rows
// itself where every block has at most one column tile and each thread at most kGridAcc loads
// (4096x4096: rms 16, layer 32). Elsewhere bwd_grad_reduce, a programmatic dependent whose
// launch overlaps the row kernel's end: H200, bf16, same process, graph replay, % of copy
// (v9 → reduce kernel): rms 4096x4096 71.2–71.4 → 68.9–69.0 with one tile a block and 16
// loads, but with 4 tiles a block layer 16384x8192 87.0–87.1 → 88.2–88.3, and with 2 rounds of
// 16 loads layer 4096x4096 63.9–64.5 → 63.8–63.9; 65536x1024 (2112 one-warp groups: 264 loads a
// thread) never qualifies. Dev hook, read per call: SIXFOLD_NORM_BWD_REDUCE=kernel → always
// bwd_grad_reduce.

bool grid_reduce_from_env() {
  const char* e = std::getenv("SIXFOLD_NORM_BWD_REDUCE");
  return !(e && std::strcmp(e, "kernel") == 0);
}

// Whether v9's reduction drops the partial rows' L2 lines once read (discard_l2_line), so that
// they never reach DRAM: where its tiles are 32 columns (a warp load reads one whole 128-byte
// line that no other block reads) of rows of a multiple of 32 floats, 128-byte aligned.
// H100, graph replay, % of copy, discarded / kept (two runs): layer 4096x4096 (32-column
// tiles) 76.3–77.2 / 75.3–76.1. Not where it would take 32-column tiles only for it (rms
// 4096x4096: 78.5–78.8 / 79.2–79.6), nor in bwd_grad_reduce (lane 0 discarding its warp's 66
// lines at 65536x1024 is on the critical path: rms 89.2 / 90.5–90.6, layer 87.9–88.0 /
// 88.9–89.0): the pool hands the next call the same partial rows, so most of their dirty lines
// are overwritten in L2 before any write-back. SIXFOLD_NORM_BWD_DISCARD=0 (dev switch, read per
// call) keeps them.
bool discard_partials(const float* part_w, const float* part_b, std::int64_t n) {
  const char* e = std::getenv("SIXFOLD_NORM_BWD_DISCARD");
  if (e && *e == '0') return false;
  const auto aligned = [](const float* p) { return reinterpret_cast<std::uintptr_t>(p) % 128 == 0; };
  return n % 32 == 0 && aligned(part_w) && aligned(part_b);
}

// Columns per tile of grid_reduce_grads for `groups` blocks of `threads`: the fewest tiles that
// still give every block one (8 floats = one 32-byte sector at least, 32 at most); 0 where
// that leaves a block more than one tile or a thread more than kGridAcc loads.
int grid_reduce_columns(std::int64_t n, std::int64_t ngrads, std::int64_t groups, int threads) {
  int cw = 8;
  while (cw < 32 && cw * groups < n * ngrads) cw *= 2;
  const bool one_tile = ceil_div(n, std::int64_t(cw)) * ngrads <= groups;
  return one_tile && ceil_div(groups, std::int64_t(threads / cw)) <= kGridAcc ? cw : 0;
}

// Dev switches of bwd_rows_regs, read per call, timing only (dw / db come out wrong):
// SIXFOLD_NORM_BWD_DEV = 8: no partial rows written, 16: written but not reduced. H100, bf16,
// graph replay, % of copy (docs/perf/norm.md, session 26): 4096x4096 rms / layer default
// 78.6–79.6 / 75.9–76.8, 8: 86.9–87.9 / 86.5–87.2, 16: 83.8–83.9 / 79.4–80.3. (Bits 0–2, the
// rows' and dx's L2 policies, and SIXFOLD_NORM_BWD_BPS were measured with commit 9831d8a and
// removed: within ~1.5 points either way, or slower.)
int dev_flags_from_env() {
  const char* e = std::getenv("SIXFOLD_NORM_BWD_DEV");
  return e ? std::atoi(e) : 0;
}

RegsVariant regs_variant_from_env() {
  if (const char* e = std::getenv("SIXFOLD_NORM_BWD_KERNEL")) {
    if (std::strcmp(e, "smem") == 0) return RegsVariant::smem;
    if (std::strcmp(e, "smem1") == 0) return RegsVariant::smem1;
    if (std::strcmp(e, "regs") == 0) return RegsVariant::regs;
    if (std::strcmp(e, "regs0") == 0) return RegsVariant::regs0;
  }
  return RegsVariant::pf;
}

// Long rows in one pass (v14, bwd_rows_stream) unless SIXFOLD_NORM_BWD_LONG=chunks (dev
// switch, read per call: the three-kernel path).
bool stream_rows_from_env() {
  const char* e = std::getenv("SIXFOLD_NORM_BWD_LONG");
  return !(e && std::strcmp(e, "chunks") == 0);
}

// Coefficient warps of bwd_rows_stream; dev switch, read per call: SIXFOLD_NORM_BWD_STREAM=<1..4>.
int stream_coef_warps_from_env() {
  const char* e = std::getenv("SIXFOLD_NORM_BWD_STREAM");
  return e && *e >= '1' && *e <= '0' + kMaxCoefWarps ? *e - '0' : 2;
}

// v14 where every column tile of a row is resident at once (1M bf16 columns: 128 tiles of 8192
// against the H100's 132 SMs); false where not, and the three kernels run instead.
template <class T, NormKind K, int W, bool Saved>
bool launch_stream(const NormBackwardArgs& a, cudaStream_t stream, int device, int sms) {
  constexpr int S = kStreamElems / W;
  const auto kernel = bwd_rows_stream<T, K, S, W, Saved>;
  constexpr std::size_t smem = stream_smem_bytes<T>();
  static std::atomic<std::uint64_t> configured{0};  // > 48 KB of shared memory: once per device
  const std::uint64_t bit = device < 64 ? std::uint64_t(1) << device : 0;
  if (!bit || !(configured.load(std::memory_order_acquire) & bit)) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess) {
      (void)cudaGetLastError();  // a device with less shared memory: the three kernels
      return false;
    }
    configured.fetch_or(bit, std::memory_order_release);
  }
  const std::int64_t n = a.x.n, rows = a.x.rows;
  const StreamGrid sg = stream_grid(
      rows, n, W, std::int64_t(blocks_per_sm(reinterpret_cast<const void*>(kernel), kStreamBlock, smem, device)) * sms);
  if (sg.col_tiles == 0) return false;
  const std::int64_t groups = sg.groups;
  const bool grads = kHasGrads<K> && (a.dweight || a.dbias);
  const std::int64_t ngrads = (a.dweight ? 1 : 0) + (a.dbias ? 1 : 0);
  const std::size_t count_bytes = std::size_t(ceil_div(rows * 4, std::int64_t(256)) * 256);
  const std::size_t state_bytes = std::size_t(ceil_div(rows * sg.col_tiles * 5 * 4, std::int64_t(256)) * 256);
  const std::size_t part_bytes = grads && groups > 1 ? std::size_t(groups * n * ngrads) * sizeof(float) : 0;
  Workspace ws(count_bytes + state_bytes + part_bytes, stream, kWhere);
  char* const scratch = static_cast<char*>(ws.get());
  auto* count = reinterpret_cast<int*>(scratch);
  auto* states = reinterpret_cast<float*>(scratch + count_bytes);
  float* part = part_bytes ? reinterpret_cast<float*>(scratch + count_bytes + state_bytes) : nullptr;
  float* part_w = part && a.dweight ? part : nullptr;
  float* part_b = part && a.dbias ? part + (a.dweight ? groups * n : 0) : nullptr;
  check_cuda(cudaMemsetAsync(count, 0, std::size_t(rows) * sizeof(int), stream), kWhere);
  launch_cooperative(kernel, groups * sg.col_tiles, kStreamThreads + 32 * stream_coef_warps_from_env(), smem,
                     stream, kWhere, a, states, count, part_w, part_b, int(sg.col_tiles), sg.tile_width,
                     sg.per_group);
  if (part) reduce_grads<T>(a, part_w, part_b, groups, stream);
  return true;
}

// Saved: rms / layer with the forward's statistics (a.rstd, and a.mean for layer).
template <class T, NormKind K, int W, bool Saved>
void launch_backward(const NormBackwardArgs& a, cudaStream_t stream, int device) {
  // Elements per thread: 16 with the row in registers (2 packs of x and dy in flight per thread;
  // 8 with 1024 threads capped registers at 64 and spilled), 8 in the long-row kernels.
  constexpr int SR = W > 1 ? 16 / W : 16, S = W > 1 ? 8 / W : 8;
  constexpr std::int64_t kE = S * W, kChunk = kChunkThreads * kE;
  const std::int64_t n = a.x.n, rows = a.x.rows;
  const bool grads = kHasGrads<K> && (a.dweight || a.dbias);
  const std::int64_t ngrads = (a.dweight ? 1 : 0) + (a.dbias ? 1 : 0);
  const int sms = parallel::cuda::sm_count(device, kWhere);
  if (n <= kRegsThreads * SR * W) {
    const int threads = int(ceil_div(ceil_div(n, SR * W), 32) * 32);
    auto kernel = bwd_rows_regs<T, K, SR, W, true, false, Saved>;
    std::size_t smem = 0;
    int cluster = 1;  // v6: the smem variant's blocks in clusters of kGradCluster
    const RegsVariant v = regs_variant_from_env();
    decltype(kernel) fused = nullptr;  // v9: the default kernel with GridReduce
    if constexpr (kHasGrads<K> && W > 1) {
      if (v == RegsVariant::pf)
        fused = bwd_rows_regs<T, K, SR, W, true, false, Saved, sizeof(T) == 2, true>;
    }
    if constexpr (kHasGrads<K> && sizeof(T) == 2 && W > 1) {  // f32 and scalar rows: always v4
      if (v == RegsVariant::pf) kernel = bwd_rows_regs<T, K, SR, W, true, false, Saved, true>;
      if (v == RegsVariant::smem || v == RegsVariant::smem1) {
        kernel = bwd_rows_regs<T, K, SR, W, true, true, Saved>;
        smem = std::size_t(kSmemGradArrays<K>) * SR * W * threads * sizeof(float);
        static std::atomic<std::uint64_t> configured{0};  // > 48 KB: once per device
        const std::uint64_t bit = device < 64 ? std::uint64_t(1) << device : 0;
        if (!bit || !(configured.load(std::memory_order_acquire) & bit)) {
          const int most = int(std::size_t(kSmemGradArrays<K>) * SR * W * kRegsThreads * sizeof(float));
          check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most),
                     kWhere);
          configured.fetch_or(bit, std::memory_order_release);
        }
        if (v == RegsVariant::smem && grads) cluster = kGradCluster;
      }
      if constexpr (std::is_same_v<T, __nv_bfloat16>)  // v0 for the comparison: bf16 only
        if (v == RegsVariant::regs0) kernel = bwd_rows_regs<T, K, SR, W, false, false, Saved>;
    }
    cudaLaunchConfig_t cfg{};
    cfg.blockDim = dim3(unsigned(threads));
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(cluster);
    attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    // Blocks resident at once (whole clusters), at least one row each.
    std::int64_t capacity =
        std::int64_t(blocks_per_sm(reinterpret_cast<const void*>(kernel), threads, smem, device)) * sms;
    // Clusters only where a block has few rows, so that its partial row is a large share of the
    // traffic: H200 run H, clusters of 8 vs none: 4096x4096 (8 rows per block) rms 48.9 -> 58.2%,
    // layer 34.6 -> 46.0% of copy; 65536x1024 (31 rows per block, 64-thread blocks) rms 79.7 ->
    // 70.1%, layer 66.2 -> 55.0%; 16384x8192 (62 rows) within 1.3 points.
    if (cluster > 1 && ceil_div(rows, std::min(rows, capacity)) >= kClusterBelowRows) cluster = 1;
    if (cluster > 1) {
      const int clusters = clusters_resident(reinterpret_cast<const void*>(kernel), cfg, device);
      if (clusters > 0) capacity = std::int64_t(clusters) * cluster;
      else cluster = 1;  // the query failed: plain blocks
    }
    if (cluster == 1) cfg.numAttrs = 0;
    std::int64_t groups = std::min<std::int64_t>(rows, capacity);
    const std::int64_t per_group = ceil_div(rows, groups);
    groups = ceil_div(ceil_div(rows, per_group), cluster) * cluster;  // whole clusters
    const std::int64_t parts = groups / cluster;  // partial rows of dw (and db)
    Workspace ws(grads ? std::size_t(parts * n * ngrads) * sizeof(float) : 0, stream, kWhere);
    float* part_w = a.dweight && grads ? reinterpret_cast<float*>(ws.get()) : nullptr;
    float* part_b = a.dbias && grads ? reinterpret_cast<float*>(ws.get()) + (a.dweight ? parts * n : 0) : nullptr;
    // v9: a cooperative launch (the grid barrier needs every block resident: groups ≤ the
    // fused kernel's own capacity, checked, as its registers may differ).
    int reduce_cw = 0;
    if (fused && grads && cluster == 1 && grid_reduce_from_env() &&
        groups <= std::int64_t(blocks_per_sm(reinterpret_cast<const void*>(fused), threads, smem, device)) * sms)
      reduce_cw = grid_reduce_columns(n, ngrads, groups, threads);
    const bool discard = reduce_cw == 32 && discard_partials(part_w, part_b, n);
    if (reduce_cw) {
      kernel = fused;
      attr[0].id = cudaLaunchAttributeCooperative;
      attr[0].val.cooperative = 1;
      cfg.numAttrs = 1;
    }
    cfg.gridDim = dim3(unsigned(groups));
    check_cuda(cudaLaunchKernelEx(&cfg, kernel, a, part_w, part_b, per_group, cluster, 1.0f / float(n),
                                  reduce_cw, discard, dev_flags_from_env()),
               kWhere);
    if (grads && !reduce_cw) reduce_grads<T>(a, part_w, part_b, parts, stream);
    return;
  }
  if constexpr (kPipelined<T, W>)
    if (stream_rows_from_env() && launch_stream<T, K, W, Saved>(a, stream, device, sms)) return;
  const std::int64_t chunks = ceil_div(n, kChunk);
  if (rows * chunks > kMaxGrid) throw_error(kWhere, "too many rows × chunks for one launch");
  // The statistics pass takes kStatPacks times longer chunks than the dx pass (4 · 2048
  // elements at 16-byte packs): its block reduction, not its loads, was most of its instructions.
  constexpr int kStatPacks = 4, SS = S * kStatPacks;
  const std::int64_t stat_chunks = ceil_div(n, std::int64_t(kChunkThreads) * SS * W);
  std::int64_t groups = std::min<std::int64_t>(rows, std::max<std::int64_t>(1, ceil_div(4 * sms, chunks)));
  const std::int64_t per_group = ceil_div(rows, groups);
  groups = ceil_div(rows, per_group);
  const std::size_t coef_bytes = std::size_t(rows) * sizeof(Coef);
  const std::size_t state_bytes = std::size_t(rows * stat_chunks * 5) * sizeof(float);
  const std::size_t part_bytes = grads ? std::size_t(groups * n * ngrads) * sizeof(float) : 0;
  Workspace ws(coef_bytes + state_bytes + part_bytes, stream, kWhere);
  char* const scratch = static_cast<char*>(ws.get());
  auto* coefs = reinterpret_cast<Coef*>(scratch);
  auto* states = reinterpret_cast<float*>(scratch + coef_bytes);
  float* part = reinterpret_cast<float*>(scratch + coef_bytes + state_bytes);
  float* part_w = a.dweight && grads ? part : nullptr;
  float* part_b = a.dbias && grads ? part + (a.dweight ? groups * n : 0) : nullptr;
  bwd_stats_chunks<T, K, SS, W, Saved><<<unsigned(rows * stat_chunks), kChunkThreads, 0, stream>>>(
      a, states, int(stat_chunks));
  check_cuda(cudaGetLastError(), kWhere);
  bwd_stats_finish<K, Saved><<<unsigned(ceil_div(rows, 8)), 256, 0, stream>>>(
      states, coefs, rows, int(stat_chunks), n, a.eps, a.mean, a.rstd);
  check_cuda(cudaGetLastError(), kWhere);
  bwd_rows_coef<T, K, S, W><<<unsigned(groups * chunks), kChunkThreads, 0, stream>>>(
      a, coefs, part_w, part_b, int(chunks), per_group);
  check_cuda(cudaGetLastError(), kWhere);
  if (grads) reduce_grads<T>(a, part_w, part_b, groups, stream);
}

template <class T, NormKind K>
void launch_kind(const NormBackwardArgs& a, cudaStream_t stream, int device) {
  constexpr int W = 16 / int(sizeof(T));
  const auto rows_ok = [&](const RowsView& v) {
    return aligned16(v.data) && (a.x.rows == 1 || v.row_stride % W == 0);
  };
  const bool vec = a.x.n % W == 0 && rows_ok(a.x) && rows_ok(a.dy) && rows_ok(a.dx) &&
                   (!kHasGrads<K> || !a.weight || aligned16(a.weight));
  // Saved statistics: rms needs rstd, layer mean and rstd (validated together).
  if constexpr (kHasGrads<K>) {
    if (a.rstd) {
      if (vec) launch_backward<T, K, W, true>(a, stream, device);
      else launch_backward<T, K, 1, true>(a, stream, device);
      return;
    }
  }
  if (vec) launch_backward<T, K, W, false>(a, stream, device);
  else launch_backward<T, K, 1, false>(a, stream, device);
}

template <class T>
void launch_dtype(const NormBackwardArgs& a, cudaStream_t stream, int device) {
  switch (a.kind) {
    case NormKind::rms: return launch_kind<T, NormKind::rms>(a, stream, device);
    case NormKind::layer: return launch_kind<T, NormKind::layer>(a, stream, device);
    case NormKind::softmax: return launch_kind<T, NormKind::softmax>(a, stream, device);
    case NormKind::log_softmax: return launch_kind<T, NormKind::log_softmax>(a, stream, device);
  }
  throw_error(kWhere, "unknown norm kind");
}

}  // namespace

void norm_backward_cuda(const NormBackwardArgs& a, int device, Stream stream) {
  if (a.x.n == 0) return;
  DeviceGuard guard(device, kWhere);
  const auto s = static_cast<cudaStream_t>(stream.handle);
  if (a.x.rows == 0) {  // Σ over no rows
    const std::size_t bytes = std::size_t(a.x.n) * std::size_t(dtype_bits(a.grad_dtype) / 8);
    if (a.dweight) check_cuda(cudaMemsetAsync(a.dweight, 0, bytes, s), kWhere);
    if (a.dbias) check_cuda(cudaMemsetAsync(a.dbias, 0, bytes, s), kWhere);
    return;
  }
  switch (a.dtype) {
    case DType::f32: return launch_dtype<float>(a, s, device);
    case DType::bf16: return launch_dtype<__nv_bfloat16>(a, s, device);
    case DType::f16: return launch_dtype<__half>(a, s, device);
    default: throw_error(kWhere, "dtype must be f32, bf16 or f16");
  }
}

}  // namespace sixfold::detail
