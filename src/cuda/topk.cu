// src/cuda/topk.cu — exact top-k on the GPU by radix selection over order-preserving keys.
//
// Each value maps to an unsigned key, greater = better (NaN → all ones, −0 → +0, bits flipped
// for `smallest`; 16-bit floats widen to f32 keys, f64 has 64-bit keys). The k-th best key is
// found a digit at a time, most significant first: a histogram of the digit among the elements
// that match the digits found so far gives the bucket holding the k-th (redundancy: everything
// above it is selected, everything below it rejected, without ordering either). Ties at the
// k-th key go to the lowest indices, so the selected set is deterministic.
//
// One long row:
//   sample   2048 runs of 128 keys: a histogram of their top 16 bits gives the bucket where the
//            sampled count from the top reaches want ≈ 1.5·(expected sampled keys among the top
//            k) + 4σ + 8; thr = the least sampled key in that bucket (a real key, so ties at thr
//            are caught exactly)
//   one pass over the input (16-byte loads, segments per block in index order): keys above thr
//            are compacted into candidates (warp-aggregated appends), keys equal to thr counted
//            per block; the last block chooses the path:
//     kCand  ≥ k candidates: radix selection continues on them only (digits 12/12/8, f64 12×5+4:
//            histogram, bucket of the k-th, compaction), lowest indices among exact ties by
//            bisection in one block
//     kTies  fewer than k above thr but enough ties: all candidates + the first ties in index
//            order (per-block counts, their scan, block-scanned ranks)
//     kFull  the sample misled: digit histograms over the input, compaction of the k-th bucket
//            (or, when it does not fit, further digit passes and an ordered tie pass)
//   The host reads the chosen path (one stream synchronization) and launches only that path;
//   under CUDA-graph capture every path is launched and the others skip on the device.
// Batched rows (src/cuda/topk_rows.cu): one block per row (topk_rows_block): digit histograms in shared memory, the first
//   digit's bucket (and above) compacted in index order, the later digits on that short list,
//   then an ordered selection (block-scanned ranks) and, for k <= 1024, a bitonic sort in shared
//   memory; larger k goes through CUB's segmented sort. (A sampled-threshold pre-pass measured
//   slower: dev/topk/topk_v3_rows_sampled.cu.)
// Sorted output of the long-row path: the selected (key, index) pairs are sorted with CUB's
// stable radix sort (index ascending, then key descending), then values are gathered from x.#include <cmath>
#include <vector>

#include "topk_common.cuh"

