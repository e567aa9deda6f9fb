// scan_bench.cu -- single-pass inclusive prefix sum (float32, +) benchmark for H200 (sm_90a).
//
// Computes out[i] = in[0] + ... + in[i] for n = 1e8 floats with several variants, checks each
// against a float64 host prefix sum, and times it against a device-to-device cudaMemcpyAsync of
// the same 400 MB (the "copy bandwidth"; a scan moves the same 8 bytes/element: 4 read + 4 written).
//
// Build:  /usr/local/cuda/bin/nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a \
//             -o /tmp/scan_bench dev/scan/scan_bench.cu          (add -Xptxas -v for registers/spills)
// Run:    /tmp/scan_bench          (checks n in {0,1,17,4097,1000003,1e8}, then times n = 1e8)
//         /tmp/scan_bench --big    (also checks n = 2^31 + 17: ~17 GB of device memory, ~35 GB host)
// Exit code 1 on any CUDA error or if max|out-ref| / max|ref| > 1e-4 for any variant and n.
//
// Variants and predictions (% of measured copy bandwidth at n = 1e8):
//   v0 cub_inclusive_scan          cub::DeviceScan::InclusiveScan, cuda::std::plus<float>.
//                                  Known: ~0.266 ms, ~71% of copy.
//   v1 lookback_256x16  (4096/tile) scan_decoupled_lookback: tile id from a global atomic counter,
//                                  warp-striped float4 loads/stores (512 B per warp instruction),
//                                  smem transpose, shuffle block scan, warp-parallel look-back over
//                                  packed 64-bit {flag,value} status words. Expect ~78-82%.
//   v2 lookback_512x16  (8192/tile) half the tiles -> half the status/atomic/memset traffic and
//                                  look-back round trips per byte, but 16-warp block syncs and a
//                                  longer serial phase per block; expect ~80-84%.
//   v3 lookback_256x32  (8192/tile) same bytes per tile as v2 with 8 float4 loads in flight per thread
//                                  (more memory-level parallelism per warp), more registers, fewer
//                                  resident blocks; expect ~82-85% (best guess for the winner).
//   v4 lookback_128x32  (4096/tile) small 4-warp blocks: cheap syncs, many resident blocks to hide
//                                  a block's look-back wait; expect ~78-82%.
// Measured (H200, 2026-11-21, one run; memcpy d2d 0.1939 ms = 4125 GB/s):
//   v0 CUB 0.2617 ms 74.1% | v1 0.3019 64.2% | v2 0.2958 65.6% | v3 0.2715 71.4% | v4 0.2693 72.0%.
//   Every prediction missed by 10-15 points: none of the own variants beats CUB.
// v5-v8 (persistent, cp.async prefetch STAGES-1 tiles ahead): predicted >= 80% by keeping loads
//   in flight during the look-back. Measured: tile ids from the counter at prefetch time 18-23%
//   (tiles wait on predecessors queued unprocessed in other blocks); static round-robin tiles
//   48-57% (look-back distance grows with the block index within a round). Worse than v4.
// v9 = v4 with the look-back removed (wrong result, timing only): 0.2017 ms, 96.7% of copy.
//   So loads, transposes, block scans and stores cost ~3% and the look-back ~26 points: the
//   next version must shorten or hide the look-back itself.
// v10-v13 (exponential __nanosleep backoff in the spin) and v14-v16 (register caps for 11-12
//   resident blocks/SM): no gain (68-72% on one machine). On a second H200 instance the same
//   binary gave v1-v4 58-60% while CUB stayed at 73.9%: our look-back is fragile where CUB's is
//   not. Still open: publish a prefetched tile's aggregate as soon as its data lands.
// ptxas (nvcc 13.0, sm_90a), no spills: v1 36 regs (6 blocks/SM), v2 36 (3), v3 63 (4), v4 56 (9);
// input loaded with ld.global.cs (streaming), output stored with st.global.cs.
#include <cub/cub.cuh>
#include <cuda/atomic>
#include <cuda/std/functional>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t err_ = (call);                                                                     \
    if (err_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(err_), __FILE__,     \
                   __LINE__, #call);                                                               \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Scratch, allocated once outside the timed region.
//   lookback[0]          : tile counter (atomicAdd hands out tile ids in the order blocks start)
//   lookback[16 + t]     : status word of tile t = (flag << 32) | float_bits(value)
// The whole prefix is zeroed by cudaMemsetAsync inside every call (flag 0 = invalid).
// ---------------------------------------------------------------------------------------------
struct Scratch {
  void* cub_tmp = nullptr;
  size_t cub_bytes = 0;
  unsigned long long* lookback = nullptr;
  long long max_tiles = 0;
};
static Scratch g_scratch;
constexpr int kStatusOffset = 16;  // keep the counter on its own 128-byte line

constexpr unsigned long long kFlagAggregate = 1ull << 32;  // value = this tile's sum
constexpr unsigned long long kFlagPrefix = 2ull << 32;     // value = sum of tiles 0..t (inclusive)

using StatusRef = cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>;

__device__ __forceinline__ float warp_inclusive_scan(float v, int lane) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    float y = __shfl_up_sync(0xffffffffu, v, off);
    if (lane >= off) v += y;
  }
  return v;
}

