// src/cuda/topk_rows.cu — top-k of many rows on the GPU, one block per row.
// k <= 1024, rows of >= 8192, 32-bit keys (topk_rows_thr, the path the benchmarks take): a
// threshold from a strided sample of 1024 keys (8-bit digit histograms: two, up to four for rows
// of a narrow value range), one read of the row with 16-byte loads appending keys above it as
// 64-bit composites (key << 32 | ~index) to per-warp parts of a shared list, the list sorted by
// bins of the key (bitonic where a bin is large), ties at the threshold taken in index order;
// rows where the sample misled are flagged and redone by topk_rows_block.
// Otherwise (topk_rows_block): radix selection over order-preserving keys (see src/cuda/topk.cu)
// with shared-memory digit histograms, the first digit's bucket (and above) compacted in index
// order so that the later digits and the ordered selection read that short list instead of the
// row, ties resolved by block-scanned ranks in index order (deterministic), and for k <= 1024 a
// bitonic sort of the selected (key, index) pairs in shared memory; larger k goes through CUB's
// segmented sort.
#include <cmath>
#include <vector>

#include "topk_common.cuh"

namespace sixfold::detail::topk_gpu {
namespace {

__global__ void segment_offsets(std::int64_t* offs, std::int64_t rows, std::int64_t k) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i <= rows) offs[i] = i * k;
}

// ---- batched rows: one block per row -----------------------------------------------------------

constexpr int kRowThreads = 512;
constexpr int kRowSmemK = 1024;  // k up to this is selected and sorted in shared memory

template <class T, class Key>
struct RowsBlockArgs {
  const T* x;
  std::int64_t x_stride, n, k;
  Key flip;
  bool sorted;
  T* values;
  std::int64_t v_stride;
  std::int64_t* indices;
  std::int64_t i_stride;
  Key* tmp_key;              // (rows, k) when k > kRowSmemK
  std::int64_t* tmp_idx;
  const int* redo;           // when set, only rows with redo[row] != 0 are done
  u32 want;                  // topk_rows_thr: the rank in the sample that gives the threshold
  int stop;                  // dev hook (topk_dev_stop)
};