namespace sixfold::detail {
namespace {

using namespace topk_gpu;

// ---- one long row: the selection state and its kernels ----------------------------------------
template <class Key>
struct SelectState {
  Key prefix, mask;     // digits found so far (mask covers them)
  Key prefix0, mask0;   // after the first digit (the bucket the overflow path re-reads)
  u64 k_rem;            // how many of the elements matching prefix are still to select
  u64 out_count;        // selected so far
  u64 cand_count[2];    // candidates of the current digit (ping-pong)
  int overflow;         // the first bucket did not fit the candidate buffer
  int done;             // every element matching prefix is selected: no more digits needed
  int done_level;       // the digit at which `done` was set
  int mode;             // kFull, kCand or kTies: what the threshold pass left to do
  int thr_bucket;       // the sample's 16-bit bucket holding the threshold (-1: none)
  Key thr;              // threshold key from the sample
  u64 eq_total;         // elements equal to thr
  u32 blocks_done;      // threshold-pass blocks finished (the last one chooses the mode)
};

// What the threshold pass leaves: kCand — at least k candidates above thr, all compacted
// (radix selection continues on them); kTies — fewer than k above thr, the rest are the first
// ties at thr in index order; kFull — the sample misled (or too many candidates): the digit
// passes over the input.
constexpr int kFull = 0, kCand = 1, kTies = 2;

template <class T, class Key>
struct RowArgs {
  const T* x;
  std::int64_t n;
  Key flip;                 // 0 for largest, all ones for smallest
  SelectState<Key>* st;
  u64* hist;                // (kMaxBins)
  Key* out_key;             // (k) selected, unordered
  std::int64_t* out_idx;
  Key* cand_key[2];         // (cap) ping-pong candidate buffers
  std::int64_t* cand_idx[2];
  u64 cap;
  u64* block_ties;          // (tie blocks) for the overflow path
  u64* block_eq;            // (threshold blocks) elements equal to thr per block
  u32* hist16;              // (65536) sample histogram of the top 16 bits
};

template <class T> struct Vec {
  static constexpr int kWidth = 16 / sizeof(T);
  uint4 raw;
  __device__ __forceinline__ T operator[](int j) const { return reinterpret_cast<const T*>(&raw)[j]; }
};

// Calls f(value, index) for every element: 16-byte loads when x is 16-byte aligned.
template <class T, class F>
__device__ __forceinline__ void for_each_elem(const T* x, std::int64_t n, F&& f) {
  constexpr int W = Vec<T>::kWidth;
  const std::int64_t tid = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  std::int64_t done_n = 0;
  if ((reinterpret_cast<std::uintptr_t>(x) & 15) == 0) {
    const std::int64_t nv = n / W;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    std::int64_t i = tid;
    for (; i + stride < nv; i += 2 * stride) {
      Vec<T> a, b;
      a.raw = __ldg(xv + i);
      b.raw = __ldg(xv + i + stride);
#pragma unroll
      for (int j = 0; j < W; ++j) f(a[j], i * W + j);
#pragma unroll
      for (int j = 0; j < W; ++j) f(b[j], (i + stride) * W + j);
    }
    if (i < nv) {
      Vec<T> a;
      a.raw = __ldg(xv + i);
#pragma unroll
      for (int j = 0; j < W; ++j) f(a[j], i * W + j);
    }
    done_n = nv * W;
  }
  for (std::int64_t i = done_n + tid; i < n; i += stride) f(x[i], i);
}

// Histogram of digit `level` over the input, of elements matching the digits found so far.
// Runs on the first digit, and on the others when the candidates overflowed.
template <class T, class Key>
__global__ void __launch_bounds__(1024) hist_input(RowArgs<T, Key> a, int level) {
  __shared__ u32 h[kMaxBins];
  const SelectState<Key> s = *a.st;
  if (s.mode != kFull || s.done || (level > 0 && !s.overflow)) return;
  const int shift = digit_shift<Key>(level), bins = 1 << digit_bits<Key>(level);
  for (int i = threadIdx.x; i < bins; i += blockDim.x) h[i] = 0;
  __syncthreads();
  const Key dmask = Key(bins - 1);
  for_each_elem(a.x, a.n, [&](T v, std::int64_t) {
    const Key key = order_key(v) ^ a.flip;
    if ((key & s.mask) == s.prefix) atomicAdd(&h[u32((key >> shift) & dmask)], 1u);
  });
  __syncthreads();
  for (int i = threadIdx.x; i < bins; i += blockDim.x)
    if (h[i]) atomicAdd(&a.hist[i], u64(h[i]));
}

// Histogram of digit `level` over the candidates (when they did not overflow).
template <class T, class Key>
__global__ void __launch_bounds__(1024) hist_cand(RowArgs<T, Key> a, int level) {
  __shared__ u32 h[kMaxBins];
  const SelectState<Key> s = *a.st;
  if (s.done || s.overflow || s.mode == kTies || (s.mode == kFull && level == 0)) return;
  const int shift = digit_shift<Key>(level), bins = 1 << digit_bits<Key>(level);
  const int src = (level - 1) & 1;
  const u64 m = s.cand_count[src];
  if (u64(blockIdx.x) * blockDim.x >= m) return;
  for (int i = threadIdx.x; i < bins; i += blockDim.x) h[i] = 0;
  __syncthreads();
  const Key dmask = Key(bins - 1);
  for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < m; i += u64(gridDim.x) * blockDim.x)
    atomicAdd(&h[u32((a.cand_key[src][i] >> shift) & dmask)], 1u);
  __syncthreads();
  for (int i = threadIdx.x; i < bins; i += blockDim.x)
    if (h[i]) atomicAdd(&a.hist[i], u64(h[i]));
}

// One block: finds the bucket holding the k_rem-th element (counting from the top digit),
// narrows the state to it, and clears the histogram for the next digit.
template <class Key>
__global__ void __launch_bounds__(1024) pick_bucket(SelectState<Key>* st, u64* hist, int level) {
  constexpr int kThreads = 1024;
  using Scan = cub::BlockScan<u64, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  SelectState<Key> s = *st;
  if (s.mode == kTies || s.done) return;
  const int shift = digit_shift<Key>(level), bins = 1 << digit_bits<Key>(level);
  const int per = (bins + kThreads - 1) / kThreads;  // bins per thread, from the top
  const int t = threadIdx.x;
  u64 c[4] = {0, 0, 0, 0}, sum = 0;
  for (int j = 0; j < per; ++j) {
    const int b = bins - 1 - (t * per + j);
    if (b >= 0) { c[j] = hist[b]; hist[b] = 0; }
    sum += c[j];
  }
  u64 above = 0;
  Scan(scan).ExclusiveSum(sum, above);
  if (above < s.k_rem && s.k_rem <= above + sum) {  // exactly one thread
    int j = 0;
    while (above + c[j] < s.k_rem) above += c[j++];
    const Key b = Key(bins - 1 - (t * per + j));
    s.k_rem -= above;
    s.prefix |= b << shift;
    s.mask |= Key(bins - 1) << shift;
    if (c[j] == s.k_rem) { s.done = 1; s.done_level = level; }
    if (level == 0) { s.prefix0 = s.prefix; s.mask0 = s.mask; }
    s.cand_count[level & 1] = 0;
    *st = s;
  }
}

// After the first digit: selects elements above the bucket, compacts those in it.
template <class T, class Key>
__global__ void __launch_bounds__(512) filter_input(RowArgs<T, Key> a) {
  const SelectState<Key> s = *a.st;
  if (s.mode != kFull) return;
  constexpr int W = Vec<T>::kWidth;
  auto visit = [&](T v, std::int64_t i, bool valid) {
    const Key key = order_key(v) ^ a.flip;
    const Key top = key & s.mask;
    const bool out = valid && (top > s.prefix || (s.done && top == s.prefix));
    const bool cand = valid && !s.done && top == s.prefix;
    const u64 o = warp_append(out, &a.st->out_count);
    if (out) { a.out_key[o] = key; a.out_idx[o] = i; }
    const u64 c = warp_append(cand, &a.st->cand_count[0]);
    if (cand) {
      if (c < a.cap) { a.cand_key[0][c] = key; a.cand_idx[0][c] = i; }
      else a.st->overflow = 1;
    }
  };
  const std::int64_t warp0 = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) & ~std::int64_t(31);
  const int lane = threadIdx.x & 31;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  std::int64_t done_n = 0;
  if ((reinterpret_cast<std::uintptr_t>(a.x) & 15) == 0) {
    const std::int64_t nv = a.n / W;
    const uint4* xv = reinterpret_cast<const uint4*>(a.x);
    for (std::int64_t w = warp0; w < nv; w += stride) {
      const std::int64_t i = w + lane;
      Vec<T> e;
      e.raw = i < nv ? __ldg(xv + i) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int j = 0; j < W; ++j) visit(e[j], i * W + j, i < nv);
    }
    done_n = nv * W;
  }
  for (std::int64_t w = done_n + warp0; w < a.n; w += stride) {
    const std::int64_t i = w + lane;
    visit(i < a.n ? a.x[i] : T{}, i, i < a.n);
  }
}

