// sixfold/parallel/cuda.cuh — reduce, scans and segmented reduce over any Monoid on the GPU.
//
// The same monoid types as the CPU (algebra/instances.hpp) drive CUB's device algorithms:
// CombineOp<M> is the binary operator, M::identity() the initial value. CUB's DeviceScan keeps
// operand order, so scans are correct for non-commutative monoids. CUB's DeviceReduce and
// DeviceSegmentedReduce may reorder operands, so they serve only monoids tagged commutative;
// the others go through an order-preserving tile reduction (blocked loads, cub::BlockReduce,
// tile results folded left to right).
//
// All functions are asynchronous in `stream`, take 64-bit sizes, allocate their temporary
// storage stream-ordered (cudaMallocAsync: no device-wide synchronization, capturable in CUDA
// graphs) and throw sixfold::Error when a CUDA call fails. The first call on a device raises
// its default memory pool's release threshold to 256 MiB (see keep_pool_memory), so scratch is
// reused instead of re-mapped. Include from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>

#include <cub/block/block_load.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_reduce.cuh>

#include <cuda/std/functional>

#include "sixfold/algebra/instances.hpp"
#include "sixfold/algebra/monoid.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold::parallel::cuda {

using algebra::CombineOp;
using algebra::Monoid;

inline void check_cuda(cudaError_t e, const char* where) {
  if (e != cudaSuccess) throw_error(where, std::string("CUDA error: ") + cudaGetErrorString(e));
}

// ---- L2 eviction priorities ------------------------------------------------------------------
// A policy from createpolicy (one instruction a thread) and the 2-, 4-, 8- or 16-byte global
// loads and stores that carry it (Raw: unsigned short, unsigned, uint2, uint4). Streams read
// once with evict-last measured faster than plain loads on the H200 (docs/perf/norm.md, session
// 18); evict-first is for a second and last read of data kept by evict-last.
__device__ __forceinline__ std::uint64_t l2_evict_last() {
  std::uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}
// Drops the 128-byte L2 line at p (128-byte aligned) without writing it back; its contents
// become undefined. For scratch read for the last time: a dirty line left in L2 is written to
// DRAM when evicted, bandwidth the kernels after it pay for.
__device__ __forceinline__ void discard_l2_line(const void* p) {
  asm volatile("discard.global.L2 [%0], 128;" ::"l"(p) : "memory");
}
// Programmatic dependent launch (Hopper), both no-ops in a plain launch. launch_dependents: the
// next kernel of the stream, when launched as a programmatic dependent (launch_dependent), may be
// scheduled once every block of this grid has executed it or exited. wait_dependencies: waits
// for the completion and memory of the grid this one depends on; nothing before it may read what
// that grid writes.
__device__ __forceinline__ void launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void wait_dependencies() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// The head of a kernel launched with launch_dependent(..., chain_launches(), ...): both of the
// above, before the kernel's first global load or store.
__device__ __forceinline__ void chain_head() {
  launch_dependents();
  wait_dependencies();
}
__device__ __forceinline__ std::uint64_t l2_evict_first() {
  std::uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

template <class Raw>
__device__ __forceinline__ Raw load_l2_hint(const Raw* p, std::uint64_t policy) {
  Raw r;
  if constexpr (sizeof(Raw) == 16)
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p), "l"(policy));
  else if constexpr (sizeof(Raw) == 8)
    asm volatile("ld.global.L2::cache_hint.v2.u32 {%0,%1}, [%2], %3;" : "=r"(r.x), "=r"(r.y) : "l"(p), "l"(policy));
  else if constexpr (sizeof(Raw) == 4)
    asm volatile("ld.global.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(r) : "l"(p), "l"(policy));
  else
    asm volatile("ld.global.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(r) : "l"(p), "l"(policy));
  return r;
}

template <class Raw>
__device__ __forceinline__ void store_l2_hint(Raw* p, const Raw& v, std::uint64_t policy) {
  if constexpr (sizeof(Raw) == 16)
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1,%2,%3,%4}, %5;" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w), "l"(policy)
                 : "memory");
  else if constexpr (sizeof(Raw) == 8)
    asm volatile("st.global.L2::cache_hint.v2.u32 [%0], {%1,%2}, %3;" ::"l"(p), "r"(v.x), "r"(v.y), "l"(policy)
                 : "memory");
  else if constexpr (sizeof(Raw) == 4)
    asm volatile("st.global.L2::cache_hint.u32 [%0], %1, %2;" ::"l"(p), "r"(v), "l"(policy) : "memory");
  else
    asm volatile("st.global.L2::cache_hint.u16 [%0], %1, %2;" ::"l"(p), "h"(v), "l"(policy) : "memory");
}

