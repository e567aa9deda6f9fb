// dev/selective_scan/v3_block_scan.cu — version 3 of src/cuda/selective_scan.cu (commit 6c07e05), kept
// for comparison: time segments spread over the warps of a block, one block-wide scan (shuffles +
// shared-memory warp totals + __syncthreads) per state round, B/C tiles staged one round ahead.
// H200, f32 Mamba config, DefaultConfig (K, S) = (16, 1): b1 L2048 d4096 n16 0.192 ms (17.4% of
// roofline), b8 L4096 d2048 n16 1.372 ms (19.5%), b4 L8192 d1536 n64 4.060 ms (19.8%). To run it,
// copy it over src/cuda/selective_scan.cu (same entry points); docs/perf/selective_scan.md has the log.

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
// Layout of a block (channels_per_warp = Cw ∈ {8, 16, 32}, W warps; K, S from ScanConfig):
//   lane = (time segment within the warp) · Cw + channel; segment = warp · (32/Cw) + lane / Cw,
//   P = W · 32 / Cw segments per block, each of K = 8 consecutive steps: a chunk is P·K steps
//   of Cw channels (all of one batch row). Lanes of one segment read the same B_t, C_t (one
//   broadcast from shared memory), lanes of one channel the same A; u, Δ, z rows are read and
//   out written 16 bytes at a time.
// Per chunk, per group of S = 2 states (a "round"):
//   1. each thread makes its K pairs (a, b) = (2^(Δ·A·log2 e), Δ·u·B) in registers (ex2.approx on
//      the SFU) and folds them into its segment's map;
//   2. maps are scanned across the segments of a warp with shuffles (lanes Cw apart), warp
//      totals go through shared memory and each thread composes the earlier warps' totals onto
//      the chunk's incoming state (kept in shared memory, double-buffered) — its own incoming
//      state;
//   3. it replays its K steps from there, accumulating y_t += C_t·h_t.
// The last segment's state becomes the next chunk's incoming state. Steps past the end of a
// sequence are identity maps, so ragged lengths and varlen sequences need no special path.
// Where the time goes (H200, docs/perf/selective_scan.md): 14–16% of the exp/bandwidth roofline;
// each round costs ~3,500 cycles of latency and per-round overhead against 16 (step, state)
// items per thread, so the SFU runs at ~15% of its rate. (K, S) = (16, 1) measured 1.2–1.4×
// faster in dev/selective_scan/sweep_launch.cpp (same outputs) and is the default since.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../ops/selective_scan_entries.hpp"
#include "sixfold/algebra/instances.hpp"
#include "sixfold/parallel/cuda.cuh"

