// src/cuda/scan_bulk.cu — inclusive sum of f32 on Hopper at ~84% of copy bandwidth (CUB's
// DeviceScan: ~72%), for parallel::cuda::inclusive_scan<Sum<float>> of ≥ 2^20 elements.
//
// A single pass with decoupled look-back (the sum is a monoid: a tile's prefix is the sum of its
// predecessors' sums, in whatever grouping the look-back finds them), where the look-back can no
// longer stall the memory system: tiles of 8192 floats (32 KB) land by 1-D bulk copies in a ring
// of 6 shared-memory slots per CTA (one CTA per SM, 192 KB of loads in flight), and three warp
// roles never wait on one another's queues:
//   loader    (1 thread)   takes the next tile id from a counter and starts its bulk copy as soon
//                          as a slot is free;
//   reducers  (4 warps)    when a tile lands: the sums of its 8 segments and its total; the total
//                          is published at once (flag 1) — so a successor's look-back waits only
//                          on loads already in flight, never on work queued behind a look-back;
//   consumers (8 warps)    per tile: warp 0 looks back over the published words, 32 tiles per
//                          round, up to the nearest inclusive prefix, and publishes this tile's
//                          (flag 2); each warp then scans its segment in place from its offset,
//                          and one thread starts the bulk store of the slot to global memory.
// DRAM sees one read and one write per element. The n mod 8192 remainder is scanned by one
// block starting from the last tile's inclusive prefix. Development history, variants and
// measurements: dev/scan/scan_tma.cu, docs/perf/foundation.md.
//
// Float sums are grouped as the look-back finds them (as in CUB): results agree with a float64
// scan to f32 rounding, not bit for bit across runs. in == out (in place) is safe: a tile is
// loaded before it is stored, and tiles are disjoint.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "ptx_sync.cuh"
#include "sixfold/parallel/cuda.cuh"

