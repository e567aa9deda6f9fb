// sixfold/parallel/parallel.hpp — reduce, scans and segmented reduce on tensor views.
//
// The entries below run the generic monoid algorithms (cpu.hpp; cuda.cuh on the GPU) for the
// common monoids on runtime-typed tensors. The backend follows the tensors: host memory runs on
// all CPU cores, CUDA memory on the tensors' GPU in `stream`, asynchronously (no device-wide
// synchronization). Mixing host and device tensors is an error.
//
// Contracts, checked before anything is written (violations throw sixfold::Error):
//   x:        rank 1, contiguous, dtype f32, f64 or i32, any length (0 and beyond 2^31 included)
//   out:      same dtype and device as `x`; scans: same shape as `x` (out == x runs in place);
//             reduce: one element (shape [] or [1])
//   offsets:  segmented_reduce only: rank 1, i32 or i64, `segments + 1` non-decreasing entries within
//             [0, len(x)]; `out` has `segments` elements. Checked on the host for host offsets;
//             device offsets are trusted (checking them would need a synchronization).
// Accumulation is in the element type (f32 sums accumulate in f32, like torch.cumsum);
// i32 sums wrap modulo 2^32. max/min propagate NaN. An empty reduction gives the identity:
// 0 for sum, −inf / +inf for max / min of floats, the lowest / highest value for i32.
#pragma once

#include "sixfold/runtime/tensor.hpp"

namespace sixfold {

enum class MonoidOp { sum, max, min };

struct ScanParams {
  MonoidOp op = MonoidOp::sum;
};

void reduce(const TensorView& x, const TensorView& out, ScanParams params = {}, Stream stream = {});
void inclusive_scan(const TensorView& x, const TensorView& out, ScanParams params = {},
                    Stream stream = {});
void exclusive_scan(const TensorView& x, const TensorView& out, ScanParams params = {},
                    Stream stream = {});
void segmented_reduce(const TensorView& x, const TensorView& offsets, const TensorView& out,
                      ScanParams params = {}, Stream stream = {});

}  // namespace sixfold
