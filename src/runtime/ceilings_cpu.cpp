// CPU ceilings: copy bandwidth, f32 FMA rate and f32 exp rate, each on all OpenMP threads.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "sixfold/runtime/ceilings.hpp"
#include "sixfold/runtime/tensor.hpp"
#include "sixfold/runtime/vec_math.hpp"
#include "../ops/vec16.hpp"

namespace sixfold {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  return "unknown CPU";
}

// Copy with non-temporal stores where available (what a streaming kernel can reach), else memcpy.
void copy_chunk(float* dst, const float* src, std::int64_t n) {
#if defined(__AVX512F__)
  std::int64_t i = 0;
  for (; i < n && (reinterpret_cast<std::uintptr_t>(dst + i) % 64) != 0; ++i) dst[i] = src[i];
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
  _mm_sfence();
#else
  std::memcpy(dst, src, std::size_t(n) * sizeof(float));
#endif
}

double measure_copy_gbps() {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const std::int64_t bytes = std::max<std::int64_t>(std::int64_t(4) * std::max(l3, 0l), 512l << 20);
  const std::int64_t n = bytes / 4;
  auto src = allocate(Device::cpu(), bytes), dst = allocate(Device::cpu(), bytes);
  auto* s = static_cast<float*>(src.get());
  auto* d = static_cast<float*>(dst.get());
  // First touch by the threads that will copy (pages land near them), non-zero data.
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) { s[i] = float(i & 1023); d[i] = 0.f; }
  double best = 1e30;
  for (int rep = 0; rep < 6; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const std::int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
      copy_chunk(d + lo, s + lo, hi - lo);
    }
    if (rep > 0) best = std::min(best, seconds_since(t0));  // rep 0 warms up
  }
  return 2.0 * double(bytes) / best / 1e9;
}

double measure_fma_gflops() {
  // Independent chains of 16-lane vectors per thread hide the FMA latency on every x86 core we
  // target: 16 in zmm registers with AVX-512; 6 (12 ymm) elsewhere, where 16 would not fit in
  // the 16 registers (vec16.hpp).
  using v16 = detail::vf16;
#if defined(__AVX512F__)
  constexpr int kChains = 16;
#else
  constexpr int kChains = 6;
#endif
  const std::int64_t iters = 4'000'000;
  double best = 1e30;
  float sink = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : sink)
    {
      v16 acc[kChains];
      const v16 a = v16{} + 0.999999f, b = v16{} + 1e-7f;
      for (int c = 0; c < kChains; ++c) acc[c] = v16{} + float(omp_get_thread_num() + c);
      for (std::int64_t i = 0; i < iters / kChains; ++i)
#pragma GCC unroll 16
        for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
      v16 tot{};
      for (int c = 0; c < kChains; ++c) tot += acc[c];
      for (int l = 0; l < 16; ++l) sink += tot[l];
    }
    best = std::min(best, seconds_since(t0));
  }
  if (sink == 42.0f) std::fputs("", stderr);  // keep the work observable
  return double(omp_get_max_threads()) * double(iters / kChains) * kChains * 16 * 2 / best / 1e9;
}

double measure_exp_gops() {
  // exp over an L1-resident array, repeated: measures the arithmetic, not memory. exp_f32 on 16
  // lanes (vexp_f32): the scalar function in a loop was vectorized only where GCC can mask
  // (AVX-512); on an AVX2 host it read 0.56 G/s.
  constexpr int kN = 2048;
  const int reps = 20000;
  double best = 1e30;
  float sink = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : sink)
    {
      alignas(64) float x[kN], y[kN];
      for (int i = 0; i < kN; ++i) x[i] = -20.0f + 40.0f * float(i) / kN;
      for (int r = 0; r < reps; ++r) {
        for (int i = 0; i < kN; i += 16) detail::vstore_bytes(y + i, detail::vexp_f32(detail::vload_bytes<detail::vf16>(x + i)));
        x[r % kN] = y[(r * 7) % kN] * 1e-30f;  // a dependency the compiler cannot hoist
      }
      sink += y[kN / 3];
    }
    best = std::min(best, seconds_since(t0));
  }
  if (sink == 42.0f) std::fputs("", stderr);
  return double(omp_get_max_threads()) * double(reps) * kN / best / 1e9;
}

}  // namespace

CpuCeilings measure_cpu_ceilings() {
  CpuCeilings c;
  c.model = cpu_model();
  c.threads = omp_get_max_threads();
  c.copy_gbps = measure_copy_gbps();
  c.fma_gflops = measure_fma_gflops();
  c.exp_gops = measure_exp_gops();
  return c;
}

}  // namespace sixfold