namespace sixfold::parallel::cuda::detail {
namespace {

using u32 = std::uint32_t;
using u64 = unsigned long long;

constexpr int kReducers = 128, kConsumers = 256;
constexpr int kThreads = 32 + kReducers + kConsumers;     // loader warp, 4 reducer, 8 consumer warps
constexpr int kSegments = kConsumers / 32;                // one segment per consumer warp

struct SlotHeader {
  long long tile;  // −1: no more tiles
  float agg, prefix;
  float seg[kSegments];
};

// kTile floats per tile, kSlots tiles in flight per SM. The library runs <8192, 6>; the other
// shapes are dev/scan/scan_tma.cu's sweep (which includes this file).
template <int kTile_, int kSlots_> struct BulkScanShape {
  static constexpr int kTile = kTile_, kSlots = kSlots_;
  static constexpr int kSeg = kTile / kSegments;
  static_assert(kSeg % 128 == 0, "a consumer warp scans whole 128-float steps");
  static_assert(kTile % 1024 == 0 && kTile <= 16384, "the tail block takes kTile / 1024 per thread");
  static constexpr std::size_t kHeaderOffset = std::size_t(kSlots) * kTile * 4;
  static constexpr std::size_t kBarOffset = kHeaderOffset + kSlots * sizeof(SlotHeader);
  static constexpr std::size_t kSmemBytes = kBarOffset + 3 * kSlots * 8;
};
using DefaultBulkScan = BulkScanShape<8192, 6>;  // 6 × 32 KB in flight per SM

using namespace sixfold::detail::ptx;  // mbarriers, bulk copies, named barriers

__device__ __forceinline__ u64 ld_relaxed(const u64* p) {
  u64 v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed(u64* p, u64 v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}
// A tile's status word: flag in the high half (0 nothing yet, 1 its sum, 2 its inclusive prefix),
// the value's bits in the low half — one 64-bit store publishes both.
__device__ __forceinline__ u64 status_word(u32 flag, float v) { return (u64(flag) << 32) | __float_as_uint(v); }

// One warp: the exclusive prefix of `tile`. Lane l reads the word of tile j − l (tiles before 0
// count as inclusive 0); a round ends at the nearest inclusive prefix once every word up to it
// is published, else adds all 32 sums and moves 32 tiles back.
__device__ __forceinline__ float look_back(const u64* status, long long tile, int lane) {
  float prefix = 0.f;
  for (long long j = tile - 1; j >= 0; j -= 32) {
    const long long k = j - lane;
    u32 incl, needed;
    u64 w;
    for (;;) {
      w = k >= 0 ? ld_relaxed(status + k) : status_word(2, 0.f);
      const u32 flag = u32(w >> 32);
      incl = __ballot_sync(0xffffffffu, flag == 2);
      const int first = incl ? __ffs(int(incl)) - 1 : 31;
      needed = first == 31 ? 0xffffffffu : (2u << first) - 1;
      if ((__ballot_sync(0xffffffffu, flag != 0) & needed) == needed) break;
    }
    float v = (needed >> lane) & 1 ? __uint_as_float(u32(w)) : 0.f;
#pragma unroll
    for (int off = 16; off; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    prefix += v;
    if (incl) break;
  }
  return prefix;
}

template <class Shape>
__global__ void __launch_bounds__(kThreads, 1)
    scan_bulk_kernel(const float* in, float* out, long long ntiles, u64* status, unsigned long long* counter) {
  constexpr int kTile = Shape::kTile, kSlots = Shape::kSlots, kSeg = Shape::kSeg;
  constexpr std::size_t kHeaderOffset = Shape::kHeaderOffset, kBarOffset = Shape::kBarOffset;
  extern __shared__ __align__(128) unsigned char smem[];
  float* buf = reinterpret_cast<float*>(smem);
  SlotHeader* hdr = reinterpret_cast<SlotHeader*>(smem + kHeaderOffset);
  const u32 bars = smem_u32(smem + kBarOffset);
  auto full = [&](int s) { return bars + 8u * u32(s); };                   // tile landed
  auto reduced = [&](int s) { return bars + 8u * u32(kSlots + s); };       // sums ready
  auto empty = [&](int s) { return bars + 8u * u32(2 * kSlots + s); };     // store has read it
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < kSlots; ++s) {
      mbar_init(full(s), 1);
      mbar_init(reduced(s), 1);
      mbar_init(empty(s), 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (tid < 32) {  // ---- loader: one thread ----
    if (tid != 0) return;
    for (long long i = 0;; ++i) {
      const int s = int(i % kSlots);
      if (i >= kSlots) mbar_wait(empty(s), u32((i / kSlots - 1) & 1));
      const long long t = (long long)atomicAdd(counter, 1ull);
      hdr[s].tile = t < ntiles ? t : -1;
      if (t >= ntiles) {
        mbar_arrive(full(s));
        return;
      }
      mbar_expect_tx(full(s), kTile * 4u);
      bulk_load(smem_u32(buf + std::size_t(s) * kTile), in + t * kTile, kTile * 4u, full(s));
    }
  }

  if (tid < 32 + kReducers) {  // ---- reducers: 16 threads per segment ----
    const int r = tid - 32, seg = r / 16, sub = r % 16;
    for (long long i = 0;; ++i) {
      const int s = int(i % kSlots);
      mbar_wait(full(s), u32((i / kSlots) & 1));
      const long long t = hdr[s].tile;
      if (t < 0) {
        if (r == 0) mbar_arrive(reduced(s));
        return;
      }
      const float4* p = reinterpret_cast<const float4*>(buf + std::size_t(s) * kTile + seg * kSeg);
      float a0 = 0.f, a1 = 0.f;
#pragma unroll 4
      for (int x = sub; x < kSeg / 4; x += 32) {
        const float4 u = p[x], v = p[x + 16];
        a0 += (u.x + u.y) + (u.z + u.w);
        a1 += (v.x + v.y) + (v.z + v.w);
      }
      float v = a0 + a1;
#pragma unroll
      for (int off = 8; off; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);  // within 16 lanes
      if (sub == 0) hdr[s].seg[seg] = v;
      named_bar_sync(1, kReducers);
      if (r == 0) {
        float agg = 0.f;
#pragma unroll
        for (int k = 0; k < kSegments; ++k) agg += hdr[s].seg[k];
        hdr[s].agg = agg;
        st_relaxed(status + t, status_word(1, agg));
        mbar_arrive(reduced(s));
      }
    }
  }

  // ---- consumers ----
  const int c = tid - 32 - kReducers, warp = c / 32, lane = c % 32;
  for (long long i = 0;; ++i) {
    const int s = int(i % kSlots);
    mbar_wait(reduced(s), u32((i / kSlots) & 1));
    const long long t = hdr[s].tile;
    if (t < 0) break;
    if (warp == 0) {
      const float prefix = look_back(status, t, lane);
      if (lane == 0) {
        st_relaxed(status + t, status_word(2, prefix + hdr[s].agg));
        hdr[s].prefix = prefix;
      }
    }
    named_bar_sync(2, kConsumers);
    float carry = hdr[s].prefix;
    for (int k = 0; k < warp; ++k) carry += hdr[s].seg[k];
    float4* p = reinterpret_cast<float4*>(buf + std::size_t(s) * kTile + warp * kSeg);
#pragma unroll 4
    for (int x = lane; x < kSeg / 4; x += 32) {
      float4 u = p[x];
      u.y += u.x;
      u.z += u.y;
      u.w += u.z;
      float incl = u.w;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += y;
      }
      const float before = carry + (incl - u.w);
      u.x += before, u.y += before, u.z += before, u.w += before;
      p[x] = u;
      carry += __shfl_sync(0xffffffffu, incl, 31);
    }
    fence_proxy_async();  // smem writes → the bulk store
    named_bar_sync(2, kConsumers);
    if (c == 0) {
      bulk_store(out + t * kTile, smem_u32(buf + std::size_t(s) * kTile), kTile * 4u);
      if (i > 0) {  // the previous tile's store has read its slot: hand it back to the loader
        asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory");
        mbar_arrive(empty(int((i - 1) % kSlots)));
      }
    }
  }
  if (c == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// The n mod kTile remainder: one block, from the last tile's inclusive prefix.
template <int kTile>
__global__ void __launch_bounds__(1024) scan_bulk_tail(const float* in, float* out, long long start, long long n,
                                                       const u64* status, long long ntiles) {
  using Scan = cub::BlockScan<float, 1024>;
  __shared__ typename Scan::TempStorage tmp;
  constexpr int kPer = kTile / 1024;
  const long long base = start + (long long)threadIdx.x * kPer;
  float v[kPer], local = 0.f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    v[k] = base + k < n ? in[base + k] : 0.f;
    local += v[k];
  }
  float excl;
  Scan(tmp).ExclusiveSum(local, excl);
  float run = (ntiles > 0 ? __uint_as_float(u32(status[ntiles - 1])) : 0.f) + excl;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    run += v[k];
    if (base + k < n) out[base + k] = run;
  }
}

// Launches one scan of n ≥ 1 floats on `sms` CTAs (scratch from the stream's pool, zeroed).
template <class Shape>
void run_bulk_scan(const float* in, float* out, std::int64_t n, int sms, cudaStream_t stream, const char* where) {
  constexpr int kTile = Shape::kTile;
  const long long ntiles = n / kTile;
  // Scratch: one status word per tile, then the tile counter; zeroed for this call.
  Scratch scratch(std::size_t(ntiles + 1) * 8, stream, where);
  auto* status = static_cast<u64*>(scratch.get());
  check_cuda(cudaMemsetAsync(status, 0, std::size_t(ntiles + 1) * 8, stream), where);
  if (ntiles > 0) {
    scan_bulk_kernel<Shape><<<sms, kThreads, Shape::kSmemBytes, stream>>>(
        in, out, ntiles, status, reinterpret_cast<unsigned long long*>(status + ntiles));
    check_cuda(cudaGetLastError(), where);
  }
  if (n > ntiles * kTile) {
    scan_bulk_tail<kTile><<<1, 1024, 0, stream>>>(in, out, ntiles * kTile, n, status, ntiles);
    check_cuda(cudaGetLastError(), where);
  }
}

}  // namespace

bool bulk_inclusive_sum(const float* in, float* out, std::int64_t n, cudaStream_t stream) {
  constexpr const char* kWhere = "sixfold::cuda::inclusive_scan";
  using Shape = DefaultBulkScan;
  if (n < kBulkScanMinElements) return false;
  if (reinterpret_cast<std::uintptr_t>(in) % 16 || reinterpret_cast<std::uintptr_t>(out) % 16) return false;
  int device = 0;
  check_cuda(cudaGetDevice(&device), kWhere);
  constexpr int kMaxDevices = 64;
  static std::atomic<int> sms_of[kMaxDevices] = {};  // 0: not configured yet
  if (device >= kMaxDevices) return false;
  int sms = sms_of[device].load(std::memory_order_relaxed);
  if (sms == 0) {
    int major = 0;
    check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), kWhere);
    if (major != 9) return false;  // bulk copies and this tuning are Hopper's
    sms = parallel::cuda::sm_count(device, kWhere);
    check_cuda(cudaFuncSetAttribute(scan_bulk_kernel<Shape>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(Shape::kSmemBytes)),
               kWhere);
    sms_of[device].store(sms, std::memory_order_relaxed);
  }
  run_bulk_scan<Shape>(in, out, n, sms, stream, kWhere);
  return true;
}

}  // namespace sixfold::parallel::cuda::detail
