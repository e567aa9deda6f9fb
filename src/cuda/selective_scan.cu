// src/cuda/selective_scan.cu — Mamba's selective scan in one fused kernel, and its decoding step.
//
//   h_t = exp(Δ_t·A)·h_{t−1} + Δ_t·B_t·u_t  (per state s < n),  y_t = Σ_s C_t·h_t + D·u_t,
//   out_t = y_t·silu(z_t)
//
// Each step is the affine map h -> a·h + b, and affine maps compose associatively (Affine in
// algebra/instances.hpp), so a sequence is cut into time segments that are folded in parallel
// and joined by composing their maps (associativity); every input element is read once, the
// state never leaves the chip, out is written once (locality).
//
// Two kernels. Version 6 (selective_scan_seq, below the version-5 kernel) runs Mamba's case
// (input-dependent B and C, n ∈ {16, 32, 64}): each thread carries S states of one channel
// through the whole sequence in order, the channel's other states on P − 1 more lanes; no time
// scan at all. Version 5 (selective_scan_warps) runs everything else:
//
// Layout (versions 4-5, docs/perf/selective_scan.md): a warp owns Cw channels (Cw ∈ {1, 2, ..., 32})
// and cuts time into G = 32/Cw segments of K consecutive steps, lane = segment·Cw + channel; a
// chunk is G·K steps. A block is W such warps over W·Cw consecutive channels of one B/C group.
// Per chunk each thread loads its K steps of u and Δ once (softplus, Δ·u, D·u in registers),
// then walks the n states one "round" each:
//   1. its K pairs (a, b) = (2^(Δ·A·log2 e), Δ·u·B) in registers (ex2.approx on the SFU), b
//      folded along its segment; the segment's a is 2^(A·ΣΔ·log2 e), one exp: ΣΔ does not
//      depend on the state, so the product of the K a's needs no chain;
//   2. the segment maps are scanned across the warp with shuffles (lanes Cw apart), the chunk's
//      incoming state (the warp's carry, in shared memory) composed in by the first segment, so
//      the scan's b is the state at each segment's end;
//   3. each thread replays its K steps from its incoming state, y_t += C_t·h_t; the last
//      segment's state is the next chunk's carry (and the final state).
// No barrier sits inside a round and warps never wait on each other's scans. B and C of the
// block's group are staged by the whole block in shared memory (cp.async, R rounds per stage,
// double-buffered, one __syncthreads per stage), each segment's row padded by 16 bytes so the
// lanes' 16-byte reads of different segments hit different banks; lanes of one segment read
// the same words (broadcast), so each B/C element is fetched once per W·Cw channels. Steps past
// the end of a sequence are identity maps (zero-filled B, Δ = 0), so ragged lengths and varlen
// sequences need no special path.
// Where the time goes (H200, v5): 27-39% of the exp/bandwidth roofline; the kernel is bound by
// instruction issue (~12 per (element, state) against the ≤ 8 an SFU-bound kernel may spend),
// not by the SFU or DRAM (v6: 37-50%, ~9.5 per (element, state) at n = 16, issue ~50%). The
// round is kept lean on purpose: no index arithmetic (running pointers), the scan width a
// template parameter, the per-chunk values pinned in registers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "../ops/selective_scan_entries.hpp"
#include "sixfold/parallel/cuda.cuh"

