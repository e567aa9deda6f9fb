// src/cuda/attention_wgmma.cuh — the Hopper prefill kernels: warpgroup MMAs (wgmma, sm_90a) for
// both products, the softmax of one key tile overlapped with the tensor cores working on the
// next. Included by attention.cu only. Three generations, each kept selectable (dev/attention):
//   attn_prefill_wgmma      (v2) cp.async by all threads, block barrier per tile; D 64/128/256
//   attn_prefill_wgmma_pp   (v4) mbarrier stages, the two warpgroups in ping-pong; D 64/128
//   attn_prefill_wgmma_tma  (v5) v4 fed by a TMA producer warpgroup; D 64/128/256 — the default
//                           for dense inputs (v4 / v2 serve varlen, whose token count the host
//                           does not know for a tensor map)
// H200, bf16, D 128, 16 heads × 16k tokens: v2 301, v4 400, v5 692 TFLOP/s (docs/perf/attention_cuda.md).
//
// One block = 128 query rows of one (batch, head) = 2 warpgroups × 64 rows. Shared memory
// (128-byte swizzled panels of 64 columns, the layout wgmma reads without bank conflicts):
// Q (128, D), K and V in 2–3 stages of (kBN, D).
//
// Per key tile t, each warpgroup:
//   issue S(t+1) = Q K(t+1)ᵀ      wgmma, A and B from shared memory (both K-major)
//   issue O += P(t) V(t)          wgmma, P from registers (the accumulator layout of S is the
//                                 A-register layout), V from shared memory MN-major
//   wait S(t+1); mask, row max, exponentials, row sums       ← overlaps O += P(t) V(t)
//   wait O; rescale O by exp(m_old − m_new); pack P(t+1)
// Associativity of the online-softmax state lets O absorb tile t+1's rescale after the fact.
#pragma once

#include <cuda.h>  // CUtensorMap

#include "attention_common.cuh"
#include "attention_wgmma_ops.cuh"

namespace sixfold::detail::attn {

template <int D> struct PrefillWgmmaTraits {
  static_assert(D == 64 || D == 128 || D == 256, "wgmma path: head dims 64, 128, 256");
  static constexpr int kBM = 128, kThreads = 256;  // 2 warpgroups × 64 rows
  static constexpr int kBN = D <= 128 ? 128 : 64;  // D=256: S 32 + O 128 f32 registers
  static constexpr int kPanelCols = 64;            // one 128-byte swizzle row
  static constexpr int kQBytes = kBM * D * 2, kKVBytes = kBN * D * 2;
  static constexpr int kSmemBytes = kQBytes + 4 * kKVBytes + 1024;  // +1024: base alignment
};

// Copies a (rows, D) tile into 128-byte-swizzled panels: element (r, c) lives in panel c / 64 at
// byte r·128 + ((c % 64 / 8) ⊕ (r % 8))·16 + (c % 8)·2. Rows at or beyond `valid` are zeros.
template <int D, class RowPtr>
__device__ __forceinline__ void load_tile_sw128(std::uint32_t dst, int rows, int valid, RowPtr row_ptr,
                                                int tid, int nthreads) {
  constexpr int kChunks = D / 8;
  for (int c = tid; c < rows * kChunks; c += nthreads) {
    const int r = c / kChunks, ch = c % kChunks;
    const std::uint32_t off = (ch >> 3) * rows * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4);
    const bool ok = r < valid;
    cp_async_16(dst + off, ok ? row_ptr(r) + ch * 8 : row_ptr(0), ok ? 16 : 0);
  }
}

