// src/ops/selective_scan.cpp — argument validation and dispatch of the selective_scan op (placeholder).
namespace sixfold::detail {}
