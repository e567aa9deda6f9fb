// src/ops/topk_cpu.cpp — the CPU backend of the topk op (placeholder).
namespace sixfold::detail {}