// Exclusive value from an inclusive warp scan, exactly (shift by one lane, no subtraction).
__device__ __forceinline__ float shift_exclusive(float incl, int lane) {
  const float e = __shfl_up_sync(0xffffffffu, incl, 1);
  return lane == 0 ? 0.f : e;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Called by all 32 lanes of warp 0 of tile `tile` > 0. Publishes the tile aggregate, then walks back
// over predecessors 32 at a time (lane i looks at tile - 1 - i - 32k) until it meets a tile with an
// inclusive prefix; sums the aggregates up to and including that one. Publishes its own inclusive
// prefix and returns the exclusive prefix of the tile (same value in all lanes).
//
// Memory ordering: flag and value live in one aligned 64-bit word written by one 64-bit store and
// read by one 64-bit load, so a reader can never see a flag without its value; no other data is
// communicated between blocks. Relaxed device-scope atomics (st/ld.relaxed.gpu) are therefore
// sufficient, and no __threadfence() is needed between computing the value and publishing it.
template <int BACKOFF_NS = 0>
__device__ __forceinline__ float lookback_exclusive_prefix(unsigned long long* status, long long tile,
                                                           float aggregate, int lane) {
  if (lane == 0)
    StatusRef(status[tile]).store(kFlagAggregate | __float_as_uint(aggregate), cuda::memory_order_relaxed);
  float exclusive = 0.f;
  long long pred = tile - 1 - lane;
  while (true) {
    unsigned long long s;
    int spins = 0;
    while (true) {  // all 32 predecessors in the window must have at least published their aggregate
      s = pred >= 0 ? StatusRef(status[pred]).load(cuda::memory_order_relaxed) : kFlagPrefix;
      if (!__any_sync(0xffffffffu, (s >> 32) == 0)) break;
      // Back off so spinning warps do not crowd the L2 that the data streams through.
      if (BACKOFF_NS > 0) __nanosleep(BACKOFF_NS << (spins < 3 ? spins++ : 3));
    }
    const unsigned prefix_mask = __ballot_sync(0xffffffffu, (s >> 32) == 2);
    const int stop = prefix_mask ? __ffs(prefix_mask) - 1 : 31;  // nearest tile with a prefix
    exclusive += warp_sum(lane <= stop ? __uint_as_float(static_cast<unsigned>(s)) : 0.f);
    if (prefix_mask) break;
    pred -= 32;
  }
  if (lane == 0)
    StatusRef(status[tile]).store(kFlagPrefix | __float_as_uint(exclusive + aggregate),
                                  cuda::memory_order_relaxed);
  return exclusive;
}

// Padded index into a warp's transpose buffer: 4 extra floats per 32 keep float4 accesses
// conflict-free both for the warp-striped (i*32+lane)*4 and the blocked lane*ITEMS+4j patterns.
__device__ __forceinline__ int pad(int i) { return i + ((i >> 5) << 2); }

template <int THREADS, int ITEMS, bool NO_LOOKBACK = false, int BACKOFF_NS = 0, int MIN_BLOCKS = 1>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
scan_decoupled_lookback_kernel(const float* __restrict__ in, float* __restrict__ out, long long n,
                               unsigned long long* __restrict__ lookback) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024 && ITEMS % 4 == 0, "bad tile shape");
  constexpr int WARPS = THREADS / 32, TILE = THREADS * ITEMS, WARP_ITEMS = 32 * ITEMS, VECS = ITEMS / 4;
  __shared__ __align__(16) float transpose[WARPS][WARP_ITEMS + WARP_ITEMS / 8];
  __shared__ float warp_prefix[WARPS];
  __shared__ long long tile_id;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) tile_id = static_cast<long long>(atomicAdd(lookback, 1ull));
  __syncthreads();
  const long long tile = tile_id;
  const long long warp_base = tile * TILE + static_cast<long long>(warp) * WARP_ITEMS;
  const bool full_tile = tile * TILE + TILE <= n;
  float* buf = transpose[warp];

  // 1. Load the warp's 32*ITEMS contiguous floats warp-striped (coalesced float4), transpose to blocked.
  if (full_tile) {
    const float4* src = reinterpret_cast<const float4*>(in + warp_base);
    float4 v[VECS];
#pragma unroll
    for (int i = 0; i < VECS; ++i) v[i] = __ldcs(src + i * 32 + lane);
#pragma unroll
    for (int i = 0; i < VECS; ++i) *reinterpret_cast<float4*>(buf + pad((i * 32 + lane) * 4)) = v[i];
  } else {  // last (partial) tile: scalar, predicated, zero-filled
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int idx = (i / 4 * 32 + lane) * 4 + i % 4;
      buf[pad(idx)] = warp_base + idx < n ? in[warp_base + idx] : 0.f;
    }
  }
  __syncwarp();
  float x[ITEMS];