namespace sixfold::detail {
namespace {

using parallel::cuda::check_cuda;
constexpr const char* kWhere = "sixfold::selective_scan (cuda)";

// The kernel's compile-time shape: K consecutive steps per thread, at least kMinBlocks blocks
// of 256 threads per SM (the register cap: 2 -> 128 registers, 3 -> 80).
template <int K_, int kMinBlocks_>
struct ScanConfig {
  static constexpr int kItems = K_, kMinBlocks = kMinBlocks_;
};
using DefaultConfig = ScanConfig<16, 2>;
constexpr int kMaxWarps = 8, kMaxThreads = kMaxWarps * 32;
constexpr int kStageRounds = 8;  // state rounds per B/C ring stage (fewer when shared memory is short)

// ---- elements --------------------------------------------------------------------------------
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
template <class T> __device__ __forceinline__ T from_f32(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else return __float2half_rn(x);
}

__device__ __forceinline__ float ex2(float x) {  // 2^x on the SFU; 2^(−large) flushes to 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// softplus(d) = max(d, 0) + log1p(x), x = e^−|d| ∈ (0, 1], with log1p(x) = 2·atanh(t),
// t = x / (2 + x) ≤ 1/3: the series 2t·(1 + t²/3 + ... + t¹²/13) leaves a relative error under
// 2e-8 (the exp's own, ~2^-22, dominates). ~14 instructions against ~50 for log1pf(expf(d)),
// which the chunk start paid per element (n = 16: a tenth of the kernel's instructions).
__device__ __forceinline__ float softplus_fast(float d) {
  const float x = ex2(-fabsf(d) * 1.4426950408889634f);
  const float t = __fdividef(x, 2.0f + x), t2 = t * t;
  float p = 1.0f / 13.0f;
  p = fmaf(p, t2, 1.0f / 11.0f);
  p = fmaf(p, t2, 1.0f / 9.0f);
  p = fmaf(p, t2, 1.0f / 7.0f);
  p = fmaf(p, t2, 1.0f / 5.0f);
  p = fmaf(p, t2, 1.0f / 3.0f);
  p = fmaf(p, t2, 1.0f);
  return fmaf(t + t, p, fmaxf(d, 0.0f));
}

__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0;
}

// v[k] = p[k] for k < valid (16-byte loads when the whole run is there and aligned), else fill.
template <class T, int K>
__device__ __forceinline__ void load_items(const T* p, int valid, float (&v)[K], float fill) {
  constexpr int kPer = 16 / int(sizeof(T));
  static_assert(K % kPer == 0);
  if (valid >= K && aligned16(p)) {
#pragma unroll
    for (int i = 0; i < K / kPer; ++i) {
      const uint4 raw = *reinterpret_cast<const uint4*>(p + i * kPer);
      T e[kPer];
      memcpy(e, &raw, 16);
#pragma unroll
      for (int j = 0; j < kPer; ++j) v[i * kPer + j] = to_f32(e[j]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = k < valid ? to_f32(p[k]) : fill;
  }
}

template <class T, int K>
__device__ __forceinline__ void store_items(T* p, int valid, const float (&v)[K]) {
  constexpr int kPer = 16 / int(sizeof(T));
  if (valid >= K && aligned16(p)) {
#pragma unroll
    for (int i = 0; i < K / kPer; ++i) {
      T e[kPer];
#pragma unroll
      for (int j = 0; j < kPer; ++j) e[j] = from_f32<T>(v[i * kPer + j]);
      uint4 raw;
      memcpy(&raw, e, 16);
      *reinterpret_cast<uint4*>(p + i * kPer) = raw;
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (k < valid) p[k] = from_f32<T>(v[k]);
  }
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {  // zero-fills past src_bytes
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_group1() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

struct Shape {
  int cw, warps;       // channels per warp (power of two ≤ 32), warps per block (each its own channels)
  int chunk;           // steps per chunk: (32 / cw) segments of K
  int rounds;          // state rounds per ring stage (a power of two)
  int row_pieces_log;  // log2 of the 16-byte pieces in one B/C row of a chunk
  int seg_bytes;       // bytes of one segment's K values in a ring row, padded: K·sizeof(T) + 16
  int channel_blocks;  // blocks per batch row: d / (warps·cw)
};

// Shared memory (bytes): ring[2][rounds][M][32/cw segments][seg_bytes] (B and/or C rows of the
// stage's rounds, M = number of input-dependent matrices), carry[W][n][cw] f32, then A of the
// warps' channels in the same layout.
struct SmemLayout {
  int row, stage, carry, a_words, bytes;  // a_words: A's offset from carry, in floats
  __host__ __device__ SmemLayout(const Shape& sh, int mats, int n) {
    row = (32 / sh.cw) * sh.seg_bytes;
    stage = sh.rounds * mats * row;
    carry = 2 * stage;
    a_words = sh.warps * n * sh.cw;
    bytes = carry + 2 * a_words * 4;
  }
};

// Stage the B/C rows of rounds (q, s), (q, s+1), ... (the R rounds of one stage, states
// wrapping into the next chunk) into one ring slot, the threads cooperating, each one 16-byte
// piece at a time (pieces ordered round, matrix, piece; all counts powers of two): cp.async,
// zero-filled past the sequence's end; `vec` false (unaligned rows): plain loads and stores.
template <class T, int K, bool kVarB, bool kVarC>
__device__ __forceinline__ void fill_stage(unsigned char* slot, const Shape& sh, int row_bytes, std::int64_t q, int s,
                                           std::int64_t nchunks, int n, const T* B_rows, std::int64_t b_s,
                                           const T* C_rows, std::int64_t c_s, std::int64_t len, bool vec, int tid,
                                           int nthreads) {
  constexpr int M = int(kVarB) + int(kVarC), E = 16 / int(sizeof(T)), kPieces = K / E;  // pieces per segment
  const int row_log = sh.row_pieces_log, total = (sh.rounds * M) << row_log;
  for (int i = tid; i < total; i += nthreads) {
    const int jm = i >> row_log, p = i & ((1 << row_log) - 1);
    const int j = M == 1 ? jm : jm >> 1, m = M == 1 ? 0 : jm & 1;
    std::int64_t qq = q;
    int ss = s + j;
    while (ss >= n) {
      ss -= n;
      ++qq;
    }
    if (qq >= nchunks) continue;
    const T* row = (kVarB && m == 0) ? B_rows + ss * b_s : C_rows + ss * c_s;
    const std::int64_t t = qq * sh.chunk + std::int64_t(p) * E, left = len - t;
    unsigned char* dst = slot + jm * row_bytes + (p / kPieces) * sh.seg_bytes + (p % kPieces) * 16;
    if (vec) {
      const int bytes = int(std::clamp<std::int64_t>(left, 0, E)) * int(sizeof(T));
      cp_async16(dst, bytes > 0 ? row + t : row, bytes);
    } else {
      T e[E];
#pragma unroll
      for (int k = 0; k < E; ++k) e[k] = k < left ? row[t + k] : from_f32<T>(0.0f);
      uint4 raw;
      memcpy(&raw, e, 16);
      *reinterpret_cast<uint4*>(dst) = raw;
    }
  }
}

// K values of T from a ring row (16-byte aligned) as f32.
template <class T, int K>
__device__ __forceinline__ void read_ring(const unsigned char* p, float (&v)[K]) {
  constexpr int kPer = 16 / int(sizeof(T));
#pragma unroll
  for (int i = 0; i < K / kPer; ++i) {
    const uint4 raw = reinterpret_cast<const uint4*>(p)[i];
    T e[kPer];
    memcpy(e, &raw, 16);
#pragma unroll
    for (int j = 0; j < kPer; ++j) v[i * kPer + j] = to_f32(e[j]);
  }
}

// kSegs: segments per warp (32 / Cw) fixed at compile time (the scan unrolled, lane arithmetic
// folded), or 0: taken from sh.cw at run time.
template <class T, bool kVarB, bool kVarC, class Cfg, int kSegs>
__global__ void __launch_bounds__(kMaxThreads, Cfg::kMinBlocks)
selective_scan_warps(SelectiveScanArgs a, Shape sh) {
  constexpr int K = Cfg::kItems, M = int(kVarB) + int(kVarC);
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(16) unsigned char smem[];
  const int n = int(a.n), cw = kSegs ? 32 / kSegs : sh.cw;
  if constexpr (kSegs != 0) sh.chunk = kSegs * K;
  const SmemLayout lay(sh, M, n);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int ch = lane & (cw - 1), seg = lane / cw;
  const std::int64_t b = blockIdx.x / sh.channel_blocks;
  const std::int64_t c0 = std::int64_t(blockIdx.x % sh.channel_blocks) * sh.warps * cw;
  const std::int64_t c = c0 + warp * cw + ch;  // < d: the host checked that W·Cw divides d / groups
  float* carry = reinterpret_cast<float*>(smem + lay.carry) + std::int64_t(warp) * n * cw + ch;  // [s·cw]
  std::int64_t start = 0, len = a.len;
  if (a.cu_seqlens) {
    start = a.cu_seqlens[b];
    len = a.cu_seqlens[b + 1] - start;
  }
  const std::int64_t g = c0 / (a.d / a.groups);  // the block's B/C group

  const T* u_row = static_cast<const T*>(a.u) + b * a.u_stride[0] + c * a.u_stride[1] + start;
  const T* dt_row = static_cast<const T*>(a.delta) + b * a.delta_stride[0] + c * a.delta_stride[1] + start;
  const T* z_row = a.z ? static_cast<const T*>(a.z) + b * a.z_stride[0] + c * a.z_stride[1] + start : nullptr;
  T* out_row = static_cast<T*>(a.out) + b * a.out_stride[0] + c * a.out_stride[1] + start;
  const T* B_rows = kVarB ? static_cast<const T*>(a.B) + b * a.B_stride[0] + g * a.B_stride[1] + start : nullptr;
  const T* C_rows = kVarC ? static_cast<const T*>(a.C) + b * a.C_stride[0] + g * a.C_stride[1] + start : nullptr;
  const float* Bfix = kVarB ? nullptr : static_cast<const float*>(a.B) + c * n;
  const float* Cfix = kVarC ? nullptr : static_cast<const float*>(a.C) + c * n;
  const float bias = a.delta_bias ? a.delta_bias[c] : 0.0f;
  const float Dv = a.D ? a.D[c] : 0.0f;
  float* final_row = a.final_state ? a.final_state + (b * a.d + c) * n : nullptr;

  // The warp's carry starts as the initial state; only lanes < cw touch it (each its own words).
  if (lane < cw)
    for (int s = 0; s < n; ++s) carry[s * cw] = a.initial_state ? a.initial_state[(b * a.d + c) * n + s] : 0.0f;
  if (len <= 0) {
    if (final_row && lane < cw)
      for (int s = 0; s < n; ++s) final_row[s] = carry[s * cw];
    return;  // uniform over the block (one sequence per block)
  }
  const std::int64_t nchunks = (len + sh.chunk - 1) / sh.chunk;
  const auto rows_vec = [](const T* rows, std::int64_t stride) {
    return aligned16(rows) && (stride * std::int64_t(sizeof(T))) % 16 == 0;
  };
  const bool vec = (!kVarB || rows_vec(B_rows, a.B_stride[2])) && (!kVarC || rows_vec(C_rows, a.C_stride[2]));
  std::int64_t fq = 0;  // first round (chunk fq, state fs) of the next stage to fill
  int fs = 0;
  const auto advance = [&] {
    fs += sh.rounds;
    while (fs >= n) { fs -= n; ++fq; }
  };
  unsigned char* const ring0 = smem;
  const int fill_tid = int(threadIdx.x), fill_threads = int(blockDim.x);
  if constexpr (M > 0) {
    fill_stage<T, K, kVarB, kVarC>(ring0, sh, lay.row, fq, fs, nchunks, n, B_rows, a.B_stride[2], C_rows,
                                   a.C_stride[2], len, vec, fill_tid, fill_threads);
    cp_async_commit();
    advance();
  }

  // Running pointers (no index arithmetic per round): this segment's B row in the ring, the
  // round within its stage, the stage's slot.
  const unsigned char* ring = ring0 + seg * sh.seg_bytes;
  int j = 0, slot = 0;
  {  // A of the warp's channels, [s][cw] beside the carry: a shared-memory read per round
    float* a_sm = carry - ch + lay.a_words;
    const float* A_w = a.A + (c - ch) * n;
    for (int i = lane; i < n * cw; i += 32) a_sm[i] = A_w[(i % cw) * n + i / cw];
    __syncwarp();
  }
  float A_cur = carry[lay.a_words], Bs_cur = kVarB ? 0.0f : Bfix[0], Cs_cur = kVarC ? 0.0f : Cfix[0];
  for (std::int64_t q = 0; q < nchunks; ++q) {
    const std::int64_t t0 = q * sh.chunk, ti = t0 + std::int64_t(seg) * K;  // this thread's first step
    const int valid = int(std::clamp<std::int64_t>(len - ti, 0, K));
    const bool last_chunk = q + 1 == nchunks;
    float dt[K], du[K], y[K], sumdt = 0.0f;
    {
      float u[K];
      load_items<T, K>(u_row + ti, valid, u, 0.0f);
      load_items<T, K>(dt_row + ti, valid, dt, 0.0f);
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float d = dt[k] + bias;
        if (a.delta_softplus) d = d <= 20.0f ? softplus_fast(d) : d;
        d = k < valid ? d : 0.0f;  // past the end: a = 1, b = 0 (identity)
        dt[k] = d * kLog2e;        // pre-scaled for ex2
        sumdt += dt[k];
        du[k] = d * u[k];
        y[k] = Dv * u[k];
      }
      // Opaque from here on: the compiler would otherwise keep the raw u and Δ and recompute
      // Δ·log2 e, Δ·u and their sum in every state round (~50 instructions a round).
      asm volatile("" : "+f"(sumdt));
#pragma unroll
      for (int k = 0; k < K; ++k) asm volatile("" : "+f"(dt[k]), "+f"(du[k]));
    }
    if (!last_chunk && ti + sh.chunk < len) {  // warm L1 with the next chunk's rows
      const std::int64_t tn = ti + sh.chunk;
      prefetch_l1(u_row + tn);
      prefetch_l1(dt_row + tn);
      if (z_row) prefetch_l1(z_row + tn);
    }
    float* carry_s = carry;
    for (int s = 0; s < n; ++s, carry_s += cw) {
      if constexpr (M > 0) {
        if (j == 0) {  // stage `stage` has landed (own copies waited, others' by the barrier);
          cp_async_wait_all();  // the other slot was last read before this barrier: refill it
          __syncthreads();
          if (fq < nchunks)
            fill_stage<T, K, kVarB, kVarC>(ring0 + (slot ^ 1) * lay.stage, sh, lay.row, fq, fs, nchunks, n,
                                           B_rows, a.B_stride[2], C_rows, a.C_stride[2], len, vec, fill_tid,
                                           fill_threads);
          cp_async_commit();
          advance();
        }
      }
      const float A2 = A_cur, Bs = Bs_cur, Cs = Cs_cur;
      {
        const int sn = s + 1 < n ? s + 1 : 0;  // the next round's per-channel values, one round early
        A_cur = carry_s[(sn - s) * cw + lay.a_words];
        if constexpr (!kVarB) Bs_cur = Bfix[sn];
        if constexpr (!kVarC) Cs_cur = Cfix[sn];
      }
      float av[K], bv[K], bacc = 0.0f;
      {
        float Bk[K];
        if constexpr (kVarB) read_ring<T, K>(ring, Bk);
#pragma unroll
        for (int k = 0; k < K; ++k) {
          av[k] = ex2(dt[k] * A2);
          bv[k] = du[k] * (kVarB ? Bk[k] : Bs);
          bacc = fmaf(av[k], bacc, bv[k]);
        }
      }
      const float cin = lane < cw ? *carry_s : 0.0f;
      float h = cin;
      if (cw < 32) {
        // Inclusive scan of the segment maps (lanes cw apart), the carry composed in first: mb
        // ends as the state at the end of this lane's segment.
        float ma = ex2(A2 * sumdt), mb = fmaf(ma, cin, bacc);
#pragma unroll
        for (int level = 0; level < 5; ++level) {
          const int off = cw << level;
          if (off >= 32) break;
          const float oa = __shfl_up_sync(0xffffffffu, ma, off), ob = __shfl_up_sync(0xffffffffu, mb, off);
          if (lane >= off) {
            mb = fmaf(ma, ob, mb);
            ma *= oa;
          }
        }
        const float prev = __shfl_up_sync(0xffffffffu, mb, cw);
        if (lane >= cw) h = prev;
      }
      {
        float Ck[K];
        if constexpr (kVarC) read_ring<T, K>(ring + (kVarB ? lay.row : 0), Ck);
#pragma unroll
        for (int k = 0; k < K; ++k) {
          h = fmaf(av[k], h, bv[k]);
          y[k] = fmaf(h, kVarC ? Ck[k] : Cs, y[k]);
        }
      }
      const float hout = __shfl_sync(0xffffffffu, h, 32 - cw + ch);  // the last segment's state
      if (lane < cw) *carry_s = hout;
      ring += M * lay.row;
      if (++j == sh.rounds) {
        j = 0;
        slot ^= 1;
        ring = ring0 + slot * lay.stage + seg * sh.seg_bytes;
      }
    }
    if (z_row) {
      float z[K];
      load_items<T, K>(z_row + ti, valid, z, 0.0f);
#pragma unroll
      for (int k = 0; k < K; ++k) y[k] *= __fdividef(z[k], 1.0f + ex2(-z[k] * kLog2e));
    }
    store_items<T, K>(out_row + ti, valid, y);
  }
  if (final_row && lane < cw)  // the last chunk's carry (each lane reads back its own words)
    for (int s = 0; s < n; ++s) final_row[s] = carry[s * cw];
  if constexpr (M > 0) cp_async_wait_all();  // no copy left in flight at exit
}

// ---- version 6: each thread walks time in order; a channel's states spread over P lanes -------------
// Versions 4-5 cut time into segments across lanes, so every (step, state) paid a fold, a replay
// and a share of a shuffle scan (~12 instructions against the ≤ 8 an SFU-bound kernel may spend,
// and a latency-bound shuffle chain in every round). Here a thread owns S states of one channel
// and carries them through the whole sequence: per (step, state) one FMUL (Δ·A), one ex2, one
// FMUL (Δu·B), one FFMA (h) and one FFMA (y += C·h): no fold, no scan, no replay. The state
// dimension gives the parallelism the time segments gave: P = n / S lanes per channel,
// G = 32 / P channels per warp; y of a step is summed over the P lanes once per chunk through
// shared memory. Everything a warp reads is its own: its chunk of B and C (Tc steps × n states)
// is staged by the warp with cp.async one chunk ahead (16-bit inputs widened to f32 once per
// chunk), u, Δ and z are loaded into registers one chunk ahead, so the only synchronisation is
// __syncwarp and warps never wait on each other. Per chunk a lane also prepares Tc / P steps of
// its channel (softplus, Δ·log2 e, Δ·u, D·u) and finishes them (the lanes' y summed, gate, store).
// S states a lane, P lanes a channel, Tc steps a chunk. (Two channels a lane, to read B and C once
// for both, and a register cap for more warps per SM were measured slower, with spills:
// docs/perf/selective_scan.md, session 10. The explicit minimum of 1 block in __launch_bounds__
// is kept: without it nvcc allocates the registers of the v6 kernels differently.)
template <int S_, int P_, int Tc_>
struct SeqConfig {
  static constexpr int S = S_, P = P_, Tc = Tc_, n = S_ * P_, G = 32 / P_, J = Tc_ / P_;
  static_assert(J % 2 == 0 && Tc % 8 == 0 && 32 % P == 0);
};

// One warp's shared memory (bytes). B and C of a chunk as f32 rows of Tc values, row r (= m·n + s)
// at r·Tc·4 + (r / S)·16: the 16 bytes after every S rows put the rows that the P lanes of a
// channel read in one instruction (s = p·S + i) in different banks. Δ·log2 e, Δ·u and the partial
// y rows are Tc + 4 words long for the same reason.
template <class T, class Cfg>
struct SeqLayout {
  static constexpr bool k16 = sizeof(T) == 2;
  static constexpr int kRow = Cfg::Tc + 4;                                  // f32 words per xs / yx row
  static constexpr int kRawRow = Cfg::Tc * int(sizeof(T));                  // bytes per copied 16-bit row
  static constexpr int kF32 = 2 * Cfg::n * Cfg::Tc * 4 + (2 * Cfg::n / Cfg::S) * 16;  // B and C as f32
  static constexpr int kStage = k16 ? 2 * Cfg::n * kRawRow : kF32;           // a chunk's B and C as copied
  static constexpr int kConv = k16 ? kF32 : 0;                               // 16-bit: widened
  static constexpr int kXs = 2 * Cfg::G * kRow * 4;                          // Δ·log2 e and Δ·u per channel
  static constexpr int kYx = 32 * kRow * 4;                                 // each lane's partial y
  static constexpr int bytes = 2 * kStage + kConv + kXs + kYx;
  // Warp-specialised (kSpec): per pair of warps, two slots of everything, plus D·u and z per lane.
  static constexpr int kDz = 2 * 32 * Cfg::J * 4;
  static constexpr int spec_bytes = 2 * (kStage + kConv + kXs + kYx + kDz) + 32;  // + 4 mbarriers
  __host__ __device__ static constexpr int f32_row(int r) { return r * Cfg::Tc * 4 + (r / Cfg::S) * 16; }
};

// mbarriers in shared memory (the warp-specialised handoff): every lane of a warp arrives
// (release), the other warp waits for the barrier's phase (acquire).
__device__ __forceinline__ void mbar_init(unsigned addr, unsigned count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(addr), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned addr) {
  asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared.b64 st, [%0];\n\t}" ::"r"(addr) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned addr, unsigned parity) {
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "wait:\n\t"
      "mbarrier.try_wait.parity.shared.b64 done, [%0], %1;\n\t"
      "@!done bra wait;\n\t}" ::"r"(addr),
      "r"(parity)
      : "memory");
}

// v6's lane layout: lane = p0 | cl0·2 | hi·4 with hi = (cl / 2)·(P / 2) + p / 2 (p0, cl0 the low
// bits; P = 2 gives lane = cl·2 + p). Where P or G is 1 there is no pair to match: lane = cl·P + p.
template <int P, int G>
__device__ __forceinline__ int lane_p(int lane) {
  if constexpr (P == 1 || G == 1) return lane % P;
  else return (lane & 1) | (((lane >> 2) % (P / 2)) << 1);
}
template <int P, int G>
__device__ __forceinline__ int lane_cl(int lane) {
  if constexpr (P == 1 || G == 1) return lane / P;
  else return ((lane >> 1) & 1) | (((lane >> 2) / (P / 2)) << 1);
}
template <int P, int G>
__device__ __forceinline__ int lane_of(int cl, int p) {
  if constexpr (P == 1 || G == 1) return cl * P + p;
  else return (p & 1) | ((cl & 1) << 1) | (((cl >> 1) * (P / 2) + (p >> 1)) << 2);
}

// J values of T at p, raw (converted where they are used, so a load in flight stalls nobody).
template <class T, int J>
struct Run {
  T v[J];
};
template <class T, int J>
__device__ __forceinline__ void load_run(const T* p, int valid, Run<T, J>& r) {
  constexpr int kBytes = J * int(sizeof(T));
  static_assert(kBytes % 16 == 0 || kBytes == 8 || kBytes == 4);
  if (valid >= J && (reinterpret_cast<std::uintptr_t>(p) & (kBytes >= 16 ? 15 : kBytes - 1)) == 0) {
    if constexpr (kBytes % 16 == 0) {
#pragma unroll
      for (int i = 0; i < kBytes / 16; ++i) {
        const uint4 raw = reinterpret_cast<const uint4*>(p)[i];
        memcpy(&r.v[i * 16 / int(sizeof(T))], &raw, 16);
      }
    } else if constexpr (kBytes == 8) {
      const uint2 raw = *reinterpret_cast<const uint2*>(p);
      memcpy(r.v, &raw, 8);
    } else {
      const unsigned raw = *reinterpret_cast<const unsigned*>(p);
      memcpy(r.v, &raw, 4);
    }
  } else {
#pragma unroll
    for (int k = 0; k < J; ++k) r.v[k] = k < valid ? p[k] : from_f32<T>(0.0f);
  }
}
template <class T, int J>
__device__ __forceinline__ void store_run(T* p, int valid, const float (&v)[J]) {
  constexpr int kBytes = J * int(sizeof(T));
  T e[J];
#pragma unroll
  for (int k = 0; k < J; ++k) e[k] = from_f32<T>(v[k]);
  if (valid >= J && (reinterpret_cast<std::uintptr_t>(p) & (kBytes >= 16 ? 15 : kBytes - 1)) == 0) {
    if constexpr (kBytes % 16 == 0) {
#pragma unroll
      for (int i = 0; i < kBytes / 16; ++i) {
        uint4 raw;
        memcpy(&raw, &e[i * 16 / int(sizeof(T))], 16);
        reinterpret_cast<uint4*>(p)[i] = raw;
      }
    } else if constexpr (kBytes == 8) {
      uint2 raw;
      memcpy(&raw, e, 8);
      *reinterpret_cast<uint2*>(p) = raw;
    } else {
      unsigned raw;
      memcpy(&raw, e, 4);
      *reinterpret_cast<unsigned*>(p) = raw;
    }
  } else {
#pragma unroll
    for (int k = 0; k < J; ++k)
      if (k < valid) p[k] = e[k];
  }
}

// J f32 values to / added from shared memory, 16 or 8 bytes at a time.
template <int J>
__device__ __forceinline__ void store_f32(float* dst, const float (&v)[J]) {
#pragma unroll
  for (int j = 0; j < J; j += (J % 4 ? 2 : 4)) {
    if constexpr (J % 4 == 0) *reinterpret_cast<float4*>(dst + j) = make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]);
    else *reinterpret_cast<float2*>(dst + j) = make_float2(v[j], v[j + 1]);
  }
}
template <int J>
__device__ __forceinline__ void add_f32(const float* src, float (&acc)[J]) {
#pragma unroll
  for (int j = 0; j < J; j += (J % 4 ? 2 : 4)) {
    if constexpr (J % 4 == 0) {
      const float4 v = *reinterpret_cast<const float4*>(src + j);
      acc[j] += v.x; acc[j + 1] += v.y; acc[j + 2] += v.z; acc[j + 3] += v.w;
    } else {
      const float2 v = *reinterpret_cast<const float2*>(src + j);
      acc[j] += v.x; acc[j + 1] += v.y;
    }
  }
}

// kSpec, the warp-specialised form: warps come in pairs over the same channels. The math warp
// only steps through chunks (FMUL, ex2, FMUL, two FFMA per (step, state)), and its helper
// prepares chunks two ahead (u/Δ/z loads, softplus, B/C staging) and finishes them (the lanes'
// y sums, gate, store). They hand over through two slots of shared memory and four mbarriers
// per pair (full[slot]: helper → math, done[slot]: math → helper), so a scheduler's SFU-bound
// step loop never waits on the ALU-bound chunk ends. (Named barriers, bar.arrive / bar.sync,
// were as fast, but racecheck flagged the handoff; with mbarriers it reports nothing. Three
// slots, the helper a chunk further ahead, measured 2% slower at b1: session 14.) It pays
// where there are few warps (one stepping warp per scheduler); with many, the plain form's own
// overlap is enough.
template <class T, class Cfg, bool kSpec = false>
__global__ void __launch_bounds__(kMaxThreads, 1)
selective_scan_seq(SelectiveScanArgs a, std::int64_t warps_total) {
  using Lay = SeqLayout<T, Cfg>;
  constexpr int S = Cfg::S, P = Cfg::P, Tc = Cfg::Tc, n = Cfg::n, G = Cfg::G, J = Cfg::J, R = Lay::kRow;
  constexpr bool k16 = Lay::k16;
  constexpr int E = 16 / int(sizeof(T)), kPieces = Tc / E;  // values per 16-byte piece, pieces per row
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // kSpec: warps [0, NP) step through the chunks ("math"), warps [NP, 2·NP) prepare and finish
  // them ("helper"), pair pr = warp mod NP; otherwise every warp does everything.
  const int NP = kSpec ? int(blockDim.x >> 6) : 1, pr = kSpec ? warp % NP : warp;
  const bool math = !kSpec || warp < NP;
  const std::int64_t gw = std::int64_t(blockIdx.x) * (kSpec ? NP : int(blockDim.x >> 5)) + pr;
  if (gw >= warps_total) return;  // no block-wide barrier below (a pair leaves together)
  unsigned char* const stage0 = smem + std::size_t(pr) * (kSpec ? Lay::spec_bytes : Lay::bytes);
  // Slot bases (kSpec: slot s of each region at + s·region; otherwise one slot of xs / yx / conv).
  float* conv = reinterpret_cast<float*>(stage0 + 2 * Lay::kStage);
  float* xs = reinterpret_cast<float*>(stage0 + 2 * Lay::kStage + (kSpec ? 2 : 1) * Lay::kConv);  // [2][G][R]
  float* yx = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(xs) + (kSpec ? 2 : 1) * Lay::kXs);
  float* const dz = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(yx) + 2 * Lay::kYx);  // kSpec
  float* const conv0 = conv;
  float* const xs0 = xs;
  float* const yx0 = yx;
  const auto use_slot = [&](std::int64_t q) {
    if constexpr (kSpec) {
      const int sl = int(q & 1);
      conv = conv0 + sl * (Lay::kConv / 4);
      xs = xs0 + sl * (Lay::kXs / 4);
      yx = yx0 + sl * (Lay::kYx / 4);
    }
  };
  // Lane (cl, p): channel c0 + cl, states p·S ... p·S + S − 1. Lane bit 0 is p's low bit and bit 1
  // cl's (the rest: cl / 2, then p / 2 fastest), so lanes l and l ^ 2 read the same B / C words
  // and lanes l and l ^ 1 the same Δ words: a 16-byte shared load that pairs lanes so is served
  // in 2 wavefronts instead of 4 (shared memory returns one register a lane per cycle, two where
  // the pairs match). With cl fastest (lane = cl·P + p), P = 4 paid 4 wavefronts per B / C load.
  const int p = lane_p<P, G>(lane), cl = lane_cl<P, G>(lane);
  const std::int64_t row_warps = a.d / G, b = gw / row_warps, c0 = (gw % row_warps) * G, c = c0 + cl;
  const std::int64_t g = c0 / (a.d / a.groups);  // the warp's B/C group (G divides d / groups)
  std::int64_t start = 0, len = a.len;
  if (a.cu_seqlens) {
    start = a.cu_seqlens[b];
    len = a.cu_seqlens[b + 1] - start;
  }
  // Rows of the lane's first channel; channel k is k rows (of each tensor's channel stride) on.
  const T* u_row = static_cast<const T*>(a.u) + b * a.u_stride[0] + c * a.u_stride[1] + start;
  const T* dt_row = static_cast<const T*>(a.delta) + b * a.delta_stride[0] + c * a.delta_stride[1] + start;
  const T* z_row = a.z ? static_cast<const T*>(a.z) + b * a.z_stride[0] + c * a.z_stride[1] + start : nullptr;
  T* out_row = static_cast<T*>(a.out) + b * a.out_stride[0] + c * a.out_stride[1] + start;
  const T* B_rows = static_cast<const T*>(a.B) + b * a.B_stride[0] + g * a.B_stride[1] + start;
  const T* C_rows = static_cast<const T*>(a.C) + b * a.C_stride[0] + g * a.C_stride[1] + start;
  const float bias = a.delta_bias ? a.delta_bias[c] : 0.0f, Dv = a.D ? a.D[c] : 0.0f;
  float Ar[S], h[S];
#pragma unroll
  for (int i = 0; i < S; ++i) {
    Ar[i] = a.A[c * n + p * S + i];
    h[i] = a.initial_state ? a.initial_state[(b * a.d + c) * n + p * S + i] : 0.0f;
  }
  const auto write_final = [&] {
    if (a.final_state && math)
#pragma unroll
      for (int i = 0; i < S; ++i) a.final_state[(b * a.d + c) * n + p * S + i] = h[i];
  };
  if (len <= 0) {
    write_final();
    return;
  }
  const std::int64_t nchunks = (len + Tc - 1) / Tc;
  const auto rows_vec = [](const T* rows, std::int64_t stride) {
    return aligned16(rows) && (stride * std::int64_t(sizeof(T))) % 16 == 0;
  };
  const bool vec = rows_vec(B_rows, a.B_stride[2]) && rows_vec(C_rows, a.C_stride[2]);