// Later digits over the candidates: above the bucket → selected, in it → next candidates.
template <class T, class Key>
__global__ void __launch_bounds__(512) filter_cand(RowArgs<T, Key> a, int level) {
  const SelectState<Key> s = *a.st;
  if (s.overflow || s.mode == kTies || (s.mode == kFull && level == 0)) return;
  const int src = (level - 1) & 1, dst = level & 1;
  if (s.done && s.done_level != level) return;  // finished at an earlier digit
  const u64 m = s.cand_count[src];
  const u64 warp0 = (u64(blockIdx.x) * blockDim.x + threadIdx.x) & ~u64(31);
  for (u64 w = warp0; w < m; w += u64(gridDim.x) * blockDim.x) {
    const u64 i = w + (threadIdx.x & 31);
    const bool valid = i < m;
    const Key key = valid ? a.cand_key[src][i] : Key(0);
    const std::int64_t idx = valid ? a.cand_idx[src][i] : 0;
    const Key top = key & s.mask;
    const bool out = valid && (top > s.prefix || (s.done && top == s.prefix));
    const bool cand = valid && !s.done && top == s.prefix;
    const u64 o = warp_append(out, &a.st->out_count);
    if (out) { a.out_key[o] = key; a.out_idx[o] = idx; }
    const u64 c = warp_append(cand, &a.st->cand_count[dst]);
    if (cand) { a.cand_key[dst][c] = key; a.cand_idx[dst][c] = idx; }
  }
}

