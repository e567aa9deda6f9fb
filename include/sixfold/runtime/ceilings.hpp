// sixfold/runtime/ceilings.hpp — the machine's measured limits, the denominators of every
// "% of roofline" that sixfold reports.
//
// Datasheet numbers are not used: each ceiling is measured on the running machine, once, and
// cached in $XDG_CACHE_HOME/sixfold (or ~/.cache/sixfold) under a key naming the CPU model,
// core count and GPU, so a different machine never reads another's numbers.
//   CPU: copy bandwidth (all cores, buffers 4× the last-level cache, bytes read + written),
//        peak f32 FMA rate (all cores, independent vector chains), f32 exp rate (sixfold's
//        vector exp on all cores).
//   GPU: device-to-device copy bandwidth (read + write), f32 FMA rate, exp rate (ex2.approx on
//        the special-function unit), cuBLAS bf16 GEMM rate at 8192³ on random data.
#pragma once

#include <optional>
#include <string>

namespace sixfold {

struct CpuCeilings {
  std::string model;       // /proc/cpuinfo "model name"
  int threads = 0;         // OpenMP threads used
  double copy_gbps = 0;    // GB/s, bytes read + bytes written
  double fma_gflops = 0;   // f32 GFLOP/s (an FMA counts 2)
  double exp_gops = 0;     // f32 exp per second, in units of 1e9
};

struct GpuCeilings {
  std::string name;          // cudaDeviceProp::name
  int sms = 0;
  double copy_gbps = 0;      // GB/s, read + write
  double fma_tflops = 0;     // f32 TFLOP/s
  double exp_gops = 0;       // exp per second / 1e9 (SFU ex2)
  double bf16_gemm_tflops = 0;
};

struct Ceilings {
  std::optional<CpuCeilings> cpu;
  std::optional<GpuCeilings> gpu;
};

CpuCeilings measure_cpu_ceilings();
GpuCeilings measure_gpu_ceilings(int device = 0);  // throws sixfold::Error without CUDA

// Cached ceilings of this machine; measured (and cached) when missing or when `remeasure`.
// The GPU part is filled only when `with_gpu` and a CUDA device is usable.
Ceilings machine_ceilings(bool with_gpu, bool remeasure = false);

// Where the cache file for this machine lives.
std::string ceilings_cache_path();

}  // namespace sixfold
