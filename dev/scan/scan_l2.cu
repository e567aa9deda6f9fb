// scan_l2.cu -- v17+: inclusive prefix sum (float32, +) as an L2-blocked reduce-then-scan dataflow.
//
// Why: scan_bench.cu showed that the decoupled look-back costs ~26 points of copy bandwidth on an
// H200 (v9, the same kernel without it, reaches 96.7%), and neither backoff, occupancy nor a
// persistent prefetching kernel hid it. Reduce-then-scan has no look-back, but reading the input
// twice from DRAM caps it at 2/3 of the copy rate. Unless the second read hits L2: the H200 has a
// 50 MB L2, so cut the array into chunks of a few MB and run the two passes chunk by chunk, one
// chunk apart, so that the scan pass of chunk c re-reads data that the reduce pass of chunk c put
// in L2 a moment ago. DRAM then sees one read and one write per element, as a copy does.
//
// Work items, handed out in this order by a global atomic counter (one CTA per item):
//   R(0), R(1), S(0), R(2), S(1), ..., R(C-1), S(C-2), S(C-1)
// where R(c) = "reduce each tile of chunk c" and S(c) = "scan each tile of chunk c".
//   R item: load the tile (L2 evict_last), block-reduce, store the tile aggregate, fence, count the
//     chunk's finished tiles. The CTA that finishes a chunk last scans the chunk's aggregates
//     (exclusive, in order: correct for any monoid), waits for the previous chunk's inclusive
//     prefix (published by that chunk's last CTA), writes per-tile offsets, publishes this chunk's
//     inclusive prefix and raises the chunk's ready flag.
//   S item: wait for its chunk's ready flag (normally long set: R(c+1) ran in between), read its
//     offset, load the tile again (an L2 hit; evict_first: last use), block-scan, store (.cs).
// No deadlock: a CTA waits only on work that was handed out before its own item, and every CTA
// that took an item earlier is resident or finished.
//
// Build:  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/scan_l2 dev/scan/scan_l2.cu
// Run:    /tmp/scan_l2     (checks n in {0,1,17,4097,1000003,1e8,1e8+3} against a float64 host
//                           prefix, then times n = 1e8 against memcpy d2d and CUB)
//
// Prediction (before the first run): DRAM traffic equal to a copy's, so 85-90% of copy for
// chunks of 2-8 MB (the no-look-back diagnostic reached 96.7%; the extra pass over L2 and the
// per-chunk serial step cost a few points). Chunks too large (>= 16 MB) fall out of L2 and
// approach the 2/3 cap.
//
// Measured (H200, 2026-11-21, memcpy d2d 0.194 ms = 4.13 TB/s; CUB 0.262 ms = 73.6-74.2%):
//   first run, lag 1, HINT 1 (R evict_last, S evict_first): 256x16 tiles: 1 MB chunks 42%, 4 MB
//   63%, 8 MB 64%, 16 MB 64%, no hints 60%; 256x32 8 MB 69.8%; 128x32 66%. Missed by ~20 points.
//   Diagnostics: the same dataflow with every wait removed (wrong results) only reaches 74.5%, so
//   the waits are not the limit (with lag 2 and 256x32 tiles they cost ~2 points: v27 72.4%).
//   ncu, v27: DRAM read 564 MB for 400 MB of input (41% of the second reads miss L2: lines marked
//   evict_last stay and crowd out newer chunks), write 373 MB; CUB reads 400 / writes 375 MB.
//   HINT 3 (demote the lines to evict_normal after the second read, applypriority) fixes the
//   traffic exactly (ncu: 401.7 MB read, 374.3 MB written) yet is slower (66.5%): with the DRAM
//   traffic of a copy, the kernel still runs at 2.6 TB/s. The limit is per-CTA latency: two CTAs
//   per tile, each with a grab atomic, a flag or fence round trip and a dependent load, and 4
//   resident 256-thread CTAs per SM (64 registers). Best: v27 72.4%, at parity with CUB, below
//   the 80% bar. Kept as the record of the attempt; the library keeps CUB.
#include <cub/cub.cuh>
#include <cuda/std/functional>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

