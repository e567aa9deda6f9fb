// src/cuda/attention.cu — the CUDA backend of the attention op (placeholder).
namespace sixfold::detail {}
