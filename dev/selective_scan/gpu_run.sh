#!/usr/bin/env bash
# dev/selective_scan/gpu_run.sh LOGDIR [TORCH_SHAPES] — everything the selective scan checks on a
# Hopper GPU machine, in one go, most important first: build (build-gpu, only the scan's
# targets), its C++ tests with the GPU required, the CLI bench rows (GPU), the launch-shape
# sweep, an Nsight Compute profile of the default launch, compute-sanitizer memcheck and
# racecheck on the small CUDA cases, then the Python extension, its
# tests and the PyTorch peers (bench/torch_selective_scan.py --shapes TORCH_SHAPES, default 0).
# Logs land in LOGDIR (8 files); a summary is printed last.
set -uo pipefail
out=${1:?usage: dev/selective_scan/gpu_run.sh LOGDIR [TORCH_SHAPES]}
shapes=${2:-0}
mkdir -p "$out"
cd "$(dirname "$0")/../.."
t0=$SECONDS
stamp() { echo "== $* ($((SECONDS - t0)) s)" | tee -a "$out/checks.log"; }
prefix=/tmp/sixfold-deps
for f in .deps/*.deb; do dpkg -x "$f" "$prefix"; done
arch=$prefix/usr/lib/x86_64-linux-gnu/cmake
deps=(-DCMAKE_PREFIX_PATH="$prefix/usr" -DGTest_DIR="$arch/GTest" -Dfmt_DIR="$arch/fmt"
      -DCLI11_DIR="$prefix/usr/share/cmake/CLI11" -Dnlohmann_json_DIR="$prefix/usr/share/cmake/nlohmann_json")
stamp "build"
{ cmake -S . -B build-gpu -G Ninja -DSIXFOLD_CUDA=ON "${deps[@]}" &&
  cmake --build build-gpu -j "$(nproc)" --target test_selective_scan sixfold_cli sixfold; } >"$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
grep -E "warning" "$out/build.log" | grep -i selective_scan | head -5

stamp "C++ tests, GPU required"
SIXFOLD_REQUIRE_GPU=1 build-gpu/tests/test_selective_scan >>"$out/checks.log" 2>&1
tail -4 "$out/checks.log"

stamp "sixfold bench selective_scan (GPU rows)"
build-gpu/tools/sixfold/sixfold bench selective_scan --backend cuda --json-file "$out/bench_cuda.json" \
  >"$out/bench_cuda.txt" 2>&1
cat "$out/bench_cuda.txt"

stamp "launch sweep"
g++ -std=c++20 -O2 -fopenmp -Iinclude -I/usr/local/cuda/include dev/selective_scan/sweep_launch.cpp \
  build-gpu/libsixfold.a -L/usr/local/cuda/lib64 -lcudart -lcublas -o /tmp/sweep >>"$out/checks.log" 2>&1 &&
  timeout 150 /tmp/sweep >"$out/sweep.txt" 2>&1
grep -E "default|floor" "$out/sweep.txt"

stamp "ncu (default launch, first shape)"
ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 120 "$ncu_bin" --clock-control none --section SpeedOfLight --section WarpStateStats \
  --section SchedulerStats --section Occupancy --section InstructionStats --section LaunchStats \
  -k regex:selective_scan_chunked -c 1 /tmp/sweep --once >"$out/ncu.txt" 2>&1
grep -E "Stall|Issued|Eligible|Achieved Occupancy|Registers|Executed Ipc|Warp Cycles Per Issued" "$out/ncu.txt" | head -30

stamp "memcheck (small CUDA cases)"
SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 \
  build-gpu/tests/test_selective_scan --gtest_filter='*Cuda*' >>"$out/checks.log" 2>&1
echo "memcheck exit $?" | tee -a "$out/checks.log"
grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/checks.log" | tail -3
stamp "racecheck (small CUDA scan cases)"
SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool racecheck --error-exitcode 3 \
  build-gpu/tests/test_selective_scan --gtest_filter='*Cuda*MatchesReference' >>"$out/checks.log" 2>&1
echo "racecheck exit $?" | tee -a "$out/checks.log"
grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$out/checks.log" | tail -2

stamp "python extension + pytest + torch peers"
pkg=/tmp/sixfold-pkg
if { cmake -S . -B build-gpu -DSIXFOLD_BUILD_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)" &&
     cmake --build build-gpu -j "$(nproc)" --target _C; } >>"$out/build.log" 2>&1; then
  mkdir -p "$pkg/sixfold" && cp python/sixfold/*.py "$pkg/sixfold/" && cp build-gpu/python/_C*.so "$pkg/sixfold/"
  (cd python/tests && SIXFOLD_REQUIRE_GPU=1 PYTHONPATH="$pkg" timeout 120 python3 -m pytest -q -rs test_selective_scan.py) \
    >>"$out/checks.log" 2>&1
  tail -2 "$out/checks.log"
  PYTHONUNBUFFERED=1 PYTHONPATH="$pkg" timeout 240 python3 bench/torch_selective_scan.py --shapes "$shapes" \
    --json "$out/torch.json" >"$out/torch.txt" 2>&1
  cat "$out/torch.txt"
else
  echo "python extension did not build (see build.log)"; tail -5 "$out/build.log"
fi
stamp "done"
