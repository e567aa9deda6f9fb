#!/usr/bin/env bash
# scripts/bench.sh [bench options] — set up, build and run the main job: `sixfold bench` over the
# default suite on the CPU backend, and on the GPU when one is usable. Options pass through
# (e.g. `scripts/bench.sh scan --json`, `scripts/bench.sh --svg roofline.svg`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake --preset default >/dev/null
cmake --build --preset default --target sixfold_cli >&2
exec build/tools/sixfold/sixfold bench "$@"