#pragma unroll
  for (int j = 0; j < VECS; ++j) {
    const float4 q = *reinterpret_cast<const float4*>(buf + pad(lane * ITEMS + 4 * j));
    x[4 * j] = q.x; x[4 * j + 1] = q.y; x[4 * j + 2] = q.z; x[4 * j + 3] = q.w;
  }

  // 2. Thread-serial scan, warp scan of thread totals, block scan of warp totals.
#pragma unroll
  for (int k = 1; k < ITEMS; ++k) x[k] += x[k - 1];
  const float warp_incl = warp_inclusive_scan(x[ITEMS - 1], lane);
  const float thread_excl = shift_exclusive(warp_incl, lane);
  if (lane == 31) warp_prefix[warp] = warp_incl;
  __syncthreads();
  if (warp == 0) {
    const float w = lane < WARPS ? warp_prefix[lane] : 0.f;
    const float w_incl = warp_inclusive_scan(w, lane);
    const float aggregate = __shfl_sync(0xffffffffu, w_incl, 31);
    float tile_prefix = 0.f;
    if (NO_LOOKBACK) {
      // Diagnostic only: tiles scanned independently (wrong result) to time everything else.
    } else if (tile == 0) {
      if (lane == 0)
        StatusRef(lookback[kStatusOffset]).store(kFlagPrefix | __float_as_uint(aggregate),
                                                 cuda::memory_order_relaxed);
    } else {
      tile_prefix = lookback_exclusive_prefix<BACKOFF_NS>(lookback + kStatusOffset, tile, aggregate, lane);
    }
    const float w_excl = shift_exclusive(w_incl, lane);
    if (lane < WARPS) warp_prefix[lane] = tile_prefix + w_excl;
  }
  __syncthreads();
  const float prefix = warp_prefix[warp] + thread_excl;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) x[k] += prefix;

  // 3. Transpose back (blocked -> warp-striped) and store coalesced float4.
