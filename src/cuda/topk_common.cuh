// src/cuda/topk_common.cuh — what the two CUDA translation units of topk share: order keys,
// the digit plan, warp-aggregated appends, the shared-memory pair sort, the gather of results,
// scratch carving and CUB sort sizing (see src/cuda/topk.cu for the algorithms).
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstdint>

#include "../ops/topk_entries.hpp"
#include "sixfold/parallel/cuda.cuh"

namespace sixfold::detail::topk_gpu {

using parallel::cuda::check_cuda;
using u32 = std::uint32_t;
using u64 = unsigned long long;
inline constexpr const char* kWhere = "sixfold::topk (cuda)";

// ---- order keys ------------------------------------------------------------------------------
template <class T> struct KeyOf { using type = u32; };
template <> struct KeyOf<double> { using type = u64; };

__device__ __forceinline__ u32 float_key(float v) {
  u32 u = __float_as_uint(v);
  if (v != v) return 0xffffffffu;
  if ((u << 1) == 0) u = 0;  // −0 → +0
  return u ^ ((u >> 31) ? 0xffffffffu : 0x80000000u);
}
// The float whose float_key is `key`, for every key but NaN's (all ones) and zero's (0x80000000),
// where float_key merged payloads and signs.
__device__ __forceinline__ float key_float(u32 key) {
  return __uint_as_float((key & 0x80000000u) ? (key ^ 0x80000000u) : ~key);
}
__device__ __forceinline__ u32 order_key(float v) { return float_key(v); }
__device__ __forceinline__ u32 order_key(__half v) { return float_key(__half2float(v)); }
__device__ __forceinline__ u32 order_key(__nv_bfloat16 v) { return float_key(__bfloat162float(v)); }
__device__ __forceinline__ u32 order_key(int v) { return u32(v) ^ 0x80000000u; }
__device__ __forceinline__ u64 order_key(double v) {
  u64 u = u64(__double_as_longlong(v));
  if (v != v) return ~0ull;
  if ((u << 1) == 0) u = 0;
  return u ^ ((u >> 63) ? ~0ull : (1ull << 63));
}

// Order key of element j of a 16-byte group (register-only unpacking).
__device__ __forceinline__ u32 word_of(const uint4& r, int w) {
  return w == 0 ? r.x : w == 1 ? r.y : w == 2 ? r.z : r.w;
}
template <class T> __device__ __forceinline__ u32 vec_key(const uint4& r, int j);
template <> __device__ __forceinline__ u32 vec_key<float>(const uint4& r, int j) {
  return float_key(__uint_as_float(word_of(r, j)));
}
template <> __device__ __forceinline__ u32 vec_key<int>(const uint4& r, int j) {
  return word_of(r, j) ^ 0x80000000u;
}
template <> __device__ __forceinline__ u32 vec_key<__half>(const uint4& r, int j) {
  return float_key(__half2float(__ushort_as_half((unsigned short)(word_of(r, j >> 1) >> (16 * (j & 1))))));
}
template <> __device__ __forceinline__ u32 vec_key<__nv_bfloat16>(const uint4& r, int j) {
  return float_key(__bfloat162float(__ushort_as_bfloat16((unsigned short)(word_of(r, j >> 1) >> (16 * (j & 1))))));
}

// Digit plan, most significant first: 12-bit digits, the last one what is left
// (u32: 12, 12, 8 bits; u64: 12 × 5, then 4).
template <class Key> constexpr int kLevels = (int(sizeof(Key)) * 8 + 11) / 12;
template <class Key> __host__ __device__ constexpr int digit_shift(int level) {
  return int(sizeof(Key)) * 8 - 12 * (level + 1) > 0 ? int(sizeof(Key)) * 8 - 12 * (level + 1) : 0;
}
template <class Key> __host__ __device__ constexpr int digit_bits(int level) {
  return int(sizeof(Key)) * 8 - 12 * level < 12 ? int(sizeof(Key)) * 8 - 12 * level : 12;
}
inline constexpr int kMaxBins = 4096;

__device__ __forceinline__ unsigned lanemask_lt() {
  unsigned m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

// A slot for each lane with `pred`, from one atomic per warp; every lane of the warp must call.
__device__ __forceinline__ u64 warp_append(bool pred, u64* counter) {
  const unsigned m = __ballot_sync(0xffffffffu, pred);
  if (!m) return 0;
  const int leader = __ffs(m) - 1, lane = threadIdx.x & 31;
  u64 base = 0;
  if (lane == leader) base = atomicAdd(counter, u64(__popc(m)));
  base = __shfl_sync(0xffffffffu, base, leader);
  return base + u64(__popc(m & lanemask_lt()));
}

// Sorts m (key, index) pairs in shared memory, key descending then index ascending (bitonic,
// padded to a power of two with (0, ~0) pairs, which sort last); the arrays need room for it.
template <int kThreads, class Key>
__device__ void block_sort_pairs(Key* key, u32* idx, int m) {
  int p = 1;
  while (p < m) p <<= 1;
  for (int i = m + int(threadIdx.x); i < p; i += kThreads) { key[i] = 0; idx[i] = 0xffffffffu; }
  __syncthreads();
  for (int size = 2; size <= p; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = int(threadIdx.x); i < p; i += kThreads) {
        const int j = i ^ stride;
        if (j > i) {
          const bool up = (i & size) == 0;
          const bool j_first = key[j] > key[i] || (key[j] == key[i] && idx[j] < idx[i]);
          if (j_first == up) {
            const Key tk = key[i]; key[i] = key[j]; key[j] = tk;
            const u32 ti = idx[i]; idx[i] = idx[j]; idx[j] = ti;
          }
        }
      }
      __syncthreads();
    }
}

// Sorts v[0, cnt) descending (one block of kThreads): bitonic with the flip step, so every
// comparator puts the larger first and the padding to a power of two (virtual least values)
// never moves; no padding is stored. v: shared memory, or a volatile global pointer.
template <int kThreads, class P>
__device__ void block_bitonic(P v, u32 cnt) {
  u32 p = 1;
  while (p < cnt) p <<= 1;
  auto cmpx = [&](u32 i, u32 j) {
    if (j < cnt) {
      const auto x = v[i], y = v[j];
      if (y > x) { v[i] = y; v[j] = x; }
    }
  };
  // Sizes and strides are powers of two: indices by shifts and masks.
  for (u32 lsize = 1; (1u << lsize) <= p; ++lsize) {
    const u32 size = 1u << lsize, hmask = (size >> 1) - 1;
    for (u32 q = threadIdx.x; q < p / 2; q += kThreads) {
      const u32 base = (q >> (lsize - 1)) << lsize, r = q & hmask;
      cmpx(base + r, base + size - 1 - r);
    }
    __syncthreads();
    for (int lst = int(lsize) - 2; lst >= 0; --lst) {
      const u32 st = 1u << lst;
      for (u32 q = threadIdx.x; q < p / 2; q += kThreads) {
        const u32 i = ((q >> lst) << (lst + 1)) | (q & (st - 1));
        cmpx(i, i + st);
      }
      __syncthreads();
    }
  }
}

// A threshold from kThreads * 2 keys held two per thread (k0, k1): the least key of the bin
// holding the want-th greatest, by 8-bit digit histograms in shared memory, most significant
// first. It stops after two digits (a 16-bit bin) unless that bin holds more than want / 2 + 8
// keys beyond those needed — rows whose values span a range narrow for their magnitude (1000.0
// to 1008.0, say) fall into one or two 16-bit bins — and after four (one key) at the latest.
// At least want of the keys are >= it, and it is one of them. hist: 512 words, s_state: 4.
// Every thread of the block calls it and gets the result.
template <int kThreads, class Scan>
__device__ u32 block_threshold_u32(u32 k0, u32 k1, u32 want, u32* hist, typename Scan::TempStorage& scan,
                                   u32* s_state) {
  static_assert(kThreads >= 256, "one histogram bin per thread");
  const u32 t = threadIdx.x;
  u32* least = hist + 256;  // ~least key per bin
  u32 prefix = 0, krem = want;
  for (int shift = 24;; shift -= 8) {
    if (t < 256) { hist[t] = 0; least[t] = 0; }
    __syncthreads();
    // Keys whose digits above this one match the prefix (all keys in the first round).
    const bool in0 = shift == 24 || (k0 >> (shift + 8)) == prefix;
    const bool in1 = shift == 24 || (k1 >> (shift + 8)) == prefix;
    if (in0) {
      atomicAdd(&hist[(k0 >> shift) & 255u], 1u);
      atomicMax(&least[(k0 >> shift) & 255u], ~k0);
    }
    if (in1) {
      atomicAdd(&hist[(k1 >> shift) & 255u], 1u);
      atomicMax(&least[(k1 >> shift) & 255u], ~k1);
    }
    __syncthreads();
    const u32 c = t < 256 ? hist[255 - t] : 0;  // from the top
    u32 above = 0;
    Scan(scan).ExclusiveSum(c, above);
    if (t < 256 && above < krem && krem <= above + c) {
      s_state[0] = 255u - t;
      s_state[1] = krem - above;
      s_state[2] = ~least[255 - t];
      s_state[3] = c - (krem - above);  // keys of the bin beyond those needed
    }
    __syncthreads();
    prefix = (prefix << 8) | s_state[0];
    krem = s_state[1];
    const u32 thr = s_state[2], spare = s_state[3];
    __syncthreads();
    if (shift == 0 || (shift <= 16 && spare <= want / 2 + 8)) return thr;
  }
}

// values[j] = x[idx[j]], indices[j] = idx[j] for each row's k results.
template <class T>
__global__ void gather(const T* x, std::int64_t x_stride, const std::int64_t* idx, std::int64_t k,
                       std::int64_t rows, T* values, std::int64_t v_stride, std::int64_t* indices,
                       std::int64_t i_stride) {
  const std::int64_t total = rows * k;
  for (std::int64_t t = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = t / k, j = t - r * k, i = idx[t];
    values[r * v_stride + j] = x[r * x_stride + i];
    indices[r * i_stride + j] = i;
  }
}

// ---- device properties, scratch ----------------------------------------------------------------
inline int sm_count() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), kWhere);
  return parallel::cuda::sm_count(device, kWhere);
}