namespace sixfold::detail {
namespace {

using parallel::cuda::check_cuda;
using Map = algebra::AffineMap<float>;
constexpr const char* kWhere = "sixfold::selective_scan (cuda)";

// The kernel's compile-time shape (the launch shape (Cw, W) is chosen per call, choose_launch):
// K consecutive steps per thread and chunk, S states per scan round (2·S·K registers hold the
// round's (a, b) pairs), at least kMinBlocks blocks of 256 threads per SM (register cap).
template <int K_, int S_, int kMinBlocks_>
struct ScanConfig {
  static constexpr int kItems = K_, kStates = S_, kMinBlocks = kMinBlocks_;
};
// (16, 1, 2): 16 steps of one state per round, 128-register cap, no spills; (8, 2, 2) was the
// first default. See docs/perf/selective_scan.md for the variants tried.
using DefaultConfig = ScanConfig<16, 1, 2>;
constexpr int kMaxWarps = 8, kMaxThreads = kMaxWarps * 32;

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

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
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

__device__ __forceinline__ Map shfl_up(Map m, int delta) {
  return {__shfl_up_sync(0xffffffffu, m.a, delta), __shfl_up_sync(0xffffffffu, m.b, delta)};
}

struct Shape {
  int cw, warps, segs, chunk;  // channels per warp, warps, segments per block, steps per chunk
};

// ---- the fused scan --------------------------------------------------------------------------
// Shared memory (f32 words): carry[2][n][Cw] (incoming state of the chunk, double-buffered),
// totals[2][W][S][Cw] Map (warp totals of a state group, double-buffered), tiles[3][2][S][P·K]
// (B and C of one state group over one chunk, triple-buffered: the block loads the next group's
// tile into registers while it computes this one, and stores it before this round's barrier —
// the global-load latency hides behind a round of exponentials).
struct SmemLayout {
  int carry, totals, tiles, words;
  __host__ __device__ SmemLayout(int n, int cw, int warps, int chunk, int states) {
    carry = 0;
    totals = 2 * n * cw;
    tiles = totals + 2 * warps * states * cw * 2;
    words = tiles + 3 * 2 * states * chunk;
  }
};

template <class T, bool kVarB, bool kVarC, class Cfg>
struct TileLoader {
  static constexpr int S = Cfg::kStates;
  static constexpr int kRegs = S * Cfg::kItems / 8;  // per thread and matrix, Cw ≥ 8
  float b[kRegs], c[kRegs];
  int jr[kRegs], tr[kRegs];  // this thread's elements of the (S, chunk) tile, fixed per launch
  __device__ __forceinline__ explicit TileLoader(int chunk) {
#pragma unroll
    for (int r = 0; r < kRegs; ++r) {
      const int i = threadIdx.x + r * blockDim.x;
      jr[r] = i / chunk;
      tr[r] = i - jr[r] * chunk;
    }
  }
  // Round (chunk t0, states s0..s0+S−1) of B and C: element i = j·chunk + t of the (S, chunk) tile.
  __device__ __forceinline__ void load(const T* B_rows, std::int64_t b_s, const T* C_rows, std::int64_t c_s,
                                       std::int64_t t0, int s0, int n, std::int64_t len) {
#pragma unroll
    for (int r = 0; r < kRegs; ++r) {
      const int s = min(s0 + jr[r], n - 1);
      const std::int64_t t = t0 + tr[r];
      const bool ok = jr[r] < S && t < len;
      if constexpr (kVarB) b[r] = ok ? to_f32(B_rows[s * b_s + t]) : 0.0f;
      if constexpr (kVarC) c[r] = ok ? to_f32(C_rows[s * c_s + t]) : 0.0f;
    }
  }
  __device__ __forceinline__ void store(float* tile, int chunk) const {  // tile: (2, S, chunk)
#pragma unroll
    for (int r = 0; r < kRegs; ++r) {
      const int i = threadIdx.x + r * blockDim.x;
      if (i >= S * chunk) continue;
      if constexpr (kVarB) tile[i] = b[r];
      if constexpr (kVarC) tile[S * chunk + i] = c[r];
    }
  }
};

template <int K>
__device__ __forceinline__ void read_tile(const float* p, float (&v)[K]) {  // 16-byte aligned
#pragma unroll
  for (int i = 0; i < K / 4; ++i) {
    const float4 q = reinterpret_cast<const float4*>(p)[i];
    v[4 * i] = q.x; v[4 * i + 1] = q.y; v[4 * i + 2] = q.z; v[4 * i + 3] = q.w;
  }
}

// kSharedTile: every block's channels read one B/C group (the host checked), so B and C always
// come from the shared tiles and the per-thread fallback is compiled out.
template <class T, bool kVarB, bool kVarC, class Cfg, bool kSharedTile>
__global__ void __launch_bounds__(kMaxThreads, Cfg::kMinBlocks)
selective_scan_chunked(SelectiveScanArgs a, Shape sh, int channel_blocks) {
  constexpr int K = Cfg::kItems, S = Cfg::kStates;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ float smem[];
  const int n = int(a.n), cw = sh.cw, chunk_len = sh.chunk;
  const SmemLayout lay(n, cw, sh.warps, chunk_len, S);
  float* carry = smem + lay.carry;                                      // (2, n, Cw)
  Map* totals = reinterpret_cast<Map*>(smem + lay.totals);              // (2, W, S, Cw)
  float* tiles = smem + lay.tiles;                                      // (3, 2, S, chunk)
  const algebra::Affine<float> affine;

  const std::int64_t b = blockIdx.x / channel_blocks;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int ch = lane % cw, seg = warp * (32 / cw) + lane / cw;
  const std::int64_t c0 = std::int64_t(blockIdx.x % channel_blocks) * cw, c = c0 + ch;
  const bool active = c < a.d;
  const std::int64_t cc = active ? c : a.d - 1;  // inactive lanes shadow a valid channel
  const bool last_seg = seg == sh.segs - 1;
  std::int64_t start = 0, len = a.len;
  if (a.cu_seqlens) {
    start = a.cu_seqlens[b];
    len = a.cu_seqlens[b + 1] - start;
  }
  const std::int64_t per_group = a.d / a.groups, g = cc / per_group;
  // B/C tiles are shared by the block's channels: only when they all read one group.
  const std::int64_t g0 = c0 / per_group;

  const T* u_row = static_cast<const T*>(a.u) + b * a.u_stride[0] + cc * a.u_stride[1] + start;
  const T* dt_row = static_cast<const T*>(a.delta) + b * a.delta_stride[0] + cc * a.delta_stride[1] + start;
  const T* z_row = a.z ? static_cast<const T*>(a.z) + b * a.z_stride[0] + cc * a.z_stride[1] + start : nullptr;
  T* out_row = static_cast<T*>(a.out) + b * a.out_stride[0] + cc * a.out_stride[1] + start;
  const T* B_tile_rows = kVarB ? static_cast<const T*>(a.B) + b * a.B_stride[0] + g0 * a.B_stride[1] + start : nullptr;
  const T* C_tile_rows = kVarC ? static_cast<const T*>(a.C) + b * a.C_stride[0] + g0 * a.C_stride[1] + start : nullptr;
  const bool shared_tile = kSharedTile || (c0 + cw <= a.d ? c0 + cw - 1 : a.d - 1) / per_group == g0;
  const float* A_row = a.A + cc * n;
  const float* Bfix = kVarB ? nullptr : static_cast<const float*>(a.B) + cc * n;
  const float* Cfix = kVarC ? nullptr : static_cast<const float*>(a.C) + cc * n;
  const float bias = a.delta_bias ? a.delta_bias[cc] : 0.0f;
  const float Dv = a.D ? a.D[cc] : 0.0f;

  // Incoming state of the first chunk; the first round's B/C tile.
  for (int i = threadIdx.x; i < n * cw; i += blockDim.x) {
    const std::int64_t ci = c0 + i % cw;
    carry[i] = (a.initial_state && ci < a.d) ? a.initial_state[(b * a.d + ci) * n + i / cw] : 0.0f;
  }
  if (len == 0 && a.final_state && threadIdx.x < cw && active)
    for (int s = 0; s < n; ++s)
      a.final_state[(b * a.d + c) * n + s] = a.initial_state ? a.initial_state[(b * a.d + c) * n + s] : 0.0f;
  TileLoader<T, kVarB, kVarC, Cfg> next(chunk_len);
  if constexpr (kVarB || kVarC) {
    next.load(B_tile_rows, a.B_stride[2], C_tile_rows, a.C_stride[2], 0, 0, n, len);
    next.store(tiles, chunk_len);
  }
  __syncthreads();

  int round = 0;  // state-group rounds so far: selects the totals (mod 2) and tile (mod 3) buffers
  for (std::int64_t t0 = 0, chunk = 0; t0 < len; t0 += chunk_len, ++chunk) {
    const std::int64_t ti = t0 + std::int64_t(seg) * K;  // this thread's first step
    const int valid = int(std::clamp<std::int64_t>(len - ti, 0, K));
    const bool last_chunk = t0 + chunk_len >= len;
    float dt[K], du[K], y[K];
    {
      float u[K];
      load_items<T, K>(u_row + ti, valid, u, 0.0f);
      load_items<T, K>(dt_row + ti, valid, dt, 0.0f);
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float d = dt[k] + bias;
        if (a.delta_softplus) d = d <= 20.0f ? log1pf(__expf(d)) : d;
        d = k < valid ? d : 0.0f;  // past the end: a = 1, b = 0 (identity)
        dt[k] = d * kLog2e;        // pre-scaled for ex2
        du[k] = d * u[k];
        y[k] = Dv * u[k];
      }
    }
    // Warm L2 with the next chunk's inputs, so its loads wait on L2 rather than on DRAM.
    if (t0 + chunk_len < len) {
      const std::int64_t tn = ti + chunk_len;
      prefetch_l2(u_row + tn);
      prefetch_l2(dt_row + tn);
      if (z_row) prefetch_l2(z_row + tn);
      if constexpr (kVarB || kVarC) {
        const int lines = (chunk_len * int(sizeof(T)) + 127) / 128;  // 128-byte lines per row
        for (int i = threadIdx.x; i < 2 * n * lines; i += blockDim.x) {
          const int m = i / (n * lines), s = (i / lines) % n, l = i % lines;
          const T* row = m == 0 ? B_tile_rows + s * a.B_stride[2] : C_tile_rows + s * a.C_stride[2];
          if ((m == 0 && kVarB) || (m == 1 && kVarC)) prefetch_l2(row + t0 + chunk_len + l * (128 / int(sizeof(T))));
        }
      }
    }
    const float* carry_in = carry + (chunk & 1) * n * cw;
    float* carry_out = carry + ((chunk + 1) & 1) * n * cw;
    for (int s0 = 0; s0 < n; s0 += S, ++round) {
      Map* tot = totals + (round & 1) * sh.warps * S * cw;
      const float* tile = tiles + (round % 3) * 2 * S * chunk_len;
      // Prefetch the next round's tile (next state group, or the next chunk's first).
      if constexpr (kVarB || kVarC) {
        const bool more_states = s0 + S < n;
        const std::int64_t nt0 = more_states ? t0 : t0 + chunk_len;
        if (nt0 < len)
          next.load(B_tile_rows, a.B_stride[2], C_tile_rows, a.C_stride[2], nt0, more_states ? s0 + S : 0, n, len);
      }
      float av[S][K], bv[S][K];
      Map incl[S];
#pragma unroll
      for (int j = 0; j < S; ++j) {
        const int s = min(s0 + j, n - 1);  // a tail state repeats the last (its results unused)
        const float A2 = A_row[s];
        float Bk[K];
        if constexpr (kVarB) {
          if (shared_tile) read_tile<K>(tile + j * chunk_len + seg * K, Bk);
          else if constexpr (!kSharedTile) load_items<T, K>(B_tile_rows + (g - g0) * a.B_stride[1] + s * a.B_stride[2] + ti, valid, Bk, 0.0f);
        }
        Map m = affine.identity();
#pragma unroll
        for (int k = 0; k < K; ++k) {
          av[j][k] = ex2(dt[k] * A2);
          bv[j][k] = du[k] * (kVarB ? Bk[k] : Bfix[s]);
          m = affine.combine(m, Map{av[j][k], bv[j][k]});
        }
        // Inclusive scan over the segments of this warp (lanes Cw apart).
        for (int off = cw; off < 32; off <<= 1) {
          const Map o = shfl_up(m, off);
          if (lane >= off) m = affine.combine(o, m);
        }
        incl[j] = m;
        if (lane >= 32 - cw) tot[(warp * S + j) * cw + ch] = m;
      }
      if constexpr (kVarB || kVarC) next.store(tiles + ((round + 1) % 3) * 2 * S * chunk_len, chunk_len);
      __syncthreads();
#pragma unroll
      for (int j = 0; j < S; ++j) {
        const int s = min(s0 + j, n - 1);
        float h = carry_in[s * cw + ch];
        for (int w = 0; w < warp; ++w) {
          const Map m = tot[(w * S + j) * cw + ch];
          h = m.a * h + m.b;
        }
        Map excl = shfl_up(incl[j], cw);
        if (lane < cw) excl = affine.identity();
        h = excl.a * h + excl.b;
        float Ck[K];
        if constexpr (kVarC) {
          if (shared_tile) read_tile<K>(tile + (S + j) * chunk_len + seg * K, Ck);
          else if constexpr (!kSharedTile) load_items<T, K>(C_tile_rows + (g - g0) * a.C_stride[1] + s * a.C_stride[2] + ti, valid, Ck, 0.0f);
        }
        const bool real = s0 + j < n;
#pragma unroll
        for (int k = 0; k < K; ++k) {
          h = av[j][k] * h + bv[j][k];
          if (real) y[k] += h * (kVarC ? Ck[k] : Cfix[s]);
        }
        if (last_seg && real) {
          carry_out[s * cw + ch] = h;
          if (last_chunk && a.final_state && active) a.final_state[(b * a.d + c) * n + s] = h;
        }
      }
    }
    if (z_row) {
      float z[K];
      load_items<T, K>(z_row + ti, valid, z, 0.0f);
#pragma unroll
      for (int k = 0; k < K; ++k) y[k] *= __fdividef(z[k], 1.0f + __expf(-z[k]));
    }
    if (active) store_items<T, K>(out_row + ti, valid, y);
    __syncthreads();  // carry_out complete before the next chunk reads it
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

template <class T, int kLanes, int kVec>
__global__ void __launch_bounds__(256) selective_state_update_rows(StateUpdateArgs a) {
  const std::int64_t row = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const int l = threadIdx.x % kLanes;
  const bool ok = row < a.batch * a.d;
  const std::int64_t r = ok ? row : 0, b = r / a.d, c = r % a.d, g = c / (a.d / a.groups);
  const int n = int(a.n);
  const float x = to_f32(static_cast<const T*>(a.x)[b * a.x_stride[0] + c * a.x_stride[1]]);
  float dt = to_f32(static_cast<const T*>(a.dt)[b * a.dt_stride[0] + c * a.dt_stride[1]]) +
             (a.dt_bias ? a.dt_bias[c] : 0.0f);
  if (a.dt_softplus) dt = dt <= 20.0f ? log1pf(__expf(dt)) : dt;
  const T* Bp = static_cast<const T*>(a.B) + b * a.B_stride[0] + g * a.B_stride[1];
  const T* Cp = static_cast<const T*>(a.C) + b * a.C_stride[0] + g * a.C_stride[1];
  float* h = a.state + r * n;
  const float* A = a.A + c * n;
  const float dtl = dt * 1.4426950408889634f, dx = dt * x;
  float y = 0.0f;
  if (ok)
    for (int s = l * kVec; s < n; s += kLanes * kVec) {
      float hv[kVec], Av[kVec], Bv[kVec], Cv[kVec];
      load_pack<float, kVec>(h + s, hv);
      load_pack<float, kVec>(A + s, Av);
      load_pack<T, kVec>(Bp + s, Bv);
      load_pack<T, kVec>(Cp + s, Cv);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        hv[i] = ex2(dtl * Av[i]) * hv[i] + dx * Bv[i];
        y += hv[i] * Cv[i];
      }
      if constexpr (kVec == 4) *reinterpret_cast<float4*>(h + s) = make_float4(hv[0], hv[1], hv[2], hv[3]);
      else h[s] = hv[0];
    }
#pragma unroll
  for (int off = 1; off < kLanes; off <<= 1) y += __shfl_xor_sync(0xffffffffu, y, off);
  if (!ok || l != 0) return;
  if (a.D) y += a.D[c] * x;
  if (a.z) {
    const float z = to_f32(static_cast<const T*>(a.z)[b * a.z_stride[0] + c * a.z_stride[1]]);
    y *= __fdividef(z, 1.0f + __expf(-z));
  }
  static_cast<T*>(a.out)[b * a.out_stride[0] + c * a.out_stride[1]] = from_f32<T>(y);
}

// ---- launch --------------------------------------------------------------------------------------
using parallel::cuda::DeviceGuard;

template <class Cfg>
std::size_t smem_bytes(int n, int cw, int warps) {
  const int chunk = warps * (32 / cw) * Cfg::kItems;
  return std::size_t(SmemLayout(n, cw, warps, chunk, Cfg::kStates).words) * sizeof(float);
}

int sm_count(int device) {
  static int cached[64] = {};
  if (device < 64 && cached[device]) return cached[device];
  int sms = 0;
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), kWhere);
  if (device < 64) cached[device] = sms;
  return sms;
}

