// src/cuda/topk.cu — exact top-k of long rows on the GPU (batched rows: src/cuda/topk_rows.cu).
//
// Each value maps to an unsigned key, greater = better (NaN → all ones, −0 → +0, bits flipped
// for `smallest`; 16-bit floats widen to f32 keys, f64 has 64-bit keys). Ties go to the lowest
// indices, so the result is deterministic.
//
// 32-bit keys, rows of fewer than 2^32 − 1 elements, k <= 2^22 (lr::, the path the benchmarks
// take): three launches in stream order and no host synchronization —
//   lr_sample  (cooperative, 64 blocks) a sample of 65536 keys (262144 for large k) in runs of
//              8 contiguous keys spread evenly over the row; thr = a real sampled key with
//              about 1.1× the expected count of sampled keys among the top k (+ 4σ + 8) at or
//              above it (two 12-bit digit rounds, a grid barrier between them)
//   lr_filter  (a programmatic dependent of the sample: its first loads go out before thr is
//              known) one read of the row with 16-byte loads; keys > thr appended as 64-bit
//              composites (key << 32 | ~index: distinct, larger = better, lower index first
//              among equal keys) through per-warp staging buffers, and counted in 16-bit bins
//              (cand_digit: from thr over twice the sample's spread above it); keys == thr
//              counted per segment of 16384 elements
//   lr_tail    (cooperative, 2 blocks per SM, grid barriers through an atomic counter) chooses on
//              the device: A >= k candidates → the top k of them; B fewer but enough ties → all
//              candidates, then the first ties in index order; C the sample misled → digit
//              histograms over the row find the k-th key, one more read selects. Then the
//              winners are sorted in the same kernel (bin offsets from the top — from the
//              filter's counts unless too many fell past the sample's range — a scatter, each
//              bin sorted by a thread per entry or a block).
// Other long rows (f64 keys, longer rows, larger k; v3, run_single_rows): the sample, one
// filtering pass, the host reads the chosen path (one synchronization) and launches digit passes
// over the candidates, then CUB sorts the k winners.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <cooperative_groups.h>

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

// ---- one long row, 32-bit keys, n < 2^32 - 1 (see the top of the file) ----------------------
// lr_sort_top: a 16-bit digit right below the candidates' common prefix; a histogram, offsets
//   from the top (only bins that start before k), a scatter, then each bin sorted: bins of up
//   to kRankBin by one thread per entry (its rank = the bin's entries above it), larger ones by
//   one block (bitonic, in shared memory up to 4096, else in global memory).
namespace lr {

constexpr int kSample = 65536, kSampleThreads = 1024;
// The sample reads runs of kSampleSector contiguous keys (one 32-byte sector) spread evenly over
// the row: sector by sector, 65536 keys scattered one per sector kept the DRAM busy opening
// rows (trace: 262144 keys took ~10 µs to arrive, 65536 ~3.5 µs).
constexpr int kSampleSector = 8;
constexpr int kThreads = 512;
constexpr std::int64_t kSeg = 16384;
constexpr int kBins = 65536, kChunkBins = 256, kChunks = kBins / kChunkBins;
constexpr int kSmemSort = 4096, kListMax = 64, kRankBin = 64;
// Chunk counters one 128-byte line apart: the filter adds to them from every SM.
constexpr int kChunkPad = 32;
__host__ __device__ constexpr u64 chunk_slot(u64 c) { return c * kChunkPad; }

struct Head {  // zeroed by lr_sample
  u32 sample_done, sample_barrier, barrier, thr, big_count;
  u32 smax;                           // the greatest sampled key
  u64 cand_count;                     // appended candidates
  u64 sel_count, sel_hi, sel_nlo;     // path C's selection (sel_hi / sel_nlo: also the A / B recount)
  u64 filled;                         // lr_sort_top: entries of the bins that start before k
  u32 hist[2][4096];                  // the sample's digit histograms (12 bits each)
  u32 least[4096];                    // ~least key per bin of the second digit
};

template <class T>
struct Args {
  const T* x;
  u64 n, k, cap, head_elems, segs;  // head_elems: elements before x's first 16-byte boundary
  u32 flip;
  Head* head;
  u32* seg_eq;     // (segs) ties per segment
  u64* cand;       // (cap)
  u64* tmp;        // (cap)
  u32* binhist;    // (kBins)
  u32* chunkhist;  // (kChunks · kChunkPad): chunk c at chunk_slot(c)
  u64* binoff;     // (kBins) offset << 32 | count; the scatter advances the offset by count
  u64* big;        // (k / 32 + 2) offset << 32 | count
  u32* chist;      // (3 * 4096) path C's digit histograms
  T* values;
  std::int64_t* indices;
  u64* trace;  // dev hook SIXFOLD_TOPK_TRACE: phase timestamps (nullptr: off)
};

// Dev hook SIXFOLD_TOPK_TRACE=1: %globaltimer (ns) at the phase boundaries of each long-row
// call, read back after the call (one synchronization per row; calls under graph capture are not
// traced); medians printed to stderr at exit. "first" slots take the earliest block, the others
// the latest.
enum TraceSlot {
  kSampleStart, kSampleLoaded, kSampleBarrier, kSampleEnd, kFilterFirst, kFilterLast, kFilterWait,
  kFilterEndFirst, kFilterEnd, kTailFirst, kTailLast, kTailHist, kTailOffsets, kTailScatter, kTailEnd,
  kTraceSlots
};
constexpr u32 kTraceFirstMask = (1u << kSampleStart) | (1u << kSampleBarrier) | (1u << kFilterFirst) |
                                (1u << kFilterWait) | (1u << kFilterEndFirst) | (1u << kTailFirst) |
                                (1u << kTailHist) | (1u << kTailOffsets) | (1u << kTailScatter);
constexpr int kTraceBlocks = 1024;  // per-block records after the slots: filter (start, end, SM), sample SM
constexpr int kTraceWords = kTraceSlots + 4 * kTraceBlocks;
__device__ __forceinline__ u64 trace_now() {
  u64 now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}
__device__ __forceinline__ void trace_at(u64* tr, int slot) {
  if (!tr || threadIdx.x != 0) return;
  const u64 now = trace_now();
  if ((kTraceFirstMask >> slot) & 1u) atomicMin(reinterpret_cast<unsigned long long*>(tr + slot), now);
  else atomicMax(reinterpret_cast<unsigned long long*>(tr + slot), now);
}
// word: 0 filter block start, 1 its end, 2 its SM, 3 the SM of sample block blockIdx.x (+ 1)
__device__ __forceinline__ void trace_block(u64* tr, int word) {
  if (!tr || threadIdx.x != 0 || blockIdx.x >= kTraceBlocks) return;
  u32 sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  tr[kTraceSlots + word * kTraceBlocks + blockIdx.x] = word == 2 || word == 3 ? u64(sm) + 1 : trace_now();
}

__device__ __forceinline__ u64 comp(u32 key, u64 i) { return (u64(key) << 32) | u64(0xffffffffu - u32(i)); }
__device__ __forceinline__ u32 comp_index(u64 c) { return 0xffffffffu - u32(c); }

// The 16-bit bin of a composite in lr_sort_top: (c − base) >> shift, the top bin also taking
// everything beyond. Monotone, so bins are ordered like their composites.
struct Digit {
  u64 base;
  int shift;
  __device__ __forceinline__ u32 operator()(u64 c) const {
    const u64 d = (c - base) >> shift;
    return d > 0xffffu ? 0xffffu : u32(d);
  }
};
// Composites in [lo, hi]: 65536 bins over exactly that range.
__device__ __forceinline__ Digit range_digit(u64 lo, u64 hi) {
  return {lo, hi == lo ? 0 : std::max(0, 64 - __clzll(hi - lo) - 16)};
}
// The filter's candidates (keys above thr), binned before their range is known: from thr's
// next key over twice the sample's spread above thr (smax: the greatest sampled key). For iid
// data the top bin then holds no more than a few keys beyond it.
__device__ __forceinline__ Digit cand_digit(u32 thr, u32 smax) {
  const u32 spread = smax > thr ? smax - thr : 1u;
  return {(u64(thr) + 1) << 32, std::max(0, (32 - __clz(spread)) + 1 + 32 - 16)};
}

// Segment of element i: [0, head + kSeg), then kSeg each (16-byte groups never straddle two).
template <class T>
__device__ __forceinline__ u64 seg_of(const Args<T>& a, u64 i) {
  return i < a.head_elems ? 0 : (i - a.head_elems) / u64(kSeg);
}
template <class T>
__device__ __forceinline__ void seg_range(const Args<T>& a, u64 s, u64& lo, u64& hi) {
  lo = s == 0 ? 0 : a.head_elems + s * u64(kSeg);
  hi = std::min(a.n, a.head_elems + (s + 1) * u64(kSeg));
}

// Zeroes lr_sort_top's bin and chunk counts, thread `from` of `step`.
template <class T>
__device__ __forceinline__ void clear_bins(const Args<T>& a, u64 from, u64 step) {
  for (u64 i = from; i < u64(kBins); i += step) a.binhist[i] = 0;
  for (u64 i = from; i < u64(kChunks); i += step) a.chunkhist[chunk_slot(i)] = 0;
}

// All blocks of the grid wait here; target = gridDim.x * (number of this barrier, from 1).
__device__ __forceinline__ void grid_barrier(u32* counter, u32& passed) {
  __syncthreads();
  passed += gridDim.x;
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
    while (*static_cast<volatile u32*>(counter) < passed) __nanosleep(20);
    __threadfence();
  }
  __syncthreads();
}