// Carves aligned pieces out of one stream-ordered allocation.
struct Carve {
  std::size_t bytes = 0;
  char* base = nullptr;
  template <class U> U* take(std::size_t count) {
    const std::size_t at = (bytes + 255) & ~std::size_t(255);
    bytes = at + count * sizeof(U);
    return base ? reinterpret_cast<U*>(base + at) : nullptr;
  }
};

// Sorts k (key, index) pairs per segment: key descending, then index ascending. With
// `by_index_first`, the pairs are first put in index order (they come unordered).
template <class Key>
struct PairSort {
  std::size_t temp_bytes = 0;
  int index_bits = 64;
  void size_for(std::int64_t items, std::int64_t segments, bool by_index_first, std::int64_t n) {
    index_bits = 1;
    while (index_bits < 63 && (std::int64_t(1) << index_bits) < n) ++index_bits;
    std::size_t a = 0, b = 0;
    const std::int64_t* offsets = nullptr;
    if (segments == 1) {
      check_cuda(cub::DeviceRadixSort::SortPairsDescending(nullptr, a, (const Key*)nullptr, (Key*)nullptr,
                                                           (const std::int64_t*)nullptr,
                                                           (std::int64_t*)nullptr, items), kWhere);
      if (by_index_first)
        check_cuda(cub::DeviceRadixSort::SortPairs(nullptr, b, (const u64*)nullptr, (u64*)nullptr,
                                                   (const Key*)nullptr, (Key*)nullptr, items, 0,
                                                   index_bits), kWhere);
    } else {
      check_cuda(cub::DeviceSegmentedRadixSort::SortPairsDescending(
                     nullptr, a, (const Key*)nullptr, (Key*)nullptr, (const std::int64_t*)nullptr,
                     (std::int64_t*)nullptr, items, segments, offsets, offsets), kWhere);
    }
    temp_bytes = std::max(a, b);
  }
};

// Dev hook for timing phases (results are then wrong): SIXFOLD_TOPK_STOP=1 runs only the
// sample, 2 the sample and the filter, 6 the filter alone with no candidates (long rows); 3 stops
// batched rows after the sample sort, 4 after the filter, 5 skips their redo pass.
inline int topk_dev_stop() {
  static const int v = [] {
    const char* e = std::getenv("SIXFOLD_TOPK_STOP");
    return e ? std::atoi(e) : 0;
  }();
  return v;
}

// One block per row (src/cuda/topk_rows.cu), for rows of fewer than 2^31 elements.
void topk_rows_cuda(const TopKArgs& a, cudaStream_t stream);

}  // namespace sixfold::detail::topk_gpu