// Makes `device` current for a scope (kernels run on the tensors' device) and restores the
// caller's current device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device, const char* where = "sixfold") {
    check_cuda(cudaGetDevice(&previous_), where);
    switched_ = device != previous_;
    if (switched_) check_cuda(cudaSetDevice(device), where);
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);  // nothing to undo (and no call) otherwise
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

// The number of SMs of `device`, asked once per device (the first 64) and cached.
inline int sm_count(int device, const char* where = "sixfold") {
  static std::atomic<int> cached[64] = {};
  if (device >= 0 && device < 64)
    if (const int c = cached[device].load(std::memory_order_relaxed)) return c;
  int sms = 0;
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), where);
  if (device >= 0 && device < 64) cached[device].store(sms, std::memory_order_relaxed);
  return sms;
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent of the work
// before it in `stream` (Hopper): its blocks may be scheduled while the previous grid finishes,
// and wait in `griddepcontrol.wait` for that grid's completion and memory. A plain launch where
// the attribute is refused or `dependent` is false (dev hooks for A/B timing). Checks the launch.
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                      bool dependent, const char* where, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (!dependent || cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...) != cudaSuccess) {
    (void)cudaGetLastError();
    kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
  }
  check_cuda(cudaGetLastError(), where);
}

// Whether kernels that begin with chain_head are launched as programmatic dependents
// (launch_dependent with dependent = true): their launch and block scheduling then overlap the
// end of the kernel before them. SIXFOLD_NO_CHAIN=1 (read on every call) launches them plainly.
inline bool chain_launches() {
  const char* e = std::getenv("SIXFOLD_NO_CHAIN");
  return !(e && *e && *e != '0');
}

namespace detail {

// The default memory pool returns its memory to the driver at every synchronization unless
// told to keep some; re-mapping it then costs ~40 µs per call (H200: scan of 1e8 f32 took
// 0.302 ms against CUB's 0.263 ms called with preallocated scratch). Keep up to 256 MiB
// cached in the pool of each device we run on — scratch for scans of 2^32 elements fits.
// Skipped while `stream` is being captured into a graph: pool calls are not permitted then.
inline void keep_pool_memory(cudaStream_t stream, const char* where) {
  constexpr int kMaxDevices = 64;
  static bool done[kMaxDevices] = {};
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &capturing), where);
  if (capturing != cudaStreamCaptureStatusNone) return;
  int device = 0;
  check_cuda(cudaGetDevice(&device), where);
  if (device >= kMaxDevices || done[device]) return;
  cudaMemPool_t pool;
  check_cuda(cudaDeviceGetDefaultMemPool(&pool, device), where);
  std::uint64_t keep = 0;
  check_cuda(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), where);
  if (keep < (std::uint64_t(256) << 20)) {
    keep = std::uint64_t(256) << 20;
    check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), where);
  }
  done[device] = true;
}