// ---- cache-hinted accesses ---------------------------------------------------------------------
__device__ __forceinline__ std::uint64_t l2_policy_evict_last() {
  std::uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ std::uint64_t l2_policy_evict_first() {
  std::uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ std::uint64_t l2_policy_evict_normal() {
  std::uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p));
  return p;
}
template <int HINT>
__device__ __forceinline__ float4 load4(const float4* p, std::uint64_t policy) {
  float4 v;
  if constexpr (HINT != 0)
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p), "l"(policy));
  else
    v = __ldg(p);
  return v;
}
template <int HINT>
__device__ __forceinline__ void store4(float4* p, float4 v) {
  if constexpr (HINT != 0) __stcs(p, v);
  else *p = v;
}

// ---- scratch -------------------------------------------------------------------------------
// ctrl[0]: item counter; ctrl[1 + c]: finished tiles of chunk c; ctrl[1 + C + c]: ready flag.
// incl[c]: (1 << 32 | bits) once chunk c's inclusive prefix is known. Zeroed every call.
struct Scratch {
  unsigned* ctrl = nullptr;
  unsigned long long* incl = nullptr;
  float* agg = nullptr;   // per tile
  float* offs = nullptr;  // per tile: exclusive prefix of everything before the tile
  long long max_tiles = 0, max_chunks = 0;
};
static Scratch g;

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long ld_acquire64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

template <int THREADS>
__device__ __forceinline__ float block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = 0;
  if (threadIdx.x < 32) {
    t = lane < THREADS / 32 ? red[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  }
  return t;  // valid in thread 0
}