// The candidates left after the last digit all equal the k-th key; takes the k_rem with the
// lowest indices: bisection on an index bound t with count(index < t) = k_rem (indices are
// distinct), one block.
template <class T, class Key>
__global__ void __launch_bounds__(1024) take_tied_candidates(RowArgs<T, Key> a) {
  using Reduce = cub::BlockReduce<u64, 1024>;
  __shared__ typename Reduce::TempStorage red;
  __shared__ u64 total;
  const SelectState<Key> s = *a.st;
  if (s.done || s.overflow || s.mode == kTies) return;
  constexpr int last = kLevels<Key> - 1;
  const int src = last & 1;
  const u64 m = s.cand_count[src];
  const Key* ck = a.cand_key[src];
  const std::int64_t* ci = a.cand_idx[src];
  std::int64_t lo = 0, hi = a.n;  // count(< lo) < k_rem <= count(< hi)
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    u64 c = 0;
    for (u64 i = threadIdx.x; i < m; i += blockDim.x) c += ci[i] < mid;
    c = Reduce(red).Sum(c);
    if (threadIdx.x == 0) total = c;
    __syncthreads();
    if (total >= s.k_rem) hi = mid; else lo = mid;
    __syncthreads();
  }
  for (u64 w = threadIdx.x & ~31u; w < m; w += blockDim.x) {
    const u64 i = w + (threadIdx.x & 31);
    const bool take = i < m && ci[i] < hi;
    const u64 o = warp_append(take, &a.st->out_count);
    if (take) { a.out_key[o] = ck[i]; a.out_idx[o] = ci[i]; }
  }
}

// ---- the threshold pass: one read of the input when a sample predicts the k-th key ------------
// The sample: kSampleChunks runs of 128 contiguous elements spread evenly over the row (all of
// it when the row is shorter).
constexpr int kSampleChunks = 2048, kSampleRun = 128;

template <class Key> __host__ __device__ constexpr int top16_shift() { return int(sizeof(Key)) * 8 - 16; }

template <class T, class Key>
__global__ void __launch_bounds__(kSampleRun) sample_hist(RowArgs<T, Key> a, std::int64_t step, int chunks,
                                                          u64 k) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {  // a fresh selection state for this row
    SelectState<Key> s{};
    s.k_rem = k;
    s.thr_bucket = -1;
    s.thr = ~Key(0);
    *a.st = s;
  }
  for (int c = blockIdx.x; c < chunks; c += gridDim.x) {
    const std::int64_t i = std::int64_t(c) * step + threadIdx.x;
    if (i < a.n) atomicAdd(&a.hist16[u32((order_key(a.x[i]) ^ a.flip) >> top16_shift<Key>())], 1u);
  }
}

// One block: the 16-bit bucket where the sample's count from the top reaches `want` (clearing
// the histogram), then thr = the least sampled key in that bucket (0 when the sample has fewer
// than `want` keys): at least `want` sampled keys are >= thr, and a thr that is a real key
// catches ties exactly.
template <class T, class Key>
__global__ void __launch_bounds__(1024) pick_threshold(RowArgs<T, Key> a, u64 want, std::int64_t step,
                                                       int chunks) {
  using Scan = cub::BlockScan<u64, 1024>;
  using Reduce = cub::BlockReduce<Key, 1024>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ typename Reduce::TempStorage red;
  __shared__ int bucket;
  constexpr int kPer = 65536 / 1024;
  u32* hist16 = a.hist16;
  const int t = threadIdx.x;
  if (t == 0) bucket = -1;
  u64 sum = 0;
  for (int j = 0; j < kPer; ++j) sum += hist16[65535 - (t * kPer + j)];
  u64 above = 0;
  Scan(scan).ExclusiveSum(sum, above);
  if (above < want && want <= above + sum) {
    int j = 0;
    while (above + hist16[65535 - (t * kPer + j)] < want) above += hist16[65535 - (t * kPer + j++)];
    bucket = 65535 - (t * kPer + j);
  }
  __syncthreads();
  for (int j = 0; j < kPer; ++j) hist16[t * kPer + j] = 0;
  const int b = bucket;
  Key m = ~Key(0);
  if (b >= 0)
    for (std::int64_t e = t; e < std::int64_t(chunks) * kSampleRun; e += 1024) {
      const std::int64_t i = (e / kSampleRun) * step + e % kSampleRun;
      if (i < a.n) {
        const Key key = order_key(a.x[i]) ^ a.flip;
        if (int(key >> top16_shift<Key>()) == b && key < m) m = key;
      }
    }
  m = Reduce(red).Reduce(m, [](Key x, Key y) { return x < y ? x : y; });
  if (t == 0) {
    a.st->thr_bucket = b;
    a.st->thr = b >= 0 ? m : Key(0);
  }
}

