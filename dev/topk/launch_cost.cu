// dev/topk/launch_cost.cu — what a per-call timing (event, call, event, synchronize: the bench's
// "per call" rows) pays before and between kernels, on an idle GPU. Each row: median of 200
// calls of a sequence of empty or short kernels, µs between the two events.
//   nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a dev/topk/launch_cost.cu -o /tmp/launch_cost
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "../cuda_check.cuh"

__global__ void empty(int* p) {
  if (p && threadIdx.x == 0 && blockIdx.x == 0) *p = 1;
}
__global__ void grid_synced(int* p) {
  cooperative_groups::this_grid().sync();
  if (p && threadIdx.x == 0 && blockIdx.x == 0) *p = 1;
}
__global__ void trigger(int* p) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (p && threadIdx.x == 0 && blockIdx.x == 0) *p = 1;
}
__global__ void dependent(int* p) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (p && threadIdx.x == 0 && blockIdx.x == 0) *p = 2;
}

static double median_us(const std::function<void(cudaStream_t)>& call, cudaStream_t s) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < 220; ++i) {
    CK(cudaEventRecord(a, s));
    call(s);
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 20) t.push_back(ms * 1000.f);
  }
  std::sort(t.begin(), t.end());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return t[t.size() / 2];
}

static void launch(void (*k)(int*), int grid, int block, cudaStream_t s, int* p, bool coop, bool pdl) {
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.stream = s;
  if (coop) {
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  } else if (pdl) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  CK(cudaLaunchKernelEx(&cfg, k, p));
}

int main() {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* p = nullptr;
  CK(cudaMalloc(&p, 64));
  cudaMemPool_t pool;
  CK(cudaDeviceGetDefaultMemPool(&pool, 0));
  unsigned long long keep = ~0ull;
  CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  struct Row {
    const char* name;
    std::function<void(cudaStream_t)> call;
  };
  const std::vector<Row> rows = {
      {"nothing between the events", [&](cudaStream_t) {}},
      {"1 empty kernel <<<1,32>>>", [&](cudaStream_t st) { empty<<<1, 32, 0, st>>>(p); }},
      {"1 empty kernel, 264 x 512", [&](cudaStream_t st) { empty<<<264, 512, 0, st>>>(p); }},
      {"1 cooperative kernel 64 x 1024 (grid sync)",
       [&](cudaStream_t st) { launch(grid_synced, 64, 1024, st, p, true, false); }},
      {"1 plain launch of the grid-sync kernel 64 x 1024",
       [&](cudaStream_t st) { launch(grid_synced, 64, 1024, st, p, false, false); }},
      {"cudaMallocAsync 64 MB + empty + cudaFreeAsync",
       [&](cudaStream_t st) {
         void* q = nullptr;
         CK(cudaMallocAsync(&q, 64 << 20, st));
         empty<<<264, 512, 0, st>>>(static_cast<int*>(q));
         CK(cudaFreeAsync(q, st));
       }},
      {"coop 64x1024 + PDL 264x512 + coop 264x512 (topk's sequence)",
       [&](cudaStream_t st) {
         launch(grid_synced, 64, 1024, st, p, true, false);
         launch(dependent, 264, 512, st, p, false, true);
         launch(grid_synced, 264, 512, st, p, true, false);
       }},
      {"plain 64x1024 (trigger) + PDL 264x512 + plain 264x512",
       [&](cudaStream_t st) {
         launch(trigger, 64, 1024, st, p, false, false);
         launch(dependent, 264, 512, st, p, false, true);
         launch(empty, 264, 512, st, p, false, false);
       }},
      {"3 plain empty kernels 264x512",
       [&](cudaStream_t st) {
         for (int i = 0; i < 3; ++i) empty<<<264, 512, 0, st>>>(p);
       }},
  };
  for (int rep = 0; rep < 2; ++rep)
    for (const auto& r : rows) std::printf("%-66s %7.2f us\n", r.name, median_us(r.call, s));
  return 0;
}