// Stream-ordered scratch memory for one CUB call.
class Scratch {
 public:
  Scratch(std::size_t bytes, cudaStream_t s, const char* where) : stream_(s) {
    if (!bytes) return;
    keep_pool_memory(s, where);
    check_cuda(cudaMallocAsync(&ptr_, bytes, s), where);
  }
  ~Scratch() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

// Calls run(temp, bytes) twice, CUB's way: once to size the scratch, once to do the work.
template <class Run>
void with_scratch(cudaStream_t stream, const char* where, Run&& run) {
  std::size_t bytes = 0;
  check_cuda(run(nullptr, bytes), where);
  Scratch scratch(bytes, stream, where);
  check_cuda(run(scratch.get(), bytes), where);
}

// CUB picks tuned policies by operator: a Sum over an arithmetic type is handed over as
// cuda::std::plus (same arithmetic, same order), which selects them; any other monoid goes
// as CombineOp and gets CUB's generic policies. (H200, 1e8 f32: inclusive scan 0.362 ms with
// CombineOp<Sum<float>>, 0.266 ms with plus.)
template <class M> struct is_arithmetic_sum : std::false_type {};
template <class T> struct is_arithmetic_sum<algebra::Sum<T>> : std::is_arithmetic<T> {};

template <Monoid M> auto cub_op(const M& m) {
  if constexpr (is_arithmetic_sum<M>::value) return ::cuda::std::plus<typename M::value_type>{};
  else return CombineOp<M>{m};
}

// Order-preserving reduction tile: each thread folds kItems consecutive elements, then the
// block reduces the threads' results in thread order.
struct OrderedReduceConfig {
  static constexpr int kThreads = 256;
  static constexpr int kItems = 4;
  static constexpr int kTile = kThreads * kItems;  // (kThreads × kItems) elements per tile
};

// Folds x[lo, hi) in order; the result is valid in thread 0.
template <Monoid M>
__device__ typename M::value_type ordered_block_fold(const typename M::value_type* x,
                                                     std::int64_t lo, std::int64_t hi, M m) {
  using V = typename M::value_type;
  using C = OrderedReduceConfig;
  using Load = cub::BlockLoad<V, C::kThreads, C::kItems, cub::BLOCK_LOAD_TRANSPOSE>;
  using Reduce = cub::BlockReduce<V, C::kThreads>;
  __shared__ union {
    typename Load::TempStorage load;
    typename Reduce::TempStorage reduce;
  } smem;
  V acc = m.identity();
  for (std::int64_t base = lo; base < hi; base += C::kTile) {
    const int valid = int(hi - base < C::kTile ? hi - base : C::kTile);
    V items[C::kItems];
    Load(smem.load).Load(x + base, items, valid, m.identity());  // padding: the identity
    __syncthreads();
    V mine = items[0];
#pragma unroll
    for (int i = 1; i < C::kItems; ++i) mine = m.combine(mine, items[i]);
    const V tile = Reduce(smem.reduce).Reduce(mine, CombineOp<M>{m});
    __syncthreads();
    if (threadIdx.x == 0) acc = m.combine(acc, tile);
  }
  return acc;
}

template <Monoid M>
__global__ void __launch_bounds__(OrderedReduceConfig::kThreads)
ordered_reduce_kernel(const typename M::value_type* x, std::int64_t n,
                      typename M::value_type* partial, M m) {
  const std::int64_t per = (n + gridDim.x - 1) / gridDim.x;
  const std::int64_t lo = per * blockIdx.x, hi = lo + per < n ? lo + per : n;
  const auto r = ordered_block_fold(x, lo < n ? lo : n, hi, m);
  if (threadIdx.x == 0) partial[blockIdx.x] = r;
}

template <Monoid M, class Offset>
__global__ void __launch_bounds__(OrderedReduceConfig::kThreads)
ordered_segmented_kernel(const typename M::value_type* x, const Offset* offsets,
                         typename M::value_type* out, M m) {
  const std::int64_t s = blockIdx.x;
  const auto r = ordered_block_fold(x, std::int64_t(offsets[s]), std::int64_t(offsets[s + 1]), m);
  if (threadIdx.x == 0) out[s] = r;
}

}  // namespace detail

