// Internal: the CUDA side of the tensor entries in parallel.hpp. The host entry validates, then
// calls these with views already checked; src/cuda/parallel.cu defines them.
#pragma once

#include "sixfold/parallel/parallel.hpp"

namespace sixfold::detail {

void cuda_reduce(const TensorView& in, const TensorView& out, MonoidOp op, Stream stream);
void cuda_scan(bool exclusive, const TensorView& in, const TensorView& out, MonoidOp op,
               Stream stream);
void cuda_segmented_reduce(const TensorView& in, const TensorView& offsets,
                           const TensorView& out, MonoidOp op, Stream stream);

}  // namespace sixfold::detail