// Default launch shape: 4 warps; the widest channel group that still gives every SM about four
// blocks (small blocks balance better over the SMs than wide ones when blocks are few), within
// the 48 KB of shared memory a launch gets without opting in.
SelectiveScanLaunch choose_launch(const SelectiveScanArgs& a, int device, SelectiveScanLaunch l) {
  if (!l.warps) l.warps = 4;
  if (!l.channels_per_warp) {
    // Blocks whose channels share one B/C group read B and C through shared tiles; the others
    // load them per thread, so prefer widths that divide the group.
    const std::int64_t want = 4 * std::int64_t(sm_count(device)), per_group = a.d / a.groups;
    l.channels_per_warp = 8;
    for (int cw : {32, 16}) {
      if (a.batch * ((a.d + cw - 1) / cw) >= want && (per_group % cw == 0 || per_group % 8 != 0)) {
        l.channels_per_warp = cw;
        break;
      }
    }
  }
  while (l.channels_per_warp > 8 && smem_bytes<DefaultConfig>(int(a.n), l.channels_per_warp, l.warps) > 40 * 1024)
    l.channels_per_warp /= 2;
  return l;
}

template <class T, bool kVarB, bool kVarC, class Cfg, bool kSharedTile = false>
void launch_scan(const SelectiveScanArgs& a, cudaStream_t stream, SelectiveScanLaunch l) {
  Shape sh;
  sh.cw = l.channels_per_warp;
  sh.warps = l.warps;
  sh.segs = l.warps * (32 / sh.cw);
  sh.chunk = sh.segs * Cfg::kItems;
  const std::int64_t channel_blocks = (a.d + sh.cw - 1) / sh.cw;
  const std::int64_t blocks = a.batch * channel_blocks;
  if (blocks > 0x7fffffff) throw_error(kWhere, "too many (batch, channel-group) blocks for one launch");
  const std::size_t smem = smem_bytes<Cfg>(int(a.n), sh.cw, l.warps);
  if (smem > 48 * 1024) throw_error(kWhere, "launch shape needs more than 48 KB of shared memory for this d_state");
  selective_scan_chunked<T, kVarB, kVarC, Cfg, kSharedTile>
      <<<unsigned(blocks), unsigned(l.warps * 32), smem, stream>>>(a, sh, int(channel_blocks));
  check_cuda(cudaGetLastError(), kWhere);
}

