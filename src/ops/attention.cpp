// src/ops/attention.cpp — argument validation and dispatch of the attention op (placeholder).
namespace sixfold::detail {}