// The sample (one cooperative grid of 64 blocks, P sampled keys per thread, kept in registers):
// two rounds of 12-bit digit histograms, most significant first, each block adding its own, with
// a grid barrier after the first; every block then finds the bucket holding the want-th key from
// the top and goes on with the keys in it. The second round keeps the least key per bin; the
// last block picks thr = the least sampled key of the 24-bit bin where the count from the top
// reaches want (a real key, so ties at thr are caught).
template <class T, int P>
__global__ void __launch_bounds__(kSampleThreads) lr_sample(Args<T> a, u32 count, u32 want, u64 stride) {
  constexpr int kDigit = 12, kBinsS = 1 << kDigit, kPer = kBinsS / kSampleThreads;
  using Scan = cub::BlockScan<u32, kSampleThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ u32 h[kBinsS], mx[kBinsS];
  __shared__ u32 s_bucket, s_above;
  __shared__ bool last;
  const int t = threadIdx.x;
  trace_at(a.trace, kSampleStart);
  trace_block(a.trace, 3);
  // lr_filter (a programmatic dependent) may start loading; it waits for this grid's results.
  parallel::cuda::launch_dependents();
  const u64 gtid = u64(blockIdx.x) * kSampleThreads + t, gthreads = u64(gridDim.x) * kSampleThreads;
  // The head is zeroed here, not by a memset before the launch (one stream operation fewer per
  // call); the grid synchronizes before its first atomic on it.
  for (u64 i = gtid; i < sizeof(Head) / sizeof(u32); i += gthreads) reinterpret_cast<u32*>(a.head)[i] = 0;
  for (u64 i = gtid; i < a.segs; i += gthreads) a.seg_eq[i] = 0;
  // lr_filter counts its candidates' bins (lr_sort_top's, under cand_digit) as it appends them.
  clear_bins(a, gtid, gthreads);
  u32 key[P];
  bool valid[P];
  // Run r starts at r · stride, plus its share of the elements past runs · stride (a multiple
  // of kSampleSector), so the last run ends within a stride of the row's end: sorted rows keep
  // their largest keys in the sample.
  const u64 runs = std::max<u64>(1, count / kSampleSector), spare = a.n - runs * stride;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const u32 s = (u32(p) * gridDim.x + blockIdx.x) * kSampleThreads + t;
    const u64 r = s / kSampleSector;
    valid[p] = s < count;
    key[p] = valid[p] ? order_key(a.x[r * stride + (r * spare / runs & ~u64(kSampleSector - 1)) + s % kSampleSector]) ^ a.flip
                      : 0u;
  }
  {
    u32 m = 0;
#pragma unroll
    for (int p = 0; p < P; ++p) m = std::max(m, key[p]);  // invalid keys are 0
    m = __reduce_max_sync(0xffffffffu, m);
    cooperative_groups::this_grid().sync();  // the head is zero
    if ((t & 31) == 0 && m) atomicMax(&a.head->smax, m);
  }
  u32 prefix = 0, rem = want, passed = 0;
  for (int round = 0; round < 2; ++round) {
    const int shift = 20 - kDigit * round;
    u32* gh = a.head->hist[round];
    for (int i = t; i < kBinsS; i += kSampleThreads) { h[i] = 0; mx[i] = 0; }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (valid[p] && (round == 0 || (key[p] >> (shift + kDigit)) == prefix)) {
        const u32 d = (key[p] >> shift) & (kBinsS - 1);
        atomicAdd(&h[d], 1u);
        if (round == 1) atomicMax(&mx[d], ~key[p]);
      }
    __syncthreads();
    if (round == 0) trace_at(a.trace, kSampleLoaded);
    for (int i = t; i < kBinsS; i += kSampleThreads)
      if (h[i]) {
        atomicAdd(&gh[i], h[i]);
        if (round == 1) atomicMax(&a.head->least[i], mx[i]);
      }
    if (round == 0) {
      grid_barrier(&a.head->sample_barrier, passed);
      trace_at(a.trace, kSampleBarrier);
    } else {  // the last block to finish picks thr
      __threadfence();
      __syncthreads();
      if (t == 0) last = atomicAdd(&a.head->sample_done, 1u) == gridDim.x - 1;
      __syncthreads();
      if (!last) return;
      __threadfence();
    }
    // Thread t holds bins kBinsS − 1 − (kPer·t + j), j < kPer, counted from the top.
    u32 c[kPer], sum = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      c[j] = __ldcg(&gh[kBinsS - 1 - (kPer * t + j)]);
      sum += c[j];
    }
    u32 above = 0;
    Scan(scan).ExclusiveSum(sum, above);
    if (above < rem && rem <= above + sum) {
      int j = 0;
      while (above + c[j] < rem) above += c[j++];
      const u32 bin = u32(kBinsS - 1 - (kPer * t + j));
      s_bucket = bin;
      s_above = above;
      if (round == 1) a.head->thr = ~__ldcg(&a.head->least[bin]);
    }
    __syncthreads();
    prefix = (prefix << kDigit) | s_bucket;
    rem -= s_above;
    __syncthreads();
  }
  trace_at(a.trace, kSampleEnd);
}

