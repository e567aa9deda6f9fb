// dev/topk/read_bw.cu — how fast can one read of a long f32 row go on this GPU, with the
// top-k filter's per-element work (order key, compare with a threshold, count)? The long-row
// filter (src/cuda/topk.cu, lr_filter) alone reads 1e8 f32 in ~123 us (3.25 TB/s) on the H200;
// the bar (70% of the 4.25 TB/s copy for the whole top-k) needs the filter near ~100 us.
//
// Variants (1e8 f32 = 400 MB, median of 20 launches, CUDA events):
//   reg<B, U, cs, pipe>  B blocks of 512 per SM, grid-stride, U 16-byte loads per thread in
//                        flight (cs: ld.global.cs; pipe: the next U issued before the current U
//                        are used, so a thread always has loads in flight)
//   bulk<tile, stages, B> B blocks per SM, one thread streams tiles into a ring of shared-memory
//                        stages with cp.async.bulk (mbarrier completion), 8 consumer warps
//                        compare from shared memory
// and the device-to-device copy of the same 400 MB for reference.
// Build: nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -o read_bw dev/topk/read_bw.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../../src/cuda/ptx_sync.cuh"
#include "../cuda_check.cuh"

using u32 = std::uint32_t;
using u64 = unsigned long long;


__device__ __forceinline__ u32 key_of(u32 u) {
  const float v = __uint_as_float(u);
  if (v != v) return 0xffffffffu;
  if ((u << 1) == 0) u = 0;
  return u ^ ((u >> 31) ? 0xffffffffu : 0x80000000u);
}
__device__ __forceinline__ u32 count4(uint4 r, u32 thr) {
  return (key_of(r.x) > thr) + (key_of(r.y) > thr) + (key_of(r.z) > thr) + (key_of(r.w) > thr);
}

template <bool kCs>
__device__ __forceinline__ uint4 load16(const uint4* p) {
  return kCs ? __ldcs(p) : __ldg(p);
}

template <int B, int U, bool kCs, bool kPipe>
__global__ void __launch_bounds__(512, B) reg_read(const uint4* x, u64 nv, u32 thr, u64* out) {
  const u64 lane = threadIdx.x & 31;
  const u64 warp = (u64(blockIdx.x) * blockDim.x + threadIdx.x) >> 5, nwarps = (u64(gridDim.x) * blockDim.x) >> 5;
  const u64 step = nwarps * 32 * U;
  u32 cnt = 0;
  uint4 e[U];
  u64 b = warp * 32 * U;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const u64 v = b + u * 32 + lane;
    e[u] = v < nv ? load16<kCs>(x + v) : make_uint4(0, 0, 0, 0);
  }
  while (b < nv) {
    if constexpr (kPipe) {
      uint4 f[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const u64 v = b + step + u * 32 + lane;
        f[u] = v < nv ? load16<kCs>(x + v) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) cnt += count4(e[u], thr);
#pragma unroll
      for (int u = 0; u < U; ++u) e[u] = f[u];
    } else {
#pragma unroll
      for (int u = 0; u < U; ++u) cnt += count4(e[u], thr);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const u64 v = b + step + u * 32 + lane;
        e[u] = v < nv ? load16<kCs>(x + v) : make_uint4(0, 0, 0, 0);
      }
    }
    b += step;
  }
  if (cnt) atomicAdd(out, u64(cnt));
}

using namespace sixfold::detail::ptx;

constexpr int kConsumerWarps = 8;