#pragma unroll
  for (int j = 0; j < VECS; ++j)
    *reinterpret_cast<float4*>(buf + pad(lane * ITEMS + 4 * j)) =
        make_float4(x[4 * j], x[4 * j + 1], x[4 * j + 2], x[4 * j + 3]);
  __syncwarp();
  if (full_tile) {
    float4* dst = reinterpret_cast<float4*>(out + warp_base);
#pragma unroll
    for (int i = 0; i < VECS; ++i)
      __stcs(dst + i * 32 + lane, *reinterpret_cast<const float4*>(buf + pad((i * 32 + lane) * 4)));
  } else {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int idx = (i / 4 * 32 + lane) * 4 + i % 4;
      if (warp_base + idx < n) out[warp_base + idx] = buf[pad(idx)];
    }
  }
}

template <int THREADS, int ITEMS, bool NO_LOOKBACK = false, int BACKOFF_NS = 0, int MIN_BLOCKS = 1>
void scan_decoupled_lookback(const float* in, float* out, long long n, cudaStream_t s) {
  if (n <= 0) return;
  constexpr long long TILE = THREADS * ITEMS;
  const long long tiles = (n + TILE - 1) / TILE;
  if (tiles > g_scratch.max_tiles || tiles > 0x7fffffffLL ||
      (reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) % 16 != 0) {
    std::fprintf(stderr, "scan_decoupled_lookback: scratch too small or pointers not 16-byte aligned\n");
    std::exit(1);
  }
  CK(cudaMemsetAsync(g_scratch.lookback, 0, (kStatusOffset + tiles) * sizeof(unsigned long long), s));
  scan_decoupled_lookback_kernel<THREADS, ITEMS, NO_LOOKBACK, BACKOFF_NS, MIN_BLOCKS>
      <<<static_cast<unsigned>(tiles), THREADS, 0, s>>>(in, out, n, g_scratch.lookback);
  CK(cudaGetLastError());
}


// ---------------------------------------------------------------------------------------------
// v5+: the same tile algorithm in a persistent, software-pipelined kernel. Each resident block
// loops over tiles; the loads of the next STAGES-1 tiles are in flight (cp.async into shared
// memory, zero-filled past n) while the block scans, looks back and stores the current one, so
// a block waiting on its predecessors still keeps DRAM busy. The grid is at most the number of
// resident blocks, so every block runs and the lowest unfinished tile always progresses.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

template <int THREADS, int ITEMS, int STAGES>
struct PipelinedTraits {
  static constexpr int kWarps = THREADS / 32, kTile = THREADS * ITEMS, kWarpItems = 32 * ITEMS;
  static constexpr int kVecs = ITEMS / 4;
  static constexpr int kWarpFloats = kWarpItems + kWarpItems / 8;     // padded, see pad()
  static constexpr int kStageFloats = kWarps * kWarpFloats;             // (WARPS, padded warp tile)
  static constexpr size_t kSmemBytes = size_t(STAGES) * kStageFloats * sizeof(float);
  static_assert(ITEMS % 4 == 0 && THREADS % 32 == 0 && STAGES >= 2, "bad pipelined shape");
};