template <class T, class Key>
__global__ void __launch_bounds__(kRowThreads) topk_rows_block(RowsBlockArgs<T, Key> a) {
  using Scan = cub::BlockScan<u64, kRowThreads>;
  // Candidates of the first digit's bucket (and above), compacted in index order.
  constexpr int kListCap = sizeof(Key) == 4 ? 2048 : 1024;
  __shared__ u32 hist[kMaxBins];
  __shared__ typename Scan::TempStorage scan;
  __shared__ Key skey[kRowSmemK];
  __shared__ u32 sidx[kRowSmemK];
  __shared__ Key lkey[kListCap];
  __shared__ u32 lidx[kListCap];
  __shared__ Key s_prefix, s_mask;
  __shared__ u32 s_krem, s_top;
  __shared__ int s_done;
  __shared__ u64 s_carry;
  if (a.redo && !a.redo[blockIdx.x]) return;
  const T* x = a.x + std::int64_t(blockIdx.x) * a.x_stride;
  const u32 n = u32(a.n), t = threadIdx.x;
  if (t == 0) { s_prefix = 0; s_mask = 0; s_krem = u32(a.k); s_done = 0; }
  __syncthreads();
  bool use_list = false;
  u32 m = n;  // elements of the source: the row, or the list
  // Key and index of source element i.
  auto key_at = [&](u32 i) { return use_list ? lkey[i] : Key(order_key(x[i]) ^ a.flip); };
  auto idx_at = [&](u32 i) { return use_list ? lidx[i] : i; };
  for (int level = 0; level < kLevels<Key>; ++level) {
    const int shift = digit_shift<Key>(level), bins = 1 << digit_bits<Key>(level);
    const Key prefix = s_prefix, mask = s_mask, dmask = Key(bins - 1);
    for (int i = t; i < bins; i += kRowThreads) hist[i] = 0;
    __syncthreads();
    constexpr int kUnroll = 8;
    u32 i = t;
    if (!use_list)
      for (; i + (kUnroll - 1) * kRowThreads < m; i += kUnroll * kRowThreads) {
        Key key[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) key[u] = order_key(x[i + u * kRowThreads]) ^ a.flip;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if ((key[u] & mask) == prefix) atomicAdd(&hist[u32((key[u] >> shift) & dmask)], 1u);
      }
    for (; i < m; i += kRowThreads) {
      const Key key = key_at(i);
      if ((key & mask) == prefix) atomicAdd(&hist[u32((key >> shift) & dmask)], 1u);
    }
    __syncthreads();
    // Bucket of the k_rem-th from the top: thread t owns bins/kRowThreads bins.
    const int per = (bins + kRowThreads - 1) / kRowThreads;
    u64 c[8] = {}, sum = 0;
    for (int j = 0; j < per; ++j) {
      const int b = bins - 1 - (int(t) * per + j);
      if (b >= 0) c[j] = hist[b];
      sum += c[j];
    }
    u64 above = 0;
    Scan(scan).ExclusiveSum(sum, above);
    const u64 krem = s_krem;
    __syncthreads();
    if (above < krem && krem <= above + sum) {
      int j = 0;
      while (above + c[j] < krem) above += c[j++];
      s_prefix = prefix | (Key(bins - 1 - (int(t) * per + j)) << shift);
      s_mask = mask | (dmask << shift);
      s_krem = u32(krem - above);
      s_done = c[j] == krem - above;
      s_top = u32(a.k - krem + above + c[j]);  // elements with top digits >= the bucket's
    }
    __syncthreads();
    if (s_done) break;
    if (level == 0 && s_top <= u32(kListCap)) {
      // Compact every element at or above the bucket, in index order; the later digits and
      // the selection then read the short list instead of the row.
      const Key p0 = s_prefix, m0 = s_mask;
      if (t == 0) s_carry = 0;
      __syncthreads();
      constexpr int kItems = 4;
      for (u32 base = 0; base < n; base += kRowThreads * kItems) {
        Key key[kItems];
        u32 keep = 0;
#pragma unroll
        for (int u = 0; u < kItems; ++u) {
          const u32 i2 = base + t * kItems + u;
          key[u] = i2 < n ? (order_key(x[i2]) ^ a.flip) : Key(0);
          keep += i2 < n && (key[u] & m0) >= p0;
        }
        u64 before = 0, total = 0;
        Scan(scan).ExclusiveSum(u64(keep), before, total);
        u32 slot = u32(s_carry + before);
#pragma unroll
        for (int u = 0; u < kItems; ++u) {
          const u32 i2 = base + t * kItems + u;
          if (i2 < n && (key[u] & m0) >= p0) { lkey[slot] = key[u]; lidx[slot] = i2; ++slot; }
        }
        __syncthreads();
        if (t == 0) s_carry += total;
        __syncthreads();
      }
      use_list = true;
      m = s_top;
    }
  }
  // Ordered selection: everything above the k-th key, and the first k_rem ties in index order.
  const Key prefix = s_prefix, mask = s_mask;
  const u32 krem = s_krem;
  const bool all_ties = s_done;
  const bool in_smem = a.k <= kRowSmemK;
  __syncthreads();
  if (t == 0) s_carry = 0;
  __syncthreads();
  constexpr int kItems = 4;  // consecutive elements per thread, so ranks follow index order
  for (u32 base = 0; base < m; base += kRowThreads * kItems) {
    Key key[kItems];
    u32 gt = 0, eq = 0;
#pragma unroll
    for (int u = 0; u < kItems; ++u) {
      const u32 i = base + t * kItems + u;
      key[u] = i < m ? key_at(i) : Key(0);
      const Key top = key[u] & mask;
      gt += i < m && top > prefix;
      eq += i < m && top == prefix;
    }
    u64 before = 0, total = 0;
    Scan(scan).ExclusiveSum((u64(gt) << 32) | eq, before, total);
    const u64 carry = s_carry;
    u64 gt_before = (carry >> 32) + (before >> 32), eq_before = (carry & 0xffffffffu) + (before & 0xffffffffu);
#pragma unroll
    for (int u = 0; u < kItems; ++u) {
      const u32 i = base + t * kItems + u;
      if (i >= m) break;
      const Key top = key[u] & mask;
      const bool is_gt = top > prefix, is_eq = top == prefix;
      if (is_gt || (is_eq && (all_ties || eq_before < krem))) {
        const u64 slot = gt_before + (all_ties ? eq_before : std::min<u64>(eq_before, krem));
        const u32 idx = idx_at(i);
        if (in_smem) { skey[slot] = key[u]; sidx[slot] = idx; }
        else {
          a.tmp_key[std::int64_t(blockIdx.x) * a.k + std::int64_t(slot)] = key[u];
          a.tmp_idx[std::int64_t(blockIdx.x) * a.k + std::int64_t(slot)] = idx;
        }
      }
      gt_before += is_gt;
      eq_before += is_eq;
    }
    __syncthreads();
    if (t == 0) s_carry = carry + total;
    __syncthreads();
  }
  if (!in_smem) return;
  const int k = int(a.k);
  if (a.sorted && k > 1) block_sort_pairs<kRowThreads>(skey, sidx, k);
  __syncthreads();
  T* vals = a.values + std::int64_t(blockIdx.x) * a.v_stride;
  std::int64_t* inds = a.indices + std::int64_t(blockIdx.x) * a.i_stride;
  for (int j = int(t); j < k; j += kRowThreads) {
    vals[j] = x[sidx[j]];
    inds[j] = sidx[j];
  }
}

