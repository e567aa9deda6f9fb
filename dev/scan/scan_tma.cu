// dev/scan/scan_tma.cu — v41–v45 (session 3): single-pass inclusive sum of f32 with big tiles held
// in shared memory and three warp roles, against cub::DeviceScan and a device-to-device copy.
//
// Why: every earlier single-pass version (scan_bench.cu) lost ~26 points of copy bandwidth to the
// decoupled look-back: a tile's CTA cannot issue more loads while it waits on its predecessors,
// and in the prefetching variants a tile's aggregate was published only when its CTA got round
// to it, so look-backs waited on queued, unprocessed work. Here the roles are split so that no
// role ever waits on a slower one's queue:
//   loader   (1 warp)   takes tile ids in order from a counter and starts one 1-D bulk copy
//                       (cp.async.bulk) per tile into a ring of S shared-memory slots;
//   reducers (4 warps)  as soon as a tile lands: its sum, and the sums of its 8 segments, then
//                       publish the tile's aggregate (flag 1) — never waiting on consumers;
//   consumers (8 warps) per tile: one warp looks back over the predecessors' published words
//                       (32 per round, stopping at the nearest inclusive prefix) and publishes
//                       this tile's inclusive prefix (flag 2); then each warp scans its segment
//                       in place from its offset, and one thread starts the bulk store to global
//                       memory; the slot returns to the loader when the store has read it.
// DRAM sees each element read once and written once; the look-back waits only on tiles whose
// loads are already in flight. Prediction: ≥ 85% of copy (the no-look-back diagnostic of
// scan_bench.cu reached 96.7%).
//
// Tiles are whole (TILE floats); the n % TILE remainder is scanned by one block that starts from
// the last tile's inclusive prefix. Float sums in the look-back are added in an order that
// depends on timing (as in CUB): results agree with a float64 scan to f32 rounding, not bitwise.
//
// Build and run on the GPU machine:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/scan_tma dev/scan/scan_tma.cu
//   /tmp/scan_tma [n]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