// Block b reads its segment [b·seg, (b+1)·seg) once: keys above thr are compacted into
// candidates (buffer 1), keys equal to thr are counted (per block, for the ordered ties).
template <class T, class Key>
__global__ void __launch_bounds__(512) thresh_pass(RowArgs<T, Key> a, std::int64_t seg, u64 k) {
  using Reduce = cub::BlockReduce<u64, 512>;
  __shared__ typename Reduce::TempStorage red;
  const Key thr = a.st->thr;
  const std::int64_t lo = std::int64_t(blockIdx.x) * seg, hi = std::min(a.n, lo + seg);
  u64 eq = 0;
  auto visit = [&](T v, std::int64_t i, bool valid) {
    const Key key = order_key(v) ^ a.flip;
    const bool above = valid && key > thr;
    eq += valid && key == thr;
    const u64 c = warp_append(above, &a.st->cand_count[1]);
    if (above && c < a.cap) { a.cand_key[1][c] = key; a.cand_idx[1][c] = i; }
  };
  constexpr int W = Vec<T>::kWidth;
  const bool vec = (reinterpret_cast<std::uintptr_t>(a.x + lo) & 15) == 0;
  if (vec) {
    const uint4* xv = reinterpret_cast<const uint4*>(a.x + lo);
    const std::int64_t nv = (hi - lo) / W, tile = blockDim.x;
    std::int64_t b = 0;
    for (; b + tile < nv; b += 2 * tile) {  // two 16-byte loads in flight per thread
      const std::int64_t i0 = b + threadIdx.x, i1 = i0 + tile;
      Vec<T> e0, e1;
      e0.raw = __ldg(xv + i0);
      const bool ok1 = i1 < nv;
      e1.raw = ok1 ? __ldg(xv + i1) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int j = 0; j < W; ++j) visit(e0[j], lo + i0 * W + j, true);
#pragma unroll
      for (int j = 0; j < W; ++j) visit(e1[j], lo + i1 * W + j, ok1);
    }
    for (; b < nv; b += tile) {
      const std::int64_t i0 = b + threadIdx.x;
      Vec<T> e0;
      e0.raw = i0 < nv ? __ldg(xv + i0) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int j = 0; j < W; ++j) visit(e0[j], lo + i0 * W + j, i0 < nv);
    }
    for (std::int64_t base = lo + nv * W; base < hi; base += blockDim.x) {
      const std::int64_t i = base + threadIdx.x;
      visit(i < hi ? a.x[i] : T{}, i, i < hi);
    }
  } else {
    for (std::int64_t base = lo; base < hi; base += blockDim.x) {
      const std::int64_t i = base + threadIdx.x;
      visit(i < hi ? a.x[i] : T{}, i, i < hi);
    }
  }
  eq = Reduce(red).Sum(eq);
  if (threadIdx.x == 0) {
    a.block_eq[blockIdx.x] = eq;
    if (eq) atomicAdd(&a.st->eq_total, eq);
    __threadfence();
    if (atomicAdd(&a.st->blocks_done, 1u) == gridDim.x - 1) {  // the last block: choose the mode
      __threadfence();
      SelectState<Key>* st = a.st;
      const u64 g = atomicAdd(&st->cand_count[1], 0ull), e = atomicAdd(&st->eq_total, 0ull);
      if (g <= a.cap && g >= k) st->mode = kCand;
      else if (g <= a.cap && g + e >= k) { st->mode = kTies; st->k_rem = k - g; }
      else st->mode = kFull;
    }
  }
}

// kTies: exclusive scan of the per-block tie counts (one block).
template <class Key>
__global__ void __launch_bounds__(1024) ties_scan(const SelectState<Key>* st, u64* counts, int blocks) {
  using Scan = cub::BlockScan<u64, 1024>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ u64 carry;
  if (st->mode != kTies) return;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < blocks; base += 1024) {
    const int i = base + threadIdx.x;
    const u64 v = i < blocks ? counts[i] : 0;
    u64 ex = 0, agg = 0;
    Scan(scan).ExclusiveSum(v, ex, agg);
    if (i < blocks) counts[i] = carry + ex;
    __syncthreads();
    if (threadIdx.x == 0) carry += agg;
    __syncthreads();
  }
}

