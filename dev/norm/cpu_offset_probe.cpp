// The CPU norms on bf16 rows whose buffers start OFF elements past a 4096-byte boundary (OFF=8:
// 16 bytes, where glibc's malloc puts large blocks, so numpy's and std::vector's arrays): best
// time of repeated calls and % of the AVX2 dev host's 46.4 GB/s copy. Session 34 (output_plan in
// src/ops/rows_cpu.hpp).
//   g++ -std=c++20 -O2 -march=native -fopenmp -Iinclude dev/norm/cpu_offset_probe.cpp \
//       build-cpu/libsixfold.a -o /tmp/probe
//   OFF=8 /tmp/probe MODE [rows n seconds]   MODE: rms / layer (backward, saved statistics, dw
//   and db in f32), frms / flayer (forward), softmax, sbwd (softmax_backward)
#include <sixfold/ops/norm.hpp>
#include <sixfold/runtime/dtype.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
#include <span>
using namespace sixfold;
int main(int argc, char** argv) {
  const bool layer = argc > 1 && (!strcmp(argv[1], "layer") || !strcmp(argv[1], "flayer")); const bool fwd = argc > 1 && argv[1][0] == 'f'; const bool sm = argc > 1 && !strcmp(argv[1], "softmax");
  const long rows = argc > 2 ? atol(argv[2]) : 16384, n = argc > 3 ? atol(argv[3]) : 8192;
  const double secs = argc > 4 ? atof(argv[4]) : 1.0;
  auto A = [](long c) { auto* p = static_cast<BFloat16*>(std::aligned_alloc(4096, ((c * 2 + 8191) / 4096) * 4096)); const long off = getenv("OFF") ? atol(getenv("OFF")) : 0; memset(p, 0, c * 2); return std::span<BFloat16>(p + off, c); };
  auto x = A(rows * n), dy = A(rows * n), dx = A(rows * n), w = A(n), b = A(n), y = A(rows * n);
  std::mt19937 g(1); std::normal_distribution<float> nd;
  for (auto& v : x) v = to_bfloat16(nd(g) + 0.5f);
  for (auto& v : dy) v = to_bfloat16(nd(g));
  for (auto& v : w) v = to_bfloat16(1.f + 0.1f * nd(g));
  for (auto& v : b) v = to_bfloat16(0.1f * nd(g));
  std::vector<float> mean(rows), rstd(rows), dw(n), db(n);
  auto T = [&](void* p, DType d, std::initializer_list<std::int64_t> s) { return TensorView::contiguous(p, d, Shape(s)); };
  NormStats st{T(mean.data(), DType::f32, {rows}), T(rstd.data(), DType::f32, {rows})};
  if (layer) layer_norm(T(x.data(), DType::bf16, {rows, n}), T(w.data(), DType::bf16, {n}), T(b.data(), DType::bf16, {n}), T(y.data(), DType::bf16, {rows, n}), {}, {}, st);
  else { st.mean = {}; rms_norm(T(x.data(), DType::bf16, {rows, n}), T(w.data(), DType::bf16, {n}), T(y.data(), DType::bf16, {rows, n}), {}, {}, st); }
  auto call = [&] {
    if (argv[1][0] == 's' && argv[1][1] == 'b') { softmax_backward(T(dy.data(), DType::bf16, {rows, n}), T(y.data(), DType::bf16, {rows, n}), T(dx.data(), DType::bf16, {rows, n})); return; }
    if (sm) { softmax(T(x.data(), DType::bf16, {rows, n}), T(dx.data(), DType::bf16, {rows, n})); return; }
    if (fwd && layer) { layer_norm(T(x.data(), DType::bf16, {rows, n}), T(w.data(), DType::bf16, {n}), T(b.data(), DType::bf16, {n}), T(dx.data(), DType::bf16, {rows, n})); return; }
    if (fwd) { rms_norm(T(x.data(), DType::bf16, {rows, n}), T(w.data(), DType::bf16, {n}), T(dx.data(), DType::bf16, {rows, n})); return; }
    if (layer) layer_norm_backward(T(dy.data(), DType::bf16, {rows, n}), T(x.data(), DType::bf16, {rows, n}), T(w.data(), DType::bf16, {n}), T(dx.data(), DType::bf16, {rows, n}), T(dw.data(), DType::f32, {n}), T(db.data(), DType::f32, {n}), {}, {}, st);
    else rms_norm_backward(T(dy.data(), DType::bf16, {rows, n}), T(x.data(), DType::bf16, {rows, n}), T(w.data(), DType::bf16, {n}), T(dx.data(), DType::bf16, {rows, n}), T(dw.data(), DType::f32, {n}), {}, {}, st);
  };
  call();
  double best = 1e9; int it = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < secs) {
    auto a = std::chrono::steady_clock::now(); call(); auto z = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(z - a).count()); ++it;
  }
  const double bytes = (fwd || sm ? 4.0 : 6.0) * rows * n;
  printf("%s %ldx%ld best %.3f ms  %.1f GB/s  %.1f%% of 46.4  (%d its) dw0 %g\n", argc > 1 ? argv[1] : "rms", rows, n, best * 1e3, bytes / best / 1e9, bytes / best / 1e9 / 46.4 * 100, it, dw[0]);
}
