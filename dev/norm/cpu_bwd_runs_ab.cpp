// dev/norm/cpu_bwd_runs_ab.cpp — in-process A/B of the CPU rms / layer backward (bf16, saved
// statistics): calls alternate between the default path and SIXFOLD_NORM_CPU_SWEEP=1 (the run
// sweep), inputs rotating over three copies; prints the median and first-quartile times of each.
// Build: g++ -std=c++20 -O2 -fopenmp -Iinclude dev/norm/cpu_bwd_runs_ab.cpp build-cpu/libsixfold.a
// Run: ./a.out ROWS N LAYER(0|1) [REPS]   (session 35, docs/perf/norm.md)
#include <sixfold/ops/norm.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
using namespace sixfold;
int main(int argc, char** argv) {
  const std::int64_t rows = std::atoll(argv[1]), n = std::atoll(argv[2]);
  const int layer = std::atoi(argv[3]), reps = argc > 4 ? std::atoi(argv[4]) : 20;
  const std::size_t el = std::size_t(rows * n);
  auto alloc = [](std::size_t b) { return static_cast<std::uint16_t*>(std::aligned_alloc(64, (b + 63) / 64 * 64)); };
  constexpr int K = 3;
  std::uint16_t *x[K], *dy[K], *dx[K];
  std::uint16_t* w = alloc(n * 2);
  std::mt19937 g(1);
  for (int k = 0; k < K; ++k) {
    x[k] = alloc(el * 2), dy[k] = alloc(el * 2), dx[k] = alloc(el * 2);
    for (std::size_t i = 0; i < el; ++i) x[k][i] = 0x3f80 + (g() & 0x7f), dy[k][i] = 0x3f00 + (g() & 0xff), dx[k][i] = 0;
  }
  for (std::int64_t i = 0; i < n; ++i) w[i] = 0x3f80 + (g() & 0x7f);
  std::vector<float> dw(n), db(n), mean(rows), rstd(rows, 1.0f);
  auto tv = [&](void* p) { return TensorView::contiguous(p, DType::bf16, {rows, n}); };
  NormStats st;
  st.rstd = TensorView::contiguous(rstd.data(), DType::f32, {rows});
  if (layer) st.mean = TensorView::contiguous(mean.data(), DType::f32, {rows});
  const auto tw = TensorView::contiguous(w, DType::bf16, {n});
  const auto tdw = TensorView::contiguous(dw.data(), DType::f32, {n}), tdb = TensorView::contiguous(db.data(), DType::f32, {n});
  std::vector<double> t[2];
  for (int r = 0; r < 2 * reps + 2; ++r) {
    const int m = r & 1, k = r % K;
    if (m) setenv("SIXFOLD_NORM_CPU_SWEEP", "1", 1); else unsetenv("SIXFOLD_NORM_CPU_SWEEP");
    const auto t0 = std::chrono::steady_clock::now();
    if (layer) layer_norm_backward(tv(dy[k]), tv(x[k]), tw, tv(dx[k]), tdw, tdb, {1e-5f}, {}, st);
    else rms_norm_backward(tv(dy[k]), tv(x[k]), tw, tv(dx[k]), tdw, {1e-5f}, {}, st);
    if (r >= 2) t[m].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  for (auto& v : t) std::sort(v.begin(), v.end());
  const auto gbs = [&](double ms) { return 6.0 * el / ms / 1e6; };
  std::printf("%lldx%lld %s  new %.3f ms (%.1f GB/s, q1 %.3f)  old %.3f ms (%.1f GB/s, q1 %.3f)  old/new %.3f\n", (long long)rows, (long long)n,
              layer ? "layer" : "rms", t[0][reps / 2], gbs(t[0][reps / 2]), t[0][reps / 4], t[1][reps / 2], gbs(t[1][reps / 2]), t[1][reps / 4],
              t[1][reps / 2] / t[0][reps / 2]);
}
