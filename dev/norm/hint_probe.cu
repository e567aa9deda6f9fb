// dev/norm/hint_probe.cu — session 18: does the way x is read and y written (L2 eviction
// priority, streaming, one pass or two) move an RMSNorm row kernel? At 16384×8192 bf16
// torch.compile's kernel (x read twice: evict-last, then evict-first; plain stores) ran 3–4%
// faster than sixfold's rms_norm with the same DRAM bytes (dev/norm/README.md, fv13).
//
// Small kernels, the knobs as template arguments: one block a row (rms_hint) with
//   Threads  128, 256 or 512 (at n = 8192: 8, 4 or 2 packs of 8 a thread)
//   LX       how x is read: 0 plain, 1 L2 evict-last (createpolicy + .L2::cache_hint),
//            2 L2 evict-first, 3 ld.global.cs (streaming)
//   SY       how y is written: 0 plain, 1 st.global.cs, 2 L2 evict-first hint
//   Two      x read twice: first pass (LX) for Σx², second pass evict-first for the rewrite
// and, for n = 1024, a warp a row with 1–8 rows a block (rms_warp_rows). Each is timed per call
// in a 20-call CUDA graph beside the library's rms_norm, cudaMemcpyAsync of the same bytes and a
// plain copy kernel, two rounds, on x and y rotating through slots: PROBE_SLOTS=cli as `sixfold
// bench` does, otherwise (default) ≥ 4 slots and 1 GiB of x, so that no L2 line of an x can
// survive until its next call. Each variant's output is compared with the library's (random
// weight, so a wrong weight index shows). Shapes 65536×1024, 16384×8192, 4096×4096. Not part of
// the build:
//   nvcc -std=c++20 -O2 -gencode=arch=compute_90a,code=sm_90a -Iinclude dev/norm/hint_probe.cu \
//     BUILD/libsixfold.a -lcublas -lgomp -o hint_probe
// (The "%" column divides by a 1 GiB cudaMemcpyAsync in a graph, which runs at ~2.7 TB/s there,
// not the 4.27 TB/s of a copy kernel: compare the µs columns, not the %.)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../../src/cuda/pack.cuh"
#include "probe_common.cuh"
#include "sixfold/ops/norm.hpp"
#include "sixfold/parallel/cuda.cuh"
#include "sixfold/runtime/tensor.hpp"

using namespace sixfold;

