// dev/norm/probe_common.cuh — what the norm probes (fwd_probe.cu, hint_probe.cu) share: random
// bf16 rows filled on the device, a plain copy kernel, and per-call timing with CUDA events,
// alone or replayed from a CUDA graph (medians). Include after the CUDA and standard headers.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "../cuda_check.cuh"

// Random bf16 values in about [-4, 5) from a hash of the index and a seed.
__global__ void fill_random(std::uint16_t* x, std::int64_t count, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < count;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    std::uint32_t h = std::uint32_t(i) * 0x9e3779b9u ^ seed;
    h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
    const float f = float(h >> 8) * (9.0f / 16777216.0f) - 4.0f;
    x[i] = std::uint16_t(__float_as_uint(f) >> 16);
  }
}

// Plain 16-byte loads and stores, 4 in flight per thread, grid-stride (the LDG / STG copy).
__global__ void __launch_bounds__(256) copy_ldg(const uint4* x, uint4* y, std::int64_t count) {
  const std::int64_t stride = std::int64_t(gridDim.x) * 256 * 4;
  for (std::int64_t i = blockIdx.x * 1024 + threadIdx.x; i < count; i += stride) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (i + k * 256 < count) v[k] = x[i + k * 256];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (i + k * 256 < count) y[i + k * 256] = v[k];
  }
}

inline float bf16_to_float(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median over `reps` of events around f(i) (one call), after 3 untimed ones.
inline double per_call_us(const std::function<void(int)>& f, int reps, cudaStream_t st) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int i = 0; i < reps + 3; ++i) {
    CK(cudaEventRecord(a, st));
    f(i);
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 3) t.push_back(ms * 1e3);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return median(t);
}

// `calls` calls of f(i) captured in one graph; median over replays of the time per call.
inline double graph_us(const std::function<void(int)>& f, int calls, cudaStream_t st) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) f(i);
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  const double t = per_call_us([&](int) { CK(cudaGraphLaunch(ge, st)); }, 10, st);
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return t / calls;
}