// Shared-memory matrix descriptor, 128-byte swizzle: start, leading and stride byte offsets.
__device__ __forceinline__ std::uint64_t smem_desc(std::uint32_t addr, std::uint32_t lbo, std::uint32_t sbo) {
  return std::uint64_t((addr >> 4) & 0x3FFF) | (std::uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (std::uint64_t((sbo >> 4) & 0x3FFF) << 32) | (std::uint64_t(1) << 62);
}

// v2: all 256 threads copy tiles with cp.async (zero-filled past the sequence end), one tile
// ahead, and meet at a block barrier every tile.
template <class T, int D>
__global__ void __launch_bounds__(256, 1) attn_prefill_wgmma(const Problem p) {
  using Tr = PrefillWgmmaTraits<D>;
  constexpr int kBM = Tr::kBM, kBN = Tr::kBN, NB = kBN / 8, OB = D / 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const std::uint32_t raw = smem_u32(smem_raw);
  const std::uint32_t sQ = (raw + 1023) & ~1023u;  // (D/64 panels, kBM, 64)
  const std::uint32_t sK = sQ + Tr::kQBytes;       // (2, D/64 panels, kBN, 64)
  const std::uint32_t sV = sK + 2 * Tr::kKVBytes;  // (2, D/64 panels, kBN, 64)

  const int b = blockIdx.z, h = blockIdx.y, i0 = (gridDim.x - 1 - blockIdx.x) * kBM;  // long rows first
  const Seq sq = seq_of(p, b);
  if (i0 >= sq.lq) return;
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
  const int r_in = wg * 64 + ((tid >> 5) & 3) * 16 + (lane >> 2);  // block row of c0/c1 (+8: c2/c3)
  const int kvh = h / p.group;
  const T* Q = static_cast<const T*>(p.q) + sq.q_off + h * p.qs[1] + i64(i0) * p.qs[2];
  const T* K = static_cast<const T*>(p.k) + sq.k_off + kvh * p.ks[1];
  const T* V = static_cast<const T*>(p.v) + sq.v_off + kvh * p.vs[1];
  const Band band{sq.lq, sq.lk, p.left, p.right};
  const ScoreScale sc(p.scale_log2);
  const int rows = min(kBM, sq.lq - i0), i_last = i0 + rows - 1;
  const int key_lo = band.lo(i0), key_hi = band.hi(i_last);
  const int t_begin = key_lo / kBN;
  const int t_end = key_hi < key_lo ? t_begin : key_hi / kBN + 1;
  const int full_lo = band.lo(i_last), full_hi = band.hi(i0);

  float o[OB][4] = {};
  float s[NB][4] = {};
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  if (t_begin == t_end) {  // no row of the block sees a key
    store_rows<T>(p, sq, h, i0, r_in, o, m, l);
    return;
  }

  auto load_k = [&](int t) {
    const int n0 = t * kBN;
    load_tile_sw128<D>(sK + ((t - t_begin) & 1) * Tr::kKVBytes, kBN, min(kBN, sq.lk - n0),
                       [&](int r) { return K + i64(n0 + r) * p.ks[2]; }, tid, Tr::kThreads);
  };
  auto load_v = [&](int t) {
    const int n0 = t * kBN;
    load_tile_sw128<D>(sV + ((t - t_begin) & 1) * Tr::kKVBytes, kBN, min(kBN, sq.lk - n0),
                       [&](int r) { return V + i64(n0 + r) * p.vs[2]; }, tid, Tr::kThreads);
  };
  // Descriptors: K-major operands step 32 bytes per k16 inside a panel, panels kRows·128 apart;
  // V (MN-major) steps 16 rows per k16, its 64-column panels kBN·128 apart (the leading offset).
  const std::uint32_t q_wg = sQ + wg * 64 * 128;
  auto desc_q = [&](int kk) { return smem_desc(q_wg + (kk >> 2) * kBM * 128 + (kk & 3) * 32, 16, 1024); };
  auto desc_k = [&](int buf, int kk) {
    return smem_desc(sK + buf * Tr::kKVBytes + (kk >> 2) * kBN * 128 + (kk & 3) * 32, 16, 1024);
  };
  auto desc_v = [&](int buf, int kk) { return smem_desc(sV + buf * Tr::kKVBytes + kk * 16 * 128, kBN * 128, 1024); };
  auto mask_scale = [&](int t) {
    const int n0 = t * kBN;
    const bool edge = n0 < full_lo || n0 + kBN - 1 > full_hi;
    if (edge || sc.pre != 1.0f) {
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[nb][e] * sc.pre;
          if (edge) {
            const int j = n0 + nb * 8 + (lane & 3) * 2 + (e & 1);
            const int i = i0 + r_in + (e >> 1) * 8;
            if (j < band.lo(i) || j > band.hi(i)) x = kNegInf;
          }
          s[nb][e] = x;
        }
    }
  };
  auto& s_flat = reinterpret_cast<float(&)[kBN / 2]>(s);
  auto& o_flat = reinterpret_cast<float(&)[D / 2]>(o);

  load_tile_sw128<D>(sQ, kBM, rows, [&](int r) { return Q + i64(r) * p.qs[2]; }, tid, Tr::kThreads);
  load_k(t_begin);
  cp_async_commit();
  if (t_begin + 1 < t_end) load_k(t_begin + 1);
  load_v(t_begin);
  cp_async_commit();  // group of iteration t_begin: K(t+1), V(t)
  cp_async_wait<1>();
  fence_proxy_async();
  __syncthreads();

  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) wgmma_ss<T, kBN>(s_flat, desc_q(kk), desc_k(0, kk), kk);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_regs(s_flat);
  float alpha[2];
  mask_scale(t_begin);
  softmax_probs(s, m, l, alpha, sc.fold);
  std::uint32_t pf[kBN / 16][4];
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) pack_p<T>(pf[kk], s, kk);

  // Every tile but the last: S(t+1) and PV(t) in flight together (no branch around a wgmma, so
  // ptxas can track the two groups without serializing them).
  int t = t_begin;
  for (; t + 1 < t_end; ++t) {
    const int buf = (t - t_begin) & 1;
    cp_async_wait<0>();  // K(t+1), V(t)
    fence_proxy_async();
    __syncthreads();     // … in every thread; and every warpgroup is done with tile t−1
    if (t + 2 < t_end) load_k(t + 2);  // into K(t)'s buffer
    load_v(t + 1);                     // into V(t−1)'s buffer
    cp_async_commit();

    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) wgmma_ss<T, kBN>(s_flat, desc_q(kk), desc_k(buf ^ 1, kk), kk);
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) wgmma_rs<T, D>(o_flat, pf[kk], desc_v(buf, kk), 1);
    wgmma_commit();
    wgmma_wait<1>();
    wgmma_fence_regs(s_flat);
    mask_scale(t + 1);
    softmax_probs(s, m, l, alpha, sc.fold);
    wgmma_wait<0>();
    wgmma_fence_regs(o_flat);
    rescale(o, alpha);
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) pack_p<T>(pf[kk], s, kk);
  }
  {  // the last tile: PV only
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) wgmma_rs<T, D>(o_flat, pf[kk], desc_v((t - t_begin) & 1, kk), 1);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs(o_flat);
  }
  cp_async_wait<0>();
  store_rows<T>(p, sq, h, i0, r_in, o, m, l);
}