template <int THREADS, int ITEMS, int STAGES>
__global__ void __launch_bounds__(THREADS)
scan_lookback_pipelined_kernel(const float* __restrict__ in, float* __restrict__ out, long long n,
                               long long tiles, unsigned long long* __restrict__ lookback) {
  using Tr = PipelinedTraits<THREADS, ITEMS, STAGES>;
  extern __shared__ __align__(16) float stage_mem[];  // (STAGES, WARPS, padded warp tile)
  __shared__ float warp_prefix[Tr::kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  auto issue = [&](long long tile, int stage) {
    if (tile < tiles) {
      float* buf = stage_mem + stage * Tr::kStageFloats + warp * Tr::kWarpFloats;
      const long long base = tile * Tr::kTile + static_cast<long long>(warp) * Tr::kWarpItems;
#pragma unroll
      for (int i = 0; i < Tr::kVecs; ++i) {
        const long long e = base + (i * 32 + lane) * 4;
        const long long left = n - e;
        const int bytes = left >= 4 ? 16 : (left > 0 ? int(left) * 4 : 0);
        cp_async_16(buf + pad((i * 32 + lane) * 4), bytes > 0 ? in + e : in, bytes);
      }
    }
    cp_async_commit();  // empty groups keep the group count uniform
  };

  // Static round-robin tiles: block b takes b, b + G, b + 2G, ... so all blocks work on one
  // round of G consecutive tiles together and a tile's predecessors are being processed right
  // now. (Taking ids from the atomic counter at prefetch time made tiles wait on predecessors
  // that sat unprocessed in another block's queue: 23% of copy, measured.)
  const long long G = gridDim.x;
  for (int p = 0; p < STAGES - 1; ++p) issue(blockIdx.x + p * G, p);

  for (int it = 0;; ++it) {
    const int s = it % STAGES, ahead = (it + STAGES - 1) % STAGES;
    const long long tile = blockIdx.x + it * G;
    if (tile >= tiles) break;
    __syncthreads();  // all reads of stage `ahead` (previous iteration) are done
    issue(tile + (STAGES - 1) * G, ahead);
    cp_async_wait<STAGES - 1>();  // this thread's copies for stage s have landed
    __syncwarp();                 // ... and the whole warp's (each warp reads only its own part)

    float* buf = stage_mem + s * Tr::kStageFloats + warp * Tr::kWarpFloats;
    float x[ITEMS];
#pragma unroll
    for (int j = 0; j < Tr::kVecs; ++j) {
      const float4 q = *reinterpret_cast<const float4*>(buf + pad(lane * ITEMS + 4 * j));
      x[4 * j] = q.x; x[4 * j + 1] = q.y; x[4 * j + 2] = q.z; x[4 * j + 3] = q.w;
    }
#pragma unroll
    for (int k = 1; k < ITEMS; ++k) x[k] += x[k - 1];
    const float warp_incl = warp_inclusive_scan(x[ITEMS - 1], lane);
    const float thread_excl = shift_exclusive(warp_incl, lane);
    if (lane == 31) warp_prefix[warp] = warp_incl;
    __syncthreads();
    if (warp == 0) {
      const float w = lane < Tr::kWarps ? warp_prefix[lane] : 0.f;
      const float w_incl = warp_inclusive_scan(w, lane);
      const float aggregate = __shfl_sync(0xffffffffu, w_incl, 31);
      float tile_prefix = 0.f;
      if (tile == 0) {
        if (lane == 0)
          StatusRef(lookback[kStatusOffset]).store(kFlagPrefix | __float_as_uint(aggregate),
                                                   cuda::memory_order_relaxed);
      } else {
        tile_prefix = lookback_exclusive_prefix(lookback + kStatusOffset, tile, aggregate, lane);
      }
      const float w_excl = shift_exclusive(w_incl, lane);
      if (lane < Tr::kWarps) warp_prefix[lane] = tile_prefix + w_excl;
    }
    __syncthreads();
    const float prefix = warp_prefix[warp] + thread_excl;
#pragma unroll
    for (int j = 0; j < Tr::kVecs; ++j)
      *reinterpret_cast<float4*>(buf + pad(lane * ITEMS + 4 * j)) =
          make_float4(x[4 * j] + prefix, x[4 * j + 1] + prefix, x[4 * j + 2] + prefix, x[4 * j + 3] + prefix);
    __syncwarp();
    const long long base = tile * Tr::kTile + static_cast<long long>(warp) * Tr::kWarpItems;
    if (tile * Tr::kTile + Tr::kTile <= n) {
      float4* dst = reinterpret_cast<float4*>(out + base);
#pragma unroll
      for (int i = 0; i < Tr::kVecs; ++i)
        __stcs(dst + i * 32 + lane, *reinterpret_cast<const float4*>(buf + pad((i * 32 + lane) * 4)));
    } else {
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        const int idx = (i / 4 * 32 + lane) * 4 + i % 4;
        if (base + idx < n) out[base + idx] = buf[pad(idx)];
      }
    }
  }
  cp_async_wait<0>();
}