  // Chunk q's B and C rows into stage slot q & 1 (f32: straight to their place in the layout;
  // 16-bit: as they are, widened by widen()), zero past the sequence's end. Lane l copies the
  // 16-byte piece l mod kPieces of rows l / kPieces + kRpj·j: one pointer step and one cp.async
  // per piece, every shared-memory offset but the lane's own a constant.
  constexpr int kRpj = 32 / kPieces, kHalf = n / kRpj;  // rows per round; rounds per matrix
  const int r0 = lane / kPieces, pc = lane % kPieces;
  const unsigned stage_sa = static_cast<unsigned>(__cvta_generic_to_shared(stage0));
  const unsigned lane_off = unsigned(k16 ? r0 * Lay::kRawRow : Lay::f32_row(r0)) + unsigned(pc) * 16u;
  const T* const srcB = B_rows + r0 * a.B_stride[2];  // + the piece's first step t below
  const T* const srcC = C_rows + r0 * a.C_stride[2];
  const std::int64_t stepB = kRpj * a.B_stride[2], stepC = kRpj * a.C_stride[2];
  const auto stage = [&](std::int64_t q) {
    const std::int64_t t = q * Tc + pc * E;
    const int bytes = int(std::clamp<std::int64_t>(len - t, 0, E)) * int(sizeof(T));
    if (vec) {
      const unsigned dst = stage_sa + unsigned(q & 1) * Lay::kStage + lane_off;
      const T* pb = bytes > 0 ? srcB + t : B_rows;
      const T* pq = bytes > 0 ? srcC + t : C_rows;
      const std::int64_t sb = bytes > 0 ? stepB : 0, sq = bytes > 0 ? stepC : 0;
#pragma unroll
      for (int j = 0; j < 2 * kHalf; ++j) {
        const int m = j / kHalf, jj = j % kHalf, rel = m * n + kRpj * jj;  // row offset from r0
        const int off = k16 ? rel * Lay::kRawRow : rel * Tc * 4 + ((m * n) / S + (kRpj * jj) / S) * 16;
        const T* src = m ? pq + jj * sq : pb + jj * sb;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + unsigned(off)), "l"(src),
                     "r"(bytes) : "memory");
      }
    } else {  // rows not 16-byte aligned: plain loads
      unsigned char* slot = stage0 + (q & 1) * Lay::kStage + lane_off;
#pragma unroll 1
      for (int j = 0; j < 2 * kHalf; ++j) {
        const int m = j / kHalf, jj = j % kHalf, rel = m * n + kRpj * jj;
        const int off = k16 ? rel * Lay::kRawRow : rel * Tc * 4 + ((m * n) / S + (kRpj * jj) / S) * 16;
        const T* src = (m ? srcC + jj * stepC : srcB + jj * stepB) + t;
        T e[E];
#pragma unroll
        for (int k = 0; k < E; ++k) e[k] = k * int(sizeof(T)) < bytes ? src[k] : from_f32<T>(0.0f);
        uint4 raw;
        memcpy(&raw, e, 16);
        *reinterpret_cast<uint4*>(slot + off) = raw;
      }
    }
  };
  const auto widen = [&](std::int64_t q) {  // 16-bit: slot q & 1 -> conv, f32 in the layout's rows
    constexpr int kP8 = Tc / 8, kR8 = 32 / kP8;  // 16-byte pieces (8 values) per raw row; rows per round
    const unsigned char* slot = stage0 + (q & 1) * Lay::kStage;
    const int w0 = lane / kP8, w8 = lane % kP8;
#pragma unroll
    for (int j = 0; j < 2 * n / kR8; ++j) {
      const int r = w0 + kR8 * j;
      const uint4 raw = *reinterpret_cast<const uint4*>(slot + r * Lay::kRawRow + w8 * 16);
      T e[8];
      memcpy(e, &raw, 16);
      float4* dst = reinterpret_cast<float4*>(reinterpret_cast<unsigned char*>(conv) + Lay::f32_row(r) + w8 * 32);
      dst[0] = make_float4(to_f32(e[0]), to_f32(e[1]), to_f32(e[2]), to_f32(e[3]));
      dst[1] = make_float4(to_f32(e[4]), to_f32(e[5]), to_f32(e[6]), to_f32(e[7]));
    }
  };
  // Of the J steps from step t (a lane's share of a chunk), how many are in the sequence.
  const auto valid_at = [&](std::int64_t t) { return int(std::clamp<std::int64_t>(len - t, 0, J)); };
  Run<T, J> un, dn, zn;  // the next chunk's u, Δ, z: this lane's J steps of its channel
  const auto fetch = [&](std::int64_t q) {
    const std::int64_t t = q * Tc + p * J;
    const int valid = valid_at(t);
    load_run<T, J>(u_row + t, valid, un);
    load_run<T, J>(dt_row + t, valid, dn);
    if (z_row) load_run<T, J>(z_row + t, valid, zn);
  };

  // Chunk q's J steps of the channel, from un / dn: Δ·log2 e and Δ·u to xs, D·u to yq.
  const auto prep = [&](std::int64_t q, float (&yq)[J]) {
    float* const xd = xs + cl * R + p * J;  // Δ·log2 e; Δ·u G·R on
    const int valid = valid_at(q * Tc + p * J);
    float dl[J], du[J];
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const float uj = to_f32(un.v[j]);
      float d = to_f32(dn.v[j]) + bias;
      const float sp = softplus_fast(d);  // both sides computed: selects, no branch
      d = a.delta_softplus && d <= 20.0f ? sp : d;
      d = j < valid ? d : 0.0f;  // past the end: a = 1, b = 0 (identity)
      dl[j] = d * kLog2e;
      du[j] = d * uj;
      yq[j] = Dv * uj;
    }
    store_f32<J>(xd, dl);
    store_f32<J>(xd + G * R, du);
  };

  // Chunk q's steps over xs and the staged B, C: the lane's partial y to yx.
  const auto steps = [&](std::int64_t q) {
    const unsigned char* Bq = (k16 ? reinterpret_cast<const unsigned char*>(conv) : stage0 + (q & 1) * Lay::kStage) +
                              Lay::f32_row(p * S);  // this lane's rows p·S + i of B, then of C
    const unsigned char* Cq = Bq + Lay::f32_row(n);
    const float4* xl = reinterpret_cast<const float4*>(xs + cl * R);
    const float4* xu = xl + G * R / 4;
    float y[Tc];
#pragma unroll
    for (int g4 = 0; g4 < Tc / 4; ++g4) {
      const float4 l4 = xl[g4], u4 = xu[g4];
      const float lv[4] = {l4.x, l4.y, l4.z, l4.w}, uv[4] = {u4.x, u4.y, u4.z, u4.w};
#pragma unroll
      for (int i = 0; i < S; ++i) {  // B and C of state i
        const float4 b4 = reinterpret_cast<const float4*>(Bq + i * Tc * 4)[g4];
        const float4 c4 = reinterpret_cast<const float4*>(Cq + i * Tc * 4)[g4];
        const float bv[4] = {b4.x, b4.y, b4.z, b4.w}, cv[4] = {c4.x, c4.y, c4.z, c4.w};
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          h[i] = fmaf(ex2(lv[kk] * Ar[i]), h[i], uv[kk] * bv[kk]);
          y[4 * g4 + kk] = i == 0 ? h[i] * cv[kk] : fmaf(h[i], cv[kk], y[4 * g4 + kk]);
        }
      }
    }
    // All Tc sums stored at the end: storing each 4 as they finish frees ~60 registers but ran
    // 7-9% slower (the compiler interleaves less of the step loop): docs/perf/selective_scan.md.
    float4* mine = reinterpret_cast<float4*>(yx + lane * R);