// ---- v4: the two warpgroups in ping-pong -----------------------------------------------------
//
// attn_prefill_wgmma lets both warpgroups meet at a block barrier every tile, so both run their
// softmax at the same moment and the tensor cores idle meanwhile. Here no block barrier is left
// in the main loop: tiles land in 3 stages tracked by mbarriers (every thread copies its share
// with cp.async and arrives on the stage's "full" barrier when its copies land; each thread
// arrives on the stage's "empty" barrier when its warpgroup is done with it), and two named
// barriers hand the tensor cores back and forth: warpgroup w issues its MMAs only on its turn,
// then gives the turn to the other, so one warpgroup's softmax runs while the other's MMAs do.
// D ≤ 128 (3 stages of K and V: 224 KB at D = 128).

template <int D> struct PrefillPingpongTraits {
  static_assert(D == 64 || D == 128, "ping-pong path: head dims 64, 128");
  static constexpr int kBM = 128, kThreads = 256, kBN = 128, kStages = 3;
  static constexpr int kQBytes = kBM * D * 2, kKVBytes = kBN * D * 2;
  static constexpr int kBarOffset = kQBytes + 2 * kStages * kKVBytes;
  static constexpr int kSmemBytes = kBarOffset + 128 + 1024;  // 13 mbarriers; base alignment
  static_assert(kSmemBytes <= 227 * 1024);
};