template <int THREADS, int ITEMS, int STAGES>
void scan_lookback_pipelined(const float* in, float* out, long long n, cudaStream_t s) {
  using Tr = PipelinedTraits<THREADS, ITEMS, STAGES>;
  if (n <= 0) return;
  const long long tiles = (n + Tr::kTile - 1) / Tr::kTile;
  if (tiles > g_scratch.max_tiles || reinterpret_cast<uintptr_t>(in) % 16 || reinterpret_cast<uintptr_t>(out) % 16) {
    std::fprintf(stderr, "scan_lookback_pipelined: scratch too small or misaligned\n");
    std::exit(1);
  }
  auto kernel = scan_lookback_pipelined_kernel<THREADS, ITEMS, STAGES>;
  static int grid = 0;
  if (grid == 0) {
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Tr::kSmemBytes)));
    int per_sm = 0, sms = 0, dev = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, Tr::kSmemBytes));
    grid = per_sm * sms;
    std::printf("pipelined<%d,%d,%d>: %d blocks/SM, %zu B smem\n", THREADS, ITEMS, STAGES, per_sm, Tr::kSmemBytes);
  }
  CK(cudaMemsetAsync(g_scratch.lookback, 0, (kStatusOffset + tiles) * sizeof(unsigned long long), s));
  const long long blocks = std::min<long long>(grid, tiles);
  kernel<<<static_cast<unsigned>(blocks), THREADS, Tr::kSmemBytes, s>>>(in, out, n, tiles, g_scratch.lookback);
  CK(cudaGetLastError());
}

void scan_v0(const float* in, float* out, long long n, cudaStream_t s) {
  size_t bytes = g_scratch.cub_bytes;
  CK(cub::DeviceScan::InclusiveScan(g_scratch.cub_tmp, bytes, in, out, cuda::std::plus<float>{}, n, s));
}
void scan_v1(const float* in, float* out, long long n, cudaStream_t s) { scan_decoupled_lookback<256, 16>(in, out, n, s); }
void scan_v2(const float* in, float* out, long long n, cudaStream_t s) { scan_decoupled_lookback<512, 16>(in, out, n, s); }
void scan_v3(const float* in, float* out, long long n, cudaStream_t s) { scan_decoupled_lookback<256, 32>(in, out, n, s); }
void scan_v4(const float* in, float* out, long long n, cudaStream_t s) { scan_decoupled_lookback<128, 32>(in, out, n, s); }
void scan_v5(const float* in, float* out, long long n, cudaStream_t s) { scan_lookback_pipelined<256, 16, 3>(in, out, n, s); }
void scan_v6(const float* in, float* out, long long n, cudaStream_t s) { scan_lookback_pipelined<256, 16, 4>(in, out, n, s); }
void scan_v7(const float* in, float* out, long long n, cudaStream_t s) { scan_lookback_pipelined<128, 32, 3>(in, out, n, s); }
void scan_v8(const float* in, float* out, long long n, cudaStream_t s) { scan_lookback_pipelined<256, 8, 4>(in, out, n, s); }
// Diagnostic: v4 with the look-back removed (wrong result, timing only).
void scan_v9(const float* in, float* out, long long n, cudaStream_t s) { scan_decoupled_lookback<128, 32, true>(in, out, n, s); }
// v10-v13: v4-style tiles with exponential backoff (base ns) in the look-back spin.
void scan_v10(const float* in, float* out, long long n, cudaStream_t s) { scan_decoupled_lookback<128, 32, false, 64>(in, out, n, s); }
void scan_v11(const float* in, float* out, long long n, cudaStream_t s) { scan_decoupled_lookback<128, 32, false, 256>(in, out, n, s); }
void scan_v12(const float* in, float* out, long long n, cudaStream_t s) { scan_decoupled_lookback<128, 16, false, 128>(in, out, n, s); }
void scan_v13(const float* in, float* out, long long n, cudaStream_t s) { scan_decoupled_lookback<64, 32, false, 128>(in, out, n, s); }
// v14-v16: more tiles in flight per SM (Little's law: the look-back adds latency per tile, so
// throughput needs more resident tiles): register caps via __launch_bounds__ min blocks.
void scan_v14(const float* in, float* out, long long n, cudaStream_t s) { scan_decoupled_lookback<128, 32, false, 0, 12>(in, out, n, s); }
void scan_v15(const float* in, float* out, long long n, cudaStream_t s) { scan_decoupled_lookback<128, 32, false, 0, 11>(in, out, n, s); }
void scan_v16(const float* in, float* out, long long n, cudaStream_t s) { scan_decoupled_lookback<256, 32, false, 0, 6>(in, out, n, s); }