// kTies: out[0, g) = the candidates above thr; out[g + r] = the r-th tie in index order, r < k_rem.
// Blocks whose first tie rank is already >= k_rem return at once.
template <class T, class Key>
__global__ void __launch_bounds__(512) ties_select(RowArgs<T, Key> a, std::int64_t seg) {
  using Scan = cub::BlockScan<u64, 512>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ u64 carry;
  const SelectState<Key> s = *a.st;
  if (s.mode != kTies) return;
  const u64 g = s.cand_count[1];
  for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < g; i += u64(gridDim.x) * blockDim.x) {
    a.out_key[i] = a.cand_key[1][i];
    a.out_idx[i] = a.cand_idx[1][i];
  }
  const u64 base_rank = a.block_eq[blockIdx.x];
  if (base_rank >= s.k_rem) return;
  const std::int64_t lo = std::int64_t(blockIdx.x) * seg, hi = std::min(a.n, lo + seg);
  if (threadIdx.x == 0) carry = base_rank;
  __syncthreads();
  for (std::int64_t base = lo; base < hi; base += blockDim.x) {
    if (carry >= s.k_rem) break;  // uniform: read after a barrier
    const std::int64_t i = base + threadIdx.x;
    const Key key = i < hi ? (order_key(a.x[i]) ^ a.flip) : Key(0);
    const bool tie = i < hi && key == s.thr;
    u64 rank = 0, count = 0;
    Scan(scan).ExclusiveSum(u64(tie), rank, count);
    const u64 r = carry + rank;
    if (tie && r < s.k_rem) { a.out_key[g + r] = key; a.out_idx[g + r] = i; }
    __syncthreads();
    if (threadIdx.x == 0) carry += count;
    __syncthreads();
  }
}

// ---- the overflow path's ordered last pass ----------------------------------------------------
// Block b owns the contiguous segment [b·seg, (b+1)·seg) of the input.
constexpr int kTieThreads = 512;

template <class T, class Key>
__global__ void __launch_bounds__(kTieThreads) count_ties(RowArgs<T, Key> a, std::int64_t seg) {
  using Reduce = cub::BlockReduce<u64, kTieThreads>;
  __shared__ typename Reduce::TempStorage red;
  const SelectState<Key> s = *a.st;
  if (!s.overflow || s.done) return;
  const std::int64_t lo = std::int64_t(blockIdx.x) * seg, hi = std::min(a.n, lo + seg);
  u64 c = 0;
  for (std::int64_t i = lo + threadIdx.x; i < hi; i += kTieThreads)
    c += ((order_key(a.x[i]) ^ a.flip) == s.prefix);
  c = Reduce(red).Sum(c);
  if (threadIdx.x == 0) a.block_ties[blockIdx.x] = c;
}

// Exclusive scan of the per-block tie counts, in place, one block.
template <class Key>
__global__ void __launch_bounds__(1024) scan_ties(const SelectState<Key>* st, u64* counts, int blocks) {
  using Scan = cub::BlockScan<u64, 1024>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ u64 carry;
  if (!st->overflow || st->done) return;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < blocks; base += 1024) {
    const int i = base + threadIdx.x;
    const u64 v = i < blocks ? counts[i] : 0;
    u64 ex = 0, agg = 0;
    Scan(scan).ExclusiveSum(v, ex, agg);
    if (i < blocks) counts[i] = carry + ex;
    __syncthreads();
    if (threadIdx.x == 0) carry += agg;
    __syncthreads();
  }
}

template <class T, class Key>
__global__ void __launch_bounds__(kTieThreads) select_ordered(RowArgs<T, Key> a, std::int64_t seg) {
  using Scan = cub::BlockScan<u64, kTieThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ u64 carry;
  const SelectState<Key> s = *a.st;
  if (!s.overflow) return;
  const std::int64_t lo = std::int64_t(blockIdx.x) * seg, hi = std::min(a.n, lo + seg);
  if (threadIdx.x == 0) carry = s.done ? 0 : a.block_ties[blockIdx.x];
  __syncthreads();
  for (std::int64_t base = lo; base < hi; base += kTieThreads) {
    const std::int64_t i = base + threadIdx.x;
    Key key = 0;
    bool in0 = false;
    if (i < hi) {
      key = order_key(a.x[i]) ^ a.flip;
      in0 = (key & s.mask0) == s.prefix0;
    }
    const Key top = key & s.mask;
    const bool tie = in0 && top == s.prefix;
    u64 rank = 0, count = 0;
    Scan(scan).ExclusiveSum(u64(tie), rank, count);
    const u64 r = carry + rank;
    const bool take = in0 && (top > s.prefix || (tie && (s.done || r < s.k_rem)));
    const u64 o = warp_append(take, &a.st->out_count);
    if (take) { a.out_key[o] = key; a.out_idx[o] = i; }
    __syncthreads();
    if (threadIdx.x == 0) carry += count;
    __syncthreads();
  }
}