template <class T, int D>
__global__ void __launch_bounds__(256, 1) attn_prefill_wgmma_pp(const Problem p) {
  using Tr = PrefillPingpongTraits<D>;
  constexpr int kBM = Tr::kBM, kBN = Tr::kBN, NB = kBN / 8, OB = D / 8, kS = Tr::kStages;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const std::uint32_t sQ = (smem_u32(smem_raw) + 1023) & ~1023u;  // (D/64, kBM, 64)
  const std::uint32_t sK = sQ + Tr::kQBytes;                       // (kS, D/64, kBN, 64)
  const std::uint32_t sV = sK + kS * Tr::kKVBytes;                 // (kS, D/64, kBN, 64)
  const std::uint32_t bars = sQ + Tr::kBarOffset;
  auto full_k = [&](int st) { return bars + 8 * st; };
  auto full_v = [&](int st) { return bars + 8 * (kS + st); };
  auto empty_k = [&](int st) { return bars + 8 * (2 * kS + st); };
  auto empty_v = [&](int st) { return bars + 8 * (3 * kS + st); };
  const std::uint32_t full_q = bars + 8 * 4 * kS;

  const int b = blockIdx.z, h = blockIdx.y, i0 = (gridDim.x - 1 - blockIdx.x) * kBM;  // long rows first
  const Seq sq = seq_of(p, b);
  if (i0 >= sq.lq) return;
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
  const int r_in = wg * 64 + ((tid >> 5) & 3) * 16 + (lane >> 2);
  const int kvh = h / p.group;
  const T* Q = static_cast<const T*>(p.q) + sq.q_off + h * p.qs[1] + i64(i0) * p.qs[2];
  const T* K = static_cast<const T*>(p.k) + sq.k_off + kvh * p.ks[1];
  const T* V = static_cast<const T*>(p.v) + sq.v_off + kvh * p.vs[1];
  const Band band{sq.lq, sq.lk, p.left, p.right};
  const ScoreScale sc(p.scale_log2);
  const int rows = min(kBM, sq.lq - i0), i_last = i0 + rows - 1;
  const int key_lo = band.lo(i0), key_hi = band.hi(i_last);
  const int t_begin = key_lo / kBN;
  const int n = key_hi < key_lo ? 0 : key_hi / kBN + 1 - t_begin;  // tiles to visit
  const int full_lo = band.lo(i_last), full_hi = band.hi(i0);

  float o[OB][4] = {};
  float s[NB][4] = {};
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  if (n == 0) {
    store_rows<T>(p, sq, h, i0, r_in, o, m, l);
    return;
  }
  if (tid == 0) {
    for (int x = 0; x < 4 * kS + 1; ++x) mbar_init(bars + 8 * x, Tr::kThreads);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  // Tile j (relative) goes to stage j % kS once both warpgroups released tile j − kS there.
  auto load_k = [&](int j) {
    const int st = j % kS, n0 = (t_begin + j) * kBN;
    if (j >= kS) mbar_wait(empty_k(st), (j / kS - 1) & 1);
    load_tile_sw128<D>(sK + st * Tr::kKVBytes, kBN, min(kBN, sq.lk - n0),
                       [&](int r) { return K + i64(n0 + r) * p.ks[2]; }, tid, Tr::kThreads);
    mbar_arrive_cp_async(full_k(st));
  };
  auto load_v = [&](int j) {
    const int st = j % kS, n0 = (t_begin + j) * kBN;
    if (j >= kS) mbar_wait(empty_v(st), (j / kS - 1) & 1);
    load_tile_sw128<D>(sV + st * Tr::kKVBytes, kBN, min(kBN, sq.lk - n0),
                       [&](int r) { return V + i64(n0 + r) * p.vs[2]; }, tid, Tr::kThreads);
    mbar_arrive_cp_async(full_v(st));
  };
  const std::uint32_t q_wg = sQ + wg * 64 * 128;
  auto desc_q = [&](int kk) { return smem_desc(q_wg + (kk >> 2) * kBM * 128 + (kk & 3) * 32, 16, 1024); };
  auto desc_k = [&](int st, int kk) {
    return smem_desc(sK + st * Tr::kKVBytes + (kk >> 2) * kBN * 128 + (kk & 3) * 32, 16, 1024);
  };
  auto desc_v = [&](int st, int kk) { return smem_desc(sV + st * Tr::kKVBytes + kk * 16 * 128, kBN * 128, 1024); };
  auto mask = [&](int j) {
    const int n0 = (t_begin + j) * kBN;
    const bool edge = n0 < full_lo || n0 + kBN - 1 > full_hi;
    if (edge || sc.pre != 1.0f) {
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[nb][e] * sc.pre;
          if (edge) {
            const int jj = n0 + nb * 8 + (lane & 3) * 2 + (e & 1);
            const int i = i0 + r_in + (e >> 1) * 8;
            if (jj < band.lo(i) || jj > band.hi(i)) x = kNegInf;
          }
          s[nb][e] = x;
        }
    }
  };
  auto& s_flat = reinterpret_cast<float(&)[kBN / 2]>(s);
  auto& o_flat = reinterpret_cast<float(&)[D / 2]>(o);
  const int my_turn = 1 + wg, other_turn = 2 - wg;  // named barrier ids (0 is __syncthreads)

  load_tile_sw128<D>(sQ, kBM, rows, [&](int r) { return Q + i64(r) * p.qs[2]; }, tid, Tr::kThreads);
  mbar_arrive_cp_async(full_q);
  load_k(0);
  if (n > 1) load_k(1);
  load_v(0);
  if (wg == 1) named_bar_arrive(1, Tr::kThreads);  // warpgroup 0 takes the first turn

  // Section 0: S(0) only.
  float alpha[2];
  std::uint32_t pf[kBN / 16][4];
  mbar_wait(full_q, 0);
  mbar_wait(full_k(0), 0);
  fence_proxy_async();
  named_bar_sync(my_turn, Tr::kThreads);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) wgmma_ss<T, kBN>(s_flat, desc_q(kk), desc_k(0, kk), kk);
  wgmma_commit();
  named_bar_arrive(other_turn, Tr::kThreads);
  wgmma_wait<0>();
  wgmma_fence_regs(s_flat);
  mask(0);
  softmax_probs(s, m, l, alpha, sc.fold);
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) pack_p<T>(pf[kk], s, kk);
  mbar_arrive(empty_k(0));
  if (2 < n) load_k(2);
  if (1 < n) load_v(1);

  // Sections 1 … n−1: S(g) and PV(g−1) in flight together.
  for (int g = 1; g < n; ++g) {
    const int sk = g % kS, sv = (g - 1) % kS;
    mbar_wait(full_k(sk), (g / kS) & 1);
    mbar_wait(full_v(sv), ((g - 1) / kS) & 1);
    fence_proxy_async();
    named_bar_sync(my_turn, Tr::kThreads);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) wgmma_ss<T, kBN>(s_flat, desc_q(kk), desc_k(sk, kk), kk);
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) wgmma_rs<T, D>(o_flat, pf[kk], desc_v(sv, kk), 1);
    wgmma_commit();
    named_bar_arrive(other_turn, Tr::kThreads);
    wgmma_wait<1>();
    wgmma_fence_regs(s_flat);
    mask(g);
    softmax_probs(s, m, l, alpha, sc.fold);
    wgmma_wait<0>();
    wgmma_fence_regs(o_flat);
    rescale(o, alpha);
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) pack_p<T>(pf[kk], s, kk);
    mbar_arrive(empty_k(sk));
    mbar_arrive(empty_v(sv));
    if (g + 2 < n) load_k(g + 2);
    if (g + 1 < n) load_v(g + 1);
  }

  // Section n: PV(n−1) only. Warpgroup 1 hands no turn on: nobody would take it.
  {
    const int sv = (n - 1) % kS;
    mbar_wait(full_v(sv), ((n - 1) / kS) & 1);
    fence_proxy_async();
    named_bar_sync(my_turn, Tr::kThreads);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) wgmma_rs<T, D>(o_flat, pf[kk], desc_v(sv, kk), 1);
    wgmma_commit();
    if (wg == 0) named_bar_arrive(other_turn, Tr::kThreads);
    wgmma_wait<0>();
    wgmma_fence_regs(o_flat);
  }
  store_rows<T>(p, sq, h, i0, r_in, o, m, l);
}