// f(key, index, valid) for every element of the row, grid-stride, 16-byte loads, four per lane
// in flight; every lane of a warp makes the same calls (valid = false past the end).
template <class T, class F>
__device__ __forceinline__ void for_each_key(const Args<T>& a, F&& f) {
  constexpr int W = Vec<T>::kWidth, U = 4;
  const u64 lane = threadIdx.x & 31;
  const u64 warp = (u64(blockIdx.x) * blockDim.x + threadIdx.x) >> 5, nwarps = (u64(gridDim.x) * blockDim.x) >> 5;
  const u64 h = a.head_elems, nv = (a.n - h) / W;
  const uint4* xv = reinterpret_cast<const uint4*>(a.x + h);
  for (u64 b = warp * 32 * U; b < nv; b += nwarps * 32 * U) {
    Vec<T> e[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const u64 v = b + u * 32 + lane;
      e[u].raw = v < nv ? __ldg(xv + v) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const u64 v = b + u * 32 + lane;
#pragma unroll
      for (int j = 0; j < W; ++j) f(order_key(e[u][j]) ^ a.flip, h + v * W + j, v < nv);
    }
  }
  const u64 rest = h + nv * W, scal = h + (a.n - rest);
  for (u64 b = warp * 32; b < scal; b += nwarps * 32) {
    const u64 s = b + lane, i = s < h ? s : rest + (s - h);
    f(s < scal ? order_key(a.x[i]) ^ a.flip : 0u, i, s < scal);
  }
}

struct Smem {
  union {
    typename cub::BlockScan<u64, kThreads>::TempStorage scan;
    typename cub::BlockReduce<u64, kThreads>::TempStorage reduce;
  };
  union {
    u64 sort[kSmemSort];
    u32 hist[4096];
  };
  u32 chunk[kChunks], above[kChunks];
  u64 list_seg[kListMax], list_rank[kListMax];
  u32 nlist;
  u64 carry;
  u32 prefix, mask;
  u64 krem;
  int done;
};

// The value whose order key is `key` (unflipped), false where the key does not determine the
// bits: NaN (payloads merge into one key) and zero (−0 and +0 share it).
template <class T>
__device__ __forceinline__ bool value_of_key(u32 key, T& v) {
  if constexpr (std::is_same_v<T, int>) {
    v = int(key ^ 0x80000000u);
    return true;
  } else {
    if (key == 0xffffffffu || key == 0x80000000u) return false;
    const float f = key_float(key);
    if constexpr (std::is_same_v<T, float>) v = f;
    else if constexpr (std::is_same_v<T, __half>) v = __float2half_rn(f);  // exact: f came from a half
    else v = __float2bfloat16_rn(f);
    return true;
  }
}

// Output position pos gets composite c: the value from its key (no read of the input) unless
// the key is NaN's or zero's, whose bits are read back from the input.
template <class T>
__device__ __forceinline__ void write_out(const Args<T>& a, u64 pos, u64 c) {
  const u32 i = comp_index(c);
  T v;
  if (!value_of_key(u32(c >> 32) ^ a.flip, v)) v = a.x[i];
  a.values[pos] = v;
  a.indices[pos] = std::int64_t(i);
}

// The kk best of the m distinct composites src[0, m), best first, to output positions [0, kk),
// by their bins under `digit`. binhist / chunkhist: zero, or (counted) already holding the
// counts of src's bins. Every block calls it (grid barriers inside).
template <class T>
__device__ void lr_sort_top(const Args<T>& a, Smem& sm, const u64* src, u64 m, u64 kk, Digit digit, bool counted,
                            u32& passed) {
  using Scan = cub::BlockScan<u64, kThreads>;
  if (m == 0 || kk == 0) return;
  const int t = threadIdx.x;
  const u64 gtid = u64(blockIdx.x) * kThreads + t, gthreads = u64(gridDim.x) * kThreads;
  // The scatter's first composite per thread, loaded now: it waits for nothing that follows.
  const u64 first = gtid < m ? __ldcg(src + gtid) : 0;
  if (!counted) {
    for (int i = t; i < kChunks; i += kThreads) sm.chunk[i] = 0;
    __syncthreads();
    for (u64 i = gtid; i < m; i += gthreads) {
      const u32 d = digit(__ldcg(src + i));
      atomicAdd(&a.binhist[d], 1u);
      atomicAdd(&sm.chunk[d / kChunkBins], 1u);
    }
    __syncthreads();
    for (int i = t; i < kChunks; i += kThreads)
      if (sm.chunk[i]) atomicAdd(&a.chunkhist[chunk_slot(i)], sm.chunk[i]);
    grid_barrier(&a.head->barrier, passed);
  }
  trace_at(a.trace, kTailHist);
  // Elements in chunks above each chunk (every block), then the bins of this block's chunks
  // (the first chunk's counts loaded beside the chunk counts).
  const u64 first_bins = blockIdx.x < u32(kChunks) && t < kChunkBins
                             ? __ldcg(&a.binhist[blockIdx.x * kChunkBins + kChunkBins - 1 - t])
                             : 0;
  {
    const u64 cs = t < kChunks ? __ldcg(&a.chunkhist[chunk_slot(kChunks - 1 - t)]) : 0;
    u64 ab = 0;
    Scan(sm.scan).ExclusiveSum(cs, ab);
    if (t < kChunks) sm.above[kChunks - 1 - t] = u32(std::min<u64>(ab, 0xffffffffu));
    __syncthreads();
  }
  for (int j = blockIdx.x; j < kChunks; j += gridDim.x) {
    const u32 base = sm.above[j];
    if (base >= kk) continue;
    const u32 d = u32(j * kChunkBins + kChunkBins - 1 - t);
    const u64 c = j == int(blockIdx.x) ? first_bins : t < kChunkBins ? __ldcg(&a.binhist[d]) : 0;
    u64 ex = 0;
    Scan(sm.scan).ExclusiveSum(c, ex);
    if (t < kChunkBins) {
      const u64 off = base + ex;
      __stcg(&a.binoff[d], (off << 32) | c);
      if (c > kRankBin && off < kk) a.big[atomicAdd(&a.head->big_count, 1u)] = (off << 32) | c;
      if (off < kk && kk <= off + c) a.head->filled = off + c;  // the one bin reaching past kk
    }
    __syncthreads();
  }
  grid_barrier(&a.head->barrier, passed);
  trace_at(a.trace, kTailOffsets);
  // Each composite takes its bin's next slot: the offset field of binoff is the cursor (it ends
  // at offset + count). The entries of bins that start at or after kk are placed too where their
  // chunk is needed, harmlessly: every slot is below m.
  for (u64 i = gtid; i < m; i += gthreads) {
    const u64 c = i == gtid ? first : __ldcg(src + i);
    const u32 d = digit(c);
    if (sm.above[d / kChunkBins] >= kk) continue;
    const u64 pos = atomicAdd(reinterpret_cast<unsigned long long*>(&a.binoff[d]), 1ull << 32) >> 32;
    __stcg(&a.tmp[pos], c);
  }
  grid_barrier(&a.head->barrier, passed);
  trace_at(a.trace, kTailScatter);
  // Bins of more than kRankBin: one block each.
  const u32 nbig = __ldcg(&a.head->big_count);
  for (u32 b = blockIdx.x; b < nbig; b += gridDim.x) {
    const u64 e = __ldcg(&a.big[b]);
    const u64 off = e >> 32;
    const u32 cnt = u32(e);
    if (cnt <= u32(kSmemSort)) {
      for (u32 i = t; i < cnt; i += kThreads) sm.sort[i] = __ldcg(&a.tmp[off + i]);
      __syncthreads();
      block_bitonic<kThreads>(sm.sort, cnt);
      for (u32 i = t; i < cnt && off + i < kk; i += kThreads) write_out(a, off + i, sm.sort[i]);
    } else {
      volatile u64* v = a.tmp + off;  // in global memory, past L1
      block_bitonic<kThreads>(v, cnt);
      for (u32 i = t; i < cnt && off + i < kk; i += kThreads) write_out(a, off + i, v[i]);
    }
    __syncthreads();
  }
  // The other entries of the bins that start before kk: one thread each, its rank in its bin
  // counted against the bin's entries (independent loads from L2; tmp[0, filled) is dense).
  const u64 filled = __ldcg(&a.head->filled);
  for (u64 p = gtid; p < filled; p += gthreads) {
    const u64 c = __ldcg(&a.tmp[p]);
    const u64 e = __ldcg(&a.binoff[digit(c)]);
    const u32 cnt = u32(e);
    if (cnt > u32(kRankBin)) continue;
    const u64 off = (e >> 32) - cnt;  // the scatter advanced it by the bin's count
    u32 rank = 0;
    for (u32 j0 = 0; j0 < cnt; j0 += 16) {  // 16 loads in flight at a time
      u64 v[16];
#pragma unroll
      for (u32 j = 0; j < 16; ++j) v[j] = j0 + j < cnt ? __ldcg(&a.tmp[off + j0 + j]) : 0;
#pragma unroll
      for (u32 j = 0; j < 16; ++j) rank += v[j] > c;
    }
    if (off + rank < kk) write_out(a, off + rank, c);
  }
}