// ---- batched rows by a sampled threshold (32-bit keys, k <= kThrMaxK) ---------------------------
// One block per row: thr = the least sampled key of the 16-bit (or finer) bin holding the
// want-th best of a strided sample of 1024 keys (block_threshold_u32); the row's first loads go out before it is
// known. One read of the row (16-byte loads, four per thread in flight) appends every key > thr
// as a 64-bit composite (key << 32 | ~index: distinct, larger = better, lower index first among
// equal keys) to the warp's own part of a shared list (no shared counter), and counts keys ==
// thr. With >= k composites: the list compacted and sorted (bitonic), its first k are the
// answer. Fewer, but enough ties: the list, then the first ties in index order (an ordered pass
// over the row). Otherwise (the sample misled, or a warp's part overflowed) the row is flagged
// and topk_rows_block redoes it.
constexpr int kThrThreads = 512, kThrCap = 4096, kThrSample = 1024, kThrMaxK = 1024;
// The final sort: kThrBins bins by a digit of the key, bins of up to kThrLaneSort sorted by one
// thread; src holds the sorted order of the first k (+ the rest of the last bin).
constexpr int kThrBinBits = 11, kThrBins = 1 << kThrBinBits, kThrLaneSort = 32,
              kThrSrc = kThrMaxK + kThrLaneSort;
constexpr std::int64_t kThrMinN = 8192;

