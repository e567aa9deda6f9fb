#!/usr/bin/env bash
# dev/topk/gpu_run.sh LOGDIR — on a GPU machine: build the top-k targets (scripts/gpu_quick.sh),
# run test_topk with the GPU required, compute-sanitizer memcheck on the small and mid-size CUDA
# cases, `sixfold bench topk` on the GPU, then the Python package: pytest python/tests/test_topk.py
# and bench/torch_topk.py (sixfold vs torch.topk / torch.sort). Logs to LOGDIR.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?log folder}
mkdir -p "$out"
start=$(date +%s)
scripts/gpu_quick.sh test_topk sixfold_cli >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "build $(( $(date +%s) - start )) s"
SIXFOLD_REQUIRE_GPU=1 timeout 180 build-gpu/tests/test_topk >"$out/test.log" 2>&1; echo "test rc $?"
grep -E "OK|FAILED|Failure|Which is|expected|rows|position" "$out/test.log" | head -40
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 build-gpu/tests/test_topk \
  --gtest_filter='TopKCuda.Sweep:TopKCuda.LongRows:TopKCuda.CapturedInAGraph:TopKCuda.MixedDevicesRejected' >"$out/memcheck.log" 2>&1
echo "memcheck rc $?"; grep -E "FAILED|ERROR SUMMARY" "$out/memcheck.log" | tail -5
echo "elapsed $(( $(date +%s) - start )) s"
timeout 60 build-gpu/tools/sixfold/sixfold verify topk --backend cuda >"$out/verify.txt" 2>&1; echo "verify rc $?"; tail -1 "$out/verify.txt"
timeout 120 build-gpu/tools/sixfold/sixfold bench topk --backend cuda >"$out/bench.txt" 2>&1
echo "bench rc $?"; grep -E "topk|copy" "$out/bench.txt" | cut -c1-120
echo "elapsed $(( $(date +%s) - start )) s"
prefix=/tmp/sixfold-py
python3 -m pip install --no-build-isolation --no-deps --no-index --target "$prefix" --upgrade . \
  >"$out/pip.log" 2>&1 || { echo "pip failed"; tail -20 "$out/pip.log"; exit 1; }
echo "pip $(( $(date +%s) - start )) s"
(cd python/tests && SIXFOLD_REQUIRE_GPU=1 PYTHONPATH="$prefix" timeout 120 python3 -m pytest -q -rs test_topk.py) 2>&1 | tail -4
PYTHONPATH="$prefix" timeout 150 python3 bench/torch_topk.py 2>&1 | tee "$out/torch_topk.txt"
echo "elapsed $(( $(date +%s) - start )) s"
