// dev/selective_scan/sweep_launch.cpp — times src/cuda/selective_scan.cu's fused kernel over its
// launch shapes (channels per warp Cw × warps per block W) on the bench shapes of the issue, f32,
// Mamba's configuration (input-dependent B/C, one group, D, z, delta_bias + softplus), and prints
// each against the exp and copy-bandwidth ceilings, for the kernel's compile-time variants
// (variant 0 = the library's; 2 = K = 8 steps per thread, 3 = 4 rounds per B/C stage instead of
// 8, 4 = the scan's width read at run time; see src/cuda/selective_scan.cu), with the largest
// difference
// from the CPU backend's output on a sample of it (the first and last 1M outputs; a
// correctness check at full size, relative to the sample's largest |out|).
//   sweep             everything
//   sweep --default   only the default launch (also links against older kernels: the entry
//                     point is the same)
//   sweep --once [I]  the default launch on shape I (default 0) once (for a profiler)
//
// Build and run on a GPU machine, after scripts/gpu_quick.sh sixfold (build-gpu/libsixfold.a):
//   g++ -std=c++20 -O2 -fopenmp -Iinclude -I/usr/local/cuda/include dev/selective_scan/sweep_launch.cpp
//       build-gpu/libsixfold.a -L/usr/local/cuda/lib64 -lcudart -lcublas -o /tmp/sweep && /tmp/sweep
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../../src/ops/selective_scan_entries.hpp"
#include "sixfold/runtime/ceilings.hpp"
#include "sixfold/runtime/tensor.hpp"

using namespace sixfold;