// Inclusive warp scan of x (lane order).
__device__ __forceinline__ float warp_incl(float x) {
  const int lane = threadIdx.x % 32;
  for (int o = 1; o < 32; o <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  return x;
}

// Tile = THREADS * ITEMS floats; warp w owns the contiguous segment [w * 32 * ITEMS, ...) and
// loads it warp-striped: round j, lane l reads float4 number j * 32 + l (512 B per instruction).
template <int THREADS, int ITEMS, int CHUNK_TILES, int HINT, int LAG = 1, bool NOWAIT = false>
__global__ void __launch_bounds__(THREADS) scan_l2_kernel(const float* __restrict__ in, float* __restrict__ out,
                                                          long long n, long long tiles, long long chunks,
                                                          unsigned* ctrl, unsigned long long* incl,
                                                          float* agg, float* offs) {
  constexpr int TILE = THREADS * ITEMS, ROUNDS = ITEMS / 4, WARPS = THREADS / 32;
  static_assert(ITEMS % 4 == 0 && CHUNK_TILES % THREADS == 0 || CHUNK_TILES <= THREADS, "");
  __shared__ unsigned s_item;
  __shared__ float s_red[32];
  __shared__ float s_warp[WARPS];
  __shared__ bool s_last;

  if (threadIdx.x == 0) s_item = atomicAdd(ctrl, 1u);
  __syncthreads();
  const long long item = s_item;
  // Decode: groups of CHUNK_TILES slots: R(0) .. R(LAG-1), then R(LAG), S(0), R(LAG+1), S(1), ...
  const long long grp = item / CHUNK_TILES, t_in_chunk = item % CHUNK_TILES;
  bool reduce;
  long long chunk;
  if (grp < LAG) {
    reduce = true, chunk = grp;
  } else {
    const long long k = grp - LAG;
    reduce = (k % 2) == 0;
    chunk = reduce ? LAG + k / 2 : k / 2;
  }
  if (chunk >= chunks) return;
  const long long tile = chunk * CHUNK_TILES + t_in_chunk;
  if (tile >= tiles) return;
  const long long rest = tiles - chunk * CHUNK_TILES;
  const long long chunk_tiles = rest < CHUNK_TILES ? rest : CHUNK_TILES;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long base = tile * TILE + (long long)warp * 32 * ITEMS;
  const bool full = (tile + 1) * TILE <= n;
  float4 v[ROUNDS];
  const std::uint64_t pol = reduce ? (HINT == 2 ? l2_policy_evict_normal() : l2_policy_evict_last())
                                    : (HINT == 3 ? l2_policy_evict_normal() : l2_policy_evict_first());
#pragma unroll
  for (int j = 0; j < ROUNDS; ++j) {
    const long long e = base + (long long)(j * 32 + lane) * 4;
    if (full) {
      v[j] = load4<HINT>(reinterpret_cast<const float4*>(in + e), pol);
    } else {
      v[j].x = e + 0 < n ? in[e + 0] : 0.f;
      v[j].y = e + 1 < n ? in[e + 1] : 0.f;
      v[j].z = e + 2 < n ? in[e + 2] : 0.f;
      v[j].w = e + 3 < n ? in[e + 3] : 0.f;
    }
  }

  if (reduce) {
    float s = 0;
#pragma unroll
    for (int j = 0; j < ROUNDS; ++j) s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    const float total = block_sum<THREADS>(s, s_red);
    if (threadIdx.x == 0) {
      agg[tile] = total;
      __threadfence();
      const unsigned done = atomicAdd(&ctrl[1 + chunk], 1u);
      s_last = done + 1 == chunk_tiles;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    // Last CTA of the chunk: exclusive scan of the chunk's aggregates, in tile order.
    constexpr int PER = CHUNK_TILES > THREADS ? CHUNK_TILES / THREADS : 1;
    float a[PER];
    float mine = 0;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const long long t = (long long)threadIdx.x * PER + i;
      a[i] = t < chunk_tiles ? __ldcg(&agg[chunk * CHUNK_TILES + t]) : 0.f;
      mine += a[i];
    }
    float inc = warp_incl(mine);
    if (lane == 31) s_warp[warp] = inc;
    __syncthreads();
    float before = 0;
    for (int w = 0; w < warp; ++w) before += s_warp[w];
    float chunk_total = 0;
    for (int w = 0; w < WARPS; ++w) chunk_total += s_warp[w];
    float prev = 0;  // inclusive prefix of chunks < chunk
    if (chunk > 0 && !NOWAIT) {
      unsigned long long word;
      do { word = ld_acquire64(&incl[chunk - 1]); } while ((word >> 32) == 0);
      prev = __uint_as_float(unsigned(word));
    }
    float run = prev + before + (inc - mine);
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const long long t = (long long)threadIdx.x * PER + i;
      if (t < chunk_tiles) offs[chunk * CHUNK_TILES + t] = run;
      run += a[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      st_release64(&incl[chunk], (1ull << 32) | __float_as_uint(prev + chunk_total));
      st_release(&ctrl[1 + chunks + chunk], 1u);
    }
    return;
  }

  // Scan item.
  if constexpr (HINT == 3) {  // the R pass marked these lines evict_last: last use, demote them
    if (full && lane % 8 == 0)
#pragma unroll
      for (int j = 0; j < ROUNDS; ++j)
        asm volatile("applypriority.global.L2::evict_normal [%0], 128;" ::"l"(in + base + (long long)(j * 32 + lane) * 4));
  }
  if (threadIdx.x == 0 && !NOWAIT) {
    while (ld_acquire(&ctrl[1 + chunks + chunk]) == 0) {}
  }
  __syncthreads();
  float carry = 0;
  float wsum = 0;
#pragma unroll
  for (int j = 0; j < ROUNDS; ++j) {  // in-register scans, warp totals per round
    v[j].y += v[j].x, v[j].z += v[j].y, v[j].w += v[j].z;
    const float inc = warp_incl(v[j].w);
    const float ex = inc - v[j].w + carry;  // exclusive of this lane's float4 (within the segment)
    v[j].x += ex, v[j].y += ex, v[j].z += ex, v[j].w += ex;
    carry += __shfl_sync(0xffffffffu, inc, 31);
  }
  wsum = carry;
  if (lane == 0) s_warp[warp] = wsum;
  __syncthreads();
  float before = __ldcg(&offs[tile]);
  for (int w = 0; w < warp; ++w) before += s_warp[w];
#pragma unroll
  for (int j = 0; j < ROUNDS; ++j) {
    const long long e = base + (long long)(j * 32 + lane) * 4;
    float4 o = make_float4(v[j].x + before, v[j].y + before, v[j].z + before, v[j].w + before);
    if (full) {
      store4<HINT>(reinterpret_cast<float4*>(out + e), o);
    } else {
      if (e + 0 < n) out[e + 0] = o.x;
      if (e + 1 < n) out[e + 1] = o.y;
      if (e + 2 < n) out[e + 2] = o.z;
      if (e + 3 < n) out[e + 3] = o.w;
    }
  }
}

template <int THREADS, int ITEMS, int CHUNK_TILES, int HINT, int LAG = 1, bool NOWAIT = false>
static void scan_l2(const float* in, float* out, long long n, cudaStream_t s) {
  if (n == 0) return;
  constexpr long long TILE = THREADS * ITEMS;
  const long long tiles = (n + TILE - 1) / TILE, chunks = (tiles + CHUNK_TILES - 1) / CHUNK_TILES;
  CK(cudaMemsetAsync(g.ctrl, 0, (1 + 2 * chunks) * sizeof(unsigned), s));
  CK(cudaMemsetAsync(g.incl, 0, chunks * sizeof(unsigned long long), s));
  const long long items = CHUNK_TILES * (2LL * chunks + LAG);
  scan_l2_kernel<THREADS, ITEMS, CHUNK_TILES, HINT, LAG, NOWAIT>
      <<<unsigned(items), THREADS, 0, s>>>(in, out, n, tiles, chunks, g.ctrl, g.incl, g.agg, g.offs);
  CK(cudaGetLastError());
}

static void cub_scan(const float* in, float* out, long long n, cudaStream_t s) {
  static void* tmp = nullptr;
  static size_t bytes = 0;
  size_t need = 0;
  CK(cub::DeviceScan::InclusiveScan(nullptr, need, in, out, cuda::std::plus<float>{}, n, s));
  if (need > bytes) {
    if (tmp) CK(cudaFree(tmp));
    CK(cudaMalloc(&tmp, need));
    bytes = need;
  }
  CK(cub::DeviceScan::InclusiveScan(tmp, bytes, in, out, cuda::std::plus<float>{}, n, s));
}

struct Variant {
  const char* name;
  void (*fn)(const float*, float*, long long, cudaStream_t);
  double max_rel_err;
};

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
  std::sort(t.begin(), t.end());
  return 0.5f * (t[reps / 2 - 1] + t[reps / 2]);
}

