// src/cuda/attention_mma.cuh — FlashAttention-2-style kernels on mma.sync (m16n8k16, bf16/f16
// operands, f32 accumulation): the prefill kernel for every head dim and mask, and the
// split-KV decode kernel. Included by attention.cu only.
//
// Prefill (attn_prefill_mma): one block per 64 query rows of one (batch, head); 4 warps × 16
// rows. Key/value tiles of 64 rows stream through double-buffered shared memory by cp.async
// (K of tile t+1 loads while tile t's softmax runs, V of tile t while its QKᵀ runs); S = QKᵀ and
// O += PV run on mma.sync with ldmatrix operands (V through ldmatrix.trans), P stays in
// registers (the S accumulator layout is the A-operand layout). Only tiles inside the rows'
// visible band are visited; only tiles crossing the band's edges are masked per element.
//
// Decode (attn_decode_mma): q_len ≤ 16. The q heads sharing a kv head and their queries are
// packed into the 16 rows of an m16 fragment (GQA 8 × q_len 2 fills it), so each K/V byte is read
// once per group, and the key range is cut across blocks (flash-decoding) and across the 4 warps
// of a block (each warp takes 16 keys of every 64-key stage). The warps' (m, l, o) states merge
// through shared memory — the online-softmax monoid — and the splits merge in a second kernel.
#pragma once

#include "attention_common.cuh"
#include "sixfold/parallel/cuda.cuh"

namespace sixfold::detail::attn {

template <int D> struct PrefillMmaTraits {
  static_assert(D % 16 == 0 && D <= 256);
  static constexpr int kBM = 64, kBN = 64, kThreads = 128;
  static constexpr int kPitch = D + 8;            // +16 bytes: ldmatrix rows hit distinct banks
  static constexpr bool kQInRegs = D <= 128;      // D = 256 would spill: re-read Q from smem
  static constexpr int kSmemBytes = (kBM + 4 * kBN) * kPitch * 2;  // Q, 2 K, 2 V stages
};

template <class T, int D>
__global__ void __launch_bounds__(128) attn_prefill_mma(const Problem p) {
  using Tr = PrefillMmaTraits<D>;
  constexpr int kBM = Tr::kBM, kBN = Tr::kBN, kP = Tr::kPitch;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // (kBM, kP)
  T* sK = sQ + kBM * kP;                    // (2, kBN, kP)
  T* sV = sK + 2 * kBN * kP;                // (2, kBN, kP)

  const int b = blockIdx.z, h = blockIdx.y, i0 = (gridDim.x - 1 - blockIdx.x) * kBM;  // long rows first
  const Seq sq = seq_of(p, b);
  if (i0 >= sq.lq) return;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
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
  const int full_lo = band.lo(i_last), full_hi = band.hi(i0);  // keys every row sees

  auto load_kv = [&](T* dst, const T* base, i64 stride, int t) {
    const int n0 = t * kBN;
    load_tile<D>(dst, kP, kBN, min(kBN, sq.lk - n0),
                 [&](int r) { return base + i64(n0 + r) * stride; }, tid, Tr::kThreads);
  };
  load_tile<D>(sQ, kP, kBM, rows, [&](int r) { return Q + i64(r) * p.qs[2]; }, tid, Tr::kThreads);
  if (t_begin < t_end) load_kv(sK, K, p.ks[2], t_begin);
  cp_async_commit();

  float o[D / 8][4] = {};
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  std::uint32_t qf[Tr::kQInRegs ? D / 16 : 1][4];
  const int r_in = warp * 16 + (lane >> 2);  // block row of this thread's c0/c1 (c2/c3: +8)

  for (int t = t_begin; t < t_end; ++t) {
    const int buf = (t - t_begin) & 1, n0 = t * kBN;
    const T* sKb = sK + buf * kBN * kP;
    const T* sVb = sV + buf * kBN * kP;
    load_kv(sV + buf * kBN * kP, V, p.vs[2], t);
    cp_async_commit();
    cp_async_wait<1>();  // Q and K(t) have landed
    __syncthreads();
    if constexpr (Tr::kQInRegs) {
      if (t == t_begin) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
          ldmatrix_x4(qf[kk], smem_u32(sQ + (warp * 16 + (lane & 15)) * kP + kk * 16 + (lane >> 4) * 8));
      }
    }
    // S (16 × kBN per warp) = Q Kᵀ
    float s[kBN / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      std::uint32_t a[4];
      if constexpr (Tr::kQInRegs) {
#pragma unroll
        for (int x = 0; x < 4; ++x) a[x] = qf[kk][x];
      } else {
        ldmatrix_x4(a, smem_u32(sQ + (warp * 16 + (lane & 15)) * kP + kk * 16 + (lane >> 4) * 8));
      }
#pragma unroll
      for (int nb = 0; nb < kBN / 16; ++nb) {
        std::uint32_t bk[4];
        ldmatrix_x4(bk, smem_u32(sKb + (nb * 16 + (lane >> 4) * 8 + (lane & 7)) * kP + kk * 16 +
                                 ((lane >> 3) & 1) * 8));
        mma_16816<T>(s[2 * nb], a, bk[0], bk[1]);
        mma_16816<T>(s[2 * nb + 1], a, bk[2], bk[3]);
      }
    }
    if (t + 1 < t_end) load_kv(sK + (buf ^ 1) * kBN * kP, K, p.ks[2], t + 1);
    cp_async_commit();

    const bool edge = n0 < full_lo || n0 + kBN - 1 > full_hi;
    if (edge || sc.pre != 1.0f) {
#pragma unroll
      for (int nb = 0; nb < kBN / 8; ++nb)
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
    softmax_step(s, m, l, o, sc.fold);

    cp_async_wait<1>();  // V(t) has landed
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      std::uint32_t a[4];
      pack_p<T>(a, s, kk);
#pragma unroll
      for (int nd = 0; nd < D / 16; ++nd) {
        std::uint32_t bv[4];
        ldmatrix_x4_trans(bv, smem_u32(sVb + (kk * 16 + (lane & 15)) * kP + nd * 16 + (lane >> 4) * 8));
        mma_16816<T>(o[2 * nd], a, bv[0], bv[1]);
        mma_16816<T>(o[2 * nd + 1], a, bv[2], bv[3]);
      }
    }
  }
  cp_async_wait<0>();
  store_rows<T>(p, sq, h, i0, r_in, o, m, l);
}