// A page-locked word per host thread, for reading the path a selection took.
int* pinned_word() {
  thread_local int* word = nullptr;
  if (!word) check_cuda(cudaMallocHost(&word, sizeof(int)), kWhere);
  return word;
}

template <class T>
void run_single_rows(const TopKArgs& a, cudaStream_t stream) {
  using Key = typename KeyOf<T>::type;
  const std::int64_t n = a.x.n, k = a.k;
  const int sms = sm_count();
  const u64 cap = u64(std::clamp<std::int64_t>(n / 16, std::min<std::int64_t>(n, 1 << 16), 1 << 23));
  const std::int64_t seg = std::max<std::int64_t>(kTieThreads * 16, (n + 1023) / 1024);
  const int tie_blocks = int((n + seg - 1) / seg);
  // The threshold pass: about 8 blocks of 512 per SM, segments of whole 16-element groups.
  const std::int64_t thr_seg = ((n + std::min<std::int64_t>((n + 65535) / 65536, sms * 8) - 1) /
                                    std::min<std::int64_t>((n + 65535) / 65536, sms * 8) + 15) / 16 * 16;
  const int thr_blocks = int((n + thr_seg - 1) / thr_seg);
  // The sample: 2048 runs of 128 (the whole row when it is shorter than 4 such samples).
  const bool whole = n < std::int64_t(4) * kSampleChunks * kSampleRun;
  const std::int64_t step = whole ? kSampleRun : n / kSampleChunks;
  const int chunks = whole ? int((n + kSampleRun - 1) / kSampleRun) : kSampleChunks;
  const double sampled = whole ? double(n) : double(kSampleChunks) * kSampleRun;
  const double expect = double(k) * sampled / double(n);  // sampled keys expected among the top k
  const u64 want = u64(std::clamp(std::ceil(1.5 * expect + 4.0 * std::sqrt(expect) + 8.0), 1.0, sampled));
  PairSort<Key> sort;
  if (a.sorted) sort.size_for(k, 1, true, n);
  RowArgs<T, Key> r{};
  Carve c;
  Key *sk1 = nullptr, *sk2 = nullptr;
  std::int64_t *si1 = nullptr, *si2 = nullptr;
  void* temp = nullptr;
  auto layout = [&] {
    c.bytes = 0;
    r.st = c.take<SelectState<Key>>(1);
    r.hist = c.take<u64>(kMaxBins);
    r.out_key = c.take<Key>(std::size_t(k));
    r.out_idx = c.take<std::int64_t>(std::size_t(k));
    for (int j = 0; j < 2; ++j) {
      r.cand_key[j] = c.take<Key>(cap);
      r.cand_idx[j] = c.take<std::int64_t>(cap);
    }
    r.block_ties = c.take<u64>(std::size_t(tie_blocks));
    r.block_eq = c.take<u64>(std::size_t(thr_blocks));
    r.hist16 = c.take<u32>(65536);
    sk1 = c.take<Key>(std::size_t(k));
    sk2 = c.take<Key>(std::size_t(k));
    si1 = c.take<std::int64_t>(std::size_t(k));
    si2 = c.take<std::int64_t>(std::size_t(k));
    temp = c.take<char>(sort.temp_bytes);
  };
  layout();
  parallel::cuda::detail::Scratch scratch(c.bytes, stream, kWhere);
  c.base = static_cast<char*>(scratch.get());
  layout();
  r.n = n;
  r.cap = cap;
  r.flip = a.largest ? Key(0) : ~Key(0);
  check_cuda(cudaMemsetAsync(r.hist, 0, kMaxBins * sizeof(u64), stream), kWhere);
  check_cuda(cudaMemsetAsync(r.hist16, 0, 65536 * sizeof(u32), stream), kWhere);

  const int hist_blocks = sms * 2, filter_blocks = sms * 4, cand_blocks = sms * 2;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &capture), kWhere);
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  int* pinned = capturing ? nullptr : pinned_word();
  for (std::int64_t row = 0; row < a.x.rows; ++row) {
    r.x = static_cast<const T*>(a.x.data) + row * a.x.row_stride;
    sample_hist<T, Key><<<std::min(chunks, 1024), kSampleRun, 0, stream>>>(r, step, chunks, u64(k));
    pick_threshold<T, Key><<<1, 1024, 0, stream>>>(r, want, step, chunks);
    thresh_pass<T, Key><<<thr_blocks, 512, 0, stream>>>(r, thr_seg, u64(k));
    // Which path the threshold pass left: read on the host (one synchronization), so only that
    // path is launched; under graph capture all paths are launched and skip on the device.
    int mode = -1;
    if (!capturing) {
      check_cuda(cudaMemcpyAsync(pinned, &r.st->mode, sizeof(int), cudaMemcpyDeviceToHost, stream), kWhere);
      check_cuda(cudaStreamSynchronize(stream), kWhere);
      mode = *pinned;
    }
    const bool full = mode == kFull || mode < 0, cand = mode == kCand || mode < 0;
    for (int level = 0; level < kLevels<Key>; ++level) {
      if (full) hist_input<T, Key><<<hist_blocks, 1024, 0, stream>>>(r, level);
      if (cand || (full && level > 0)) hist_cand<T, Key><<<cand_blocks, 1024, 0, stream>>>(r, level);
      if (mode != kTies) pick_bucket<Key><<<1, 1024, 0, stream>>>(r.st, r.hist, level);
      if (full && level == 0) filter_input<T, Key><<<filter_blocks, 512, 0, stream>>>(r);
      if (cand || (full && level > 0)) filter_cand<T, Key><<<cand_blocks, 512, 0, stream>>>(r, level);
    }
    if (mode != kTies) take_tied_candidates<T, Key><<<1, 1024, 0, stream>>>(r);
    if (full) {
      count_ties<T, Key><<<tie_blocks, kTieThreads, 0, stream>>>(r, seg);
      scan_ties<Key><<<1, 1024, 0, stream>>>(r.st, r.block_ties, tie_blocks);
      select_ordered<T, Key><<<tie_blocks, kTieThreads, 0, stream>>>(r, seg);
    }
    if (mode == kTies || mode < 0) {
      ties_scan<Key><<<1, 1024, 0, stream>>>(r.st, r.block_eq, thr_blocks);
      ties_select<T, Key><<<thr_blocks, 512, 0, stream>>>(r, thr_seg);
    }
    check_cuda(cudaGetLastError(), kWhere);
    const std::int64_t* idx = r.out_idx;
    if (a.sorted && k > 1) {
      std::size_t tb = sort.temp_bytes;
      check_cuda(cub::DeviceRadixSort::SortPairs(temp, tb, reinterpret_cast<const u64*>(r.out_idx),
                                                 reinterpret_cast<u64*>(si1), r.out_key, sk1, k, 0,
                                                 sort.index_bits, stream), kWhere);
      tb = sort.temp_bytes;
      check_cuda(cub::DeviceRadixSort::SortPairsDescending(temp, tb, sk1, sk2, si1, si2, k, 0,
                                                           int(sizeof(Key) * 8), stream), kWhere);
      idx = si2;
    }
    const int blocks = int(std::min<std::int64_t>((k + 255) / 256, 4096));
    gather<T><<<blocks, 256, 0, stream>>>(r.x, 0, idx, k, 1, static_cast<T*>(a.values.data) + row * a.values.row_stride,
                                          0, static_cast<std::int64_t*>(a.indices.data) + row * a.indices.row_stride, 0);
    check_cuda(cudaGetLastError(), kWhere);
  }
}

