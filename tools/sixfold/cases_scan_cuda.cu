// CUDA reduce/scan cases: sixfold's monoid algorithms (CUB under the monoid's combine),
// cub::DeviceScan / cub::DeviceReduce called directly as the peer, and the float64 host loop
// as the naive baseline. Also the event timer the harness uses for GPU rows.
#include <cuda_runtime.h>

#include <cstring>

#include "bench.hpp"
#include "scan_workloads.hpp"
#include "sixfold/parallel/cuda.cuh"
#include "sixfold/runtime/tensor.hpp"

namespace sixfold::bench {

double gpu_time_ms(const std::function<void()>& launch) {
  cudaEvent_t a, b;
  parallel::cuda::check_cuda(cudaEventCreate(&a), "bench");
  parallel::cuda::check_cuda(cudaEventCreate(&b), "bench");
  cudaEventRecord(a);
  launch();
  cudaEventRecord(b);
  parallel::cuda::check_cuda(cudaEventSynchronize(b), "bench");
  parallel::cuda::check_cuda(cudaGetLastError(), "bench");
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

GraphReplay::GraphReplay(const std::function<void(Stream, int)>& enqueue, int calls) {
  using parallel::cuda::check_cuda;
  cudaStream_t st;
  check_cuda(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "bench graph");
  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "bench graph");
  try {
    for (int i = 0; i < calls; ++i) enqueue(Stream{st}, i);
  } catch (...) {
    cudaStreamEndCapture(st, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(st);
    throw;
  }
  check_cuda(cudaStreamEndCapture(st, &graph), "bench graph");
  cudaGraphExec_t exec = nullptr;
  check_cuda(cudaGraphInstantiate(&exec, graph, 0), "bench graph");
  check_cuda(cudaStreamDestroy(st), "bench graph");
  graph_ = graph;
  exec_ = exec;
}

GraphReplay::~GraphReplay() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void GraphReplay::replay() const {
  parallel::cuda::check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), 0), "bench graph");
}

namespace {

using namespace scan_workloads;

// The peer's combine, written as a user of CUB would write it: no sixfold types involved.
struct PlainAffineOp {
  __host__ __device__ algebra::AffineMap<float> operator()(algebra::AffineMap<float> f,
                                                           algebra::AffineMap<float> g) const {
    return {g.a * f.a, g.a * f.b + g.b};
  }
};
template <class W> auto plain_op() {
  if constexpr (std::is_same_v<W, SumF32>) return ::cuda::std::plus<float>{};
  else return PlainAffineOp{};
}

template <class T>
struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t n) : n(n) {
    parallel::cuda::check_cuda(cudaMalloc(&p, std::max<std::size_t>(1, n) * sizeof(T)), "bench");
  }
  ~DeviceBuffer() { cudaFree(p); }
  T* p = nullptr;
  std::size_t n;
};

template <class W>
std::unique_ptr<Case> make_cuda_case(std::int64_t n, bool scan) {
  using T = V<W>;
  auto c = std::make_unique<Case>();
  c->op = scan ? "scan" : "reduce";
  c->workload = W::kName;
  c->backend = Backend::cuda;
  c->cost = cost<W>(n, scan);
  c->tolerance = W::kTolerance;
  c->property = property(algebra::is_commutative_v<typename W::M>);
  c->slots = rotating_slots(Backend::cuda, c->cost.min_bytes);
  const auto host = std::make_shared<std::vector<std::vector<T>>>(draw_inputs<W>(c->slots, n));
  auto in = std::make_shared<std::vector<std::shared_ptr<DeviceBuffer<T>>>>();
  for (const auto& h : *host) {
    auto d = std::make_shared<DeviceBuffer<T>>(h.size());
    parallel::cuda::check_cuda(cudaMemcpy(d->p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "bench");
    in->push_back(d);
  }
  const std::int64_t outs = scan ? n : 1;
  auto out = std::make_shared<DeviceBuffer<T>>(std::size_t(outs));
  auto ref = std::make_shared<std::vector<double>>(std::size_t(outs) * W::kWidth);
  auto naive_out = std::make_shared<std::vector<double>>(ref->size());
  reference<W>((*host)[0], scan, ref->data());
  c->poison = [out, naive_out] {
    cudaMemset(out->p, 0xff, out->n * sizeof(T));  // all-ones bits: NaN in every float field
    std::fill(naive_out->begin(), naive_out->end(), NAN);
  };
  c->sync = [] { parallel::cuda::check_cuda(cudaDeviceSynchronize(), "bench"); };
  auto err = [out, ref, outs] {
    std::vector<T> h(static_cast<std::size_t>(outs));
    cudaMemcpy(h.data(), out->p, h.size() * sizeof(T), cudaMemcpyDeviceToHost);
    return error_vs<W>(*ref, h.data(), outs);
  };
  c->impls.push_back({"float64 loop (host)", ImplKind::naive, true,
                      [host, scan, naive_out](int s) { reference<W>((*host)[std::size_t(s)], scan, naive_out->data()); },
                      [naive_out, ref] { return max_rel_error(ref->data(), naive_out->data(), std::int64_t(ref->size())); }});
  const typename W::M m;
  // The peer gets its scratch allocated once, outside the timed region: its best case.
  struct Scratch { void* p = nullptr; std::size_t bytes = 0; };
  auto scratch = std::shared_ptr<Scratch>(new Scratch, [](Scratch* s) { cudaFree(s->p); delete s; });
  auto peer_call = [in, out, n, scan, scratch](int s, void* t, std::size_t& b) {
    const T* x = (*in)[std::size_t(s)]->p;
    if (scan) return cub::DeviceScan::InclusiveScan(t, b, x, out->p, plain_op<W>(), n);
    if constexpr (std::is_same_v<W, SumF32>) return cub::DeviceReduce::Sum(t, b, x, out->p, n);
    return cudaErrorNotSupported;
  };
  const bool has_peer = scan || std::is_same_v<W, SumF32>;  // CUB reduce needs commutativity
  if (has_peer) {
    parallel::cuda::check_cuda(peer_call(0, nullptr, scratch->bytes), "bench");
    parallel::cuda::check_cuda(cudaMalloc(&scratch->p, std::max<std::size_t>(1, scratch->bytes)), "bench");
    c->impls.push_back({scan ? "cub::DeviceScan" : "cub::DeviceReduce", ImplKind::peer, false,
                        [peer_call, scratch](int s) {
                          std::size_t b = scratch->bytes;
                          parallel::cuda::check_cuda(peer_call(s, scratch->p, b), "bench");
                        }, err});
  }
  c->impls.push_back({scan ? "sixfold::inclusive_scan" : "sixfold::reduce", ImplKind::sixfold, false,
                      [in, out, n, scan, m](int s) {
                        const T* x = (*in)[std::size_t(s)]->p;
                        if (scan) parallel::cuda::inclusive_scan(x, out->p, n, m);
                        else parallel::cuda::reduce(x, out->p, n, m);
                      }, err});
  return c;
}

const std::vector<std::int64_t> kVerifySizes = {1, 17, 4097, 65537, 1'000'003};

template <class W>
void add(bool scan) {
  registry().push_back({scan ? "scan" : "reduce", W::kName, Backend::cuda,
                        [scan](std::int64_t n) { return make_cuda_case<W>(n, scan); },
                        {{100'000'000, "1e8"}}, kVerifySizes});
}

}  // namespace

void register_cuda_cases() {
  if (!cuda_available()) return;
  add<SumF32>(false);
  add<AffineF32>(false);
  add<SumF32>(true);
  add<AffineF32>(true);
}

}  // namespace sixfold::bench
