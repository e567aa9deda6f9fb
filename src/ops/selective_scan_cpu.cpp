// src/ops/selective_scan_cpu.cpp — the CPU backend of the selective_scan op (placeholder).
namespace sixfold::detail {}