// Ties at `key` in index order, ranks [0, krem): emit(rank, index) for each. Segments with their
// tie counts in a.seg_eq; block b takes segments s with s % gridDim.x == b.
template <class T, class Emit>
__device__ void lr_ordered_ties(const Args<T>& a, Smem& sm, u32 key, u64 krem, Emit&& emit) {
  using Scan = cub::BlockScan<u64, kThreads>;
  const int t = threadIdx.x;
  if (t == 0) sm.carry = 0;
  __syncthreads();
  for (u64 s0 = 0; s0 < a.segs; s0 += kThreads) {
    const u64 carry = sm.carry;
    if (carry >= krem) break;  // uniform: read after a barrier
    const u64 s = s0 + t;
    const u64 e = s < a.segs ? __ldcg(&a.seg_eq[s]) : 0;
    u64 ex = 0, tot = 0;
    Scan(sm.scan).ExclusiveSum(e, ex, tot);
    if (t == 0) sm.nlist = 0;
    __syncthreads();
    if (e && carry + ex < krem && s % gridDim.x == blockIdx.x) {
      const u32 at = atomicAdd(&sm.nlist, 1u);
      sm.list_seg[at] = s;
      sm.list_rank[at] = carry + ex;
    }
    __syncthreads();
    const u32 nl = sm.nlist;
    for (u32 l = 0; l < nl; ++l) {
      u64 lo = 0, hi = 0, rank = sm.list_rank[l];
      seg_range(a, sm.list_seg[l], lo, hi);
      for (u64 base = lo; base < hi && rank < krem; base += kThreads * 4) {
        bool tie[4];
        u64 cnt = 0;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const u64 i = base + u64(t) * 4 + u;
          tie[u] = i < hi && (order_key(a.x[i]) ^ a.flip) == key;
          cnt += tie[u];
        }
        u64 before = 0, total = 0;
        Scan(sm.scan).ExclusiveSum(cnt, before, total);
        u64 r = rank + before;
#pragma unroll
        for (int u = 0; u < 4; ++u)
          if (tie[u]) {
            if (r < krem) emit(r, base + u64(t) * 4 + u);
            ++r;
          }
        rank += total;
        __syncthreads();
      }
    }
    __syncthreads();
    if (t == 0) sm.carry = carry + tot;
    __syncthreads();
  }
}

// Max and ~min of the composites a thread appended, into the head (one atomic per warp).
__device__ __forceinline__ void publish_range(u64 hi, u64 nlo, u64* g_hi, u64* g_nlo) {
  for (int o = 16; o > 0; o >>= 1) {
    hi = std::max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    nlo = std::max(nlo, __shfl_xor_sync(0xffffffffu, nlo, o));
  }
  if ((threadIdx.x & 31) == 0 && hi) {
    atomicMax(g_hi, hi);
    atomicMax(g_nlo, nlo);
  }
}

constexpr int kFilterThreads = 512;

// The filter's common-case test on a 16-byte group: false only if no element's key (^ flip) is
// at or above thr. Floats compare as floats against the value of thr's key, s·v against s·tf
// with s = −1 for `smallest` — one multiply and one unordered compare per element instead of
// the order key (NaN, −0 and the xor) — and it errs only towards true (NaN, a NaN threshold),
// after which the exact keys are computed. Integers compare their keys (already cheap).
struct Probe {
  float s, st;  // sign, sign · value of thr's key
  u32 thr, flip;
  __device__ __forceinline__ Probe(u32 thr_, u32 flip_) : thr(thr_), flip(flip_) {
    const float tf = key_float(thr ^ flip);  // the value of the (unflipped) key thr stands for
    s = flip ? -1.f : 1.f;
    st = s * tf;
  }
  __device__ __forceinline__ bool f(float v) const { return !(s * v < st); }
};
template <class T> __device__ __forceinline__ bool may_pass(const uint4& r, const Probe& p);
template <> __device__ __forceinline__ bool may_pass<float>(const uint4& r, const Probe& p) {
  return p.f(__uint_as_float(r.x)) | p.f(__uint_as_float(r.y)) | p.f(__uint_as_float(r.z)) |
         p.f(__uint_as_float(r.w));
}
template <> __device__ __forceinline__ bool may_pass<int>(const uint4& r, const Probe& p) {
  bool hit = false;
#pragma unroll
  for (int j = 0; j < 4; ++j) hit |= (vec_key<int>(r, j) ^ p.flip) >= p.thr;
  return hit;
}
// 16-bit floats: four pairs (H2: __half2 or __nv_bfloat162), widened to f32 pairwise.
__device__ __forceinline__ float2 widen2(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 widen2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
template <class H2> __device__ __forceinline__ bool may_pass_pairs(const uint4& r, const Probe& p) {
  bool hit = false;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const float2 f = widen2(*reinterpret_cast<const H2*>(&(&r.x)[w]));
    hit |= p.f(f.x) | p.f(f.y);
  }
  return hit;
}
template <> __device__ __forceinline__ bool may_pass<__half>(const uint4& r, const Probe& p) {
  return may_pass_pairs<__half2>(r, p);
}
template <> __device__ __forceinline__ bool may_pass<__nv_bfloat16>(const uint4& r, const Probe& p) {
  return may_pass_pairs<__nv_bfloat162>(r, p);
}