#pragma unroll
    for (int m = 0; m < Tc / 4; ++m) mine[m] = make_float4(y[4 * m], y[4 * m + 1], y[4 * m + 2], y[4 * m + 3]);
  };
  // Chunk q's outputs: y of each step summed over the channel's P lanes (lane p: steps p·J ...
  // p·J + J − 1), plus D·u (in yo), gated, stored.
  const auto finish = [&](std::int64_t q, float (&yo)[J], const float (&zf)[J]) {
    const std::int64_t tq = q * Tc + p * J;
    const int valid = valid_at(tq);
#pragma unroll
    for (int pp = 0; pp < P; ++pp) add_f32<J>(yx + lane_of<P, G>(cl, pp) * R + p * J, yo);
    if (z_row) {
#pragma unroll
      for (int j = 0; j < J; ++j) yo[j] *= __fdividef(zf[j], 1.0f + ex2(-zf[j] * kLog2e));
    }
    store_run<T, J>(out_row + tq, valid, yo);
  };
  const auto z_of = [&](float (&zf)[J]) {
#pragma unroll
    for (int j = 0; j < J; ++j) zf[j] = z_row ? to_f32(zn.v[j]) : 0.0f;
  };

  if constexpr (kSpec) {
    // mbarriers full[2] (helper → math: slot ready) and done[2] (math → helper: slot free), 32
    // arrivals a phase; chunk q uses slot q & 1 for the (q / 2)-th time: phase parity (q / 2) & 1.
    const unsigned bars = static_cast<unsigned>(__cvta_generic_to_shared(stage0 + Lay::spec_bytes - 32));
    const auto full = [&](std::int64_t q) { return bars + unsigned(q & 1) * 8u; };
    const auto done = [&](std::int64_t q) { return bars + 16u + unsigned(q & 1) * 8u; };
    const auto parity = [](std::int64_t q) { return unsigned((q >> 1) & 1); };
    if (!math && lane == 0)
      for (int i = 0; i < 4; ++i) mbar_init(bars + 8u * unsigned(i), 32);
    asm volatile("bar.sync %0, 64;" ::"r"(pr + 1) : "memory");  // the pair: barriers initialised
    if (math) {  // the step loop only
#pragma unroll 1
      for (std::int64_t q = 0; q < nchunks; ++q) {
        use_slot(q);
        mbar_wait(full(q), parity(q));
        steps(q);
        mbar_arrive(done(q));
      }
      write_final();
      return;
    }
    // Helper: chunks 0 and 1 prepared, then per chunk q: finish it, prepare chunk q + 2 in its slot.
    // D·u and z of a chunk wait in the slot's dz (lane-private).
    const auto dz_of = [&](std::int64_t q) { return dz + int(q & 1) * (2 * 32 * J) + lane * J; };
    const auto produce = [&](std::int64_t q, bool staged) {  // u, Δ, z of q in un / dn / zn
      use_slot(q);
      if (!staged) {
        stage(q);
        cp_async_commit();
      }
      float yq[J], zf[J];
      prep(q, yq);
      z_of(zf);
      float* d = dz_of(q);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        d[j] = yq[j];
        d[32 * J + j] = zf[j];
      }
    };
    const auto publish = [&](std::int64_t q) {
      cp_async_wait_all();
      __syncwarp();
      if constexpr (k16) {
        widen(q);
        __syncwarp();
      }
      mbar_arrive(full(q));
    };
    for (std::int64_t q = 0; q < 2 && q < nchunks; ++q) {
      fetch(q);
      produce(q, false);
      publish(q);
    }
    if (nchunks > 2) fetch(2);
