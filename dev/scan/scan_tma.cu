// dev/scan/scan_tma.cu — v41–v49 (session 3): single-pass inclusive sum of f32 with big tiles held
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
//   nvcc -std=c++20 -O3 -Iinclude --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//     -o /tmp/scan_tma dev/scan/scan_tma.cu src/runtime/error.cpp
//   /tmp/scan_tma [n]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <cub/device/device_scan.cuh>

// The kernels are the library's (src/cuda/scan_bulk.cu, templated on the tile shape); this file
// is the sweep over shapes and the comparison with CUB that chose the library's default.
#include "../../src/cuda/scan_bulk.cu"

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

namespace sb = sixfold::parallel::cuda::detail;

namespace {

template <int TILE, int S>
struct Runner {
  using Shape = sb::BulkScanShape<TILE, S>;
  int sms = 0;
  Runner() {
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaFuncSetAttribute(sb::scan_bulk_kernel<Shape>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            int(Shape::kSmemBytes)));
  }
  void run(const float* in, float* out, long long n) { sb::run_bulk_scan<Shape>(in, out, n, sms, 0, "scan_tma"); }
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
void variant(const char* name, const std::vector<float>& hx, const float* in, float* out, long long n,
             double copy_gbps, double cub_err) {
  Runner<TILE, S> r;
  CK(cudaMemset(out, 0xff, n * 4));
  r.run(in, out, n);
  CK(cudaDeviceSynchronize());
  const double err = max_rel_err(hx, out, n);
  const float ms = median_ms([&] { r.run(in, out, n); });
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
  CK(cudaMalloc(&in, n * 4));
  CK(cudaMalloc(&out, n * 4));
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
    variant<16384, 3>("v41 tile 16384 x 3 slots", hx, in, out, n, copy_gbps, cub_err);
    variant<8192, 4>("v42 tile 8192 x 4 slots", hx, in, out, n, copy_gbps, cub_err);
    variant<8192, 6>("v43 tile 8192 x 6 slots", hx, in, out, n, copy_gbps, cub_err);
    variant<4096, 8>("v44 tile 4096 x 8 slots", hx, in, out, n, copy_gbps, cub_err);
    variant<4096, 12>("v45 tile 4096 x 12 slots", hx, in, out, n, copy_gbps, cub_err);
    variant<6144, 8>("v46 tile 6144 x 8 slots", hx, in, out, n, copy_gbps, cub_err);
    variant<7168, 7>("v47 tile 7168 x 7 slots", hx, in, out, n, copy_gbps, cub_err);
    variant<10240, 5>("v48 tile 10240 x 5 slots", hx, in, out, n, copy_gbps, cub_err);
    variant<12288, 4>("v49 tile 12288 x 4 slots", hx, in, out, n, copy_gbps, cub_err);
  }
  // Awkward sizes for the best-guess shape: tail only, one tile + tail, primes.
  for (long long m : {1LL, 4095LL, 16384LL, 16385LL, 1000003LL, 33554467LL}) {
    if (m > n) continue;
    Runner<8192, 6> r;
    CK(cudaMemset(out, 0xff, m * 4));
    r.run(in, out, m);
    CK(cudaDeviceSynchronize());
    std::vector<float> part(hx.begin(), hx.begin() + m);
    const double e = max_rel_err(part, out, m);
    std::printf("n = %-10lld v43 max rel err %.1e%s\n", m, e, e < 1e-4 ? "" : "  <-- WRONG");
  }
  CK(cudaFree(tmp));
  CK(cudaFree(in));
  CK(cudaFree(out));
  return 0;
}