// The filter: one read of the row. Candidates (keys > thr) go through a per-warp staging
// buffer in shared memory to the global list, whole 32s at a time (one atomic per flush, not
// per ballot). A programmatic dependent of lr_sample: the first loads are issued before its
// threshold exists. The common case (no element of the warp's U loads may reach thr, by
// may_pass) costs a multiply and a compare per element and one vote per U loads; the exact keys
// are computed only on the slow path, for the loads that may hold one, which flushes once per
// load (the buffer holds 32 more than one load's W ballots can add).
template <class T, int kMinBlocks, int U, bool kStreamLoads>
__global__ void __launch_bounds__(kFilterThreads, kMinBlocks) lr_filter(Args<T> a) {
  constexpr int W = Vec<T>::kWidth, kWarpBuf = 32 * (W + 1);
  __shared__ u64 wbuf[kFilterThreads / 32][kWarpBuf];
  const int t = threadIdx.x;
  const u32 lane = t & 31;
  u64* buf = wbuf[t >> 5];
  const u64 gtid = u64(blockIdx.x) * kFilterThreads + t, gthreads = u64(gridDim.x) * kFilterThreads;
  trace_at(a.trace, kFilterFirst);
  trace_at(a.trace, kFilterLast);
  trace_block(a.trace, 0);
  trace_block(a.trace, 2);
  for (u64 i = gtid; i < 3 * 4096; i += gthreads) a.chist[i] = 0;
  const u64 warp = gtid >> 5, nwarps = gthreads >> 5, step = nwarps * 32 * U;
  const u64 h = a.head_elems, nv = (a.n - h) / W;
  const uint4* xv = reinterpret_cast<const uint4*>(a.x + h);
  uint4 e[U];
  u64 b = warp * 32 * U;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const u64 v = b + u * 32 + lane;
    e[u] = v < nv ? (kStreamLoads ? __ldcs(xv + v) : __ldg(xv + v)) : make_uint4(0, 0, 0, 0);
  }
  parallel::cuda::wait_dependencies();  // lr_sample's threshold and zeroed counts
  trace_at(a.trace, kFilterWait);
  const u32 thr = __ldcg(&a.head->thr);
  __shared__ Digit s_digit;  // read only when flushing (kept out of the loop's registers)
  if (t == 0) s_digit = cand_digit(thr, __ldcg(&a.head->smax));
  __syncthreads();
  const Probe probe(thr, a.flip);
  u32 wc = 0;  // entries in this warp's buffer (the same in every lane)
  auto flush = [&](u32 count) {  // the first `count` entries: a multiple of 32, or all at the end
    u64 base = 0;
    if (lane == 0 && count) base = atomicAdd(&a.head->cand_count, u64(count));
    // The bin counts go out while the atomic's answer is on its way: one add per distinct bin
    // (and chunk) of each 32 — sorted rows put a whole flush into one chunk.
    const Digit digit = s_digit;
    for (u32 i0 = 0; i0 < count; i0 += 32) {
      const bool ok = i0 + lane < count;
      const u32 d = ok ? digit(buf[i0 + lane]) : ~0u;
      const unsigned same_bin = __match_any_sync(0xffffffffu, d);
      const unsigned same_chunk = __match_any_sync(0xffffffffu, ok ? d / kChunkBins : ~0u);
      const unsigned me = 1u << lane;
      if (ok && (same_bin & (me - 1)) == 0) atomicAdd(&a.binhist[d], u32(__popc(same_bin)));
      if (ok && (same_chunk & (me - 1)) == 0)
        atomicAdd(&a.chunkhist[chunk_slot(d / kChunkBins)], u32(__popc(same_chunk)));
    }
    base = __shfl_sync(0xffffffffu, base, 0);
    for (u32 i = lane; i < count; i += 32)
      if (base + i < a.cap) a.cand[base + i] = buf[i];
    const u32 rest = wc - count;  // < 32
    __syncwarp();
    const u64 v = lane < rest ? buf[count + lane] : 0;
    __syncwarp();
    if (lane < rest) buf[lane] = v;
    __syncwarp();
    wc = rest;
  };
  auto append = [&](bool p, u32 key, u64 i) {  // no flush: the caller flushes
    const unsigned m = __ballot_sync(0xffffffffu, p);
    if (p) buf[wc + __popc(m & lanemask_lt())] = comp(key, i);
    wc += __popc(m);
  };
  // A warp's U loads of one step lie in one tie segment: one tie count per step.
  static_assert(kSeg % (32 * U * W) == 0, "a step must not straddle two tie segments");
  while (b < nv) {
    // Bit u: some element of the warp's load u may reach thr. The exact keys are computed on the
    // slow path only, and only for those loads (at k = 1e5 about one load in four holds a
    // candidate, while most votes over four loads find one).
    u32 hits = 0;
#pragma unroll
    for (int u = 0; u < U; ++u) hits |= u32(b + u * 32 + lane < nv && may_pass<T>(e[u], probe)) << u;
    // The next step's loads go out before the slow path runs (on this step's copy, cur).
    uint4 cur[U];
    const u64 bc = b;
#pragma unroll
    for (int u = 0; u < U; ++u) cur[u] = e[u];
    b += step;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const u64 v = b + u * 32 + lane;
      e[u] = v < nv ? (kStreamLoads ? __ldcs(xv + v) : __ldg(xv + v)) : make_uint4(0, 0, 0, 0);
    }
    if (__any_sync(0xffffffffu, hits != 0)) {
      u32 ties = 0;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (!__any_sync(0xffffffffu, (hits >> u) & 1u)) continue;
        const u64 v = bc + u * 32 + lane;
        const bool ok = v < nv;
        const uint4& r = cur[u];
        u32 key[W];
        bool above = false;
#pragma unroll
        for (int j = 0; j < W; ++j) {
          key[j] = vec_key<T>(r, j) ^ a.flip;
          above |= ok && key[j] > thr;
          ties += ok && key[j] == thr;
        }
        if (__any_sync(0xffffffffu, above)) {
#pragma unroll
          for (int j = 0; j < W; ++j) append(ok && key[j] > thr, key[j], h + v * W + j);
          __syncwarp();
          if (wc >= 32) flush(wc & ~31u);
        }
      }
      if (__any_sync(0xffffffffu, ties != 0)) {
        const u32 sum = __reduce_add_sync(0xffffffffu, ties);
        if (lane == 0) atomicAdd(&a.seg_eq[bc * W / u64(kSeg)], sum);
      }
    }
  }
  const u64 rest = h + nv * W, scal = h + (a.n - rest);
  for (u64 bb = warp * 32; bb < scal; bb += nwarps * 32) {
    const u64 s = bb + lane, i = s < h ? s : rest + (s - h);
    const bool ok = s < scal;
    const u32 key = ok ? order_key(a.x[i]) ^ a.flip : 0u;
    append(ok && key > thr, key, i);
    __syncwarp();
    if (wc >= 32) flush(wc & ~31u);
    if (ok && key == thr) atomicAdd(&a.seg_eq[seg_of(a, i)], 1u);
  }
  flush(wc);
  __syncthreads();
  trace_at(a.trace, kFilterEndFirst);
  trace_at(a.trace, kFilterEnd);
  trace_block(a.trace, 1);
}