#pragma unroll 1
    for (std::int64_t q = 0; q < nchunks; ++q) {
      mbar_wait(done(q), parity(q));  // the math warp is done with chunk q and its slot
      const bool next = q + 2 < nchunks;
      if (next) {  // stage() finds its slot from q
        stage(q + 2);
        cp_async_commit();
      }
      use_slot(q);
      float yo[J], zf[J];
      const float* d = dz_of(q);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        yo[j] = d[j];
        zf[j] = d[32 * J + j];
      }
      finish(q, yo, zf);
      if (next) {
        produce(q + 2, true);
        if (q + 3 < nchunks) fetch(q + 3);
        publish(q + 2);
      }
    }
    cp_async_wait_all();
    return;
  } else {
    stage(0);
    cp_async_commit();
    fetch(0);
#pragma unroll 1
    for (std::int64_t q = 0; q < nchunks; ++q) {
      float yo[J], zf[J];  // chunk q's D·u (then its output) and z
      prep(q, yo);            // while chunk q's copies land
      z_of(zf);
      if (q + 1 < nchunks) {
        fetch(q + 1);
        stage(q + 1);
      }
      cp_async_commit();
      cp_async_wait_group1();  // chunk q's pieces (this lane's) have landed; the warp's after the sync
      __syncwarp();
      if constexpr (k16) {
        widen(q);
        __syncwarp();
      }
      steps(q);
      __syncwarp();
      finish(q, yo, zf);
      __syncwarp();  // yx and xs are rewritten by the next chunk
    }
    write_final();
    cp_async_wait_all();
  }
}

