#!/usr/bin/env bash
# dev/topk/gpu_run.sh LOGDIR [bench|nobench] — on a GPU machine: build the top-k targets
# (scripts/gpu_quick.sh), run test_topk with the GPU required, compute-sanitizer memcheck on the
# small CUDA cases, then `sixfold bench topk` on the GPU; logs to LOGDIR.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?log folder}
mode=${2:-bench}
mkdir -p "$out"
start=$(date +%s)
scripts/gpu_quick.sh test_topk sixfold_cli >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "build $(( $(date +%s) - start )) s"
SIXFOLD_REQUIRE_GPU=1 timeout 180 build-gpu/tests/test_topk >"$out/test.log" 2>&1; echo "test rc $?"
grep -E "OK|FAILED|Failure|Which is|expected|rows|position" "$out/test.log" | head -40
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 build-gpu/tests/test_topk \
  --gtest_filter='TopKCuda.Sweep:TopKCuda.MixedDevicesRejected' >"$out/memcheck.log" 2>&1
echo "memcheck rc $?"; tail -5 "$out/memcheck.log"
echo "elapsed $(( $(date +%s) - start )) s"
if [ "$mode" = bench ]; then
  timeout 240 build-gpu/tools/sixfold/sixfold bench topk --backend cuda >"$out/bench.txt" 2>&1
  echo "bench rc $?"; cat "$out/bench.txt" | tail -40
fi
echo "elapsed $(( $(date +%s) - start )) s"
