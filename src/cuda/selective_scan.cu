// src/cuda/selective_scan.cu — the CUDA backend of the selective_scan op (placeholder).
namespace sixfold::detail {}
