#!/usr/bin/env bash
# scripts/gpu_check.sh LOGDIR — everything sixfold checks on a Hopper GPU machine, in one go:
# build with the CUDA backend (sm_90a), all tests with the GPU required, compute-sanitizer
# memcheck on the small CUDA cases, `sixfold verify` on the GPU, the machine's ceilings and the
# CPU + GPU bench rows. Logs and JSON land in LOGDIR; a summary is printed last.
#
# The machine needs nvcc, CMake, ninja and a C++ compiler, nothing installed: where the header
# libraries (GoogleTest, CLI11, fmt, nlohmann-json) are missing, put their Debian .debs in .deps/
# (scripts/fetch_deps.sh does that) and they are unpacked into a private prefix, never into /.
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh LOGDIR}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${SIXFOLD_GPU_BUILD:-build-gpu}
status=0
step() { echo "== $*" | tee -a "$out/summary.txt"; }

prefix_args=()
if compgen -G ".deps/*.deb" >/dev/null; then
  prefix=/tmp/sixfold-deps
  for f in .deps/*.deb; do dpkg -x "$f" "$prefix"; done
  arch=$prefix/usr/lib/x86_64-linux-gnu/cmake
  prefix_args=(-DCMAKE_PREFIX_PATH="$prefix/usr" -DGTest_DIR="$arch/GTest" -Dfmt_DIR="$arch/fmt"
               -DCLI11_DIR="$prefix/usr/share/cmake/CLI11"
               -Dnlohmann_json_DIR="$prefix/usr/share/cmake/nlohmann_json")
fi

nvidia-smi >"$out/nvidia-smi.txt" 2>&1
step "configure + build ($build)"
{ cmake -S . -B "$build" -G Ninja -DSIXFOLD_CUDA=ON "${prefix_args[@]}" &&
  cmake --build "$build" -j "$(nproc)"; } >"$out/build.log" 2>&1 || { status=1; tail -40 "$out/build.log"; }

step "ctest (GPU required)"
SIXFOLD_REQUIRE_GPU=1 ctest --test-dir "$build" --output-on-failure -j 4 >"$out/ctest.log" 2>&1 || status=1
tail -5 "$out/ctest.log" | tee -a "$out/summary.txt"

step "compute-sanitizer memcheck (small CUDA cases)"
SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 compute-sanitizer --tool memcheck --error-exitcode 3 \
  "$build/tests/test_parallel_cuda" >"$out/memcheck.log" 2>&1 || status=1
for t in test_norm test_activation; do
  SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$build/tests/$t" --gtest_filter='*Cuda*' >>"$out/memcheck.log" 2>&1 || status=1
done
grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log" | tail -6 | tee -a "$out/summary.txt"

step "python package (pip install --no-build-isolation) + pytest with torch/cupy/jax, GPU required"
pyprefix=/tmp/sixfold-py
{ python3 -m pip install --no-build-isolation --no-deps --no-index --target "$pyprefix" --upgrade . ; } \
  >"$out/pip.log" 2>&1 || { status=1; tail -30 "$out/pip.log"; }
(cd python/tests && SIXFOLD_REQUIRE_GPU=1 PYTHONPATH="$pyprefix" python3 -m pytest -q -rs . ) \
  >"$out/pytest.log" 2>&1 || status=1
tail -8 "$out/pytest.log" | tee -a "$out/summary.txt"
PYTHONPATH="$pyprefix" python3 bench/python_overhead.py 2>&1 | tee -a "$out/summary.txt"
PYTHONPATH="$pyprefix" python3 bench/torch_scan.py 2>&1 | tee -a "$out/summary.txt"

cli="$build/tools/sixfold/sixfold"
step "ceilings"
"$cli" ceilings --remeasure 2>&1 | tee -a "$out/summary.txt"
step "verify"
"$cli" verify >"$out/verify.log" 2>&1 || status=1
grep -E "^(FAIL|over)" "$out/verify.log" | tee -a "$out/summary.txt"
tail -1 "$out/verify.log" | tee -a "$out/summary.txt"
step "laws"
"$cli" laws --counterexamples >"$out/laws.log" 2>&1 || status=1
tail -1 "$out/laws.log" | tee -a "$out/summary.txt"
step "bench (GPU rows)"
"$cli" bench --backend cuda --json-file "$out/bench_cuda.json" --svg "$out/roofline_cuda.svg" \
  >"$out/bench_cuda.txt" 2>&1 || status=1
grep -E "sixfold::|cub::" "$out/bench_cuda.txt" | tee -a "$out/summary.txt"
echo "status=$status" | tee -a "$out/summary.txt"
exit $status