int main() {
  const std::vector<long long> sizes = {0, 1, 17, 4097, 1000003, 100000000, 100000003};
  const long long n_max = 100000003, n_time = 100000000;
  Variant variants[] = {
      {"cub", cub_scan, 0},
      {"v27 256x32 c256 lag2 h1", scan_l2<256, 32, 256, 1, 2>, 0},
      {"v32 256x32 c256 lag2 h2", scan_l2<256, 32, 256, 2, 2>, 0},
      {"v33 256x32 c256 lag2 h3", scan_l2<256, 32, 256, 3, 2>, 0},
      {"v34 256x32 c128 lag2 h2", scan_l2<256, 32, 128, 2, 2>, 0},
      {"v35 256x32 c128 lag2 h3", scan_l2<256, 32, 128, 3, 2>, 0},
      {"v36 256x32 c128 lag1 h3", scan_l2<256, 32, 128, 3, 1>, 0},
      {"v37 256x32 c64 lag2 h3", scan_l2<256, 32, 64, 3, 2>, 0},
      {"v38 256x16 c256 lag2 h3", scan_l2<256, 16, 256, 3, 2>, 0},
      {"v39 256x64 c64 lag2 h3", scan_l2<256, 64, 64, 3, 2>, 0},
      {"v40 256x32 c128 lag2 h0", scan_l2<256, 32, 128, 0, 2>, 0},
  };
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (%d SMs, L2 %d MB)\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  float *d_in, *d_out;
  CK(cudaMalloc(&d_in, n_max * sizeof(float)));
  CK(cudaMalloc(&d_out, n_max * sizeof(float)));
  g.max_tiles = n_max / 1024 + 2;
  g.max_chunks = g.max_tiles;
  CK(cudaMalloc(&g.ctrl, (1 + 2 * g.max_chunks) * sizeof(unsigned)));
  CK(cudaMalloc(&g.incl, g.max_chunks * sizeof(unsigned long long)));
  CK(cudaMalloc(&g.agg, g.max_tiles * sizeof(float)));
  CK(cudaMalloc(&g.offs, g.max_tiles * sizeof(float)));

  if (const char* prof = std::getenv("SCAN_L2_PROFILE")) {  // one call of one variant, for ncu
    Variant& v = variants[std::atoi(prof)];
    std::printf("profiling %s\n", v.name);
    CK(cudaMemset(d_in, 0, n_max * sizeof(float)));
    v.fn(d_in, d_out, n_time, s);
    v.fn(d_in, d_out, n_time, s);
    CK(cudaStreamSynchronize(s));
    return 0;
  }
  std::mt19937_64 rng(777);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  bool ok = true;
  std::vector<float> h_in, h_out(n_max);
  std::vector<double> ref;
  for (long long n : sizes) {
    h_in.resize(n);
    ref.resize(n);
    double acc = 0;
    for (long long i = 0; i < n; ++i) ref[i] = acc += (h_in[i] = uni(rng));
    if (n) CK(cudaMemcpy(d_in, h_in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    for (Variant& v : variants) {
      if (v.max_rel_err < 0) continue;  // timing-only diagnostic (wrong results)
      CK(cudaMemset(d_out, 0xff, n_max * sizeof(float)));
      v.fn(d_in, d_out, n, s);
      CK(cudaStreamSynchronize(s));
      if (n) CK(cudaMemcpy(h_out.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
      double err = 0, mref = 0;
      for (long long i = 0; i < n; ++i) {
        const double e = std::fabs(double(h_out[i]) - ref[i]);
        if (!(e <= err)) err = e;
        mref = std::max(mref, std::fabs(ref[i]));
      }
      const double rel = n ? err / std::max(mref, 1e-30) : 0;
      const bool pass = rel <= 1e-4;
      std::printf("check %-24s n=%-10lld rel=%.3e %s\n", v.name, n, rel, pass ? "ok" : "FAIL");
      v.max_rel_err = std::max(v.max_rel_err, rel);
      ok = ok && pass;
    }
  }
  const double bytes = 8.0 * n_time;
  const float copy_ms = median_ms(
      [&] { CK(cudaMemcpyAsync(d_out, d_in, n_time * sizeof(float), cudaMemcpyDeviceToDevice, s)); }, s);
  const double copy_gbs = bytes / (copy_ms * 1e6);
  std::printf("\nn = 1e8 f32, median of 30; GB/s counts 8 bytes/element\n%-26s %9s %9s %7s\n", "variant", "ms",
              "GB/s", "%copy");
  std::printf("%-26s %9.4f %9.1f %7.1f\n", "memcpy d2d", copy_ms, copy_gbs, 100.0);
  for (Variant& v : variants) {
    const float ms = median_ms([&] { v.fn(d_in, d_out, n_time, s); }, s);
    const double gbs = bytes / (ms * 1e6);
    std::printf("%-26s %9.4f %9.1f %7.1f  err %.2e\n", v.name, ms, gbs, 100.0 * gbs / copy_gbs, v.max_rel_err);
  }
  if (!ok) std::printf("FAILED\n");
  return ok ? 0 : 1;
}
