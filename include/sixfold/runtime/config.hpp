// sixfold/runtime/config.hpp — compile-time switches shared by host and device code.
//
// SIXFOLD_HD marks functions usable from both host and CUDA device code: every monoid's
// identity() and combine() carry it, so one definition serves the CPU and the CUDA backends.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define SIXFOLD_HD __host__ __device__
#define SIXFOLD_DEVICE_COMPILE 1
#else
#define SIXFOLD_HD
#define SIXFOLD_DEVICE_COMPILE 0
#endif

#if defined(__CUDA_ARCH__)
#define SIXFOLD_ON_DEVICE 1
#else
#define SIXFOLD_ON_DEVICE 0
#endif
