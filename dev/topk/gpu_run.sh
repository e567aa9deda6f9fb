#!/usr/bin/env bash
# dev/topk/gpu_run.sh LOGDIR [py] — on a GPU machine: test_topk with the GPU required,
# compute-sanitizer memcheck on the small and mid-size CUDA cases, `sixfold verify topk` and
# `sixfold bench topk` on the GPU; with `py`, also the Python package (pip install, pytest
# python/tests/test_topk.py, bench/torch_topk.py: sixfold vs torch.topk / torch.sort in one
# process). Logs to LOGDIR.
# Binaries: TOPK_BIN=<build dir> uses test_topk and sixfold prebuilt there (tests/test_topk,
# tools/sixfold/sixfold) when they run on this machine; otherwise scripts/gpu_quick.sh builds
# them into build-gpu. The pip build of the Python package starts first, in the background.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?log folder}
py=${2:-}
mkdir -p "$out"
start=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
prefix=/tmp/sixfold-py
if [ "$py" = py ]; then
  (python3 -m pip install --no-build-isolation --no-deps --no-index --target "$prefix" --upgrade . \
    >"$out/pip.log" 2>&1; echo "pip rc $? at $(( $(date +%s) - start )) s" >>"$out/pip.log") &
  pip_pid=$!
fi
bin=${TOPK_BIN:-}
if [ -n "$bin" ] && "$bin/tests/test_topk" --gtest_list_tests >/dev/null 2>&1 &&
   "$bin/tools/sixfold/sixfold" --help >/dev/null 2>&1; then
  echo "prebuilt binaries in $bin run here"
else
  [ -n "$bin" ] && { echo "prebuilt binaries do not run here:"; "$bin/tests/test_topk" --gtest_list_tests 2>&1 | head -3; }
  scripts/gpu_quick.sh test_topk sixfold_cli >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
  bin=build-gpu
  echo "build $(( $(date +%s) - start )) s"
fi
SIXFOLD_REQUIRE_GPU=1 timeout 240 "$bin/tests/test_topk" >"$out/test.log" 2>&1; echo "test rc $?"
grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED|Failure|Which is|expected|row |position" "$out/test.log" | head -40
echo "elapsed $(( $(date +%s) - start )) s"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/tests/test_topk" \
  --gtest_filter='TopKCuda.Sweep:TopKCuda.LongRows:TopKCuda.BatchedRows:TopKCuda.CapturedInAGraph:TopKCuda.MixedDevicesRejected' >"$out/memcheck.log" 2>&1
echo "memcheck rc $?"; grep -E "FAILED|ERROR SUMMARY" "$out/memcheck.log" | tail -5
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/tests/test_topk" \
  --gtest_filter='TopKCuda.LongRowPaths' >>"$out/memcheck.log" 2>&1
echo "memcheck (long-row paths) rc $?"; grep -E "FAILED|ERROR SUMMARY" "$out/memcheck.log" | tail -2
echo "elapsed $(( $(date +%s) - start )) s"
timeout 60 "$bin/tools/sixfold/sixfold" verify topk --backend cuda >"$out/verify.txt" 2>&1; echo "verify rc $?"; tail -1 "$out/verify.txt"
timeout 150 "$bin/tools/sixfold/sixfold" bench topk --backend cuda >"$out/bench.txt" 2>&1
echo "bench rc $?"; grep -E "topk|copy" "$out/bench.txt" | cut -c1-150
# The same bench under dev-hook settings (';'-separated, e.g. "SIXFOLD_TOPK_STOP=1;SIXFOLD_TOPK_STOP=2").
IFS=';' read -ra settings <<<"${TOPK_AB:-}"
for setting in "${settings[@]}"; do
  env $setting timeout 150 "$bin/tools/sixfold/sixfold" bench topk --backend cuda >>"$out/bench_ab.txt" 2>&1
  echo "bench ($setting) rc $?"; grep -E "^topk" "$out/bench_ab.txt" | tail -12 | cut -c1-100
done
echo "elapsed $(( $(date +%s) - start )) s"
if [ "$py" = py ]; then
  wait "$pip_pid"; tail -1 "$out/pip.log"
  (cd python/tests && SIXFOLD_REQUIRE_GPU=1 PYTHONPATH="$prefix" timeout 120 python3 -m pytest -q -rs test_topk.py) 2>&1 | tail -4
  PYTHONPATH="$prefix" timeout 150 python3 bench/torch_topk.py 2>&1 | tee "$out/torch_topk.txt"
  echo "elapsed $(( $(date +%s) - start )) s"
fi
