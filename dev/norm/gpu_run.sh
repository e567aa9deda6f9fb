#!/usr/bin/env bash
# dev/norm/gpu_run.sh LOGDIR — one GPU session for the norm backward work: build, CUDA tests
# (default kernel, then pipe1 and pipe3 as the default; CudaKernelVariantsMatchReference runs all), memcheck on small cases, the CLI bench for each
# variant (SIXFOLD_NORM_BWD_KERNEL = regs | pipe1 | pipe2 | pipe3, same machine),
# then bench/torch_norm.py --only backward (sixfold's Python module built against build-gpu).
# Every step has its own time limit so that the logs of the earlier steps survive.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?log folder}
mkdir -p "$out"
s="$out/summary.txt"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$s"; }
el "build"
timeout 200 scripts/gpu_quick.sh test_norm_backward test_norm sixfold_cli >"$out/build.log" 2>&1 \
  || { el "build failed"; tail -40 "$out/build.log" | tee -a "$s"; exit 1; }
grep -E "warning" "$out/build.log" | grep -i norm | head -5 | tee -a "$s"
# Python module in the background (only for the torch side-by-side at the end).
( prefix=/tmp/sixfold-deps; arch=$prefix/usr/lib/x86_64-linux-gnu/cmake
  cmake -S . -B build-gpu -DSIXFOLD_BUILD_PYTHON=ON >/dev/null && cmake --build build-gpu -j 8 --target _C \
  && mkdir -p /tmp/sfpy/sixfold && cp python/sixfold/*.py /tmp/sfpy/sixfold/ \
  && cp build-gpu/python/_C*.so /tmp/sfpy/sixfold/ ) >"$out/pybuild.log" 2>&1 &
pyjob=$!
el "tests"
b=build-gpu
{
  for t in test_norm_backward test_norm; do
    SIXFOLD_REQUIRE_GPU=1 timeout 90 "$b/tests/$t" --gtest_filter='*Cuda*' 2>&1 | tail -4
  done
  for v in pipe1 pipe3; do
    echo "== test_norm_backward with SIXFOLD_NORM_BWD_KERNEL=$v"
    SIXFOLD_NORM_BWD_KERNEL=$v SIXFOLD_REQUIRE_GPU=1 timeout 60 "$b/tests/test_norm_backward" \
      --gtest_filter='*Cuda*' 2>&1 | tail -3
  done
} >"$out/tests.log" 2>&1
grep -E "PASSED|FAILED|==" "$out/tests.log" | tee -a "$s"
el "memcheck"
SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 timeout 60 compute-sanitizer --tool memcheck \
  --error-exitcode 3 "$b/tests/test_norm_backward" --gtest_filter='*Cuda*' >"$out/memcheck.log" 2>&1
echo "memcheck rc=$?" | tee -a "$s"
grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log" | tail -3 | tee -a "$s"
el "SASS"
if command -v cuobjdump >/dev/null; then
  o=$(find "$b" -name 'norm_backward.cu.o' | head -1)
  cuobjdump --dump-sass "$o" | awk '/Function : .*bwd_rows_pipeI13__nv_bfloat16LNS_8NormKindE0ELi2ELi8ELi3/{f=1;print;next} /Function :/{f=0} f' \
    | grep -oE "LDG[.A-Z0-9]*|STG[.A-Z0-9]*|BAR[.A-Z0-9]*|LDS[.A-Z0-9]*|STS[.A-Z0-9]*|LDL[.A-Z0-9]*|STL[.A-Z0-9]*|SHFL[.A-Z]*|BRA" \
    | uniq -c >"$out/sass_rms_pipe3.txt"
fi
el "CLI bench per variant"
for v in regs pipe1 pipe2 pipe3; do
  echo "== SIXFOLD_NORM_BWD_KERNEL=$v" >>"$out/bench.log"
  SIXFOLD_NORM_BWD_KERNEL=$v SIXFOLD_NORM_CASES=backward SIXFOLD_NORM_SKIP_NAIVE=1 \
    SIXFOLD_NORM_SHAPES=16384x8192,4096x4096,65536x1024 \
    timeout 35 "$b/tools/sixfold/sixfold" bench norm --backend cuda --seconds 0.25 >>"$out/bench.log" 2>&1
  el "  $v done"
done
grep -E "==|rms_norm_backward|layer_norm_backward|softmax_backward|copy" "$out/bench.log" | cut -c1-160 | tee -a "$s"
el "torch side by side"
wait $pyjob; echo "pybuild rc=$?" | tee -a "$s"
PYTHONPATH=/tmp/sfpy timeout 150 python3 bench/torch_norm.py --only backward \
  --shapes 16384x8192,4096x4096,65536x1024 >"$out/torch.log" 2>&1
echo "torch rc=$?" | tee -a "$s"
el "end"