// ---- one decoding step -------------------------------------------------------------------------
// kLanes lanes per (batch, channel) row, each over packs of kVec consecutive states (kVec = 4:
// 16-byte state and A accesses, when n % 4 == 0 and the rows are aligned); y reduced by shuffles.
template <class T, int kVec>
__device__ __forceinline__ void load_pack(const T* p, float (&v)[kVec]) {
  if constexpr (kVec == 4 && sizeof(T) == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
  } else if constexpr (kVec == 4) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    T e[4];
    memcpy(e, &raw, 8);
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = to_f32(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = to_f32(p[i]);
  }
}

// kLanes lanes a (batch, channel) row, kPacks packs of kVec states a lane. Every load of a lane's
// first round of packs (state, A, B, C) is issued before x, Δ and softplus, whose results the
// packs' arithmetic waits for: the state, the bytes that matter, must not queue behind a second
// round trip (at n = 16 a thread lives for one round, several waves of them per call). Row
// indices in 32 bits when batch·d fits (one division instead of three 64-bit ones).
// The kPacks packs of a round are all loaded before any is used: lane l of a row owns the packs at states
// (l + j·kLanes)·kVec + i·kLanes·kVec·kPacks (j < kPacks, rounds i), so the lanes of a row read
// consecutive 16-byte pieces. Fewer lanes a row (each with more packs) repeat the row's index,
// softplus and shuffle work fewer times and keep more rows in flight per SM (launch_step).
// Launched as a programmatic dependent (chain_head: launch_dependent, SIXFOLD_NO_CHAIN=1 for a
// plain launch): a decode loop's next step is scheduled while this one ends, and waits for it
// before its first load.
template <class T, int kLanes, int kVec, int kPacks, class Index>
__global__ void __launch_bounds__(256) selective_state_update_rows(StateUpdateArgs a) {
  parallel::cuda::chain_head();
  const Index row = Index((std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes);
  const int l = threadIdx.x % kLanes;
  const Index d = Index(a.d);
  const bool ok = std::int64_t(row) < a.batch * a.d;
  const Index r = ok ? row : 0, b = r / d, c = r - b * d, g = c / (d / Index(a.groups));
  const int n = int(a.n);
  // Element offsets in Index arithmetic (32-bit when every tensor's offsets fit: launch_step).
  const auto off = [](Index i, std::int64_t si, Index j, std::int64_t sj) { return i * Index(si) + j * Index(sj); };
  const T* Bp = static_cast<const T*>(a.B) + off(b, a.B_stride[0], g, a.B_stride[1]);
  const T* Cp = static_cast<const T*>(a.C) + off(b, a.C_stride[0], g, a.C_stride[1]);
  float* h = a.state + r * Index(n);
  const float* A = a.A + c * Index(n);
  constexpr int kStride = kLanes * kVec, kRound = kStride * kPacks;  // states between a lane's packs; a round
  const int s0 = l * kVec;
  float hv[kPacks][kVec], Av[kPacks][kVec], Bv[kPacks][kVec], Cv[kPacks][kVec];
  const auto load = [&](int s) {
#pragma unroll
    for (int j = 0; j < kPacks; ++j)
      if (s + j * kStride < n) {
        load_pack<float, kVec>(h + s + j * kStride, hv[j]);
        load_pack<float, kVec>(A + s + j * kStride, Av[j]);
        load_pack<T, kVec>(Bp + s + j * kStride, Bv[j]);
        load_pack<T, kVec>(Cp + s + j * kStride, Cv[j]);
      }
  };
  if (ok && s0 < n) load(s0);
  const float x = to_f32(static_cast<const T*>(a.x)[off(b, a.x_stride[0], c, a.x_stride[1])]);
  float dt = to_f32(static_cast<const T*>(a.dt)[off(b, a.dt_stride[0], c, a.dt_stride[1])]) +
             (a.dt_bias ? a.dt_bias[c] : 0.0f);
  if (a.dt_softplus) dt = dt <= 20.0f ? softplus_fast(dt) : dt;  // mamba's threshold
  const float dtl = dt * 1.4426950408889634f, dx = dt * x;
  float y = 0.0f;
  if (ok)
    for (int s = s0; s < n; s += kRound) {
      if (s != s0) load(s);
#pragma unroll
      for (int j = 0; j < kPacks; ++j) {
        if (s + j * kStride >= n) break;
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          hv[j][i] = ex2(dtl * Av[j][i]) * hv[j][i] + dx * Bv[j][i];
          y += hv[j][i] * Cv[j][i];
        }
        float* hs = h + s + j * kStride;
        if constexpr (kVec == 4) *reinterpret_cast<float4*>(hs) = make_float4(hv[j][0], hv[j][1], hv[j][2], hv[j][3]);
        else hs[0] = hv[j][0];
      }
    }
#pragma unroll
  for (int off = 1; off < kLanes; off <<= 1) y += __shfl_xor_sync(0xffffffffu, y, off);
  if (!ok || l != 0) return;
  if (a.D) y += a.D[c] * x;
  if (a.z) {
    const float z = to_f32(static_cast<const T*>(a.z)[off(b, a.z_stride[0], c, a.z_stride[1])]);
    y *= __fdividef(z, 1.0f + __expf(-z));
  }
  static_cast<T*>(a.out)[off(b, a.out_stride[0], c, a.out_stride[1])] = from_f32<T>(y);
}


// ---- launch --------------------------------------------------------------------------------------
using parallel::cuda::DeviceGuard;

int sm_count(int device) { return parallel::cuda::sm_count(device, kWhere); }

constexpr std::size_t kSmemLimit = 48 * 1024;  // what a launch gets without opting in

Shape make_shape(int cw, int warps, int k, int elem_bytes, std::int64_t d, std::int64_t groups) {
  Shape sh;
  sh.cw = cw;
  sh.warps = warps;
  sh.chunk = (32 / cw) * k;
  sh.rounds = kStageRounds;
  sh.seg_bytes = k * elem_bytes + 16;
  sh.row_pieces_log = 0;
  while ((16 << sh.row_pieces_log) < sh.chunk * elem_bytes) ++sh.row_pieces_log;
  sh.channel_blocks = int(d / (std::int64_t(warps) * cw));
  (void)groups;
  return sh;
}