namespace {

using parallel::cuda::l2_evict_first;
using parallel::cuda::l2_evict_last;

template <int LX>
__device__ __forceinline__ uint4 load_x(const uint4* p, std::uint64_t pol) {
  if constexpr (LX == 1 || LX == 2) return parallel::cuda::load_l2_hint(p, pol);
  uint4 v;
  if constexpr (LX == 0)
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else
    asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

template <int SY>
__device__ __forceinline__ void store_y(uint4* p, uint4 v, std::uint64_t pol) {
  if constexpr (SY == 0)
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  else if constexpr (SY == 1)
    asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  else
    parallel::cuda::store_l2_hint(p, v, pol);
}

using BfPack = detail::Pack<__nv_bfloat16, 8>;  // 8 bf16 in one uint4 (src/cuda/pack.cuh)

__device__ __forceinline__ void unpack(uint4 q, float (&f)[8]) { BfPack{q}.unpack(f); }

// The rewrite of one pack: x·r·w, rounded to bf16.
__device__ __forceinline__ uint4 scaled(uint4 q, uint4 wq, float r) {
  float f[8], g[8];
  unpack(q, f);
  unpack(wq, g);
#pragma unroll
  for (int k = 0; k < 8; ++k) f[k] = f[k] * r * g[k];
  return BfPack::pack(f).raw;
}

template <int N, int Threads, int LX, int SY, bool Two>
__global__ void __launch_bounds__(Threads) rms_hint(const uint4* x, const uint4* w, uint4* y, float eps) {
  constexpr int P = N / 8 / Threads;  // 16-byte packs a thread
  static_assert(P >= 1 && N % (8 * Threads) == 0);
  __shared__ float red[Threads / 32];
  const int t = threadIdx.x;
  const uint4* xr = x + std::int64_t(blockIdx.x) * (N / 8);
  uint4* yr = y + std::int64_t(blockIdx.x) * (N / 8);
  const std::uint64_t pol = LX == 1 ? l2_evict_last() : l2_evict_first();
  const std::uint64_t pol_y = l2_evict_first();
  uint4 q[P], wq[P];
#pragma unroll
  for (int p = 0; p < P; ++p) wq[p] = __ldg(w + p * Threads + t);
#pragma unroll
  for (int p = 0; p < P; ++p) q[p] = load_x<LX>(xr + p * Threads + t, pol);
  float part[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    float f[8];
    unpack(q[p], f);
    part[p] = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) part[p] = fmaf(f[k], f[k], part[p]);
  }
  float ss = 0.f;
#pragma unroll
  for (int p = 0; p < P; ++p) ss += part[p];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((t & 31) == 0) red[t >> 5] = ss;
  __syncthreads();
  float tot = 0.f;
#pragma unroll
  for (int i = 0; i < Threads / 32; ++i) tot += red[i];
  const float r = 1.0f / sqrtf(tot / float(N) + eps);
  if constexpr (Two) {  // the rewrite reads x again, evict-first (an L2 hit where pass 1 kept it)
    const std::uint64_t pf = l2_evict_first();
#pragma unroll
    for (int p = 0; p < P; ++p) q[p] = load_x<2>(xr + p * Threads + t, pf);
  }
#pragma unroll
  for (int p = 0; p < P; ++p) store_y<SY>(yr + p * Threads + t, scaled(q[p], wq[p], r), pol_y);
}

// Rows of N = 32·P·8 elements, one warp each, Rows warps (rows) a block.
template <int N, int Rows, int LX>
__global__ void __launch_bounds__(32 * Rows) rms_warp_rows(const uint4* x, const uint4* w, uint4* y, float eps) {
  constexpr int P = N / 8 / 32;
  const int lane = threadIdx.x & 31;
  const std::int64_t row = std::int64_t(blockIdx.x) * Rows + (threadIdx.x >> 5);
  const uint4* xr = x + row * (N / 8);
  uint4* yr = y + row * (N / 8);
  const std::uint64_t pol = l2_evict_last();
  uint4 q[P], wq[P];
#pragma unroll
  for (int p = 0; p < P; ++p) wq[p] = __ldg(w + p * 32 + lane);
#pragma unroll
  for (int p = 0; p < P; ++p) q[p] = load_x<LX>(xr + p * 32 + lane, pol);
  float ss = 0.f;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    float f[8];
    unpack(q[p], f);
#pragma unroll
    for (int k = 0; k < 8; ++k) ss = fmaf(f[k], f[k], ss);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float r = 1.0f / sqrtf(ss / float(N) + eps);
#pragma unroll
  for (int p = 0; p < P; ++p) store_y<0>(yr + p * 32 + lane, scaled(q[p], wq[p], r), 0);
}

struct Variant {
  std::string name;
  std::function<void(const void*, const void*, void*, std::int64_t, cudaStream_t)> launch;
};

template <int N, int Threads, int LX, int SY, bool Two>
Variant variant(const char* name) {
  return {name, [](const void* x, const void* w, void* y, std::int64_t rows, cudaStream_t st) {
            rms_hint<N, Threads, LX, SY, Two><<<unsigned(rows), Threads, 0, st>>>(
                static_cast<const uint4*>(x), static_cast<const uint4*>(w), static_cast<uint4*>(y), 1e-5f);
          }};
}

template <int N, int Rows, int LX>
Variant warp_variant(const char* name) {
  return {name, [](const void* x, const void* w, void* y, std::int64_t rows, cudaStream_t st) {
            rms_warp_rows<N, Rows, LX><<<unsigned(rows / Rows), 32 * Rows, 0, st>>>(
                static_cast<const uint4*>(x), static_cast<const uint4*>(w), static_cast<uint4*>(y), 1e-5f);
          }};
}

template <int N>
std::vector<Variant> variants() {
  if constexpr (N == 1024)
    return {
        warp_variant<N, 1, 0>("warp rows x1 plain"),
        warp_variant<N, 1, 1>("warp rows x1 evict_last"),
        warp_variant<N, 2, 1>("warp rows x2 evict_last"),
        warp_variant<N, 4, 1>("warp rows x4 evict_last"),
        warp_variant<N, 8, 1>("warp rows x8 evict_last"),
        variant<N, 128, 1, 0, false>("t128 x evict_last"),
        variant<N, 64, 1, 0, false>("t64 x evict_last"),
        variant<N, 128, 1, 0, true>("t128 two-pass el/ef"),
    };
  else
  return {
      variant<N, 128, 0, 0, false>("t128 plain"),
      variant<N, 128, 1, 0, false>("t128 x evict_last"),
      variant<N, 256, 0, 0, false>("t256 plain"),
      variant<N, 256, 1, 0, false>("t256 x evict_last"),
      variant<N, 256, 2, 0, false>("t256 x evict_first"),
      variant<N, 256, 3, 0, false>("t256 x .cs"),
      variant<N, 256, 0, 1, false>("t256 y .cs"),
      variant<N, 256, 0, 2, false>("t256 y evict_first"),
      variant<N, 256, 2, 1, false>("t256 x ef, y .cs"),
      variant<N, 512, 0, 0, false>("t512 plain"),
      variant<N, 256, 1, 0, true>("t256 two-pass el/ef"),
      variant<N, 512, 1, 0, true>("t512 two-pass el/ef"),
      variant<N, 512, 0, 0, true>("t512 two-pass plain/ef"),
  };
}

}  // namespace

