// src/cuda/topk.cu — the CUDA backend of the topk op (placeholder).
namespace sixfold::detail {}