struct Variant {
  const char* name;
  void (*fn)(const float*, float*, long long, cudaStream_t);
  double max_rel_err;
};

// ---------------------------------------------------------------------------------------------
// Host side: correctness check and timing.
// ---------------------------------------------------------------------------------------------
static double check(Variant& v, const float* d_in, float* d_out, const std::vector<double>& ref,
                    std::vector<float>& h_out, long long n, cudaStream_t s) {
  if (n > 0) CK(cudaMemsetAsync(d_out, 0xff, n * sizeof(float), s));  // NaN poison
  v.fn(d_in, d_out, n, s);
  CK(cudaStreamSynchronize(s));
  if (n == 0) return 0.0;
  CK(cudaMemcpy(h_out.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
  double max_err = 0.0, max_ref = 0.0;
  for (long long i = 0; i < n; ++i) {
    const double e = std::fabs(static_cast<double>(h_out[i]) - ref[i]);
    if (!(e <= max_err)) max_err = e;  // NaN-sticky
    max_ref = std::max(max_ref, std::fabs(ref[i]));
  }
  return max_err / std::max(max_ref, 1e-30);
}

template <typename F>
static float median_ms(F&& call, cudaStream_t s, int warmup = 5, int reps = 30) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) call();
  CK(cudaStreamSynchronize(s));
  std::vector<float> t(reps);
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a, s));
    call();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&t[i], a, b));
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return 0.5f * (t[reps / 2 - 1] + t[reps / 2]);
}