namespace detail {
// Inclusive f32 sums of ≥ kBulkScanMinElements elements with 16-byte aligned pointers on Hopper
// run sixfold's own single-pass scan (src/cuda/scan_bulk.cu: ~84% of copy bandwidth on an H200
// against ~72% for CUB). Returns false, doing nothing, where it does not apply.
inline constexpr std::int64_t kBulkScanMinElements = std::int64_t(1) << 20;
bool bulk_inclusive_sum(const float* in, float* out, std::int64_t n, cudaStream_t stream);
}  // namespace detail

template <Monoid M>
void inclusive_scan(const typename M::value_type* in, typename M::value_type* out,
                    std::int64_t n, M m = M{}, cudaStream_t stream = 0) {
  if (n == 0) return;
  if constexpr (std::is_same_v<M, algebra::Sum<float>>)
    if (detail::bulk_inclusive_sum(in, out, n, stream)) return;
  detail::with_scratch(stream, "sixfold::cuda::inclusive_scan", [&](void* t, std::size_t& b) {
    return cub::DeviceScan::InclusiveScan(t, b, in, out, detail::cub_op(m), n, stream);
  });
}

template <Monoid M>
void exclusive_scan(const typename M::value_type* in, typename M::value_type* out,
                    std::int64_t n, M m = M{}, cudaStream_t stream = 0) {
  if (n == 0) return;
  detail::with_scratch(stream, "sixfold::cuda::exclusive_scan", [&](void* t, std::size_t& b) {
    return cub::DeviceScan::ExclusiveScan(t, b, in, out, detail::cub_op(m), m.identity(), n,
                                          stream);
  });
}

// *out (device memory) = reduction of in[0, n).
template <Monoid M>
void reduce(const typename M::value_type* in, typename M::value_type* out, std::int64_t n,
            M m = M{}, cudaStream_t stream = 0) {
  using V = typename M::value_type;
  const char* where = "sixfold::cuda::reduce";
  if constexpr (algebra::is_commutative_v<M>) {
    detail::with_scratch(stream, where, [&](void* t, std::size_t& b) {
      return cub::DeviceReduce::Reduce(t, b, in, out, n, detail::cub_op(m), m.identity(), stream);
    });
  } else {
    using C = detail::OrderedReduceConfig;
    int device = 0;
    check_cuda(cudaGetDevice(&device), where);
    const int sms = sm_count(device, where);
    const std::int64_t tiles = (n + C::kTile - 1) / C::kTile;
    const int blocks = int(tiles < 4 * sms ? (tiles > 0 ? tiles : 1) : 4 * sms);
    detail::Scratch partial(sizeof(V) * blocks, stream, where);
    auto* p = static_cast<V*>(partial.get());
    detail::ordered_reduce_kernel<<<blocks, C::kThreads, 0, stream>>>(in, n, p, m);
    check_cuda(cudaGetLastError(), where);
    detail::ordered_reduce_kernel<<<1, C::kThreads, 0, stream>>>(p, blocks, out, m);
    check_cuda(cudaGetLastError(), where);
  }
}

// out[s] = reduction of in[offsets[s], offsets[s+1]) for s < segments.
template <Monoid M, class Offset>
void segmented_reduce(const typename M::value_type* in, const Offset* offsets,
                      typename M::value_type* out, std::int64_t segments, M m = M{},
                      cudaStream_t stream = 0) {
  const char* where = "sixfold::cuda::segmented_reduce";
  if (segments == 0) return;
  if constexpr (algebra::is_commutative_v<M>) {
    detail::with_scratch(stream, where, [&](void* t, std::size_t& b) {
      return cub::DeviceSegmentedReduce::Reduce(t, b, in, out, segments, offsets, offsets + 1,
                                                detail::cub_op(m), m.identity(), stream);
    });
  } else {
    using C = detail::OrderedReduceConfig;
    detail::ordered_segmented_kernel<<<unsigned(segments), C::kThreads, 0, stream>>>(
        in, offsets, out, m);
    check_cuda(cudaGetLastError(), where);
  }
}

}  // namespace sixfold::parallel::cuda