template <class T>
void launch_scan_bc(const SelectiveScanArgs& a, cudaStream_t s, SelectiveScanLaunch l) {
  // Mamba's case (input-dependent B and C) gets a kernel without the per-thread B/C fallback
  // when the launch's channel groups never straddle two B/C groups.
  const bool shared = (a.d / a.groups) % l.channels_per_warp == 0;
  if constexpr (std::is_same_v<T, float>) {  // dev variants (dev/selective_scan/sweep_launch.cpp)
    if (a.var_B && a.var_C && shared && l.variant > 0) {
      if (l.variant == 1) return launch_scan<T, true, true, ScanConfig<16, 1, 2>, true>(a, s, l);
      if (l.variant == 2) return launch_scan<T, true, true, ScanConfig<8, 4, 1>, true>(a, s, l);
      if (l.variant == 3) return launch_scan<T, true, true, ScanConfig<16, 2, 1>, true>(a, s, l);
      if (l.variant == 4) return launch_scan<T, true, true, ScanConfig<4, 4, 2>, true>(a, s, l);
    }
  }
  if (a.var_B && a.var_C && shared) launch_scan<T, true, true, DefaultConfig, true>(a, s, l);
  else if (a.var_B && a.var_C) launch_scan<T, true, true, DefaultConfig>(a, s, l);
  else if (a.var_B) launch_scan<T, true, false, DefaultConfig>(a, s, l);
  else if (a.var_C) launch_scan<T, false, true, DefaultConfig>(a, s, l);
  else launch_scan<T, false, false, DefaultConfig>(a, s, l);
}

}  // namespace

