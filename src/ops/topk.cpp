// src/ops/topk.cpp — argument validation and dispatch of the topk op (placeholder).
namespace sixfold::detail {}