template <class T>
__global__ void __launch_bounds__(kThrThreads, 3) topk_rows_thr(RowsBlockArgs<T, u32> a, int* redo) {
  using Scan = cub::BlockScan<u32, kThrThreads>;
  using Reduce = cub::BlockReduce<u32, kThrThreads>;
  __shared__ union {
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
  } tmp;
  __shared__ u64 list[kThrCap];
  __shared__ u32 bins[kThrBins];
  __shared__ unsigned short src[kThrSrc];
  __shared__ u64 s_maxcomp;
  __shared__ u32 s_ties, s_carry, s_big, s_maxkey, s_state[4], s_wcount[kThrThreads / 32],
      s_woff[kThrThreads / 32 + 1];
  constexpr int kWarps = kThrThreads / 32, kPerWarp = kThrCap / kWarps;
  constexpr int W = 16 / sizeof(T), U = 4;
  const u32 n = u32(a.n), t = threadIdx.x, k = u32(a.k), lane = t & 31, wid = t >> 5;
  const T* x = a.x + std::int64_t(blockIdx.x) * a.x_stride;
  const bool aligned = (reinterpret_cast<std::uintptr_t>(x) & 15) == 0;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  const u32 nv = aligned ? n / W : 0;
  // The row's first loads go out before the sample is sorted.
  uint4 e[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const u32 v = u * kThrThreads + t;
    e[u] = v < nv ? __ldg(xv + v) : make_uint4(0, 0, 0, 0);
  }
  static_assert(kThrSample == 2 * kThrThreads, "two sampled keys per thread");
  const u32 k0 = order_key(x[u32((u64(t) * n) / kThrSample)]) ^ a.flip;
  const u32 k1 = order_key(x[u32((u64(t + kThrThreads) * n) / kThrSample)]) ^ a.flip;
  const u32 thr = block_threshold_u32<kThrThreads, Scan>(k0, k1, a.want, reinterpret_cast<u32*>(list), tmp.scan,
                                                      s_state);
  __syncthreads();
  if (a.stop == 3) {
    if (t == 0) redo[blockIdx.x] = 0;
    return;
  }
  // Each warp appends to its own part of the list (no shared counter), compacted afterwards.
  u64* wl = list + wid * kPerWarp;
  u32 wc = 0, ties = 0;
  auto visit = [&](u32 key, u32 i, bool ok) {  // every lane of a warp calls it alike
    const bool p = ok && key > thr;
    ties += ok && key == thr;
    const unsigned m = __ballot_sync(0xffffffffu, p);
    if (m) {
      const u32 pos = wc + u32(__popc(m & lanemask_lt()));
      if (p && pos < u32(kPerWarp)) wl[pos] = (u64(key) << 32) | u64(0xffffffffu - i);
      wc += u32(__popc(m));
    }
  };
  for (u32 vb = 0; vb < nv; vb += kThrThreads * U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const u32 v = vb + u * kThrThreads + t;
      u32 key[W];
      bool any = false;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        key[j] = vec_key<T>(e[u], j) ^ a.flip;
        any |= v < nv && key[j] >= thr;
      }
      if (__any_sync(0xffffffffu, any)) {
#pragma unroll
        for (int j = 0; j < W; ++j) visit(key[j], v * W + j, v < nv);
      }
    }
    const u32 next = vb + kThrThreads * U;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const u32 v = next + u * kThrThreads + t;
      e[u] = v < nv ? __ldg(xv + v) : make_uint4(0, 0, 0, 0);
    }
  }
  for (u32 b = nv * W; b < n; b += kThrThreads) {
    const u32 i = b + t;
    visit(i < n ? order_key(x[i]) ^ a.flip : 0u, i, i < n);
  }
  if (lane == 0) s_wcount[wid] = wc;
  if (t == 0) s_maxcomp = 0;
  __syncthreads();
  if (t == 0) {
    u32 o = 0;
    for (int w = 0; w < kWarps; ++w) {
      s_woff[w] = o;
      o += s_wcount[w] <= u32(kPerWarp) ? s_wcount[w] : u32(kThrCap) + 1;  // overflow: fails below
    }
    s_woff[kWarps] = o;
  }
  // Compact the warps' parts: read everything first, then write.
  {
    constexpr int R = kPerWarp / 32;
    u64 r[R];
    const u32 c = min(wc, u32(kPerWarp));
    u64 best = 0;
#pragma unroll
    for (int j = 0; j < R; ++j) {
      r[j] = lane + 32 * j < c ? wl[lane + 32 * j] : 0;
      best = max(best, r[j]);
    }
    for (int o = 16; o; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
    if (lane == 0) atomicMax(&s_maxcomp, best);
    __syncthreads();
    const u32 o = s_woff[wid];
    if (s_woff[kWarps] <= u32(kThrCap))
#pragma unroll
      for (int j = 0; j < R; ++j)
        if (lane + 32 * j < c) list[o + lane + 32 * j] = r[j];
  }
  ties = Reduce(tmp.reduce).Sum(ties);
  if (t == 0) { s_ties = ties; s_maxkey = u32(s_maxcomp >> 32); }
  __syncthreads();
  const u32 g = s_woff[kWarps], eq = s_ties;
  const bool ok = g <= u32(kThrCap) && g + eq >= k;
  if (a.stop == 4) {
    if (t == 0) redo[blockIdx.x] = 0;
    return;
  }
  if (t == 0) redo[blockIdx.x] = !ok;
  if (!ok) return;
  // The best min(g, k) composites in order: a counting sort by a digit of (key - thr - 1),
  // then each bin that reaches into the first k sorted by one thread (src[] holds list
  // positions in sorted order). A bin of more than kThrLaneSort reaching into the first k
  // (keys clustered against the range: outliers, many ties) sends the row to a bitonic sort of
  // the whole list.
  const u32 take = min(g, k);
  bool by_bins = g > 1;
  if (by_bins) {
    // Digit: (key - lo) >> shift < kThrBins, taken from the top (rb = kThrBins - 1 - digit).
    const u32 lo = thr + 1;
    const u32 span = (s_maxkey - lo) | 1u;
    const int shift = max(0, 32 - __clz(span) - kThrBinBits);
    auto bin_of = [&](u64 c) { return u32(kThrBins - 1) - ((u32(c >> 32) - lo) >> shift); };
    for (u32 b = t; b < u32(kThrBins); b += kThrThreads) bins[b] = 0;
    __syncthreads();
    for (u32 j = t; j < g; j += kThrThreads) atomicAdd(&bins[bin_of(list[j])], 1u);
    __syncthreads();
    constexpr int kPer = kThrBins / kThrThreads;
    u32 c[kPer], sum = 0;
#pragma unroll
    for (int q = 0; q < kPer; ++q) { c[q] = bins[t * kPer + q]; sum += c[q]; }
    u32 start = 0;
    Scan(tmp.scan).ExclusiveSum(sum, start);
    bool big = false;
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      bins[t * kPer + q] = start;  // where the bin starts; the scatter moves it to its end
      big |= start < k && c[q] > u32(kThrLaneSort);
      start += c[q];
    }
    if (t == 0) s_big = 0;
    __syncthreads();
    if (big) s_big = 1;
    for (u32 j = t; j < g; j += kThrThreads) {
      const u32 pos = atomicAdd(&bins[bin_of(list[j])], 1u);
      if (pos < u32(kThrSrc)) src[pos] = (unsigned short)j;
    }
    __syncthreads();
    by_bins = !s_big;
    if (by_bins)
#pragma unroll
      for (int q = 0; q < kPer; ++q) {
        const u32 b = t * kPer + q, end = bins[b], first = b ? bins[b - 1] : 0;
        if (first >= k || end - first < 2) continue;
        for (u32 i = first + 1; i < end; ++i) {  // insertion sort, descending
          const unsigned short v = src[i];
          const u64 cv = list[v];
          u32 j = i;
          for (; j > first && list[src[j - 1]] < cv; --j) src[j] = src[j - 1];
          src[j] = v;
        }
      }
    __syncthreads();
  }
  if (!by_bins) block_bitonic<kThrThreads>(list, g);
  T* vals = a.values + std::int64_t(blockIdx.x) * a.v_stride;
  std::int64_t* inds = a.indices + std::int64_t(blockIdx.x) * a.i_stride;
  for (u32 j = t; j < take; j += kThrThreads) {
    const u32 i = 0xffffffffu - u32(list[by_bins ? src[j] : j]);
    vals[j] = x[i];
    inds[j] = i;
  }
  if (g >= k) return;
  // The first k - g ties at thr in index order, 4 consecutive elements per thread.
  const u32 krem = k - g;
  if (t == 0) s_carry = 0;
  __syncthreads();
  for (u32 base = 0; base < n; base += kThrThreads * 4) {
    const u32 carry = s_carry;
    if (carry >= krem) break;  // uniform: read after a barrier
    bool tie[4];
    u32 cnt = 0;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const u32 i = base + t * 4 + u;
      tie[u] = i < n && (order_key(x[i]) ^ a.flip) == thr;
      cnt += tie[u];
    }
    u32 before = 0, total = 0;
    Scan(tmp.scan).ExclusiveSum(cnt, before, total);
    u32 r = carry + before;
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (tie[u]) {
        if (r < krem) {
          const u32 i = base + t * 4 + u;
          vals[g + r] = x[i];
          inds[g + r] = i;
        }
        ++r;
      }
    __syncthreads();
    if (t == 0) s_carry = carry + total;
    __syncthreads();
  }
}

