// Internal: backend entry points of the selective scan, called with validated arguments.
#pragma once

#include "sixfold/ops/selective_scan.hpp"

namespace sixfold::detail {

void selective_scan_cpu(const SelectiveScanArgs& a);
void selective_state_update_cpu(const StateUpdateArgs& a);

// src/cuda/selective_scan.cu (a CPU-only build has stubs that throw, in selective_scan.cpp).
void selective_scan_cuda(const SelectiveScanArgs& a, int device, Stream stream);
void selective_state_update_cuda(const StateUpdateArgs& a, int device, Stream stream);

// The CUDA kernel's launch shape, for dev/selective_scan's sweeps: channels per warp (lanes
// along d; the other lanes of a warp take consecutive time segments) and warps per block
// (further channels of the same B/C group). 0 picks the default for the shape.
struct SelectiveScanLaunch {
  int channels_per_warp = 0;  // a power of two up to 32
  int warps = 0;              // 1..8
  int variant = 0;            // dev: 0 the library's kernel; 2 K = 8, 3 R = 4, 4 run-time width (f32, input-dependent B/C)
};
void selective_scan_cuda_launch(const SelectiveScanArgs& a, int device, Stream stream,
                                SelectiveScanLaunch launch);

}  // namespace sixfold::detail