namespace {

using u32 = std::uint32_t;
using u64 = unsigned long long;

__device__ __forceinline__ u32 smem_u32(const void* p) { return u32(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try(u32 bar, u32 parity) {
  u32 ok;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  while (!mbar_try(bar, parity)) {
  }
}
__device__ __forceinline__ void bulk_load(u32 dst, const void* src, u32 bytes, u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void bulk_store(void* dst, u32 src, u32 bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ u64 ld_relaxed(const u64* p) {
  u64 v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed(u64* p, u64 v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ u64 word(u32 flag, float v) { return (u64(flag) << 32) | __float_as_uint(v); }

constexpr int kReducers = 128, kConsumers = 256;
constexpr int kThreads = 32 + kReducers + kConsumers;  // 416
constexpr int kSegments = kConsumers / 32;            // one per consumer warp

struct SlotHeader {
  long long tile;
  float agg, prefix;
  float seg[kSegments];
};

template <int TILE, int S>
struct Layout {
  static_assert(TILE % (kSegments * 128) == 0, "segments are whole 128-float steps");
  static constexpr int kSeg = TILE / kSegments;
  static constexpr std::size_t kBufBytes = std::size_t(S) * TILE * 4;
  static constexpr std::size_t kHeaderOffset = kBufBytes;
  static constexpr std::size_t kBarOffset = kHeaderOffset + S * sizeof(SlotHeader);
  static constexpr std::size_t kSmemBytes = kBarOffset + 3 * S * 8;
};

// Look-back by one warp: the exclusive prefix of `tile`. Lane l reads the word of tile j − l;
// words of tiles before 0 count as inclusive 0. The round ends at the nearest inclusive prefix
// once every word up to it has been published.
__device__ __forceinline__ float look_back(const u64* status, long long tile, int lane) {
  float prefix = 0.f;
  for (long long j = tile - 1; j >= 0; j -= 32) {
    const long long k = j - lane;
    u32 incl, needed;
    u64 w;
    for (;;) {
      w = k >= 0 ? ld_relaxed(status + k) : word(2, 0.f);
      const u32 flag = u32(w >> 32);
      incl = __ballot_sync(0xffffffffu, flag == 2);
      const int first = incl ? __ffs(incl) - 1 : 31;
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

template <int TILE, int S>
__global__ void __launch_bounds__(kThreads, 1)
    scan_tma(const float* __restrict__ in, float* __restrict__ out, long long ntiles, u64* status,
             unsigned long long* counter) {
  using L = Layout<TILE, S>;
  extern __shared__ __align__(128) unsigned char smem[];
  float* buf = reinterpret_cast<float*>(smem);
  SlotHeader* hdr = reinterpret_cast<SlotHeader*>(smem + L::kHeaderOffset);
  const u32 bars = smem_u32(smem + L::kBarOffset);
  auto full = [&](int s) { return bars + 8u * u32(s); };
  auto reduced = [&](int s) { return bars + 8u * u32(S + s); };
  auto empty = [&](int s) { return bars + 8u * u32(2 * S + s); };
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(full(s), 1);
      mbar_init(reduced(s), 1);
      mbar_init(empty(s), 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (tid < 32) {  // ---- loader ----
    if (tid != 0) return;
    for (long long i = 0;; ++i) {
      const int s = int(i % S);
      if (i >= S) mbar_wait(empty(s), u32((i / S - 1) & 1));
      const long long t = (long long)atomicAdd(counter, 1ull);
      hdr[s].tile = t < ntiles ? t : -1;
      if (t >= ntiles) {
        mbar_arrive(full(s));
        return;
      }
      mbar_expect_tx(full(s), TILE * 4u);
      bulk_load(smem_u32(buf + std::size_t(s) * TILE), in + t * TILE, TILE * 4u, full(s));
    }
  }

  if (tid < 32 + kReducers) {  // ---- reducers ----
    const int r = tid - 32, seg = r / 16, sub = r % 16;
    for (long long i = 0;; ++i) {
      const int s = int(i % S);
      mbar_wait(full(s), u32((i / S) & 1));
      const long long t = hdr[s].tile;
      if (t < 0) {
        if (r == 0) mbar_arrive(reduced(s));
        return;
      }
      const float4* p = reinterpret_cast<const float4*>(buf + std::size_t(s) * TILE + seg * L::kSeg);
      float a0 = 0.f, a1 = 0.f;
#pragma unroll 4
      for (int x = sub; x < L::kSeg / 4; x += 32) {
        const float4 u = p[x], v = p[x + 16];
        a0 += (u.x + u.y) + (u.z + u.w);
        a1 += (v.x + v.y) + (v.z + v.w);
      }
      float v = a0 + a1;
#pragma unroll
      for (int off = 8; off; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (sub == 0) hdr[s].seg[seg] = v;
      named_sync(1, kReducers);
      if (r == 0) {
        float agg = 0.f;
#pragma unroll
        for (int k = 0; k < kSegments; ++k) agg += hdr[s].seg[k];
        hdr[s].agg = agg;
        if (t > 0) st_relaxed(status + t, word(1, agg));  // tile 0 publishes its inclusive directly
        mbar_arrive(reduced(s));
      }
    }
  }

  // ---- consumers ----
  const int c = tid - 32 - kReducers, warp = c / 32, lane = c % 32;
  for (long long i = 0;; ++i) {
    const int s = int(i % S);
    mbar_wait(reduced(s), u32((i / S) & 1));
    const long long t = hdr[s].tile;
    if (t < 0) break;
    if (warp == 0) {
      const float prefix = look_back(status, t, lane);
      if (lane == 0) {
        st_relaxed(status + t, word(2, prefix + hdr[s].agg));
        hdr[s].prefix = prefix;
      }
    }
    named_sync(2, kConsumers);
    float carry = hdr[s].prefix;
    for (int k = 0; k < warp; ++k) carry += hdr[s].seg[k];
    float4* p = reinterpret_cast<float4*>(buf + std::size_t(s) * TILE + warp * L::kSeg);
#pragma unroll 4
    for (int x = lane; x < L::kSeg / 4; x += 32) {
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
    fence_proxy_async();
    named_sync(2, kConsumers);
    if (c == 0) {
      bulk_store(out + t * TILE, smem_u32(buf + std::size_t(s) * TILE), TILE * 4u);
      if (i > 0) {
        bulk_wait_read<1>();
        mbar_arrive(empty(int((i - 1) % S)));
      }
    }
  }
  if (c == 0) bulk_wait_all();
}

// The n % TILE remainder: one block, starting from the last whole tile's inclusive prefix.
__global__ void __launch_bounds__(1024) scan_tail(const float* in, float* out, long long start, long long n,
                                                  const u64* status, long long ntiles) {
  using Scan = cub::BlockScan<float, 1024>;
  __shared__ typename Scan::TempStorage tmp;
  constexpr int kPer = 16;
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

template <int TILE, int S>
struct Runner {
  using L = Layout<TILE, S>;
  int sms = 0;
  Runner() {
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaFuncSetAttribute(scan_tma<TILE, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(L::kSmemBytes)));
  }
  // scratch: (ntiles + 1) words: the status words, then the tile counter.
  void run(const float* in, float* out, long long n, u64* scratch, cudaStream_t st = 0) {
    const long long ntiles = n / TILE;
    CK(cudaMemsetAsync(scratch, 0, std::size_t(ntiles + 1) * 8, st));
    if (ntiles > 0)
      scan_tma<TILE, S><<<sms, kThreads, L::kSmemBytes, st>>>(in, out, ntiles, scratch,
                                                             reinterpret_cast<unsigned long long*>(scratch + ntiles));
    if (n > ntiles * TILE) scan_tail<<<1, 1024, 0, st>>>(in, out, ntiles * TILE, n, scratch, ntiles);
  }
};

template <class F> float median_ms(F&& f, int reps = 15) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();
  f();
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Max relative error against a float64 scan of the same (non-negative) inputs.
double max_rel_err(const std::vector<float>& x, const float* dev_out, long long n) {
  std::vector<float> got(n);
  CK(cudaMemcpy(got.data(), dev_out, n * 4, cudaMemcpyDeviceToHost));
  double run = 0, worst = 0;
  for (long long i = 0; i < n; ++i) {
    run += x[i];
    const double e = std::fabs(got[i] - run) / std::max(run, 1e-30);
    if (!(e <= worst)) worst = e;  // NaN counts as the worst
  }
  return worst;
}

template <int TILE, int S>
void variant(const char* name, const std::vector<float>& hx, const float* in, float* out, long long n, u64* scratch,
             double copy_gbps, double cub_err) {
  Runner<TILE, S> r;
  CK(cudaMemset(out, 0xff, n * 4));
  r.run(in, out, n, scratch);
  CK(cudaDeviceSynchronize());
  const double err = max_rel_err(hx, out, n);
  const float ms = median_ms([&] { r.run(in, out, n, scratch); });
  CK(cudaGetLastError());
  const double gbps = 8.0 * n / ms * 1e-6;
  std::printf("%-34s %8.4f ms %7.0f GB/s %6.1f%% of copy  max rel err %.1e (CUB %.1e)%s\n", name, ms, gbps,
              100 * gbps / copy_gbps, err, cub_err, err <= 4 * cub_err + 1e-6 ? "" : "  <-- WRONG");
}

}  // namespace

int main(int argc, char** argv) {
  const long long n = argc > 1 ? std::atoll(argv[1]) : 100000000LL;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, n = %lld f32\n", prop.name, prop.multiProcessorCount, n);
  std::vector<float> hx(n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> U(0.f, 1.f);
  for (auto& v : hx) v = U(rng);
  float *in, *out;
  u64* scratch;
  CK(cudaMalloc(&in, n * 4));
  CK(cudaMalloc(&out, n * 4));
  CK(cudaMalloc(&scratch, (n / 1024 + 16) * 8));
  CK(cudaMemcpy(in, hx.data(), n * 4, cudaMemcpyHostToDevice));

  float* big;
  const std::size_t cb = std::size_t(1) << 31;
  CK(cudaMalloc(&big, 2 * cb));
  const float copy_ms = median_ms([&] { CK(cudaMemcpyAsync(big + cb / 4, big, cb, cudaMemcpyDeviceToDevice)); }, 9);
  const double copy_gbps = 2.0 * cb / copy_ms * 1e-6;
  CK(cudaFree(big));
  std::printf("device-to-device copy %.0f GB/s\n", copy_gbps);

  std::size_t tb = 0;
  CK(cub::DeviceScan::InclusiveSum(nullptr, tb, in, out, n));
  void* tmp;
  CK(cudaMalloc(&tmp, tb));
  CK(cub::DeviceScan::InclusiveSum(tmp, tb, in, out, n));
  CK(cudaDeviceSynchronize());
  const double cub_err = max_rel_err(hx, out, n);
  const float cub_ms = median_ms([&] { CK(cub::DeviceScan::InclusiveSum(tmp, tb, in, out, n)); });
  std::printf("%-34s %8.4f ms %7.0f GB/s %6.1f%% of copy  max rel err %.1e\n", "cub::DeviceScan::InclusiveSum", cub_ms,
              8.0 * n / cub_ms * 1e-6, 100 * 8.0 * n / cub_ms * 1e-6 / copy_gbps, cub_err);

  for (int round = 0; round < 2; ++round) {
    variant<16384, 3>("v41 tile 16384 x 3 slots", hx, in, out, n, scratch, copy_gbps, cub_err);
    variant<8192, 4>("v42 tile 8192 x 4 slots", hx, in, out, n, scratch, copy_gbps, cub_err);
    variant<8192, 6>("v43 tile 8192 x 6 slots", hx, in, out, n, scratch, copy_gbps, cub_err);
    variant<4096, 8>("v44 tile 4096 x 8 slots", hx, in, out, n, scratch, copy_gbps, cub_err);
    variant<4096, 12>("v45 tile 4096 x 12 slots", hx, in, out, n, scratch, copy_gbps, cub_err);
    variant<6144, 8>("v46 tile 6144 x 8 slots", hx, in, out, n, scratch, copy_gbps, cub_err);
    variant<7168, 7>("v47 tile 7168 x 7 slots", hx, in, out, n, scratch, copy_gbps, cub_err);
    variant<10240, 5>("v48 tile 10240 x 5 slots", hx, in, out, n, scratch, copy_gbps, cub_err);
    variant<12288, 4>("v49 tile 12288 x 4 slots", hx, in, out, n, scratch, copy_gbps, cub_err);
  }
  // Awkward sizes for the best-guess shape: tail only, one tile + tail, primes.
  for (long long m : {1LL, 4095LL, 16384LL, 16385LL, 1000003LL, 33554467LL}) {
    if (m > n) continue;
    Runner<8192, 6> r;
    CK(cudaMemset(out, 0xff, m * 4));
    r.run(in, out, m, scratch);
    CK(cudaDeviceSynchronize());
    std::vector<float> part(hx.begin(), hx.begin() + m);
    const double e = max_rel_err(part, out, m);
    std::printf("n = %-10lld v43 max rel err %.1e%s\n", m, e, e < 1e-4 ? "" : "  <-- WRONG");
  }
  CK(cudaFree(tmp));
  CK(cudaFree(scratch));
  CK(cudaFree(in));
  CK(cudaFree(out));
  return 0;
}