// Everything after the filter, decided on the device (see above). Cooperative launch.
template <class T>
__global__ void __launch_bounds__(kThreads, 2) lr_tail(Args<T> a) {
  __shared__ Smem sm;
  const int t = threadIdx.x;
  trace_at(a.trace, kTailFirst);
  trace_at(a.trace, kTailLast);
  u32 passed = 0;
  const u64 gtid = u64(blockIdx.x) * kThreads + t, gthreads = u64(gridDim.x) * kThreads;
  const u64 g = __ldcg(&a.head->cand_count), k = a.k;
  const u32 thr = __ldcg(&a.head->thr);
  // The candidates' bins as the filter counted them, unless the sample misjudged their range
  // (sorted rows: the greatest sampled key is far below the row's) and more than a shared-memory
  // sort's worth landed in the top bin: then they are counted again over their actual range.
  auto cand_bins = [&](Digit& digit) {
    digit = cand_digit(thr, __ldcg(&a.head->smax));
    if (__ldcg(&a.binhist[0xffff]) <= u32(kSmemSort)) return true;
    u64 hi = 0, nlo = 0;
    for (u64 i = gtid; i < g; i += gthreads) {
      const u64 c = __ldcg(&a.cand[i]);
      hi = std::max(hi, c);
      nlo = std::max(nlo, ~c);
    }
    publish_range(hi, nlo, &a.head->sel_hi, &a.head->sel_nlo);
    grid_barrier(&a.head->barrier, passed);  // every block has read the top bin's count
    clear_bins(a, gtid, gthreads);
    grid_barrier(&a.head->barrier, passed);
    digit = range_digit(~__ldcg(&a.head->sel_nlo), __ldcg(&a.head->sel_hi));
    return false;
  };
  if (g >= k && g <= a.cap) {  // A
    Digit digit;
    const bool counted = cand_bins(digit);
    lr_sort_top(a, sm, a.cand, g, k, digit, counted, passed);
    __syncthreads();
    trace_at(a.trace, kTailEnd);
    return;
  }
  // Ties at thr, over all segments (every block).
  u64 ties = 0;
  {
    u64 part = 0;
    for (u64 s = t; s < a.segs; s += kThreads) part += __ldcg(&a.seg_eq[s]);
    ties = cub::BlockReduce<u64, kThreads>(sm.reduce).Sum(part);
    if (t == 0) sm.carry = ties;
    __syncthreads();
    ties = sm.carry;
    __syncthreads();
  }
  if (g <= a.cap && g + ties >= k) {  // B
    lr_ordered_ties(a, sm, thr, k - g, [&](u64 r, u64 i) {
      a.values[g + r] = a.x[i];
      a.indices[g + r] = std::int64_t(i);
    });
    Digit digit;
    const bool counted = cand_bins(digit);
    lr_sort_top(a, sm, a.cand, g, g, digit, counted, passed);
    return;
  }
  // C: the k-th key by digit histograms over the row.
  if (t == 0) { sm.prefix = 0; sm.mask = 0; sm.krem = k; sm.done = 0; }
  __syncthreads();
  for (int level = 0; level < kLevels<u32>; ++level) {
    const int shift = digit_shift<u32>(level), bins = 1 << digit_bits<u32>(level);
    const u32 prefix = sm.prefix, mask = sm.mask, dmask = u32(bins - 1);
    u32* gh = a.chist + level * 4096;
    for (int i = t; i < bins; i += kThreads) sm.hist[i] = 0;
    if (level == 0) {  // the filter's bin counts do not describe this selection
      clear_bins(a, gtid, gthreads);
    }
    if (level == 1)  // everyone has read the tie counts (a barrier passed): reuse them
      for (u64 i = gtid; i < a.segs; i += gthreads) a.seg_eq[i] = 0;
    __syncthreads();
    for_each_key(a, [&](u32 key, u64, bool ok) {
      if (ok && (key & mask) == prefix) atomicAdd(&sm.hist[(key >> shift) & dmask], 1u);
    });
    __syncthreads();
    for (int i = t; i < bins; i += kThreads)
      if (sm.hist[i]) atomicAdd(&gh[i], sm.hist[i]);
    grid_barrier(&a.head->barrier, passed);
    // The bucket of the krem-th from the top (thread t: 8 bins from the top).
    const int per = (bins + kThreads - 1) / kThreads;
    u64 c[8] = {}, sum = 0;
    for (int j = 0; j < per; ++j) {
      const int bb = bins - 1 - (t * per + j);
      if (bb >= 0) c[j] = __ldcg(&gh[bb]);
      sum += c[j];
    }
    u64 above = 0;
    cub::BlockScan<u64, kThreads>(sm.scan).ExclusiveSum(sum, above);
    const u64 krem = sm.krem;
    __syncthreads();
    if (above < krem && krem <= above + sum) {
      int j = 0;
      while (above + c[j] < krem) above += c[j++];
      sm.prefix = prefix | (u32(bins - 1 - (t * per + j)) << shift);
      sm.mask = mask | (dmask << shift);
      sm.krem = krem - above;
      sm.done = c[j] == krem - above;
    }
    __syncthreads();
    if (sm.done) break;
  }
  const u32 prefix = sm.prefix, mask = sm.mask;
  const u64 krem = sm.krem;
  const bool done = sm.done;
  u64 hi = 0, nlo = 0;
  auto select = [&](u32 key, u64 i, bool p) {
    const u64 c = warp_append(p, &a.head->sel_count);
    if (p) {
      const u64 cv = comp(key, i);
      a.cand[c] = cv;
      hi = std::max(hi, cv);
      nlo = std::max(nlo, ~cv);
    }
  };
  if (done) {  // everything whose digits so far reach the bucket's
    for_each_key(a, [&](u32 key, u64 i, bool ok) { select(key, i, ok && (key & mask) >= prefix); });
  } else {  // above the k-th key, then the first krem ties at it in index order
    for_each_key(a, [&](u32 key, u64 i, bool ok) {
      select(key, i, ok && key > prefix);
      if (ok && key == prefix) atomicAdd(&a.seg_eq[seg_of(a, i)], 1u);
    });
    grid_barrier(&a.head->barrier, passed);
    lr_ordered_ties(a, sm, prefix, krem, [&](u64, u64 i) {
      const u64 c = atomicAdd(&a.head->sel_count, 1ull);
      const u64 cv = comp(prefix, i);
      a.cand[c] = cv;
      hi = std::max(hi, cv);
      nlo = std::max(nlo, ~cv);
    });
  }
  // lanes of a warp may have left the tie loop at different points: gather them first
  __syncwarp();
  publish_range(hi, nlo, &a.head->sel_hi, &a.head->sel_nlo);
  grid_barrier(&a.head->barrier, passed);
  lr_sort_top(a, sm, a.cand, __ldcg(&a.head->sel_count), k,
              range_digit(~__ldcg(&a.head->sel_nlo), __ldcg(&a.head->sel_hi)), false, passed);
}

}  // namespace lr