template <class T>
void run(const TopKArgs& a, cudaStream_t stream) {
  // One block per row while that fills the GPU or rows are short; else each row across the GPU.
  const bool batched = a.x.n <= (std::int64_t(1) << 31) - 1 &&
                       (a.x.n <= 65536 || a.x.rows >= 2 * std::int64_t(sm_count()));
  if (batched) topk_rows_cuda(a, stream);
  else run_single_rows<T>(a, stream);
}

}  // namespace

void topk_cuda(const TopKArgs& a, int device, Stream stream) {
  int previous = 0;
  check_cuda(cudaGetDevice(&previous), kWhere);
  if (previous != device) check_cuda(cudaSetDevice(device), kWhere);
  const auto s = static_cast<cudaStream_t>(stream.handle);
  try {
    switch (a.dtype) {
      case DType::f32: run<float>(a, s); break;
      case DType::f16: run<__half>(a, s); break;
      case DType::bf16: run<__nv_bfloat16>(a, s); break;
      case DType::f64: run<double>(a, s); break;
      case DType::i32: run<int>(a, s); break;
      default: throw_error(kWhere, "unsupported dtype reached the CUDA backend");
    }
  } catch (...) {
    cudaSetDevice(previous);
    throw;
  }
  if (previous != device) cudaSetDevice(previous);
}

}  // namespace sixfold::detail
