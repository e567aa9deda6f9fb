#!/usr/bin/env bash
# scripts/gpu_quick.sh TARGET... — on a GPU machine: configure build-gpu (carried .deps unpacked
# into a private prefix, as gpu_check.sh does) and build only the given targets.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=/tmp/sixfold-deps
for f in .deps/*.deb; do dpkg -x "$f" "$prefix"; done
arch=$prefix/usr/lib/x86_64-linux-gnu/cmake
cmake -S . -B build-gpu -G Ninja -DSIXFOLD_CUDA=ON -DCMAKE_PREFIX_PATH="$prefix/usr" \
  -DGTest_DIR="$arch/GTest" -Dfmt_DIR="$arch/fmt" -DCLI11_DIR="$prefix/usr/share/cmake/CLI11" \
  -Dnlohmann_json_DIR="$prefix/usr/share/cmake/nlohmann_json" >/dev/null
cmake --build build-gpu -j "$(nproc)" --target "$@"
