// dev/norm/fwd_probe.cu — where the forward norms' time goes on the bench shapes (GPU).
//
// For rms_norm / layer_norm / softmax, bf16, on the five shapes of issue 7, each timed three ways
// on inputs rotating through > 2× the L2 (as `sixfold bench norm`):
//   call   CUDA events around one call from the host (what the CLI bench reports): kernel time
//          plus whatever of the host's call and launch the idle GPU waits for;
//   graph  20 calls captured in one CUDA graph, replayed, time per call: back-to-back kernels,
//          no host in between (BENCH.md method 3);
//   copy   cudaMemcpyAsync of the same bytes (read n·rows, write n·rows), per call and in a graph.
// plus a 1 GiB device copy (the ceiling) and an empty kernel per call. SIXFOLD_NORM_FWD passes
// through to the library (its dev switches). Not part of the build: compiled by hand against a
// build's libsixfold.a (dev/norm/gpu_fwd.sh):
//   nvcc -std=c++20 -O2 -arch=sm_90a -Iinclude dev/norm/fwd_probe.cu BUILD/libsixfold.a -lcublas -lgomp
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "sixfold/ops/norm.hpp"
#include "sixfold/runtime/tensor.hpp"

using namespace sixfold;

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__global__ void empty_kernel() {}

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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median over `reps` of events around f() (one call).
double per_call_us(const std::function<void(int)>& f, int reps, cudaStream_t st) {
  cudaEvent_t a, b;
  cuda_ok(cudaEventCreate(&a), "event");
  cuda_ok(cudaEventCreate(&b), "event");
  std::vector<double> t;
  for (int i = 0; i < reps + 3; ++i) {
    cuda_ok(cudaEventRecord(a, st), "record");
    f(i);
    cuda_ok(cudaEventRecord(b, st), "record");
    cuda_ok(cudaEventSynchronize(b), "sync");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, a, b), "elapsed");
    if (i >= 3) t.push_back(ms * 1e3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

// `calls` calls of f(i) captured in one graph; median over replays of the time per call.
double graph_us(const std::function<void(int)>& f, int calls, cudaStream_t st) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cuda_ok(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < calls; ++i) f(i);
  cuda_ok(cudaStreamEndCapture(st, &g), "end capture");
  cuda_ok(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  const double t = per_call_us([&](int) { cuda_ok(cudaGraphLaunch(ge, st), "graph launch"); }, 10, st);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return t / calls;
}

}  // namespace