// The filter's variant: 2 blocks of 512 per multiprocessor (64 registers: no spills), 4
// 16-byte cache-streaming loads (ld.global.cs) in flight per thread, the next step's loads
// issued before the slow path runs. Measured on the H200 (1e8 f32, graph replay, session 5):
// 0.119 / 0.120 / 0.138 ms for k = 10 / 1000 / 1e5 against 0.134 / 0.134 / 0.165 for 3 blocks
// of 40 registers (which spill once the slow path keeps the tie count across loads, and 0.246
// with the next loads kept in registers too). Dev hook for A/B timing: SIXFOLD_TOPK_FILTER=ldg
// (read-only-path loads instead).
template <class T>
auto lr_filter_kernel() {
  static const bool ldg = [] {
    const char* e = std::getenv("SIXFOLD_TOPK_FILTER");
    return e && std::string(e) == "ldg";
  }();
  return ldg ? lr::lr_filter<T, 2, 4, false> : lr::lr_filter<T, 2, 4, true>;
}

// The sample's margin: thr is the sampled key with margin × the expected count of sampled
// keys among the top k above it (+ 4σ + 8). Dev hook for A/B timing: SIXFOLD_TOPK_MARGIN=x.
inline double lr_margin() {
  static const double v = [] {
    const char* e = std::getenv("SIXFOLD_TOPK_MARGIN");
    return e ? std::clamp(std::atof(e), 1.0, 4.0) : 1.1;
  }();
  return v;
}

// Grids of lr_filter (as many blocks as fit) and lr_tail (2 per multiprocessor, all resident),
// read once per device.
template <class T>
void lr_grids(int device, int& filter, int& tail) {
  static std::atomic<int> cached[64][2];
  const int slot = device & 63;
  filter = cached[slot][0].load(std::memory_order_relaxed);
  tail = cached[slot][1].load(std::memory_order_relaxed);
  if (filter && tail) return;
  const int sms = parallel::cuda::sm_count(device, kWhere);
  int occ_f = 0, occ_t = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_f, lr_filter_kernel<T>(), lr::kFilterThreads, 0), kWhere);
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_t, lr::lr_tail<T>, lr::kThreads, 0), kWhere);
  if (occ_f < 1 || occ_t < 1) throw_error(kWhere, "the long-row kernels do not fit a multiprocessor");
  filter = sms * occ_f;
  tail = sms * std::min(occ_t, 2);
  cached[slot][0].store(filter, std::memory_order_relaxed);
  cached[slot][1].store(tail, std::memory_order_relaxed);
}


// SIXFOLD_TOPK_TRACE=1 (dev hook): the device buffer of the phase timestamps (allocated on first use).
inline u64* lr_trace_buffer() {
  static u64* buf = [] {
    u64* b = nullptr;
    check_cuda(cudaMalloc(&b, lr::kTraceWords * sizeof(u64)), kWhere);
    return b;
  }();
  return buf;
}

// Phase times of traced calls, µs from the first sample block's start (from the first filter
// block's where there is no sample), by (n, k); medians to stderr at exit.
struct LrTraceLog {
  std::map<std::pair<u64, u64>, std::vector<std::vector<double>>> calls;
  std::map<std::pair<u64, u64>, std::vector<double>> late_sample, late_other;  // filter end − wait, µs
  std::map<std::pair<u64, u64>, std::vector<double>> spread;                   // percentiles of the ends
  void add(u64 n, u64 k, const u64* t, u64 cand, unsigned blocks) {
    // Per filter block: its end after the wait, split by whether its SM also ran a sample block.
    const u64* fs = t + lr::kTraceSlots;
    const u64* fe = fs + lr::kTraceBlocks;
    const u64* fsm = fe + lr::kTraceBlocks;
    const u64* ssm = fsm + lr::kTraceBlocks;
    bool sampled[1024] = {};
    for (int b = 0; b < lr::kTraceBlocks; ++b)
      if (ssm[b]) sampled[(ssm[b] - 1) & 1023] = true;
    const u64 wait = t[lr::kFilterWait];
    std::vector<double> ends;
    for (unsigned b = 0; b < blocks && b < unsigned(lr::kTraceBlocks); ++b) {
      if (!fe[b] || wait == ~0ull) continue;
      const double e = double(std::int64_t(fe[b] - wait)) * 1e-3;
      ends.push_back(e);
      (sampled[(fsm[b] - 1) & 1023] ? late_sample : late_other)[{n, k}].push_back(e);
    }
    if (!ends.empty()) {
      std::sort(ends.begin(), ends.end());
      auto& sp = spread[{n, k}];
      for (double q : {0.0, 0.1, 0.5, 0.9, 1.0}) sp.push_back(ends[std::size_t(q * double(ends.size() - 1))]);
    }
    using namespace lr;
    const u64 none = ~0ull;
    const u64 base = t[kSampleStart] != none ? t[kSampleStart] : t[kFilterFirst];
    std::vector<double> v(kTraceSlots + 1, -1.0);
    for (int i = 0; i < kTraceSlots; ++i)
      if (t[i] != none && t[i] != 0) v[i] = double(std::int64_t(t[i] - base)) * 1e-3;
    v[kTraceSlots] = double(cand);
    calls[{n, k}].push_back(std::move(v));
  }
  ~LrTraceLog() {
    static const char* names[] = {"sample start", "sample loaded+hist0", "sample barrier", "sample end (thr)",
                                  "filter first block", "filter last block", "filter past wait",
                                  "filter first done", "filter last done", "tail first block", "tail last block",
                                  "tail hist barrier", "tail offsets barrier", "tail scatter barrier", "tail end",
                                  "candidates"};
    for (auto& [key, rows] : calls) {
      std::fprintf(stderr, "topk trace n=%llu k=%llu (%zu calls, medians, us from the sample's start)\n",
                   (unsigned long long)key.first, (unsigned long long)key.second, rows.size());
      for (int i = 0; i <= lr::kTraceSlots; ++i) {
        std::vector<double> col;
        for (auto& r : rows)
          if (r[i] >= 0) col.push_back(r[i]);
        if (col.empty()) continue;
        std::nth_element(col.begin(), col.begin() + col.size() / 2, col.end());
        std::fprintf(stderr, "  %-22s %10.2f\n", names[i], col[col.size() / 2]);
      }
      auto med = [](std::vector<double> v) {
        if (v.empty()) return -1.0;
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
        return v[v.size() / 2];
      };
      std::fprintf(stderr, "  filter block ends after the wait, median over blocks and calls: SM with a sample block %.2f, "
                   "others %.2f\n", med(late_sample[key]), med(late_other[key]));
      auto& sp = spread[key];
      for (int q = 0; q < 5; ++q) {
        std::vector<double> col;
        for (std::size_t c = q; c < sp.size(); c += 5) col.push_back(sp[c]);
        std::fprintf(stderr, "  filter block ends, percentile %s of blocks (median over calls): %.2f\n",
                     (const char*[]){"0", "10", "50", "90", "100"}[q], med(col));
      }
    }
  }
};