namespace {

struct Shape4 { std::int64_t batch, len, d, n; };

struct Array {  // host copy + device copy of one f32 input
  std::vector<float> host;
  std::shared_ptr<void> dev;
};

Array random_array(std::int64_t count, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> ud(lo, hi);
  Array a;
  a.host.resize(static_cast<std::size_t>(count));
  for (auto& x : a.host) x = ud(rng);
  a.dev = allocate(Device::cuda(0), count * 4);
  copy_bytes(a.dev.get(), Device::cuda(0), a.host.data(), Device::cpu(), count * 4);
  return a;
}

double time_ms(const SelectiveScanArgs& a, detail::SelectiveScanLaunch l) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) detail::selective_scan_cuda_launch(a, 0, {}, l);
  std::vector<float> ms;
  for (int i = 0; i < 11; ++i) {
    cudaEventRecord(e0);
    detail::selective_scan_cuda_launch(a, 0, {}, l);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (cudaGetLastError() != cudaSuccess) return NAN;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::vector<float> sample(const void* out, std::int64_t numel) {  // first and last 1M elements
  const std::int64_t m = std::min<std::int64_t>(numel, 1 << 20);
  std::vector<float> h(static_cast<std::size_t>(2 * m));
  copy_bytes(h.data(), Device::cpu(), out, Device::cuda(0), m * 4);
  copy_bytes(h.data() + m, Device::cpu(), static_cast<const float*>(out) + (numel - m), Device::cuda(0), m * 4);
  return h;
}

double rel_diff(const std::vector<float>& got, const std::vector<float>& ref) {
  double diff = 0, mx = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, double(std::fabs(got[i] - ref[i])));
    mx = std::max(mx, double(std::fabs(ref[i])));
    if (!std::isfinite(got[i])) diff = INFINITY;
  }
  return diff / mx;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool once = mode == "--once", only_default = mode == "--default";
  const int once_shape = once && argc > 2 ? std::atoi(argv[2]) : 0;
  if (!cuda_available()) { std::fprintf(stderr, "no GPU\n"); return 1; }
  double bw = 1, ex = 1;  // --once (profiling) needs no ceilings
  if (!once) {
    const Ceilings ceil = machine_ceilings(true);
    bw = ceil.gpu->copy_gbps * 1e9;
    ex = ceil.gpu->exp_gops * 1e9;
    std::printf("%s: copy %.0f GB/s, exp %.0f G/s\n", ceil.gpu->name.c_str(), bw / 1e9, ex / 1e9);
  }
  std::mt19937 rng(12345);
  int shape_index = -1;
  for (Shape4 s : {Shape4{1, 2048, 4096, 16}, Shape4{8, 4096, 2048, 16}, Shape4{4, 8192, 1536, 64}}) {
    if (once && ++shape_index != once_shape) continue;
    const std::int64_t numel = s.batch * s.d * s.len, bc = s.batch * s.n * s.len;
    Array u = random_array(numel, -2, 2, rng), dt = random_array(numel, -5, 0, rng), z = random_array(numel, -3, 3, rng),
          B = random_array(bc, -1, 1, rng), C = random_array(bc, -1, 1, rng), A = random_array(s.d * s.n, -8, -0.5, rng),
          D = random_array(s.d, -1, 1, rng), bias = random_array(s.d, -1, 1, rng);
    auto out = allocate(Device::cuda(0), numel * 4);
    SelectiveScanArgs a;
    a.batch = s.batch; a.d = s.d; a.n = s.n; a.len = s.len; a.groups = 1;
    for (auto* st : {a.u_stride, a.delta_stride, a.z_stride, a.out_stride}) { st[0] = s.d * s.len; st[1] = s.len; }
    for (auto* st : {a.B_stride, a.C_stride}) { st[0] = s.n * s.len; st[1] = s.n * s.len; st[2] = s.len; }
    a.var_B = a.var_C = true;
    a.delta_softplus = true;
    SelectiveScanArgs h = a;  // the CPU backend's arguments: the same inputs on the host
    std::vector<float> want(static_cast<std::size_t>(numel));
    h.u = u.host.data(); h.delta = dt.host.data(); h.z = z.host.data(); h.out = want.data();
    h.A = A.host.data(); h.D = D.host.data(); h.delta_bias = bias.host.data(); h.B = B.host.data(); h.C = C.host.data();
    a.u = u.dev.get(); a.delta = dt.dev.get(); a.z = z.dev.get(); a.out = out.get();
    a.A = static_cast<const float*>(A.dev.get()); a.D = static_cast<const float*>(D.dev.get());
    a.delta_bias = static_cast<const float*>(bias.dev.get()); a.B = B.dev.get(); a.C = C.dev.get();
    if (once) {
      detail::selective_scan_cuda_launch(a, 0, {}, {});
      synchronize(Device::cuda(0));
      return 0;
    }
    detail::selective_scan_cpu(h);
    std::vector<float> ref(static_cast<std::size_t>(2 * std::min<std::int64_t>(numel, 1 << 20)));
    {
      const std::size_t m = ref.size() / 2;
      std::copy(want.begin(), want.begin() + m, ref.begin());
      std::copy(want.end() - m, want.end(), ref.begin() + m);
    }
    const double bytes = 4.0 * (4.0 * double(numel) + 2.0 * double(bc));
    const double floor_ms = 1e3 * std::max(bytes / bw, double(numel) * double(s.n) / ex);
    const double def_ms = time_ms(a, {});
    std::printf("b%lld L%lld d%lld n%lld: floor %.4f ms (mem %.4f, exp %.4f); default %.4f ms = %.1f%% of roofline, "
                "diff vs CPU %.1e\n",
                (long long)s.batch, (long long)s.len, (long long)s.d, (long long)s.n, floor_ms, 1e3 * bytes / bw,
                1e3 * double(numel) * double(s.n) / ex, def_ms, 100.0 * floor_ms / def_ms,
                rel_diff(sample(out.get(), numel), ref));
    std::fflush(stdout);
    if (only_default) continue;
    for (int v : {0, 2, 3, 4})
      for (int cw : {1, 2, 4, 8})
        for (int w : {4, 8}) {
          try {
            cudaMemset(out.get(), 0xff, numel * 4);  // NaN: every output must be written again
            const double ms = time_ms(a, {cw, w, v});
            std::printf("  variant %d cw %2d warps %d: %.4f ms  %.1f%% of roofline  %.0f GB/s  diff %.1e\n", v, cw, w,
                        ms, 100.0 * floor_ms / ms, bytes / (ms * 1e-3) / 1e9, rel_diff(sample(out.get(), numel), ref));
          } catch (const std::exception& e) {
            std::printf("  variant %d cw %2d warps %d: %s\n", v, cw, w, e.what());
          }
        }
    std::fflush(stdout);
  }
  return 0;
}