// ---- Decode ----------------------------------------------------------------------------------

template <int D> struct DecodeMmaTraits {
  static constexpr int kRows = 16, kBN = 64, kThreads = 128;  // 16 keys per warp per stage
  static constexpr int kStages = D <= 128 ? 3 : 2;             // D=128: 106 KB, 2 blocks/SM
  static constexpr int kPitch = D + 8;
  static constexpr bool kQInRegs = D <= 128;
  static constexpr int kSmemBytes = (kRows + 2 * kStages * kBN) * kPitch * 2;
  static_assert(4 * kRows * D * 4 + 4 * 2 * kRows * 4 <= kSmemBytes, "warp states fit the smem");
};

// The packed rows of a decode block: row r ↦ (q head in group, query i).
struct PackedRows {
  int lq, r0, valid;
  __device__ __forceinline__ int head_in_group(int r) const { return (r0 + r) / lq; }
  __device__ __forceinline__ int query(int r) const { return (r0 + r) % lq; }
};

// Grid: (batch·kv_heads, row blocks of 16 over group·q_len, num_splits) — batch·kv_heads in x,
// the only dimension that may exceed 65535.
template <class T, int D>
__global__ void __launch_bounds__(128) attn_decode_mma(const Problem p) {
  using Tr = DecodeMmaTraits<D>;
  // Programmatic dependent launch: once every block of this grid has started, the split merge
  // (launched with the programmatic-serialization attribute) may be scheduled; it waits in
  // griddepcontrol.wait for this grid's completion and memory, so only its launch overlaps.
  parallel::cuda::launch_dependents();
  constexpr int kBN = Tr::kBN, kP = Tr::kPitch, kS = Tr::kStages;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // (16, kP)
  T* sKV = sQ + Tr::kRows * kP;             // (kS, 2, kBN, kP): K then V of each stage

  const int b = blockIdx.x / p.kv_heads, kvh = blockIdx.x % p.kv_heads, z = blockIdx.z;
  const Seq sq = seq_of(p, b);
  const int rows_total = p.group * sq.lq;
  if (int(blockIdx.y) * Tr::kRows >= rows_total) return;
  const PackedRows pr{sq.lq, int(blockIdx.y) * Tr::kRows, min(Tr::kRows, rows_total - int(blockIdx.y) * Tr::kRows)};
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const T* Qb = static_cast<const T*>(p.q) + sq.q_off + i64(kvh) * p.group * p.qs[1];
  const T* K = static_cast<const T*>(p.k) + sq.k_off + kvh * p.ks[1];
  const T* V = static_cast<const T*>(p.v) + sq.v_off + kvh * p.vs[1];
  const Band band{sq.lq, sq.lk, p.left, p.right};
  const ScoreScale sc(p.scale_log2);
  const int last = pr.valid - 1;
  const bool one_head = pr.head_in_group(0) == pr.head_in_group(last);
  const int i_min = one_head ? pr.query(0) : 0, i_max = one_head ? pr.query(last) : sq.lq - 1;
  const int key_lo = band.lo(i_min), key_hi = band.hi(i_max);
  const int tb = key_lo / kBN, te = key_hi < key_lo ? tb : key_hi / kBN + 1;
  const int per = (te - tb + p.num_splits - 1) / p.num_splits;
  const int t_begin = min(te, tb + z * per), t_end = min(te, t_begin + per);
  const int full_lo = band.lo(i_max), full_hi = band.hi(i_min);

  auto stage = [&](int t) { return sKV + ((t - t_begin) % kS) * 2 * kBN * kP; };
  // Full tiles (all but the cache's last): each thread copies the same 16-byte column chunk of
  // rows r0, r0 + kPass, … of K and V, from pointers set up once — a 64-bit add and one cp.async
  // per chunk, instead of the generic loop's ~28 instructions of index arithmetic per chunk
  // (which made the kernel issue-bound: ncu, 0.48 issued warps per scheduler per cycle).
  constexpr int kChunks = D / 8, kPass = Tr::kThreads / kChunks;
  constexpr bool kFastLoads = Tr::kThreads % kChunks == 0 && kBN % kPass == 0;
  const int r0 = tid / kChunks, col = tid % kChunks * 8;
  const T* k_chunk = K + i64(r0) * p.ks[2] + col;
  const T* v_chunk = V + i64(r0) * p.vs[2] + col;
  const i64 k_pass = i64(kPass) * p.ks[2], v_pass = i64(kPass) * p.vs[2];
  auto load_stage = [&](int t) {
    if (t < t_end) {
      const int n0 = t * kBN, valid = min(kBN, sq.lk - n0);
      T* dst = stage(t);
      if (kFastLoads && valid == kBN) {
        const std::uint32_t sk = smem_u32(dst + r0 * kP + col), sv = sk + kBN * kP * 2;
        const T* gk = k_chunk + i64(n0) * p.ks[2];
        const T* gv = v_chunk + i64(n0) * p.vs[2];
#pragma unroll
        for (int x = 0; x < kBN / kPass; ++x) {
          cp_async_16(sk + x * kPass * kP * 2, gk + x * k_pass, 16);
          cp_async_16(sv + x * kPass * kP * 2, gv + x * v_pass, 16);
        }
      } else {
        load_tile<D>(dst, kP, kBN, valid, [&](int r) { return K + i64(n0 + r) * p.ks[2]; }, tid, Tr::kThreads);
        load_tile<D>(dst + kBN * kP, kP, kBN, valid, [&](int r) { return V + i64(n0 + r) * p.vs[2]; }, tid,
                     Tr::kThreads);
      }
    }
    cp_async_commit();
  };
  load_tile<D>(sQ, kP, Tr::kRows, pr.valid,
               [&](int r) { return Qb + pr.head_in_group(r) * p.qs[1] + i64(pr.query(r)) * p.qs[2]; }, tid,
               Tr::kThreads);
  for (int x = 0; x < kS - 1; ++x) load_stage(t_begin + x);  // Q rides in the first group

  float o[D / 8][4] = {};
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  std::uint32_t qf[Tr::kQInRegs ? D / 16 : 1][4];
  int qi[2];  // query index of this thread's two rows
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) qi[hh] = pr.query(min((lane >> 2) + 8 * hh, last));

  for (int t = t_begin; t < t_end; ++t) {
    cp_async_wait<kS - 2>();
    __syncthreads();
    load_stage(t + kS - 1);
    if constexpr (Tr::kQInRegs) {
      if (t == t_begin) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
          ldmatrix_x4(qf[kk], smem_u32(sQ + (lane & 15) * kP + kk * 16 + (lane >> 4) * 8));
      }
    }
    const T* sK = stage(t) + warp * 16 * kP;  // this warp's 16 keys
    const T* sV = sK + kBN * kP;
    float s[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      std::uint32_t a[4];
      if constexpr (Tr::kQInRegs) {
#pragma unroll
        for (int x = 0; x < 4; ++x) a[x] = qf[kk][x];
      } else {
        ldmatrix_x4(a, smem_u32(sQ + (lane & 15) * kP + kk * 16 + (lane >> 4) * 8));
      }
      std::uint32_t bk[4];
      ldmatrix_x4(bk, smem_u32(sK + ((lane >> 4) * 8 + (lane & 7)) * kP + kk * 16 + ((lane >> 3) & 1) * 8));
      mma_16816<T>(s[0], a, bk[0], bk[1]);
      mma_16816<T>(s[1], a, bk[2], bk[3]);
    }
    const int n0 = t * kBN + warp * 16;
    const bool edge = n0 < full_lo || n0 + 15 > full_hi;  // lo, hi monotone: i_min..i_max bound every row
    if (edge || sc.pre != 1.0f) {
#pragma unroll
      for (int nb = 0; nb < 2; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[nb][e] * sc.pre;
          if (edge) {
            const int j = n0 + nb * 8 + (lane & 3) * 2 + (e & 1);
            if (j < band.lo(qi[e >> 1]) || j > band.hi(qi[e >> 1])) x = kNegInf;
          }
          s[nb][e] = x;
        }
    }
    softmax_step(s, m, l, o, sc.fold);
    std::uint32_t a[4];
    pack_p<T>(a, s, 0);
