#!/usr/bin/env bash
# scripts/test.sh — set up, build and run every test (the README's test command; CI runs it).
# Builds the CUDA backend too when nvcc is present; CUDA tests skip where no GPU is usable.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake --preset default >/dev/null
cmake --build --preset default
ctest --preset default
