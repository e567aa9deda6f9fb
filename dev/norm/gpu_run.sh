#!/usr/bin/env bash
# dev/norm/gpu_run.sh LOGDIR [ncu] [vars] [torch] [fwd] (PREBUILT=DIR: see below) — one GPU session for the norm
# build, CUDA tests (the default kernel, then every SIXFOLD_NORM_BWD_KERNEL variant in
# CudaKernelVariantsMatchReference), memcheck on the small cases, optionally (ncu) Nsight Compute
# on the bwd_rows_regs launches at 16384x8192 (rms / layer with the default v5, softmax), the CLI
# bench of the default on all five shapes, optionally (vars) other variants on three shapes
# (VARS, default smem1) and the reduction without PDL, optionally (torch) bench/torch_norm.py --only backward (sixfold's Python module
# built against build-gpu). The float64 naive rows are skipped (SIXFOLD_NORM_SKIP_NAIVE=1: they
# time the host only). Every step has its own time limit so that the logs of the earlier steps
# survive; everything ends up in LOGDIR/norm_bwd_logs.tgz and LOGDIR/summary.txt.
#
# PREBUILT=DIR (binaries built for sm_90a elsewhere and carried: DIR/test_norm,
# DIR/test_norm_backward, DIR/sixfold): no build; the CUDA tests and memcheck of test_norm too
# (the forward's saved statistics), then the same benches. Option fwd: also the forward bench of
# rms / layer on the first three shapes (a check that saving statistics costs the forward nothing
# when not asked). The backward bench rows of rms / layer are the saved-statistics path and
# "(recompute stats)" the path without them.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?log folder}
want_ncu=0 want_torch=0 want_vars=0 want_fwd=0
for a in "${@:2}"; do
  [[ $a == ncu ]] && want_ncu=1
  [[ $a == torch ]] && want_torch=1
  [[ $a == vars ]] && want_vars=1
  [[ $a == fwd ]] && want_fwd=1
done
prebuilt=${PREBUILT:-}
logs=$(mktemp -d)
s="$logs/summary.txt"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$s"; }
finish() { tar -czf "$out/norm_bwd_logs.tgz" -C "$logs" . ; cp "$s" "$out/summary.txt"; }
trap finish EXIT
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,memory.total --format=csv,noheader | tee -a "$s"
if [[ -z $prebuilt ]]; then
  el "build"
  timeout 300 scripts/gpu_quick.sh test_norm_backward sixfold_cli >"$logs/build.log" 2>&1 \
    || { el "build failed"; tail -40 "$logs/build.log" | tee -a "$s"; exit 1; }
  grep -E "warning" "$logs/build.log" | grep -i norm | head -5 | tee -a "$s"
