// dev/attention/v2_wgmma_sync.cuh — v2 as measured (H200: 278-303 TFLOP/s, D 128, seq 2k-16k), kept
// for the record; it builds against src/cuda/attention_common.cuh of commit 1aa52f2 (the
// live v2, with v3's softmax, is attn_prefill_wgmma in src/cuda/attention_wgmma.cuh).
//
// src/cuda/attention_wgmma.cuh — the Hopper prefill kernel: warpgroup MMAs (wgmma, sm_90a) for
// both products, the softmax of one key tile overlapped with the tensor cores working on the
// next. Included by attention.cu only.
//
// One block = 128 query rows of one (batch, head) = 2 warpgroups × 64 rows, 256 threads.
// Shared memory (128-byte swizzled panels of 64 columns, the layout wgmma reads without bank
// conflicts): Q (128, D), K and V double-buffered (kBN, D). Tiles arrive by cp.async issued by
// all threads (zero-filled past the sequence end), one tile ahead.
//
// Per key tile t, each warpgroup:
//   issue S(t+1) = Q K(t+1)ᵀ      wgmma, A and B from shared memory (both K-major)
//   issue O += P(t) V(t)          wgmma, P from registers (the accumulator layout of S is the
//                                 A-register layout), V from shared memory MN-major
//   wait S(t+1); mask, row max, exponentials, row sums       ← overlaps O += P(t) V(t)
//   wait O; rescale O by exp(m_old − m_new); pack P(t+1)
// Associativity of the online-softmax state lets O absorb tile t+1's rescale after the fact.
#pragma once

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

__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

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
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nb][e] * p.scale_log2;
        if (edge) {
          const int j = n0 + nb * 8 + (lane & 3) * 2 + (e & 1);
          const int i = i0 + r_in + (e >> 1) * 8;
          if (j < band.lo(i) || j > band.hi(i)) x = kNegInf;
        }
        s[nb][e] = x;
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
  softmax_probs(s, m, l, alpha);
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
    softmax_probs(s, m, l, alpha);
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

}  // namespace sixfold::detail::attn