// ---- v5: a producer warp with the tensor-memory copy engine (TMA) ------------------------------
//
// v4's consumer threads spent a share of every tile on address arithmetic and cp.async issue.
// Here warp 8 is the producer: one lane issues bulk tensor copies (cp.async.bulk.tensor, one per
// 64-column panel, written by the copy engine in the same 128-byte swizzle wgmma reads) that
// complete on the stage's "full" mbarrier with a byte count; the 8 consumer warps (2 ping-pong
// warpgroups, as in v4) only wait, multiply and run the softmax. 384 threads: the producer
// warpgroup gives its registers to the consumers (setmaxnreg 24 / 240; 288 threads compiled to
// 168 registers and spilled).
// Rows past a tensor's end arrive as zeros; in varlen batches a tile may also bring in the next
// sequence's first rows, which the band mask hides (finite values times probability 0).

// Where a (token, head, batch) coordinate goes in a tensor map whose dims were ordered by stride.
struct TmaOrder {
  int token_dim, head_dim;  // 1 or 2 (dim 0 is the head_dim columns, dim 3 the batch)
};

__device__ __forceinline__ void tma_load_4d(std::uint32_t dst, const void* map, std::uint32_t bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
      ::"r"(dst), "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

struct TmaMaps {
  CUtensorMap q, k, v;
  TmaOrder oq, ok, ov;
};

template <int D> struct PrefillTmaTraits {
  static_assert(D == 64 || D == 128 || D == 256, "TMA path: head dims 64, 128, 256");
  static constexpr int kBM = 128;
  static constexpr int kBN = D <= 128 ? 128 : 64;    // D=256: S 32 + O 128 f32 registers
  static constexpr int kStages = D <= 128 ? 3 : 2;   // D=256: Q 64 KB + 2 × (K, V) 128 KB
  static constexpr int kConsumers = 256, kThreads = kConsumers + 128;
  static constexpr int kQBytes = kBM * D * 2, kKVBytes = kBN * D * 2;
  static constexpr int kBarOffset = kQBytes + 2 * kStages * kKVBytes;
  static constexpr int kSmemBytes = kBarOffset + 128 + 1024;
  static_assert(kSmemBytes <= 227 * 1024);
};

template <class T, int D>
__global__ void __launch_bounds__(384, 1) attn_prefill_wgmma_tma(const Problem p, const __grid_constant__ TmaMaps maps) {
  using Tr = PrefillTmaTraits<D>;
  constexpr int kBM = Tr::kBM, kBN = Tr::kBN, NB = kBN / 8, OB = D / 8, kS = Tr::kStages;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const std::uint32_t sQ = (smem_u32(smem_raw) + 1023) & ~1023u;  // (D/64, kBM, 64)
  const std::uint32_t sK = sQ + Tr::kQBytes;                       // (kS, D/64, kBN, 64)
  const std::uint32_t sV = sK + kS * Tr::kKVBytes;                 // (kS, D/64, kBN, 64)
  const std::uint32_t bars = sQ + Tr::kBarOffset;
  auto full_k = [&](int st) { return bars + 8 * st; };
  auto full_v = [&](int st) { return bars + 8 * (kS + st); };
  auto empty_k = [&](int st) { return bars + 8 * (2 * kS + st); };
  auto empty_v = [&](int st) { return bars + 8 * (3 * kS + st); };
  const std::uint32_t full_q = bars + 8 * 4 * kS;

  const int b = blockIdx.z, h = blockIdx.y, i0 = (gridDim.x - 1 - blockIdx.x) * kBM;  // long rows first
  const Seq sq = seq_of(p, b);
  if (i0 >= sq.lq) return;
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
  const int kvh = h / p.group;
  const Band band{sq.lq, sq.lk, p.left, p.right};
  const int rows = min(kBM, sq.lq - i0), i_last = i0 + rows - 1;
  const int key_lo = band.lo(i0), key_hi = band.hi(i_last);
  const int t_begin = key_lo / kBN;
  const int n = key_hi < key_lo ? 0 : key_hi / kBN + 1 - t_begin;
  if (n == 0) {
    if (wg < 2) {
      float o[OB][4] = {}, m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
      store_rows<T>(p, sq, h, i0, wg * 64 + ((tid >> 5) & 3) * 16 + (lane >> 2), o, m, l);
    }
    return;
  }
  if (tid == 0) {
    for (int x = 0; x < 2 * kS; ++x) mbar_init(bars + 8 * x, 1);                 // full: the producer
    for (int x = 2 * kS; x < 4 * kS; ++x) mbar_init(bars + 8 * x, Tr::kConsumers);  // empty: consumers
    mbar_init(full_q, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 2) {  // ---- producer warpgroup: one lane issues every copy ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (tid != 256) return;
    // Varlen: token coordinates are offsets into the packed token axis, batch coordinate 0.
    const bool varlen = p.cu_q != nullptr;
    const int q_tok = (varlen ? p.cu_q[b] : 0) + i0, k_tok = varlen ? p.cu_k[b] : 0, bb = varlen ? 0 : b;
    auto coords = [](const TmaOrder& o, int tok, int head, int& c1, int& c2) {
      c1 = o.token_dim == 1 ? tok : head;
      c2 = o.token_dim == 1 ? head : tok;
    };
    int c1, c2;
    mbar_expect_tx(full_q, Tr::kQBytes);
    coords(maps.oq, q_tok, h, c1, c2);
    for (int pn = 0; pn < D / 64; ++pn) tma_load_4d(sQ + pn * kBM * 128, &maps.q, full_q, pn * 64, c1, c2, bb);
    for (int j = 0; j < n; ++j) {
      const int st = j % kS, n0 = k_tok + (t_begin + j) * kBN;
      if (j >= kS) mbar_wait(empty_k(st), (j / kS - 1) & 1);
      mbar_expect_tx(full_k(st), Tr::kKVBytes);
      coords(maps.ok, n0, kvh, c1, c2);
      for (int pn = 0; pn < D / 64; ++pn)
        tma_load_4d(sK + st * Tr::kKVBytes + pn * kBN * 128, &maps.k, full_k(st), pn * 64, c1, c2, bb);
      if (j >= kS) mbar_wait(empty_v(st), (j / kS - 1) & 1);
      mbar_expect_tx(full_v(st), Tr::kKVBytes);
      coords(maps.ov, n0, kvh, c1, c2);
      for (int pn = 0; pn < D / 64; ++pn)
        tma_load_4d(sV + st * Tr::kKVBytes + pn * kBN * 128, &maps.v, full_v(st), pn * 64, c1, c2, bb);
    }
  } else {  // ---- consumer warpgroups (as v4, without the copies) ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
  const int r_in = wg * 64 + ((tid >> 5) & 3) * 16 + (lane >> 2);
  const ScoreScale sc(p.scale_log2);
  const int full_lo = band.lo(i_last), full_hi = band.hi(i0);
  float o[OB][4] = {};
  float s[NB][4] = {};
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  const std::uint32_t q_wg = sQ + wg * 64 * 128;
  auto desc_q = [&](int kk) { return smem_desc(q_wg + (kk >> 2) * kBM * 128 + (kk & 3) * 32, 16, 1024); };
  auto desc_k = [&](int st, int kk) {
    return smem_desc(sK + st * Tr::kKVBytes + (kk >> 2) * kBN * 128 + (kk & 3) * 32, 16, 1024);
  };
  auto desc_v = [&](int st, int kk) { return smem_desc(sV + st * Tr::kKVBytes + kk * 16 * 128, kBN * 128, 1024); };
  auto mask = [&](int j) {
    const int n0 = (t_begin + j) * kBN;
    const bool edge = n0 < full_lo || n0 + kBN - 1 > full_hi;
    if (edge || sc.pre != 1.0f) {
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[nb][e] * sc.pre;
          if (edge) {
            const int jj = n0 + nb * 8 + (lane & 3) * 2 + (e & 1);
            const int i = i0 + r_in + (e >> 1) * 8;
            if (jj < band.lo(i) || jj > band.hi(i)) x = kNegInf;
          }
          s[nb][e] = x;
        }
    }
  };
  auto& s_flat = reinterpret_cast<float(&)[kBN / 2]>(s);
  auto& o_flat = reinterpret_cast<float(&)[D / 2]>(o);
  const int my_turn = 1 + wg, other_turn = 2 - wg;
  if (wg == 1) named_bar_arrive(1, Tr::kConsumers);

  float alpha[2];
  std::uint32_t pf[kBN / 16][4];
  mbar_wait(full_q, 0);
  mbar_wait(full_k(0), 0);
  named_bar_sync(my_turn, Tr::kConsumers);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) wgmma_ss<T, kBN>(s_flat, desc_q(kk), desc_k(0, kk), kk);
  wgmma_commit();
  named_bar_arrive(other_turn, Tr::kConsumers);
  wgmma_wait<0>();
  wgmma_fence_regs(s_flat);
  mask(0);
  softmax_probs(s, m, l, alpha, sc.fold);
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) pack_p<T>(pf[kk], s, kk);
  mbar_arrive(empty_k(0));

  for (int g = 1; g < n; ++g) {
    const int sk = g % kS, sv = (g - 1) % kS;
    mbar_wait(full_k(sk), (g / kS) & 1);
    mbar_wait(full_v(sv), ((g - 1) / kS) & 1);
    named_bar_sync(my_turn, Tr::kConsumers);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) wgmma_ss<T, kBN>(s_flat, desc_q(kk), desc_k(sk, kk), kk);
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) wgmma_rs<T, D>(o_flat, pf[kk], desc_v(sv, kk), 1);
    wgmma_commit();
    named_bar_arrive(other_turn, Tr::kConsumers);
    wgmma_wait<1>();
    wgmma_fence_regs(s_flat);
    mask(g);
    softmax_probs(s, m, l, alpha, sc.fold);
    wgmma_wait<0>();
    wgmma_fence_regs(o_flat);
    rescale(o, alpha);
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) pack_p<T>(pf[kk], s, kk);
    mbar_arrive(empty_k(sk));
    mbar_arrive(empty_v(sv));
  }
  {
    const int sv = (n - 1) % kS;
    mbar_wait(full_v(sv), ((n - 1) / kS) & 1);
    named_bar_sync(my_turn, Tr::kConsumers);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) wgmma_rs<T, D>(o_flat, pf[kk], desc_v(sv, kk), 1);
    wgmma_commit();
    if (wg == 0) named_bar_arrive(other_turn, Tr::kConsumers);
    wgmma_wait<0>();
    wgmma_fence_regs(o_flat);
  }
  store_rows<T>(p, sq, h, i0, r_in, o, m, l);
  }
}

}  // namespace sixfold::detail::attn
