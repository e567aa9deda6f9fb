#!/usr/bin/env bash
# scripts/gpu_check.sh LOGDIR [PHASE...] — everything sixfold checks on a Hopper GPU machine:
#   build    configure + build with the CUDA backend (sm_90a)            (always, incremental)
#   test     ctest with the GPU required (a skip is a failure), compute-sanitizer memcheck on the
#            small CUDA cases, the Python package + pytest (torch/cupy/jax, GPU required),
#            `sixfold verify` and `sixfold laws`
#   bench    the machine's ceilings, the GPU bench rows of every op (`sixfold bench --backend
#            cuda`, JSON + roofline SVG) and the Python peer benches (PyTorch on the same inputs)
# No phase named: test and bench. Logs and JSON land in LOGDIR; LOGDIR/summary.txt is the digest.
# Narrowing the bench (one device command has a time limit): SIXFOLD_BENCH_OPS="attention topk"
# (CLI ops; empty: all) and SIXFOLD_PYBENCH="torch_attention torch_topk" (scripts in bench/;
# "none": skip them; empty: all).
#
# The machine needs nvcc, CMake, ninja and a C++ compiler, nothing installed: where the header
# libraries (GoogleTest, CLI11, fmt, nlohmann-json) are missing, put their Debian .debs in .deps/
# (scripts/fetch_deps.sh does that) and they are unpacked into a private prefix, never into /.
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh LOGDIR}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
shift
phases=" ${*:-test bench} "
want() { [[ $phases == *" $1 "* ]]; }
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

if want test; then
step "ctest (GPU required)"
SIXFOLD_REQUIRE_GPU=1 ctest --test-dir "$build" --output-on-failure -j 4 >"$out/ctest.log" 2>&1 || status=1
tail -5 "$out/ctest.log" | tee -a "$out/summary.txt"

step "compute-sanitizer memcheck (small CUDA cases)"
SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 compute-sanitizer --tool memcheck --error-exitcode 3 \
  "$build/tests/test_parallel_cuda" >"$out/memcheck.log" 2>&1 || status=1
memcheck() {  # test binary, gtest filter
  echo "-- $1 $2" >>"$out/memcheck.log"
  SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$build/tests/$1" --gtest_filter="$2" >>"$out/memcheck.log" 2>&1 || { status=1; echo "memcheck FAILED: $1"; }
}
for t in test_norm test_norm_backward test_activation test_selective_scan; do memcheck $t '*Cuda*'; done
memcheck test_topk 'TopKCuda.Sweep:TopKCuda.LongRows:TopKCuda.LongRowPaths:TopKCuda.BatchedRows:TopKCuda.CapturedInAGraph:TopKCuda.MixedDevicesRejected'
memcheck test_attention_cuda '*OddStrides*:*Repeated*:*Negative*:*DecodeSplitCounts*'
memcheck test_parallel_cuda '*Bulk*:*Graph*'
memcheck test_attention 'AttentionCuda.BadInput:AttentionCuda.MergeAttentionStates'
grep -E "^-- |ERROR SUMMARY|FAILED" "$out/memcheck.log" | tee -a "$out/summary.txt"

step "python package (pip install --no-build-isolation) + pytest with torch/cupy/jax, GPU required"
pyprefix=/tmp/sixfold-py
{ python3 -m pip install --no-build-isolation --no-deps --no-index --target "$pyprefix" --upgrade . ; } \
  >"$out/pip.log" 2>&1 || { status=1; tail -30 "$out/pip.log"; }
(cd python/tests && SIXFOLD_REQUIRE_GPU=1 PYTHONPATH="$pyprefix" python3 -m pytest -q -rs . ) \
  >"$out/pytest.log" 2>&1 || status=1
tail -8 "$out/pytest.log" | tee -a "$out/summary.txt"

cli="$build/tools/sixfold/sixfold"
step "verify"
"$cli" verify >"$out/verify.log" 2>&1 || status=1
grep -E "^(FAIL|over)" "$out/verify.log" | tee -a "$out/summary.txt"
tail -1 "$out/verify.log" | tee -a "$out/summary.txt"
step "laws"
"$cli" laws --counterexamples >"$out/laws.log" 2>&1 || status=1
tail -1 "$out/laws.log" | tee -a "$out/summary.txt"
fi

if want bench; then
cli="$build/tools/sixfold/sixfold"
pyprefix=/tmp/sixfold-py
[ -d "$pyprefix/sixfold" ] || python3 -m pip install --no-build-isolation --no-deps --no-index --target "$pyprefix" \
  --upgrade . >"$out/pip.log" 2>&1 || status=1
step "ceilings"
"$cli" ceilings --remeasure 2>&1 | tee -a "$out/summary.txt"
step "bench (GPU rows)"
# shellcheck disable=SC2086
"$cli" bench ${SIXFOLD_BENCH_OPS:-} --backend cuda --json-file "$out/bench_cuda.json" --svg "$out/roofline_cuda.svg" \
  >"$out/bench_cuda.txt" 2>&1 || status=1
grep -E "^(op|---)|sixfold" "$out/bench_cuda.txt" | tee -a "$out/summary.txt"
pybench() {  # script and arguments: PyTorch peers on the same inputs, ratios printed
  local name; name=$(basename "$1" .py)
  [ "${SIXFOLD_PYBENCH:-}" = none ] && return
  [ -n "${SIXFOLD_PYBENCH:-}" ] && [[ " $SIXFOLD_PYBENCH " != *" $name "* ]] && return
  step "python $*"
  PYTHONPATH="$pyprefix" PYTHONUNBUFFERED=1 timeout 300 python3 "$@" >"$out/$(basename "$1" .py).txt" 2>&1 || status=1
  tail -40 "$out/$(basename "$1" .py).txt" | tee -a "$out/summary.txt"
}
pybench bench/python_overhead.py
pybench bench/torch_scan.py
pybench bench/torch_norm.py
pybench bench/torch_activation.py
pybench bench/torch_topk.py
pybench bench/torch_selective_scan.py --shapes 0,1,2
pybench bench/torch_attention.py
fi
echo "status=$status" | tee -a "$out/summary.txt"
exit $status
