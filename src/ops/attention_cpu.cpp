// src/ops/attention_cpu.cpp — the CPU backend of the attention op (placeholder).
namespace sixfold::detail {}