// Default launch shape. Every block reads one B/C group, so W·Cw must divide d / groups. Cw: the
// widest power of two (≤ 4) that still leaves ~11 warps per SM (time segments give the
// parallelism that channels lack). W (8, 4, 2 or 1): the one whose blocks fill the SMs' last
// round best, time counted as rounds of blocks per SM times warps per block (the larger W on
// ties: more channels share each staged B/C element). From the H200 sweep of session 4 (v5):
// the previous rule (Cw ≤ 8, ~12 warps per SM, the largest W) gave Cw 8 / W 8 on b8 d2048
// (0.849 ms against 0.824 for Cw 4 / W 8) and Cw 2 / W 8 on b4 d1536 (2.205 against 2.070 for
// Cw 4 / W 4: 192 blocks of 8 warps leave 72 of the 132 SMs one block short).
SelectiveScanLaunch choose_launch(const SelectiveScanArgs& a, int device, SelectiveScanLaunch l) {
  const std::int64_t per_group = a.d / a.groups, channels = a.batch * a.d;
  const std::int64_t sms = sm_count(device);
  if (!l.channels_per_warp) {
    int cw = 1;
    while (cw < 4 && per_group % (2 * cw) == 0 && channels / (2 * cw) >= 11 * sms) cw *= 2;
    // Dev/test hook: SIXFOLD_SSCAN_CW=c forces the widest power of two <= c that divides the
    // group (the tests' small shapes would otherwise always get Cw = 1).
    if (const char* e = std::getenv("SIXFOLD_SSCAN_CW")) {
      const int want = std::atoi(e);
      cw = 1;
      while (2 * cw <= std::min(want, 32) && per_group % (2 * cw) == 0) cw *= 2;
    }
    l.channels_per_warp = cw;
  }
  if (!l.warps) {
    const std::int64_t warps = channels / l.channels_per_warp;
    double best = -1.0;
    for (int w = kMaxWarps; w >= 1; w /= 2) {
      if (per_group % (std::int64_t(w) * l.channels_per_warp) != 0) continue;
      const std::int64_t blocks = warps / w, rounds = (blocks + sms - 1) / sms;
      const double fill = double(warps) / double(rounds * sms * w);
      if (fill > best + 0.02) {
        best = fill;
        l.warps = w;
      }
    }
  }
  return l;
}

template <class T, bool kVarB, bool kVarC, class Cfg, bool kFixedSegs = false>
void launch_scan(const SelectiveScanArgs& a, cudaStream_t stream, SelectiveScanLaunch l, bool fit) {
  constexpr int M = int(kVarB) + int(kVarC);
  if ((a.d / a.groups) % (std::int64_t(l.warps) * l.channels_per_warp) != 0)
    throw_error(kWhere, "warps · channels_per_warp must divide d / groups");
  Shape sh = make_shape(l.channels_per_warp, l.warps, Cfg::kItems, int(sizeof(T)), a.d, a.groups);
  // Shared memory: fewer rounds per stage, then (default launches) fewer warps, until it fits.
  if (l.variant == 3) sh.rounds = 4;  // dev: the stage depth of the first version
  while (std::size_t(SmemLayout(sh, M, int(a.n)).bytes) > kSmemLimit) {
    if (sh.rounds > 1) sh.rounds /= 2;
    else if (fit && sh.warps > 1) {
      do --sh.warps; while ((a.d / a.groups) % (std::int64_t(sh.warps) * sh.cw) != 0);
      sh.channel_blocks = int(a.d / (std::int64_t(sh.warps) * sh.cw));
    } else break;
  }
  const std::size_t smem = std::size_t(SmemLayout(sh, M, int(a.n)).bytes);
  if (smem > kSmemLimit) throw_error(kWhere, "launch shape needs more than 48 KB of shared memory for this d_state");
  const std::int64_t blocks = a.batch * sh.channel_blocks;
  if (blocks > 0x7fffffff) throw_error(kWhere, "too many (batch, channel-group) blocks for one launch");
  const auto plain = selective_scan_warps<T, kVarB, kVarC, Cfg, 0>;
  auto kernel = plain;
  if constexpr (kFixedSegs) {  // Mamba's case (input-dependent B and C): the scan unrolled for the usual widths
    if (sh.cw == 8) kernel = selective_scan_warps<T, kVarB, kVarC, Cfg, 4>;
    if (sh.cw == 4) kernel = selective_scan_warps<T, kVarB, kVarC, Cfg, 8>;
    if (sh.cw == 2) kernel = selective_scan_warps<T, kVarB, kVarC, Cfg, 16>;
    if (sh.cw == 1) kernel = selective_scan_warps<T, kVarB, kVarC, Cfg, 32>;
  }
  kernel<<<unsigned(blocks), unsigned(sh.warps * 32), smem, stream>>>(a, sh);
  check_cuda(cudaGetLastError(), kWhere);
}

template <class T, class Cfg>
void launch_scan_bc(const SelectiveScanArgs& a, cudaStream_t s, SelectiveScanLaunch l, bool fit) {
  if (a.var_B && a.var_C) launch_scan<T, true, true, Cfg, true>(a, s, l, fit);
  else if (a.var_B) launch_scan<T, true, false, Cfg>(a, s, l, fit);
  else if (a.var_C) launch_scan<T, false, true, Cfg>(a, s, l, fit);
  else launch_scan<T, false, false, Cfg>(a, s, l, fit);
}

template <class T>
void launch_scan_variant(const SelectiveScanArgs& a, cudaStream_t s, SelectiveScanLaunch l, bool fit) {
  if constexpr (std::is_same_v<T, float>) {  // dev variants (dev/selective_scan/sweep_launch.cpp)
    if (l.variant == 2) return launch_scan<T, true, true, ScanConfig<8, 3>>(a, s, l, fit);
    if (l.variant == 4) return launch_scan<T, true, true, DefaultConfig>(a, s, l, fit);
  }
  launch_scan_bc<T, DefaultConfig>(a, s, l, fit);
}

// Version 6's launch, for input-dependent B and C with n ∈ {16, 32, 64} (the other cases run
// version 5): P = 4 lanes per channel (8 channels a warp) when that gives at least ~4 warps per
// SM (b8 d2048 n16: 0.534 ms against 0.552 at P = 2, 16 channels a warp, since the lane layout
// pairs P = 4's shared loads; P = 2 won before it, 0.559 against 0.591); below that
// (b1 d4096) the warp-specialised form, each stepping warp paired with a helper that prepares
// and finishes its chunks (0.096 ms against 0.114 for the plain form at P = 8, which this case
// ran before; at b8 d2048 the plain form wins, 0.591 against 0.681). Tc = 32 steps per chunk (16
// when S ≥ 8: more spills). W (warps per block; blocks never synchronise) from {8, 4, 2, 1}: see
// launch_seq. The H200 sweep (docs/perf/selective_scan.md, session 10): b1 d4096 n16 0.120 ms
// at P = 8 against 0.163 at P = 4; b8 d2048 n16 0.622 at P = 4 against 0.798 at P = 8; b4 d1536 n64
// 1.646 at P = 4 against 1.931 at P = 8. Two channels a lane (K = 2: B and C read once for both),
// 128-register caps and 16-step chunks at n = 16 measured slower. Dev hook:
// SIXFOLD_SSCAN_KERNEL=v5 runs version 5; =p2 (n = 16) / =p4 / =p8 force the plain form with that
// P; =spec the warp-specialised form (=spec8: at P = 8). SIXFOLD_SSCAN_W forces the warps per block.
int seq_choice() {
  const char* e = std::getenv("SIXFOLD_SSCAN_KERNEL");
  if (!e) return 0;
  if (!std::strcmp(e, "v5")) return -1;
  if (!std::strcmp(e, "p4")) return 4;
  if (!std::strcmp(e, "p8")) return 8;
  if (!std::strcmp(e, "spec")) return 2;  // warp-specialised (P = 4 where the group allows)
  if (!std::strcmp(e, "p2")) return 6;
  if (!std::strcmp(e, "spec8")) return 10;  // warp-specialised at P = 8
  return 0;
}

template <class T, class Cfg, bool kSpec = false>
void launch_seq(const SelectiveScanArgs& a, int device, cudaStream_t stream) {
  // kSpec: "warps" below are pairs (a math and a helper warp, bytes each pair), blocks of w pairs.
  constexpr int bytes = kSpec ? SeqLayout<T, Cfg>::spec_bytes : SeqLayout<T, Cfg>::bytes, kPer = kSpec ? 64 : 32;
  constexpr std::size_t kOptIn = 227 * 1024;  // Hopper's opt-in limit per block
  const auto kernel = selective_scan_seq<T, Cfg, kSpec>;
  static bool opted[64] = {};
  if (device < 64 && !opted[device]) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kOptIn)), kWhere);
    opted[device] = true;
  }
  // W: the fewest rounds of resident blocks, then the fewest warps on the busiest SM,
  // ceil(blocks / SMs)·W (blocks are dealt out evenly; the larger W on ties), among the W whose
  // blocks fit an SM at all (registers and shared memory, from the runtime).
  const std::int64_t warps = a.batch * (a.d / Cfg::G), sms = sm_count(device);
  static int fits[64][4] = {};  // [device][log2 W]: blocks an SM holds, 0 until asked
  int w_best = 0;
  std::int64_t best = 0;
  const char* w_env = std::getenv("SIXFOLD_SSCAN_W");  // dev hook: only this W (1, 2, 4 or 8)
  for (int lw = kSpec ? 2 : 3; lw >= 0; --lw) {
    const int w = 1 << lw;
    if (std::size_t(w) * bytes > kOptIn || (w_env && std::atoi(w_env) != w)) continue;
    int fit = device < 64 ? fits[device][lw] : 0;
    if (!fit) {
      check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, w * kPer, std::size_t(w) * bytes), kWhere);
      if (device < 64) fits[device][lw] = fit;
    }
    if (fit < 1) continue;
    // Rounds of resident blocks first (a warp's speed hardly depends on how many share its SM),
    // then the warps on the busiest SM.
    const std::int64_t blocks = (warps + w - 1) / w, rounds = (blocks + sms * fit - 1) / (sms * fit);
    const std::int64_t cost = rounds * 4096 + (blocks + sms - 1) / sms * w;
    if (!w_best || cost < best) {
      best = cost;
      w_best = w;
    }
  }
  if (!w_best) throw_error(kWhere, "no block of this kernel fits an SM");
  const std::int64_t blocks = (warps + w_best - 1) / w_best;
  if (blocks > 0x7fffffff) throw_error(kWhere, "too many (batch, channel) warps for one launch");
  kernel<<<unsigned(blocks), unsigned(w_best * kPer), std::size_t(w_best) * bytes, stream>>>(a, warps);
  check_cuda(cudaGetLastError(), kWhere);
}