void selective_scan_cuda_launch(const SelectiveScanArgs& a, int device, Stream stream,
                                SelectiveScanLaunch launch) {
  if (launch.channels_per_warp != 0 && launch.channels_per_warp != 8 &&
      launch.channels_per_warp != 16 && launch.channels_per_warp != 32)
    throw_error(kWhere, "channels_per_warp must be 8, 16 or 32");
  if (launch.warps < 0 || launch.warps > kMaxWarps)
    throw_error(kWhere, "warps must be 1..8");
  DeviceGuard guard(device, kWhere);
  const SelectiveScanLaunch l = choose_launch(a, device, launch);
  const auto s = static_cast<cudaStream_t>(stream.handle);
  switch (a.dtype) {
    case DType::f32: return launch_scan_bc<float>(a, s, l);
    case DType::bf16: return launch_scan_bc<__nv_bfloat16>(a, s, l);
    case DType::f16: return launch_scan_bc<__half>(a, s, l);
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
  const int lanes = vec ? 4 : 8;
  const std::int64_t threads = a.batch * a.d * lanes;
  const unsigned blocks = unsigned((threads + 255) / 256);
  if (vec) selective_state_update_rows<T, 4, 4><<<blocks, 256, 0, s>>>(a);
  else selective_state_update_rows<T, 8, 1><<<blocks, 256, 0, s>>>(a);
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