// Tiles t = blockIdx.x + i·gridDim.x (static), tile bytes kTile, kStages slots.
template <int kTile, int kStages>
__global__ void __launch_bounds__(32 * (kConsumerWarps + 1)) bulk_read(const uint4* x, u64 ntiles, u32 thr, u64* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) u64 bars[2 * kStages];
  const u32 full0 = smem_u32(bars), empty0 = smem_u32(bars + kStages);
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const u64 mine = ntiles > blockIdx.x ? (ntiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  if (tid < 32) {
    if (tid != 0) return;
    for (u64 i = 0; i < mine; ++i) {
      const int s = int(i % kStages);
      if (i >= kStages) mbar_wait(empty0 + 8 * s, u32((i / kStages - 1) & 1));
      const u64 t = blockIdx.x + i * gridDim.x;
      mbar_expect_tx(full0 + 8 * s, kTile);
      bulk_load(smem_u32(smem + std::size_t(s) * kTile), reinterpret_cast<const char*>(x) + t * kTile, kTile,
                full0 + 8 * s);
    }
    return;
  }
  const int c = tid - 32, lane = c & 31;
  u32 cnt = 0;
  for (u64 i = 0; i < mine; ++i) {
    const int s = int(i % kStages);
    mbar_wait(full0 + 8 * s, u32((i / kStages) & 1));
    const uint4* p = reinterpret_cast<const uint4*>(smem + std::size_t(s) * kTile);
#pragma unroll 4
    for (int v = c; v < kTile / 16; v += 32 * kConsumerWarps) cnt += count4(p[v], thr);
    __syncwarp();
    if (lane == 0) mbar_arrive(empty0 + 8 * s);
  }
  if (cnt) atomicAdd(out, u64(cnt));
}

struct Timer {
  cudaEvent_t a, b;
  Timer() { CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b)); }
  template <class F> double median_us(F&& f) {
    for (int i = 0; i < 3; ++i) f();
    std::vector<float> ms;
    for (int i = 0; i < 20; ++i) {
      CK(cudaEventRecord(a));
      f();
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      float m = 0;
      CK(cudaEventElapsedTime(&m, a, b));
      ms.push_back(m);
    }
    std::sort(ms.begin(), ms.end());
    return 1000.0 * ms[ms.size() / 2];
  }
};

int main() {
  const u64 n = 100000000ull, bytes = n * 4, nv = n / 4;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  uint4 *x = nullptr, *y = nullptr;
  u64* out = nullptr;
  CK(cudaMalloc(&x, bytes));
  CK(cudaMalloc(&y, bytes));
  CK(cudaMalloc(&out, 8));
  CK(cudaMemset(x, 0x3f, bytes));  // 0x3f3f3f3f ≈ 0.75f everywhere
  const u32 thr = 0xfffffff0u;     // nothing passes
  Timer tm;
  const double copy_us = tm.median_us([&] { CK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice)); });
  const double copy_rate = 2.0 * double(bytes) / copy_us;  // bytes per us, read + write
  std::printf("copy 400 MB D2D %8.1f us  %6.2f TB/s (read + write)\n", copy_us, copy_rate * 1e-6);
  auto row = [&](const char* name, double us, double moved = 0) {  // moved: bytes read
    if (moved == 0) moved = double(bytes);
    std::printf("%-28s %8.1f us  %6.2f TB/s  %5.1f%% of copy (read once)\n", name, us, moved / us * 1e-6,
                100.0 * (moved / us) / copy_rate);
  };
#define REG(B, U, CS, PIPE)                                                                                \
  row("reg B" #B " U" #U " cs" #CS " pipe" #PIPE, tm.median_us([&] {                                       \
        reg_read<B, U, CS, PIPE><<<sms * B, 512>>>(x, nv, thr, out);                                       \
      }));
  REG(3, 4, false, false)
  REG(3, 4, true, false)
  REG(3, 4, true, true)
  REG(2, 8, true, true)
  REG(4, 2, true, true)
  REG(2, 4, true, true)
  REG(1, 16, true, false)
#define BULK(TILE, ST, B)                                                                                   \
  {                                                                                                         \
    auto k = bulk_read<TILE, ST>;                                                                           \
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, TILE * ST));                     \
    row("bulk tile" #TILE " st" #ST " B" #B, tm.median_us([&] {                                             \
          k<<<sms * B, 32 * (kConsumerWarps + 1), TILE * ST>>>(x, bytes / TILE, thr, out);                   \
        }), double(bytes / TILE * TILE));                                                                   \
  }
  // Whole tiles only (the last partial tile, < 32 KB of 400 MB, is left out of the bytes counted).
  BULK(16384, 6, 1)
  BULK(16384, 12, 1)
  BULK(32768, 6, 1)
  BULK(16384, 6, 2)
  BULK(8192, 12, 2)
  BULK(32768, 3, 2)
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  return 0;
}
