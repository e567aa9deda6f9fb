#!/usr/bin/env bash
# dev/norm/gpu_fwd.sh LOGDIR [probe] [torch] — one GPU session for the forward norms (norm.cu):
# CUDA tests of the forward and the fused residual add with the GPU required, compute-sanitizer
# memcheck on their small cases, `sixfold bench norm` forward rows on the five shapes, optionally
# (probe) dev/norm/fwd_probe.cu — per-call vs CUDA-graph time vs a copy of the same bytes, with
# the dev switches in SIXFOLD_NORM_FWD_VARIANTS (space-separated SIXFOLD_NORM_FWD values; "-" =
# none) and, where PREBUILT holds fwd_probe_v0 (the probe linked against an earlier norm.cu),
# that too — and optionally (torch) bench/torch_norm.py --only forward (PyTorch eager and
# torch.compile in the same process). SIXFOLD_NORM_SHAPES limits the CLI bench's shapes.
#
# Binaries: with PREBUILT=DIR (test_norm, test_norm_backward, sixfold, fwd_probe[_v0],
# libsixfold.a, built elsewhere from this tree for sm_90a), they are used as they are; otherwise
# scripts/gpu_quick.sh builds test_norm test_norm_backward sixfold_cli here (and the probe is
# compiled against build-gpu). The float64 naive rows are skipped (SIXFOLD_NORM_SKIP_NAIVE=1).
# Every step has its own time limit; LOGDIR/summary.txt is written as the steps go (it survives
# a kill), the full logs end up in LOGDIR/norm_fwd_logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?log folder}
want_probe=0 want_torch=0
for a in "${@:2}"; do
  [[ $a == probe ]] && want_probe=1
  [[ $a == torch ]] && want_torch=1
done
logs=$(mktemp -d)
mkdir -p "$out"
s="$out/summary.txt"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$s"; }
finish() { tar -czf "$out/norm_fwd_logs.tgz" -C "$logs" . ; }
trap finish EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,memory.total --format=csv,noheader | tee -a "$s"
if [[ -n ${PREBUILT:-} ]]; then
  bin=$PREBUILT
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  lib=$bin/libsixfold.a
  tn=$bin/test_norm tb=$bin/test_norm_backward cli=$bin/sixfold
  if ! "$tn" --gtest_list_tests >/dev/null 2>"$logs/prebuilt.log"; then
    el "prebuilt binaries do not run here ($(head -c 200 "$logs/prebuilt.log")); building"
    unset PREBUILT
  fi
fi
if [[ -z ${PREBUILT:-} ]]; then
  el "build"
  timeout 300 scripts/gpu_quick.sh test_norm test_norm_backward sixfold_cli >"$logs/build.log" 2>&1 \
    || { el "build failed"; tail -40 "$logs/build.log" | tee -a "$s"; exit 1; }
  tn=build-gpu/tests/test_norm tb=build-gpu/tests/test_norm_backward cli=build-gpu/tools/sixfold/sixfold
  lib=build-gpu/libsixfold.a bin=build-gpu
fi
pyjob=
if (( want_torch )); then  # the Python module in the background: bindings + nanobind, linked to $lib
  dev/build_pymod.sh "$lib" /tmp/sfpy >"$logs/pybuild.log" 2>&1 &
  pyjob=$!
fi
el "tests (GPU required)"
SIXFOLD_REQUIRE_GPU=1 timeout 120 "$tn" --gtest_filter='*Cuda*' >"$logs/tests.log" 2>&1
echo "test_norm rc=$?" | tee -a "$s"
SIXFOLD_REQUIRE_GPU=1 timeout 120 "$tb" --gtest_filter='AddNorm.*' >>"$logs/tests.log" 2>&1
echo "test_norm_backward AddNorm.* rc=$?" | tee -a "$s"
for v in ${SIXFOLD_NORM_FWD_VARIANTS:-}; do  # the dev switches' paths too
  [[ $v == - ]] && continue
  SIXFOLD_NORM_FWD=$v SIXFOLD_REQUIRE_GPU=1 timeout 120 "$tn" --gtest_filter='*Cuda*' >>"$logs/tests.log" 2>&1
  echo "test_norm SIXFOLD_NORM_FWD=$v rc=$?" | tee -a "$s"
done
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$logs/tests.log" | sort | uniq -c | tee -a "$s"
el "memcheck (small cases)"
SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool memcheck \
  --error-exitcode 3 "$tn" --gtest_filter='*Cuda*' >"$logs/memcheck.log" 2>&1
echo "memcheck test_norm rc=$?" | tee -a "$s"
SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 timeout 100 compute-sanitizer --tool memcheck \
  --error-exitcode 3 "$tb" --gtest_filter='AddNorm.Cuda*' >>"$logs/memcheck.log" 2>&1
echo "memcheck AddNorm rc=$?" | tee -a "$s"
grep -E "ERROR SUMMARY" "$logs/memcheck.log" | tee -a "$s"
if (( want_probe )); then
  if [[ ! -x $bin/fwd_probe ]]; then
    nvcc -std=c++20 -O2 -arch=sm_90a -Iinclude dev/norm/fwd_probe.cu "$lib" -lcublas -lgomp \
      -o "$bin/fwd_probe" >"$logs/probe_build.log" 2>&1 || el "probe build failed"
  fi
  for v in ${SIXFOLD_NORM_FWD_VARIANTS:--}; do
    el "probe SIXFOLD_NORM_FWD=$v"
    echo "== probe, SIXFOLD_NORM_FWD=$v" >>"$logs/probe.log"
    SIXFOLD_NORM_FWD=${v#-} timeout 60 "$bin/fwd_probe" >>"$logs/probe.log" 2>&1
  done
  if [[ -x $bin/fwd_probe_v0 ]]; then
    el "probe v0 (earlier norm.cu)"
    echo "== probe v0" >>"$logs/probe.log"
    timeout 60 "$bin/fwd_probe_v0" >>"$logs/probe.log" 2>&1
  fi
  cat "$logs/probe.log" >>"$s"
fi
shapes=${SIXFOLD_NORM_SHAPES:-16384x8192,4096x4096,65536x1024,256x262144,32x1048576}
el "CLI bench, forward, $shapes"
echo "== SIXFOLD_NORM_CASES=forward SIXFOLD_NORM_SKIP_NAIVE=1 SIXFOLD_NORM_SHAPES=$shapes sixfold bench norm --backend cuda --seconds 0.25" >>"$logs/bench.log"
SIXFOLD_NORM_CASES=forward SIXFOLD_NORM_SKIP_NAIVE=1 SIXFOLD_NORM_SHAPES=$shapes timeout 150 "$cli" bench norm --backend cuda --seconds 0.25 >>"$logs/bench.log" 2>&1
echo "bench rc=$?" | tee -a "$s"
grep -E "==|sixfold::|copy" "$logs/bench.log" | cut -c1-170 | tee -a "$s"
if (( want_torch )); then
  el "torch side by side"
  wait "$pyjob"; echo "pybuild rc=$?" | tee -a "$s"
  PYTHONPATH=/tmp/sfpy PYTHONUNBUFFERED=1 timeout 240 python3 bench/torch_norm.py --only forward >"$logs/torch.log" 2>&1
  echo "torch rc=$?" | tee -a "$s"
  cat "$logs/torch.log" | cut -c1-170 | tee -a "$s"
fi
el "end"