template <class T, int S4, int S8>  // S4: states per lane at P = 4 (n = 4·S4), S8 at P = 8
bool launch_seq_n(const SelectiveScanArgs& a, int device, cudaStream_t stream, int choice) {
  constexpr int kTc4 = S4 >= 8 ? 16 : 32;  // (S = 8 at Tc = 32 spills)
  const std::int64_t per_group = a.d / a.groups;
  const bool wide = a.batch * a.d / 8 >= 4 * std::int64_t(sm_count(device));
  if constexpr (S4 == 4) {  // n = 16: P = 2 (8 states a lane, 16-step chunks) only when forced
    if (choice == 6 && per_group % 16 == 0) {
      launch_seq<T, SeqConfig<8, 2, 16>>(a, device, stream);
      return true;
    }
  }
  if (choice == 10 && per_group % 4 == 0) {  // dev: the warp-specialised form at P = 8
    launch_seq<T, SeqConfig<S8, 8, 32>, true>(a, device, stream);
    return true;
  }
  if (choice == 2 || (choice == 0 && !wide)) {  // warp-specialised
    if (per_group % 8 == 0) launch_seq<T, SeqConfig<S4, 4, kTc4>, true>(a, device, stream);
    else if (per_group % 4 == 0) launch_seq<T, SeqConfig<S8, 8, 32>, true>(a, device, stream);
    else return false;
    return true;
  }
  if (choice != 8 && (wide || choice == 4) && per_group % 8 == 0)
    launch_seq<T, SeqConfig<S4, 4, kTc4>>(a, device, stream);
  else if (choice != 4 && per_group % 4 == 0)
    launch_seq<T, SeqConfig<S8, 8, 32>>(a, device, stream);
  else
    return false;
  return true;
}

template <class T>
bool try_launch_seq(const SelectiveScanArgs& a, int device, cudaStream_t stream) {
  const int choice = seq_choice();  // (SIXFOLD_SSCAN_CW, a version-5 width, runs version 5)
  if (choice < 0 || std::getenv("SIXFOLD_SSCAN_CW") || !a.var_B || !a.var_C) return false;
  if (a.n == 16) return launch_seq_n<T, 4, 2>(a, device, stream, choice);
  if (a.n == 32) return launch_seq_n<T, 8, 4>(a, device, stream, choice);
  if (a.n == 64) return launch_seq_n<T, 16, 8>(a, device, stream, choice);
  return false;
}

template <class T>
void launch_any(const SelectiveScanArgs& a, int device, cudaStream_t s, SelectiveScanLaunch launch, bool fit) {
  if (fit && launch.variant == 0 && try_launch_seq<T>(a, device, s)) return;
  launch_scan_variant<T>(a, s, choose_launch(a, device, launch), fit);
}

}  // namespace

void selective_scan_cuda_launch(const SelectiveScanArgs& a, int device, Stream stream,
                                SelectiveScanLaunch launch) {
  const int cw = launch.channels_per_warp;
  if (cw < 0 || cw > 32 || (cw & (cw - 1)) != 0) throw_error(kWhere, "channels_per_warp must be a power of two up to 32");
  if (launch.warps < 0 || launch.warps > kMaxWarps) throw_error(kWhere, "warps must be 1..8");
  if (launch.variant != 0 && !(a.dtype == DType::f32 && a.var_B && a.var_C))
    throw_error(kWhere, "dev variants are compiled for f32 with input-dependent B and C only");
  DeviceGuard guard(device, kWhere);
  const bool fit = launch.channels_per_warp == 0 && launch.warps == 0;
  const auto s = static_cast<cudaStream_t>(stream.handle);
  switch (a.dtype) {
    case DType::f32: return launch_any<float>(a, device, s, launch, fit);
    case DType::bf16: return launch_any<__nv_bfloat16>(a, device, s, launch, fit);
    case DType::f16: return launch_any<__half>(a, device, s, launch, fit);
    default: throw_error(kWhere, "dtype must be f32, bf16 or f16");
  }
}

void selective_scan_cuda(const SelectiveScanArgs& a, int device, Stream stream) {
  selective_scan_cuda_launch(a, device, stream, {});
}
namespace {

template <class T>
void launch_step(const StateUpdateArgs& a, cudaStream_t s) {
  // Packs of 4 states when every row of state, A, B and C starts 4 states apart and aligned.
  const auto al = [](const void* p, int bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; };
  const int pack = 4 * int(sizeof(T));
  const bool vec = a.n % 4 == 0 && al(a.state, 16) && al(a.A, 16) && al(a.B, pack) && al(a.C, pack) &&
                   a.B_stride[0] % 4 == 0 && a.B_stride[1] % 4 == 0 && a.C_stride[0] % 4 == 0 &&
                   a.C_stride[1] % 4 == 0;
  // Rows on the 16-byte path get 2 lanes of 2 packs (8 states a lane, per round). H200, f32,
  // b128 d4096 n16, same process, two rounds (docs/perf/selective_scan.md, session 11): 4 lanes
  // of 1 pack (48 registers) 0.037-0.040 ms per call, 0.030-0.033 in a CUDA graph; 2 lanes of 2
  // (63 registers) 0.028-0.030 / 0.024 (73.4% of the memory roofline); 1 lane of 4 (92
  // registers) 0.037-0.038 / 0.031-0.032; 2 lanes capped at 51 registers 0.039-0.040 / 0.032.
  // With the 32-bit offsets below, 2 lanes of 2 take 57 registers: 74.3-74.6% in a graph.
  // Dev/test hook: SIXFOLD_SSCAN_DECODE=1 or 4 forces that many lanes a row.
  const char* e = std::getenv("SIXFOLD_SSCAN_DECODE");
  const int want = e ? std::atoi(e) : 2;
  const int lanes = vec ? (want == 1 || want == 4 ? want : 2) : 8;
  const std::int64_t threads = a.batch * a.d * lanes;
  const unsigned blocks = unsigned((threads + 255) / 256);
  // 32-bit row indices and element offsets where every tensor's offsets fit (unsigned: no
  // stride may be negative).
  const auto fits = [](std::int64_t most) { return most <= 0x7fffffff; };
  const auto rows_fit = [&](const std::int64_t (&st)[2], std::int64_t rows, std::int64_t cols, std::int64_t tail) {
    return st[0] >= 0 && st[1] >= 0 && fits((rows - 1) * st[0] + (cols - 1) * st[1] + tail);
  };
  const bool narrow = fits(a.batch * a.d * a.n) && rows_fit(a.x_stride, a.batch, a.d, 0) &&
                      rows_fit(a.dt_stride, a.batch, a.d, 0) && (!a.z || rows_fit(a.z_stride, a.batch, a.d, 0)) &&
                      rows_fit(a.out_stride, a.batch, a.d, 0) && rows_fit(a.B_stride, a.batch, a.groups, a.n) &&
                      rows_fit(a.C_stride, a.batch, a.groups, a.n);
  const bool chain = parallel::cuda::chain_launches();
  const auto go = [&]<int kLanes, int kVec, int kPacks>() {
    if (narrow)
      parallel::cuda::launch_dependent(selective_state_update_rows<T, kLanes, kVec, kPacks, std::uint32_t>,
                                       dim3(blocks), dim3(256), 0, s, chain, kWhere, a);
    else
      parallel::cuda::launch_dependent(selective_state_update_rows<T, kLanes, kVec, kPacks, std::int64_t>,
                                       dim3(blocks), dim3(256), 0, s, chain, kWhere, a);
  };
  if (!vec) go.template operator()<8, 1, 1>();
  else if (lanes == 1) go.template operator()<1, 4, 4>();
  else if (lanes == 2) go.template operator()<2, 4, 2>();
  else go.template operator()<4, 4, 1>();
}

}  // namespace

void selective_state_update_cuda(const StateUpdateArgs& a, int device, Stream stream) {
  DeviceGuard guard(device, kWhere);
  const auto s = static_cast<cudaStream_t>(stream.handle);
  switch (a.dtype) {
    case DType::f32: launch_step<float>(a, s); break;
    case DType::bf16: launch_step<__nv_bfloat16>(a, s); break;
    case DType::f16: launch_step<__half>(a, s); break;
    default: throw_error(kWhere, "dtype must be f32, bf16 or f16");
  }
  check_cuda(cudaGetLastError(), kWhere);
}

}  // namespace sixfold::detail
