// dev/topk/topk_v3_rows_sampled.cu — version 3's sampled pre-pass for batched rows, kept for the
// record (not built). It ran before topk_rows_block (src/cuda/topk_rows.cu), which redid the rows
// flagged as failed (RowsBlockArgs had a `const int* redo` field then). H200, 4096 x 32768 f32,
// compared with topk_rows_block alone (run 2): random k 8 0.829 vs 0.665 ms, k 64 0.951 vs
// 0.723, k 1024 2.188 vs 1.143, ascending 0.899 vs 1.014, descending 0.900 vs 1.016, all-equal
// 1.756 vs 1.057 — slower except on sorted rows: two bitonic sorts per row cost more than the
// histogram atomics they avoid. Correct (all CUDA tests passed with it, run 3).
// Rows by a sampled threshold, one block per row, no histograms: the want-th best of a strided
// sample of 1024 keys is a threshold t with (very likely) k <= #{key >= t} <= kCap; one read of
// the row appends every key >= t to a shared-memory list, which is sorted; its first k are the
// answer (every key >= t is in it, ties included). Rows where the guess fails are flagged and
// redone by topk_rows_block. Short rows (n <= kCap) are taken whole.
template <class Key> constexpr int kSampledCap = sizeof(Key) == 4 ? 4096 : 2048;
constexpr bool kUseSampledRows = false;  // see run_rows_block

template <class T, class Key>
__global__ void __launch_bounds__(kRowThreads) topk_rows_sampled(RowsBlockArgs<T, Key> a, int* failed) {
  constexpr int kCap = kSampledCap<Key>;
  constexpr u32 kRowSample = 1024;
  __shared__ Key ckey[kCap];
  __shared__ u32 cidx[kCap];
  __shared__ u32 count;
  const T* x = a.x + std::int64_t(blockIdx.x) * a.x_stride;
  const u32 n = u32(a.n), t = threadIdx.x;
  const int k = int(a.k);
  Key thr = 0;
  if (n > u32(kCap)) {
    const u32 s = kRowSample;
    for (u32 j = t; j < s; j += kRowThreads) {
      const u32 i = u32((u64(j) * n) / s);
      ckey[j] = order_key(x[i]) ^ a.flip;
      cidx[j] = j;
    }
    block_sort_pairs<kRowThreads>(ckey, cidx, int(s));
    const float expect = float(k) * float(s) / float(n);
    const int want = min(int(s), int(ceilf(1.5f * expect + 4.0f * sqrtf(expect) + 8.0f)));
    thr = ckey[want - 1];
    __syncthreads();
  }
  if (t == 0) count = 0;
  __syncthreads();
  for (u32 base = 0; base < n; base += kRowThreads * 4) {
    Key key[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const u32 i = base + u * kRowThreads + t;
      key[u] = i < n ? (order_key(x[i]) ^ a.flip) : Key(0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const u32 i = base + u * kRowThreads + t;
      const bool keep = i < n && key[u] >= thr;
      const unsigned m = __ballot_sync(0xffffffffu, keep);
      if (m) {
        const int leader = __ffs(m) - 1, lane = int(t & 31);
        u32 slot = 0;
        if (lane == leader) slot = atomicAdd(&count, u32(__popc(m)));
        slot = __shfl_sync(0xffffffffu, slot, leader) + u32(__popc(m & lanemask_lt()));
        if (keep && slot < u32(kCap)) { ckey[slot] = key[u]; cidx[slot] = i; }
      }
    }
  }
  __syncthreads();
  const u32 m = count;
  if (m < u32(k) || m > u32(kCap)) {  // the guess failed: topk_rows_block redoes this row
    if (t == 0) failed[blockIdx.x] = 1;
    return;
  }
  if (t == 0) failed[blockIdx.x] = 0;
  block_sort_pairs<kRowThreads>(ckey, cidx, int(m));
  __syncthreads();
  T* vals = a.values + std::int64_t(blockIdx.x) * a.v_stride;
  std::int64_t* inds = a.indices + std::int64_t(blockIdx.x) * a.i_stride;
  for (int j = int(t); j < k; j += kRowThreads) {
    vals[j] = x[cidx[j]];
    inds[j] = cidx[j];
  }
}