int main() {
  cudaStream_t st;
  cuda_ok(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  const Stream stream{st};
  // The ceiling: 1 GiB device copy (read + write counted).
  const std::size_t big = std::size_t(1) << 30;
  void *p, *q;
  cuda_ok(cudaMalloc(&p, big), "malloc");
  cuda_ok(cudaMalloc(&q, big), "malloc");
  cuda_ok(cudaMemset(p, 1, big), "memset");
  const double big_us =
      per_call_us([&](int) { cuda_ok(cudaMemcpyAsync(q, p, big, cudaMemcpyDeviceToDevice, st), "copy"); }, 10, st);
  const double ceil_gbps = 2.0 * double(big) / big_us / 1e3;
  cudaFree(p);
  cudaFree(q);
  const double empty = per_call_us([&](int) { empty_kernel<<<1, 32, 0, st>>>(); }, 200, st);
  std::printf("copy 1 GiB: %.1f us = %.0f GB/s (the ceiling); empty kernel per call: %.2f us\n",
              big_us, ceil_gbps, empty);
  std::printf("%% = floor (bytes / the 1 GiB copy's rate) over the time; copy_*: cudaMemcpyAsync of"
              " x's bytes (read + write = the forward's bytes)\n");
  std::printf("%-11s %-12s %9s %9s %9s %9s %7s %7s %7s\n", "op", "shape", "call_us", "graph_us",
              "copy_call", "copy_grph", "call%", "graph%", "copy%");

  struct Shape { std::int64_t rows, n; };
  const Shape shapes[] = {{16384, 8192}, {4096, 4096}, {65536, 1024}, {256, 262144}, {32, 1048576}};
  std::uint32_t seed = 7;
  for (const Shape sh : shapes) {
    const std::int64_t numel = sh.rows * sh.n;
    const std::size_t bytes = std::size_t(numel) * 2;
    const int slots = int(std::clamp<std::int64_t>((std::int64_t(120) << 20) / std::int64_t(2 * bytes) + 1, 1, 16));
    std::vector<void*> xs(static_cast<std::size_t>(slots));
    for (auto& x : xs) {
      cuda_ok(cudaMalloc(&x, bytes), "malloc");
      fill_random<<<1024, 256>>>(static_cast<std::uint16_t*>(x), numel, seed++);
    }
    void *res, *sum;  // the fused residual add: residual (one buffer) and its sum output
    cuda_ok(cudaMalloc(&res, bytes), "malloc");
    cuda_ok(cudaMalloc(&sum, bytes), "malloc");
    fill_random<<<1024, 256>>>(static_cast<std::uint16_t*>(res), numel, seed++);
    void *y, *w, *b;
    cuda_ok(cudaMalloc(&y, bytes), "malloc");
    cuda_ok(cudaMalloc(&w, std::size_t(sh.n) * 2), "malloc");
    cuda_ok(cudaMalloc(&b, std::size_t(sh.n) * 2), "malloc");
    std::vector<std::uint16_t> ones(std::size_t(sh.n), 0x3f80);
    cuda_ok(cudaMemcpy(w, ones.data(), std::size_t(sh.n) * 2, cudaMemcpyHostToDevice), "h2d");
    cuda_ok(cudaMemset(b, 0, std::size_t(sh.n) * 2), "memset");
    const Device dev = Device::cuda(0);
    const auto view = [&](void* ptr) { return TensorView::contiguous(ptr, DType::bf16, {sh.rows, sh.n}, dev); };
    const TensorView tw = TensorView::contiguous(w, DType::bf16, {sh.n}, dev);
    const TensorView tb = TensorView::contiguous(b, DType::bf16, {sh.n}, dev);
    const TensorView ty = view(y);
    char label[32];
    std::snprintf(label, sizeof label, "%lldx%lld", (long long)sh.rows, (long long)sh.n);
    const auto copy = [&](int i) {
      cuda_ok(cudaMemcpyAsync(y, xs[std::size_t(i % slots)], bytes, cudaMemcpyDeviceToDevice, st), "copy");
    };
    const double copy_call = per_call_us(copy, 40, st), copy_graph = graph_us(copy, 20, st);
    const char* names[] = {"rms_norm", "layer_norm", "softmax", "add_rms", "add_layer"};
    for (int k = 0; k < 5; ++k) {
      const auto op = [&](int i) {
        const TensorView tx = view(xs[std::size_t(i % slots)]);
        if (k == 0) rms_norm(tx, tw, ty, {1e-5f}, stream);
        else if (k == 1) layer_norm(tx, tw, tb, ty, {1e-5f}, stream);
        else if (k == 2) softmax(tx, ty, stream);
        else if (k == 3) add_rms_norm(tx, view(res), tw, ty, view(sum), {1e-5f}, stream);
        else add_layer_norm(tx, view(res), tw, tb, ty, view(sum), {1e-5f}, stream);
      };
      const double call = per_call_us(op, 40, st), graph = graph_us(op, 20, st);
      // bytes: read x, write y (the add: read x and residual, write y and sum)
      const double us_floor = (k < 3 ? 2.0 : 4.0) * double(bytes) / ceil_gbps / 1e3;
      std::printf("%-11s %-12s %9.2f %9.2f %9.2f %9.2f %7.1f %7.1f %7.1f\n", names[k], label, call,
                  graph, copy_call, copy_graph, 100 * us_floor / call, 100 * us_floor / graph,
                  100 * us_floor / copy_call);
    }
    for (auto x : xs) cudaFree(x);
    cudaFree(res);
    cudaFree(sum);
    cudaFree(y);
    cudaFree(w);
    cudaFree(b);
  }
  cuda_ok(cudaGetLastError(), "last error");
  return 0;
}