template <class T>
void run_rows_block(const TopKArgs& a, cudaStream_t stream) {
  using Key = typename KeyOf<T>::type;
  RowsBlockArgs<T, Key> r{};
  r.x = static_cast<const T*>(a.x.data);
  r.x_stride = a.x.row_stride;
  r.n = a.x.n;
  r.k = a.k;
  r.flip = a.largest ? Key(0) : ~Key(0);
  r.sorted = a.sorted;
  r.values = static_cast<T*>(a.values.data);
  r.v_stride = a.values.row_stride;
  r.indices = static_cast<std::int64_t*>(a.indices.data);
  r.i_stride = a.indices.row_stride;
  const std::int64_t rows = a.x.rows;
  if constexpr (sizeof(Key) == 4) {
    if (a.k <= kThrMaxK && a.x.n >= kThrMinN) {
      // The sampled threshold; rows where it fails are redone by the radix kernel.
      // want: about 1.15x the expected sampled keys among the top k, + 3.5 sigma + 6 (a row
      // then falls short of k about once in 10^4).
      const double expect = double(a.k) * kThrSample / double(a.x.n);
      r.want = u32(std::clamp(std::ceil(1.15 * expect + 3.5 * std::sqrt(expect) + 6.0), 1.0, double(kThrSample)));
      parallel::cuda::detail::Scratch flags(std::size_t(rows) * sizeof(int), stream, kWhere);
      int* redo = static_cast<int*>(flags.get());
      r.stop = topk_dev_stop();
      topk_rows_thr<T><<<unsigned(rows), kThrThreads, 0, stream>>>(r, redo);
      r.redo = redo;
      if (r.stop != 5) topk_rows_block<T, Key><<<unsigned(rows), kRowThreads, 0, stream>>>(r);
      check_cuda(cudaGetLastError(), kWhere);
      return;
    }
  }
  if (a.k <= kRowSmemK) {
    topk_rows_block<T, Key><<<unsigned(rows), kRowThreads, 0, stream>>>(r);
    check_cuda(cudaGetLastError(), kWhere);
    return;
  }
  // Large k: ordered selection into scratch, then a stable segmented sort and a gather.
  const std::int64_t items = rows * a.k;
  PairSort<Key> sort;
  if (a.sorted) sort.size_for(items, rows, false, a.x.n);
  Carve c;
  Key *k1 = nullptr, *k2 = nullptr;
  std::int64_t *i1 = nullptr, *i2 = nullptr, *offs = nullptr;
  void* temp = nullptr;
  auto layout = [&] {
    c.bytes = 0;
    k1 = c.take<Key>(std::size_t(items));
    k2 = c.take<Key>(std::size_t(items));
    i1 = c.take<std::int64_t>(std::size_t(items));
    i2 = c.take<std::int64_t>(std::size_t(items));
    offs = c.take<std::int64_t>(std::size_t(rows + 1));
    temp = c.take<char>(sort.temp_bytes);
  };
  layout();
  parallel::cuda::detail::Scratch scratch(c.bytes, stream, kWhere);
  c.base = static_cast<char*>(scratch.get());
  layout();
  r.tmp_key = k1;
  r.tmp_idx = i1;
  topk_rows_block<T, Key><<<unsigned(rows), kRowThreads, 0, stream>>>(r);
  check_cuda(cudaGetLastError(), kWhere);
  const std::int64_t* idx = i1;
  if (a.sorted) {
    segment_offsets<<<int((rows + 256) / 256), 256, 0, stream>>>(offs, rows, a.k);
    std::size_t tb = sort.temp_bytes;
    const std::int64_t* co = offs;
    check_cuda(cub::DeviceSegmentedRadixSort::SortPairsDescending(
                   temp, tb, static_cast<const Key*>(k1), k2, static_cast<const std::int64_t*>(i1), i2,
                   items, rows, co, co + 1, 0, int(sizeof(Key) * 8), stream),
               kWhere);
    idx = i2;
  }
  const int blocks = int(std::min<std::int64_t>((items + 255) / 256, 4096));
  gather<T><<<blocks, 256, 0, stream>>>(r.x, a.x.row_stride, idx, a.k, rows, r.values, a.values.row_stride,
                                        r.indices, a.indices.row_stride);
  check_cuda(cudaGetLastError(), kWhere);
}

}  // namespace

void topk_rows_cuda(const TopKArgs& a, cudaStream_t stream) {
  switch (a.dtype) {
    case DType::f32: return run_rows_block<float>(a, stream);
    case DType::f16: return run_rows_block<__half>(a, stream);
    case DType::bf16: return run_rows_block<__nv_bfloat16>(a, stream);
    case DType::f64: return run_rows_block<double>(a, stream);
    case DType::i32: return run_rows_block<int>(a, stream);
    default: break;
  }
  throw_error(kWhere, "unsupported dtype reached the CUDA backend");
}

}  // namespace sixfold::detail::topk_gpu