int main() {
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const Stream stream{st};
  const std::size_t big = std::size_t(1) << 30;
  void *p, *q;
  CK(cudaMalloc(&p, big));
  CK(cudaMalloc(&q, big));
  CK(cudaMemset(p, 1, big));
  const auto big_copy = [&](int) { CK(cudaMemcpyAsync(q, p, big, cudaMemcpyDeviceToDevice, st)); };
  const double big_us = graph_us(big_copy, 5, st);
  const double ceil_gbps = 2.0 * double(big) / big_us / 1e3;
  CK(cudaFree(p));
  CK(cudaFree(q));
  std::printf("copy 1 GiB in a graph: %.1f us = %.0f GB/s (the ceiling)\n", big_us, ceil_gbps);
  std::printf("%-26s %-11s %9s %7s   (round 1 / round 2; %% = bytes / ceiling over time)\n", "variant", "shape",
              "graph_us", "%");
  struct Shape { std::int64_t rows, n; };
  const Shape shapes[] = {{65536, 1024}, {16384, 8192}, {4096, 4096}};
  std::uint32_t seed = 11;
  for (const Shape sh : shapes) {
    const std::int64_t numel = sh.rows * sh.n;
    const std::size_t bytes = std::size_t(numel) * 2;
    // x and y rotate through slots: PROBE_SLOTS=cli as `sixfold bench` (enough sets for twice a
    // 50 MB L2: one at 16384x8192, two at 4096x4096), else at least 4 and 1 GiB of x (an x read
    // again only after 1 GiB of other traffic: no L2 line of it can survive between its calls).
    const char* mode = std::getenv("PROBE_SLOTS");
    const bool cli = mode && std::strcmp(mode, "cli") == 0;
    const int slots = cli ? int(std::clamp<std::int64_t>((std::int64_t(100) << 20) / std::int64_t(2 * bytes) + 1, 1, 8))
                          : int(std::clamp<std::int64_t>((std::int64_t(1) << 30) / std::int64_t(bytes), 4, 32));
    std::printf("%s: %d slots of x and y\n", cli ? "cli slots" : "many slots", slots);
    std::vector<void*> xs(static_cast<std::size_t>(slots)), ys(static_cast<std::size_t>(slots));
    for (int s = 0; s < slots; ++s) {
      CK(cudaMalloc(&xs[std::size_t(s)], bytes));
      CK(cudaMalloc(&ys[std::size_t(s)], bytes));
      fill_random<<<1024, 256>>>(static_cast<std::uint16_t*>(xs[std::size_t(s)]), numel, seed++);
    }
    void* w;
    CK(cudaMalloc(&w, std::size_t(sh.n) * 2));
    fill_random<<<64, 256>>>(static_cast<std::uint16_t*>(w), sh.n, seed++);
    CK(cudaGetLastError());
    const Device dev = Device::cuda(0);
    const auto view = [&](void* ptr) { return TensorView::contiguous(ptr, DType::bf16, {sh.rows, sh.n}, dev); };
    const TensorView tw = TensorView::contiguous(w, DType::bf16, {sh.n}, dev);
    char label[32];
    std::snprintf(label, sizeof label, "%lldx%lld", (long long)sh.rows, (long long)sh.n);
    const double floor_us = 2.0 * double(bytes) / ceil_gbps / 1e3;
    std::vector<Variant> vs = sh.n == 8192 ? variants<8192>() : sh.n == 4096 ? variants<4096>() : variants<1024>();
    std::vector<std::pair<std::string, std::function<void(int)>>> rows;
    rows.push_back({"library rms_norm", [&](int i) {
                      rms_norm(view(xs[std::size_t(i % slots)]), tw, view(ys[std::size_t(i % slots)]), {1e-5f}, stream);
                    }});
    rows.push_back({"cudaMemcpyAsync", [&](int i) {
                      CK(cudaMemcpyAsync(ys[std::size_t(i % slots)], xs[std::size_t(i % slots)], bytes,
                                         cudaMemcpyDeviceToDevice, st));
                    }});
    rows.push_back({"copy kernel", [&](int i) {
                      copy_ldg<<<132 * 8, 256, 0, st>>>(static_cast<const uint4*>(xs[std::size_t(i % slots)]),
                                                       static_cast<uint4*>(ys[std::size_t(i % slots)]),
                                                       std::int64_t(bytes / 16));
                    }});
    for (const Variant& v : vs)
      rows.push_back({v.name, [&, launch = v.launch](int i) {
                        launch(xs[std::size_t(i % slots)], w, ys[std::size_t(i % slots)], sh.rows, st);
                      }});
    std::vector<std::vector<double>> t(rows.size());
    for (int round = 0; round < 2; ++round)
      for (std::size_t k = 0; k < rows.size(); ++k) t[k].push_back(graph_us(rows[k].second, 20, st));
    for (std::size_t k = 0; k < rows.size(); ++k)
      std::printf("%-26s %-11s %9.2f %9.2f %7.1f %7.1f\n", rows[k].first.c_str(), label, t[k][0], t[k][1],
                  100 * floor_us / t[k][0], 100 * floor_us / t[k][1]);
    // Agreement with the library on slot 0: max |v - lib| / max(1, |lib|).
    std::vector<std::uint16_t> a(static_cast<std::size_t>(numel)), b(static_cast<std::size_t>(numel));
    rms_norm(view(xs[0]), tw, view(ys[0]), {1e-5f}, stream);
    CK(cudaMemcpyAsync(a.data(), ys[0], bytes, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    for (const Variant& v : vs) {
      CK(cudaMemsetAsync(ys[0], 0xff, bytes, st));
      v.launch(xs[0], w, ys[0], sh.rows, st);
      CK(cudaMemcpyAsync(b.data(), ys[0], bytes, cudaMemcpyDeviceToHost, st));
      CK(cudaStreamSynchronize(st));
      double worst = 0;
      for (std::size_t e = 0; e < a.size(); ++e) {
        const float fa = bf16_to_float(a[e]), fb = bf16_to_float(b[e]);
        const double d = std::isnan(fb) ? 1e9 : double(std::fabs(fa - fb)) / std::max(1.0, double(std::fabs(fa)));
        worst = std::max(worst, d);
      }
      std::printf("  %s %s: max |v - library| / max(1, |y|) = %.3g (bf16 eps 0.0078)\n", v.name.c_str(), label, worst);
    }
    for (int s = 0; s < slots; ++s) {
      CK(cudaFree(xs[std::size_t(s)]));
      CK(cudaFree(ys[std::size_t(s)]));
    }
    CK(cudaFree(w));
  }
  CK(cudaGetLastError());
  return 0;
}