int main(int argc, char** argv) {
  const bool big = argc > 1 && std::strcmp(argv[1], "--big") == 0;
  std::vector<long long> sizes = {0, 1, 17, 4097, 1000003, 100000000};
  if (big) sizes.push_back((1LL << 31) + 17);
  const long long n_max = *std::max_element(sizes.begin(), sizes.end());
  const long long n_time = 100000000;

  Variant variants[] = {{"v0 cub_inclusive_scan", scan_v0, 0}, {"v1 lookback_256x16", scan_v1, 0},
                        {"v2 lookback_512x16", scan_v2, 0},    {"v3 lookback_256x32", scan_v3, 0},
                        {"v4 lookback_128x32", scan_v4, 0},    {"v5 pipelined_256x16x3", scan_v5, 0},
                        {"v6 pipelined_256x16x4", scan_v6, 0}, {"v7 pipelined_128x32x3", scan_v7, 0},
                        {"v8 pipelined_256x8x4", scan_v8, 0},  {"v9 v4 w/o lookback (diag)", scan_v9, -1},
                        {"v10 128x32 backoff64", scan_v10, 0}, {"v11 128x32 backoff256", scan_v11, 0},
                        {"v12 128x16 backoff128", scan_v12, 0}, {"v13 64x32 backoff128", scan_v13, 0},
                        {"v14 128x32 12 blk/SM", scan_v14, 0},  {"v15 128x32 11 blk/SM", scan_v15, 0},
                        {"v16 256x32 6 blk/SM", scan_v16, 0}};
  constexpr int kVariants = sizeof(variants) / sizeof(variants[0]);

  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs, L2 %d MB)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.l2CacheSize >> 20);

  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  float *d_in, *d_out;
  CK(cudaMalloc(&d_in, n_max * sizeof(float)));
  CK(cudaMalloc(&d_out, n_max * sizeof(float)));
  // Scratch sized for the smallest tile; CUB's requirement grows with n, so size for n_max.
  g_scratch.max_tiles = (n_max + 2047) / 2048;  // smallest tile: 2048 elements (v8, v12, v13)
  CK(cudaMalloc(&g_scratch.lookback, (kStatusOffset + g_scratch.max_tiles) * sizeof(unsigned long long)));
  CK(cub::DeviceScan::InclusiveScan(nullptr, g_scratch.cub_bytes, static_cast<const float*>(d_in), d_out, cuda::std::plus<float>{},
                                    n_max, s));
  CK(cudaMalloc(&g_scratch.cub_tmp, std::max<size_t>(g_scratch.cub_bytes, 1)));

  // Correctness: fresh uniform [-1,1) input per n, float64 host reference.
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  bool ok = true;
  {
    std::vector<float> h_in, h_out(n_max);
    std::vector<double> ref;
    for (long long n : sizes) {
      h_in.resize(n);
      ref.resize(n);
      double acc = 0.0;
      for (long long i = 0; i < n; ++i) {
        h_in[i] = uni(rng);
        ref[i] = acc += h_in[i];
      }
      if (n > 0) CK(cudaMemcpy(d_in, h_in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
      for (Variant& v : variants) {
        if (v.max_rel_err < 0) continue;  // timing-only diagnostic
        const double rel = check(v, d_in, d_out, ref, h_out, n, s);
        const bool pass = rel <= 1e-4;
        std::printf("check %-24s n=%-11lld max|out-ref|/max|ref| = %.3e %s\n", v.name, n, rel,
                    pass ? "ok" : "FAIL");
        if (!(rel <= v.max_rel_err)) v.max_rel_err = rel;
        ok = ok && pass;
      }
    }
  }

  // Timing at n = 1e8 (input keeps the last checked data of size >= 1e8).
  const double bytes = 8.0 * n_time;
  const float copy_ms = median_ms(
      [&] { CK(cudaMemcpyAsync(d_out, d_in, n_time * sizeof(float), cudaMemcpyDeviceToDevice, s)); }, s);
  const double copy_gbs = bytes / (copy_ms * 1e6);
  float ms[kVariants];
  for (int k = 0; k < kVariants; ++k) ms[k] = median_ms([&] { variants[k].fn(d_in, d_out, n_time, s); }, s);

  if (!ok) std::printf("FAILED: relative error above 1e-4 (see check lines above)\n");
  std::printf("\nn = %lld floats, median of 30 after 5 warm-up; GB/s counts 8 bytes/element\n", n_time);
  std::printf("%-24s %9s %9s %8s %12s\n", "variant", "ms", "GB/s", "%copy", "max_rel_err");
  std::printf("%-24s %9.4f %9.1f %8.1f %12s\n", "memcpy d2d (copy)", copy_ms, copy_gbs, 100.0, "-");
  for (int k = 0; k < kVariants; ++k) {
    const double gbs = bytes / (ms[k] * 1e6);
    std::printf("%-24s %9.4f %9.1f %8.1f %12.3e\n", variants[k].name, ms[k], gbs, 100.0 * gbs / copy_gbs,
                variants[k].max_rel_err);
  }
  CK(cudaFree(g_scratch.cub_tmp));
  CK(cudaFree(g_scratch.lookback));
  CK(cudaFree(d_in));
  CK(cudaFree(d_out));
  CK(cudaStreamDestroy(s));
  return ok ? 0 : 1;
}