#pragma unroll
    for (int nd = 0; nd < D / 16; ++nd) {
      std::uint32_t bv[4];
      ldmatrix_x4_trans(bv, smem_u32(sV + (lane & 15) * kP + nd * 16 + (lane >> 4) * 8));
      mma_16816<T>(o[2 * nd], a, bv[0], bv[1]);
      mma_16816<T>(o[2 * nd + 1], a, bv[2], bv[3]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are free: reuse them for the warps' states

  float* wo = reinterpret_cast<float*>(smem_raw);  // (4 warps, 16 rows, D)
  float* wm = wo + 4 * Tr::kRows * D;              // (4, 16)
  float* wl = wm + 4 * Tr::kRows;                  // (4, 16)
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = (lane >> 2) + 8 * hh;
    const float sum = quad_sum(l[hh]);
    if ((lane & 3) == 0) { wm[warp * 16 + r] = m[hh]; wl[warp * 16 + r] = sum; }
#pragma unroll
    for (int ob = 0; ob < D / 8; ++ob) {
      float* dst = wo + (warp * 16 + r) * D + ob * 8 + (lane & 3) * 2;
      dst[0] = o[ob][2 * hh];
      dst[1] = o[ob][2 * hh + 1];
    }
  }
  __syncthreads();
  for (int x = tid; x < pr.valid * D; x += Tr::kThreads) {
    const int r = x / D, c = x % D;
    float mx = kNegInf;
#pragma unroll
    for (int w = 0; w < 4; ++w) mx = fmaxf(mx, wm[w * 16 + r]);
    float acc = 0.0f, sum = 0.0f;
    if (mx != kNegInf) {
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float f = exp2f(wm[w * 16 + r] - mx);
        acc += f * wo[(w * 16 + r) * D + c];
        sum += f * wl[w * 16 + r];
      }
    }
    const float val = sum > 0.0f ? acc / sum : 0.0f;
    const float lse = sum > 0.0f ? (mx + log2f(sum)) * kLn2 : kNegInf;
    const int h = kvh * p.group + pr.head_in_group(r), i = pr.query(r);
    if (p.num_splits == 1) {
      T* O = static_cast<T*>(p.out) + sq.o_off + h * p.os[1] + i64(i) * p.os[2];
      if constexpr (std::is_same_v<T, __nv_bfloat16>) O[c] = __float2bfloat16_rn(val);
      else O[c] = __float2half_rn(val);
      if (p.lse && c == 0) p.lse[sq.l_off + h * p.ls[1] + i64(i) * p.ls[2]] = lse;
    } else {
      const i64 row = ((i64(z) * p.batch + b) * p.q_heads + h) * p.q_len + i;
      p.part_o[row * D + c] = val;
      if (c == 0) p.part_lse[row] = lse;
    }
  }
}

}  // namespace sixfold::detail::attn
