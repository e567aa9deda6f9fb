// dev/norm/copy_ceiling.cu — what a plain device copy of a norm's bytes reaches at each bench
// size, with the destination fixed (as the norm bench had it before session 16, and as
// fwd_probe.cu's copy column still has it) and rotating with the source (as the bench has it now).
// The forward norms read x once and write y once, so a copy of x's bytes is their ceiling at that
// size; the 1 GiB copy the CLI reports is the ceiling at no size in particular.
//
//   nvcc -std=c++20 -O2 -gencode=arch=compute_90a,code=sm_90a dev/norm/copy_ceiling.cu -o copy_ceiling
//   ./copy_ceiling
//
// Two copies: cudaMemcpyAsync and a grid-stride kernel of 16-byte loads and stores (the access
// pattern of the norm kernels). Each timed per call (events around 40 calls) and from a CUDA
// graph of 20 calls replayed (time per call). Sources (and rotating destinations) rotate through
// copies totalling > 2x the L2.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__global__ void copy16(const uint4* __restrict__ src, uint4* __restrict__ dst, std::int64_t n) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride * 4) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (i + k * stride < n) v[k] = src[i + k * stride];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (i + k * stride < n) dst[i + k * stride] = v[k];
  }
}

double per_call_us(const std::function<void(int)>& f, int calls, cudaStream_t st) {
  for (int i = 0; i < 4; ++i) f(i);
  cudaEvent_t a, b;
  ok(cudaEventCreate(&a), "event");
  ok(cudaEventCreate(&b), "event");
  std::vector<float> ms;
  for (int rep = 0; rep < 5; ++rep) {
    ok(cudaEventRecord(a, st), "record");
    for (int i = 0; i < calls; ++i) f(i);
    ok(cudaEventRecord(b, st), "record");
    ok(cudaEventSynchronize(b), "sync");
    float t = 0;
    ok(cudaEventElapsedTime(&t, a, b), "elapsed");
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return 1e3 * ms[ms.size() / 2] / calls;
}

double graph_us(const std::function<void(int)>& f, int calls, cudaStream_t st) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  ok(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), "capture");
  for (int i = 0; i < calls; ++i) f(i);
  ok(cudaStreamEndCapture(st, &g), "capture");
  ok(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  const double us = per_call_us([&](int) { ok(cudaGraphLaunch(ge, st), "launch"); }, 10, st) / calls;
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return us;
}

}  // namespace

int main() {
  cudaStream_t st;
  ok(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  int l2 = 0, sms = 0;
  ok(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0), "attr");
  ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attr");
  const std::size_t big = std::size_t(1) << 30;
  void *p, *q;
  ok(cudaMalloc(&p, big), "malloc");
  ok(cudaMalloc(&q, big), "malloc");
  ok(cudaMemset(p, 1, big), "memset");
  const double big_us =
      per_call_us([&](int) { ok(cudaMemcpyAsync(q, p, big, cudaMemcpyDeviceToDevice, st), "copy"); }, 10, st);
  const double ceil = 2.0 * double(big) / big_us / 1e3;  // GB/s, read + write
  ok(cudaFree(p), "free");
  ok(cudaFree(q), "free");
  std::printf("L2 %d MB, %d SMs; 1 GiB cudaMemcpyAsync: %.0f GB/s (read + write) = 100%%\n", l2 >> 20, sms,
              ceil);
  std::printf("%-10s %6s %-8s %-9s %10s %10s %8s %8s\n", "bytes", "slots", "dst", "how", "call_us", "graph_us",
              "call%", "graph%");
  const std::size_t sizes[] = {std::size_t(8) << 20, std::size_t(32) << 20, std::size_t(128) << 20,
                               std::size_t(256) << 20};
  for (const std::size_t bytes : sizes) {
    const int slots = int(std::clamp<std::size_t>(2 * std::size_t(l2) / bytes + 1, 1, 32));
    std::vector<void*> src(std::size_t(slots), nullptr), dst(std::size_t(slots), nullptr);
    for (int s = 0; s < slots; ++s) {
      ok(cudaMalloc(&src[std::size_t(s)], bytes), "malloc");
      ok(cudaMalloc(&dst[std::size_t(s)], bytes), "malloc");
      ok(cudaMemset(src[std::size_t(s)], s, bytes), "memset");
    }
    const std::int64_t n16 = std::int64_t(bytes / 16);
    const int blocks = sms * 8;
    for (const bool rotate : {false, true}) {
      for (const bool kernel : {false, true}) {
        const auto f = [&](int i) {
          const void* s = src[std::size_t(i % slots)];
          void* d = dst[rotate ? std::size_t(i % slots) : 0];
          if (kernel)
            copy16<<<blocks, 256, 0, st>>>(static_cast<const uint4*>(s), static_cast<uint4*>(d), n16);
          else
            ok(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, st), "copy");
        };
        const double call = per_call_us(f, 40, st), graph = graph_us(f, 20, st);
        const double floor_us = 2.0 * double(bytes) / ceil / 1e3;
        std::printf("%-10zu %6d %-8s %-9s %10.2f %10.2f %7.1f%% %7.1f%%\n", bytes, slots,
                    rotate ? "rotating" : "fixed", kernel ? "kernel" : "memcpy", call, graph,
                    100.0 * floor_us / call, 100.0 * floor_us / graph);
      }
    }
    for (int s = 0; s < slots; ++s) {
      ok(cudaFree(src[std::size_t(s)]), "free");
      ok(cudaFree(dst[std::size_t(s)]), "free");
    }
  }
  ok(cudaGetLastError(), "kernels");
  return 0;
}
