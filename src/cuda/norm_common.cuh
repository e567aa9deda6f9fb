// src/cuda/norm_common.cuh — pieces shared by the norm kernels (norm.cu: forward,
// norm_backward.cu: backward): order-preserving warp/block reductions of any monoid state and
// small host helpers, over the dtype conversions and element packs of pack.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "pack.cuh"
#include "ptx_sync.cuh"
#include "sixfold/parallel/cuda.cuh"

namespace sixfold::detail {
namespace {

using parallel::cuda::check_cuda;

// Hides a value from the optimizer (an empty asm on each 32-bit word), so that a later pass
// unpacks a raw pack again where it is used instead of keeping the first pass's floats alive
// across the row's reductions (forward register rows, backward SmemGrads).
template <class P>
__device__ __forceinline__ P opaque(P v) {
  if constexpr (sizeof(P) % 4 == 0) {
    unsigned w[sizeof(P) / 4];
    memcpy(w, &v, sizeof(P));
#pragma unroll
    for (int i = 0; i < int(sizeof(P) / 4); ++i) asm("" : "+r"(w[i]));
    memcpy(&v, w, sizeof(P));
  }
  return v;
}

// ---- Combining states across lanes and warps -------------------------------------------------

template <class S>
__device__ __forceinline__ S shfl_xor(const S& s, int mask) {
  static_assert(sizeof(S) % 4 == 0 && std::is_trivially_copyable_v<S>);
  unsigned w[sizeof(S) / 4];
  memcpy(w, &s, sizeof(S));
#pragma unroll
  for (int i = 0; i < int(sizeof(S) / 4); ++i) w[i] = __shfl_xor_sync(0xffffffffu, w[i], mask);
  S r;
  memcpy(&r, w, sizeof(S));
  return r;
}

// Reduces over aligned groups of `width` lanes (a power of two ≤ 32) in lane order. Both lanes
// of a butterfly pair compute combine(lower, upper) from the same operands, so every lane of a
// group ends with the same bits (Welford's merge is commutative only up to rounding). All 32
// lanes must call it.
template <class M>
__device__ __forceinline__ typename M::value_type group_reduce(typename M::value_type s,
                                                               int width, M m) {
  const int lane = threadIdx.x & 31;
  for (int off = 1; off < width; off <<= 1) {
    const auto other = shfl_xor(s, off);
    const bool upper = lane & off;
    s = m.combine(upper ? other : s, upper ? s : other);
  }
  return s;
}

// Whole-block reduction in thread order; blockDim.x a multiple of 32. Every thread gets the
// total. warp_states: (32) states in shared memory, used once per launch.
template <class M>
__device__ __forceinline__ typename M::value_type block_reduce(typename M::value_type s, M m,
                                                               typename M::value_type* warp_states) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  s = group_reduce(s, 32, m);
  if (lane == 0) warp_states[warp] = s;
  __syncthreads();
  return group_reduce(lane < warps ? warp_states[lane] : m.identity(), 32, m);
}


// ---- Rows streamed through shared memory (the long-row backward and forward) -------------------
// cp.async of 16 bytes through L2 only (rows read once); each thread later reads back only what it
// copied itself, so waiting for its own groups is enough.
__device__ __forceinline__ void cp_async16_cg(void* smem, const void* gmem) {
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// The "memory" clobber keeps the compiler from moving the stage's shared-memory reads above it.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The streamed long-row kernels (norm.cu's norm_rows_stream, norm_backward.cu's
// bwd_rows_stream): 512 row threads of 16 elements (an 8192-column tile) a block, and a ring of
// kStreamRing row coefficients between their coefficient warps and the row threads. The flags
// are ptx::ld_acquire_gpu / red_add_release_gpu (a row's counter of published tile states) and
// ptx::ld_acquire_cta / st_release_cta (the ring).
constexpr int kStreamThreads = 512, kStreamElems = 16, kStreamRing = 8;
constexpr std::int64_t kStreamTile = std::int64_t(kStreamThreads) * kStreamElems;

// Merges `count` values in a fixed order — lane l takes l, l + 32, ... (kMergeBatch loads in
// flight), then the lanes combine in lane order (group_reduce) — so every lane, and every block
// merging the same values, gets the same bits. load(i): value i (written by other blocks: read
// it through L2).
constexpr int kMergeBatch = 4;
template <class M, class Load>
__device__ __forceinline__ typename M::value_type merge_in_order(int count, int lane, M m, Load load) {
  typename M::value_type acc = m.identity();
  for (int i0 = lane; i0 < count; i0 += 32 * kMergeBatch) {
    typename M::value_type e[kMergeBatch];
#pragma unroll
    for (int b = 0; b < kMergeBatch; ++b) e[b] = i0 + 32 * b < count ? load(i0 + 32 * b) : m.identity();
#pragma unroll
    for (int b = 0; b < kMergeBatch; ++b) acc = m.combine(acc, e[b]);
  }
  return group_reduce(acc, 32, m);
}

// ---- Host helpers ----------------------------------------------------------------------------

using parallel::cuda::DeviceGuard;

constexpr std::int64_t kMaxGrid = 0x7fffffff;  // gridDim.x limit

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; }

// Launch shape of a streamed long-row kernel: col_tiles balanced tiles of tile_width ≤ kStreamTile
// columns (a multiple of w), the rows in `groups` groups of per_group (the last may be shorter),
// groups · col_tiles ≤ capacity blocks; col_tiles = 0 where one row's tiles exceed capacity.
struct StreamGrid {
  std::int64_t col_tiles = 0, tile_width = 0, groups = 0, per_group = 0;
};
inline StreamGrid stream_grid(std::int64_t rows, std::int64_t n, std::int64_t w, std::int64_t capacity) {
  StreamGrid g;
  const std::int64_t tiles = ceil_div(n, kStreamTile);
  if (tiles > capacity) return g;
  g.col_tiles = tiles;
  g.tile_width = ceil_div(ceil_div(n, tiles), w) * w;
  g.per_group = ceil_div(rows, std::min(rows, capacity / tiles));
  g.groups = ceil_div(rows, g.per_group);
  return g;
}

// A cooperative launch (every block resident at once, or the launch fails).
template <class... Params, class... Args>
void launch_cooperative(void (*kernel)(Params...), std::int64_t blocks, int threads, std::size_t smem,
                        cudaStream_t stream, const char* where, Args... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(blocks));
  cfg.blockDim = dim3(unsigned(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  check_cuda(cudaLaunchKernelEx(&cfg, kernel, args...), where);
}

}  // namespace
}  // namespace sixfold::detail
