// CUDA side of the tensor entries (parallel.hpp): the views arrive validated; this file picks
// the monoid for (dtype, op) and runs the generic CUB-backed algorithms of cuda.cuh.
#include "../parallel/dispatch.hpp"
#include "../parallel/entries.hpp"
#include "sixfold/parallel/cuda.cuh"

namespace sixfold::detail {

namespace {
cudaStream_t raw(Stream s) { return static_cast<cudaStream_t>(s.handle); }

using parallel::cuda::DeviceGuard;
}  // namespace

void cuda_reduce(const TensorView& in, const TensorView& out, MonoidOp op, Stream stream) {
  DeviceGuard g(in.device.index);
  with_monoid("sixfold::reduce", in.dtype, op, [&](auto m) {
    using V = typename decltype(m)::value_type;
    parallel::cuda::reduce(static_cast<const V*>(in.data), static_cast<V*>(out.data), in.numel(),
                           m, raw(stream));
  });
}

void cuda_scan(bool exclusive, const TensorView& in, const TensorView& out, MonoidOp op,
               Stream stream) {
  DeviceGuard g(in.device.index);
  with_monoid("sixfold::inclusive_scan", in.dtype, op, [&](auto m) {
    using V = typename decltype(m)::value_type;
    const auto* x = static_cast<const V*>(in.data);
    auto* y = static_cast<V*>(out.data);
    if (exclusive) parallel::cuda::exclusive_scan(x, y, in.numel(), m, raw(stream));
    else parallel::cuda::inclusive_scan(x, y, in.numel(), m, raw(stream));
  });
}

void cuda_segmented_reduce(const TensorView& in, const TensorView& offsets,
                           const TensorView& out, MonoidOp op, Stream stream) {
  DeviceGuard g(in.device.index);
  with_monoid("sixfold::segmented_reduce", in.dtype, op, [&](auto m) {
    using V = typename decltype(m)::value_type;
    const auto* x = static_cast<const V*>(in.data);
    auto* y = static_cast<V*>(out.data);
    if (offsets.dtype == DType::i64)
      parallel::cuda::segmented_reduce(x, static_cast<const std::int64_t*>(offsets.data), y,
                                       out.numel(), m, raw(stream));
    else
      parallel::cuda::segmented_reduce(x, static_cast<const std::int32_t*>(offsets.data), y,
                                       out.numel(), m, raw(stream));
  });
}

}  // namespace sixfold::detail