template <class T>
void run_long_rows(const TopKArgs& a, cudaStream_t stream) {
  using namespace lr;
  const u64 n = u64(a.x.n), k = u64(a.k);
  int device = 0;
  check_cuda(cudaGetDevice(&device), kWhere);
  int grid_filter = 0, grid_tail = 0;
  lr_grids<T>(device, grid_filter, grid_tail);
  // Four sampled keys per thread where 65536 would expect more than 16 of the top k: the
  // margin shrinks relative to the count (k = 1e5 of 1e8: 1.7 k candidates → about 1.4 k).
  static const int per_thread_hook = [] {  // dev hook for A/B timing: SIXFOLD_TOPK_SAMPLE_PER=1|4
    const char* e = std::getenv("SIXFOLD_TOPK_SAMPLE_PER");
    const int v = e ? std::atoi(e) : 0;
    return v == 1 || v == 4 ? v : 0;
  }();
  const int per_thread = per_thread_hook ? per_thread_hook : double(k) * kSample > 16.0 * double(n) ? 4 : 1;
  const u32 count = u32(std::min<u64>(n, u64(kSample) * per_thread));
  u32 want = u32(k);
  if (count < n) {
    const double expect = double(k) * double(count) / double(n);
    want = u32(std::clamp(std::ceil(lr_margin() * expect + 4.0 * std::sqrt(expect) + 8.0), 1.0, double(count)));
  }
  const u64 per = (n + count - 1) / count;
  // Run r of the sample starts near r · stride (the whole row, in order, when count = n; see
  // lr_sample for the spare elements past the last stride).
  const u64 stride = count < n ? n / (count / kSampleSector) / kSampleSector * kSampleSector : kSampleSector;
  // Room for 4× the expected candidates, and for sorted rows, where thr falls inside a run
  // and everything up to the next run's start is above it (2 strides).
  const u64 cap = std::min<u64>(n, std::max<u64>(2 * k + 65536, 4 * u64(want) * per + k + 2 * stride));
  const u64 max_segs = n / u64(kSeg) + 2;
  Args<T> r{};
  Carve c;
  auto layout = [&] {
    c.bytes = 0;
    r.head = c.take<Head>(1);
    r.seg_eq = c.take<u32>(max_segs);
    r.cand = c.take<u64>(cap);
    r.tmp = c.take<u64>(cap);
    r.binhist = c.take<u32>(kBins);
    r.chunkhist = c.take<u32>(kChunks * kChunkPad);
    r.binoff = c.take<u64>(kBins);
    r.big = c.take<u64>(k / 32 + 2);
    r.chist = c.take<u32>(3 * 4096);
  };
  layout();
  parallel::cuda::detail::Scratch scratch(c.bytes, stream, kWhere);
  c.base = static_cast<char*>(scratch.get());
  layout();
  r.n = n;
  r.k = k;
  r.cap = cap;
  r.flip = a.largest ? 0u : 0xffffffffu;
  static const bool tracing = [] {
    const char* e = std::getenv("SIXFOLD_TOPK_TRACE");
    return e && *e && *e != '0';
  }();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (tracing) check_cuda(cudaStreamIsCapturing(stream, &capture), kWhere);
  r.trace = tracing && capture == cudaStreamCaptureStatusNone ? lr_trace_buffer() : nullptr;
  constexpr int W = Vec<T>::kWidth;
  for (std::int64_t row = 0; row < a.x.rows; ++row) {
    r.x = static_cast<const T*>(a.x.data) + row * a.x.row_stride;
    const std::uintptr_t mis = (reinterpret_cast<std::uintptr_t>(r.x) & 15) / sizeof(T);
    r.head_elems = mis ? std::min<u64>(n, W - mis) : 0;
    r.segs = std::max<u64>(1, (n - r.head_elems + kSeg - 1) / kSeg);
    r.values = static_cast<T*>(a.values.data) + row * a.values.row_stride;
    r.indices = static_cast<std::int64_t*>(a.indices.data) + row * a.indices.row_stride;
    // The sample and the tail are cooperative launches (grid barriers inside): the launch fails
    // rather than the barriers hang if the blocks cannot all be resident.
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cudaLaunchConfig_t cfg{};
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    // Dev hook SIXFOLD_TOPK_STOP=6: the filter alone, with thr = 0xfefefefe (the key of ~1.7e38:
    // no candidates in the bench data).
    const int stop = topk_dev_stop();
    if (stop == 6) check_cuda(cudaMemsetAsync(r.head, 0xfe, sizeof(Head), stream), kWhere);  // lr_sample zeroes it
    if (r.trace) {
      static u64 init[kTraceWords];
      for (int i = 0; i < kTraceWords; ++i) init[i] = i < kTraceSlots && (kTraceFirstMask >> i) & 1u ? ~0ull : 0;
      check_cuda(cudaMemcpyAsync(r.trace, init, sizeof init, cudaMemcpyHostToDevice, stream), kWhere);
    }
    if (stop != 6) {
      cfg.gridDim = dim3(unsigned((count + kSampleThreads * per_thread - 1) / (kSampleThreads * per_thread)));
      cfg.blockDim = dim3(kSampleThreads);
      check_cuda(cudaLaunchKernelEx(&cfg, per_thread == 4 ? lr_sample<T, 4> : lr_sample<T, 1>, r, count, want, stride), kWhere);
    }
    // The filter: a programmatic dependent of the sample (its first loads overlap the sample).
    if (stop != 1)
      parallel::cuda::launch_dependent(lr_filter_kernel<T>(), dim3(unsigned(grid_filter)), dim3(kFilterThreads), 0,
                                       stream, true, kWhere, r);
    if (stop != 1 && stop != 2 && stop != 6) {
      cfg.gridDim = dim3(unsigned(grid_tail));
      cfg.blockDim = dim3(kThreads);
      check_cuda(cudaLaunchKernelEx(&cfg, lr_tail<T>, r), kWhere);
    }
    if (r.trace) {
      static u64 t[kTraceWords];
      u64 cand = 0;
      check_cuda(cudaMemcpyAsync(t, r.trace, sizeof t, cudaMemcpyDeviceToHost, stream), kWhere);
      check_cuda(cudaMemcpyAsync(&cand, &r.head->cand_count, sizeof cand, cudaMemcpyDeviceToHost, stream), kWhere);
      check_cuda(cudaStreamSynchronize(stream), kWhere);
      static LrTraceLog log;
      log.add(n, k, t, cand, unsigned(grid_filter));
    }
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
  if (batched) {
    topk_rows_cuda(a, stream);
    return;
  }
  if constexpr (sizeof(typename KeyOf<T>::type) == 4) {
    // 32-bit keys: composites (key, 32-bit index) and no host synchronization.
    if (a.x.n <= 0xfffffffeLL && a.k <= (std::int64_t(1) << 22)) {
      run_long_rows<T>(a, stream);
      return;
    }
  }
  run_single_rows<T>(a, stream);
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