fi
pyjob=
if (( want_torch )); then  # Python module in the background, for the torch side-by-side
  ( cmake -S . -B build-gpu -DSIXFOLD_BUILD_PYTHON=ON >/dev/null && cmake --build build-gpu -j 8 --target _C \
    && mkdir -p /tmp/sfpy/sixfold && cp python/sixfold/*.py /tmp/sfpy/sixfold/ \
    && cp build-gpu/python/_C*.so /tmp/sfpy/sixfold/ ) >"$logs/pybuild.log" 2>&1 &
  pyjob=$!
fi
b=build-gpu
cli=$b/tools/sixfold/sixfold
tests=("$b/tests/test_norm_backward")
if [[ -n $prebuilt ]]; then
  cli=$prebuilt/sixfold
  tests=("$prebuilt/test_norm" "$prebuilt/test_norm_backward")
fi
for t in "${tests[@]}"; do
  name=$(basename "$t")
  el "tests $name"
  SIXFOLD_REQUIRE_GPU=1 timeout 150 "$t" --gtest_filter='*Cuda*' >"$logs/tests_$name.log" 2>&1
  echo "tests $name rc=$?" | tee -a "$s"
  grep -E "^\[  (PASSED|FAILED) |^\[       OK|^\[  FAILED" "$logs/tests_$name.log" | tee -a "$s"
done
for t in "${tests[@]}"; do
  name=$(basename "$t")
  el "memcheck $name"
  SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool memcheck \
    --error-exitcode 3 "$t" --gtest_filter='*Cuda*:-*Variants*' >"$logs/memcheck_$name.log" 2>&1
  echo "memcheck $name rc=$?" | tee -a "$s"
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$logs/memcheck_$name.log" | tail -3 | tee -a "$s"
done
if (( want_ncu )); then
  el "ncu (16384x8192 bf16, every bwd_rows_regs launch; cold caches)"
  mets=dram__bytes_read.sum,dram__bytes_write.sum,sm__inst_executed.sum,smsp__inst_executed.avg.per_cycle_active,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__throughput.avg.pct_of_peak_sustained_elapsed
  for v in smem; do
    SIXFOLD_NORM_BWD_KERNEL=$v SIXFOLD_NORM_CASES=backward SIXFOLD_NORM_SKIP_NAIVE=1 SIXFOLD_NORM_SHAPES=16384x8192 \
      timeout 100 ncu --clock-control none -k regex:bwd_rows_regs \
      --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
      --metrics "$mets,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio" \
      "$cli" bench norm --backend cuda --seconds 0.001 >"$logs/ncu_$v.log" 2>&1
    echo "ncu $v rc=$?" | tee -a "$s"
  done
fi
echo "== default, all shapes: SIXFOLD_NORM_CASES=backward SIXFOLD_NORM_SKIP_NAIVE=1 sixfold bench norm --backend cuda --seconds 0.25" >>"$logs/bench.log"
el "CLI bench, default, five shapes"
SIXFOLD_NORM_CASES=backward SIXFOLD_NORM_SKIP_NAIVE=1 timeout 120 "$cli" bench norm --backend cuda --seconds 0.25 >>"$logs/bench.log" 2>&1
if (( want_vars )); then
  for v in ${VARS:-smem1}; do
    el "  variant $v (16384x8192, 4096x4096, 65536x1024)"
    echo "== SIXFOLD_NORM_BWD_KERNEL=$v" >>"$logs/bench.log"
    SIXFOLD_NORM_BWD_KERNEL=$v SIXFOLD_NORM_CASES=backward SIXFOLD_NORM_SKIP_NAIVE=1 \
      SIXFOLD_NORM_SHAPES=16384x8192,4096x4096,65536x1024 \
      timeout 60 "$cli" bench norm --backend cuda --seconds 0.25 >>"$logs/bench.log" 2>&1
  done
  el "  no PDL for the reduction (4096x4096, 65536x1024)"
  echo "== SIXFOLD_NORM_BWD_NO_PDL=1" >>"$logs/bench.log"
  SIXFOLD_NORM_BWD_NO_PDL=1 SIXFOLD_NORM_CASES=backward SIXFOLD_NORM_SKIP_NAIVE=1 \
    SIXFOLD_NORM_SHAPES=4096x4096,65536x1024 \
    timeout 60 "$cli" bench norm --backend cuda --seconds 0.25 >>"$logs/bench.log" 2>&1
fi
if (( want_fwd )); then
  el "forward rms / layer (16384x8192, 4096x4096, 65536x1024)"
  echo "== forward: SIXFOLD_NORM_CASES=forward" >>"$logs/bench.log"
  SIXFOLD_NORM_CASES=forward SIXFOLD_NORM_SHAPES=16384x8192,4096x4096,65536x1024 \
    timeout 90 "$cli" bench norm --backend cuda --seconds 0.25 2>&1 | grep -v softmax >>"$logs/bench.log"
fi
grep -E "==|_backward|_norm bf16|copy" "$logs/bench.log" | grep -v "float64" | cut -c1-170 | tee -a "$s"
if (( want_torch )); then
  el "torch side by side"
  wait "$pyjob"; echo "pybuild rc=$?" | tee -a "$s"
  PYTHONPATH=/tmp/sfpy timeout 200 python3 bench/torch_norm.py --only backward >"$logs/torch.log" 2>&1
  echo "torch rc=$?" | tee -a "$s"
  grep -iE "backward" "$logs/torch.log" | cut -c1-170 | tee -a "$s"
fi
el "end"
