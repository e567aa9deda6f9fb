#!/usr/bin/env bash
# dev/ab_run.sh LOGDIR PHASE... — same-process A/B runs on a GPU machine of binaries built for
# sm_90a elsewhere and carried in AB_BIN (default build-topk/carry): AB_BIN/sixfold (the CLI
# under test, or AB_BIN/sixfold.xz), AB_BIN/sixfold_old.xz (the previous CLI, xz-compressed, optional) and the test
# binaries the phases name. Phases, in this order:
#   tests     the CUDA cases of each test binary in TESTS (GPU required, no memcheck)
#   sscan     test_selective_scan's CUDA cases with the GPU required, then compute-sanitizer
#             memcheck on its small cases (SIXFOLD_TEST_SMALL=1)
#   sscan-vars  the selective-scan rows (SIXFOLD_SSCAN_CASES=${SSCAN_CASES:-0,1,2}) of the new CLI
#             with SIXFOLD_SSCAN_KERNEL unset and set to each of SSCAN_VARS (default v5 p4 p8; an
#             entry NAME=VALUE sets that variable instead), two rounds
#   norm      the same for test_norm and test_norm_backward
#   sscan-ab  the selective-scan rows (SSCAN_CASES, default 0,1,2), old and new CLI alternating
#             (every A/B phase also runs AB_BIN/sixfold_NAME.xz for each NAME in AB_EXTRA)
#   decode    the selective-scan decode row (SIXFOLD_SSCAN_CASES=decode), old and new CLI
#             alternating, two rounds
#   norm-bwd  the norm backward rows on the first three shapes (SIXFOLD_NORM_CASES=backward,
#             naive rows skipped), old and new alternating, two rounds
#   act-test  test_activation's CUDA cases with the GPU required, then memcheck on the small ones
#   norm-fwd  the same for the forward and fused-add rows (shapes: FWD_AB_SHAPES; cases:
#             FWD_AB_CASES, default forward,add)
#   fwd-vars  test_norm (and memcheck) with each SIXFOLD_NORM_FWD of FWD_VARS (default s8), then
#             the forward and fused-add rows, default vs each, on FWD_SHAPES (default 65536x1024)
#   norm-all  every norm row of the new CLI (CUDA graph rows included), first three shapes
#   norm-vars the rms / layer / softmax backward rows of the new CLI with SIXFOLD_NORM_BWD_KERNEL unset and
#             set to each of VARS (default: regs regspf; an entry NAME=VALUE sets that variable
#             instead), two rounds; shapes NV_SHAPES (default the first three)
#   ncu-fwd   Nsight Compute on the forward register kernels (NCU_OPS, NCU_SHAPES) of the new CLI
#             and on torch.compile's (dev/norm/ncu_torch_fwd.py), same shapes
#   ncu-norm  Nsight Compute on the LayerNorm backward (saved statistics, 16384x8192 bf16):
#             sections and the per-SASS source page (csv)
#   torch-sscan  the Python selective-scan tests (GPU required) and bench/torch_selective_scan.py
#             (TORCH_ARGS), the extension built as for `torch`
#   racecheck-sscan  compute-sanitizer racecheck on test_selective_scan's small CUDA cases
#   pytest    python tests (PYTESTS, default test_torch_autograd.py test_norm_backward.py
#             test_frameworks.py) with the GPU required, the extension built as for `torch`
#   torch     bench/torch_norm.py (sixfold's Python wrapper beside PyTorch eager, the unfused
#             chain and torch.compile, same process; TORCH_ARGS, default all families and shapes),
#             the extension built here by dev/build_pymod.sh against AB_BIN/libsixfold.a.xz
#   act-vars  the activation rows (ACT_SHAPES) of the new CLI, default and with each entry of
#             ACT_VARS (NAME=VALUE[,NAME=VALUE...]) set, two rounds
#   act       test_activation (GPU required, memcheck), then bench/torch_activation.py (ACT_ARGS,
#             default --graph) with each of AB_BIN/libsixfold_old, _mid and libsixfold.a.xz built
#             into an extension (the older ones --sixfold-only), two rounds
# AB_TIMEOUT: seconds each CLI run of an A/B phase may take (default 150).
# Logs to LOGDIR; a summary is printed as it goes (LOGDIR/summary.txt).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?log folder}
shift
phases=" $* "
want() { [[ $phases == *" $1 "* ]]; }
mkdir -p "$out"
bin=${AB_BIN:-build-topk/carry}
t0=$SECONDS
el() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$out/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$out/summary.txt"
ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
cli_new=$bin/sixfold  # the CLI under test; carried as AB_BIN/sixfold.xz where it would not fit
if [[ ! -x $cli_new && -f $bin/sixfold.xz ]]; then
  cli_new=/tmp/sixfold_new && xz -dc "$bin/sixfold.xz" >"$cli_new" && chmod +x "$cli_new"
fi
old=
if [[ -f $bin/sixfold_old.xz ]]; then
  old=/tmp/sixfold_old && xz -dc "$bin/sixfold_old.xz" >"$old" && chmod +x "$old"
fi

test_bin() {  # test_bin TEST: its path (bin/TEST, or bin/TEST.xz unpacked to /tmp), or nothing
  local t=$bin/$1
  if [[ ! -x $t && -f $t.xz ]]; then xz -dc "$t.xz" >"/tmp/$1" && chmod +x "/tmp/$1" && t=/tmp/$1; fi
  [[ -x $t ]] && echo "$t"
}
gpu_cases() {  # gpu_cases TEST PATH: the CUDA cases with the GPU required
  el "$1 (GPU required)"
  SIXFOLD_REQUIRE_GPU=1 timeout 200 "$2" --gtest_filter='*Cuda*' >"$out/$1.log" 2>&1
  echo "$1 rc=$?" | tee -a "$out/summary.txt"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/$1.log" | tee -a "$out/summary.txt"
}
check() {  # check TEST: the CUDA cases with the GPU required, then memcheck on the small ones
  local t
  t=$(test_bin "$1") || { el "$1: not in $bin, skipped"; return; }
  gpu_cases "$1" "$t"
  el "$1 memcheck (small cases)"
  SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$t" --gtest_filter='*Cuda*:-*Variants*' >"$out/$1_memcheck.log" 2>&1
  echo "$1 memcheck rc=$?" | tee -a "$out/summary.txt"
  grep -E "ERROR SUMMARY" "$out/$1_memcheck.log" | tail -1 | tee -a "$out/summary.txt"
}
ab() {  # ab NAME ENV... -- BENCH ARGS: old and new CLI alternating, two rounds
  local name=$1; shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  el "A/B $name"
  for round in 1 2; do
    for which in old new ${AB_EXTRA:-}; do
      local cli=$cli_new
      if [[ $which == old ]]; then [[ -n $old ]] || continue; cli=$old; fi
      if [[ $which != old && $which != new ]]; then  # AB_EXTRA: bin/sixfold_NAME.xz
        cli=/tmp/sixfold_$which
        [[ -x $cli ]] || { xz -dc "$bin/sixfold_$which.xz" >"$cli" && chmod +x "$cli"; } || continue
      fi
      echo "== $name round $round: $which" >>"$out/$name.log"
      env "${envs[@]}" timeout "${AB_TIMEOUT:-150}" stdbuf -oL "$cli" bench "$@" >>"$out/$name.log" 2>&1
    done
  done
  grep -E "^==|sixfold::|copy" "$out/$name.log" | grep -v "^cpu" | cut -c1-160 | tee -a "$out/summary.txt"
}

if want tests; then  # TESTS: the CUDA cases of each with the GPU required (no memcheck)
  for t in ${TESTS:-}; do
    if b=$(test_bin "$t"); then gpu_cases "$t" "$b"; else el "$t: not in $bin, skipped"; fi
  done
fi
want sscan && check test_selective_scan
if want racecheck-sscan; then
  el "test_selective_scan racecheck (small cases)"
  SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 3 \
    "$bin/test_selective_scan" --gtest_filter='SelectiveScanCuda.KernelVersions*' >"$out/racecheck_sscan.log" 2>&1
  echo "racecheck rc=$?" | tee -a "$out/summary.txt"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/racecheck_sscan.log" | tail -2 | tee -a "$out/summary.txt"
fi
if want sscan-vars; then
  el "selective scan: default vs ${SSCAN_VARS:-v5 p4 p8}"
  for round in 1 2; do
    for v in default ${SSCAN_VARS:-v5 p4 p8}; do
      echo "== sscan round $round: $v" >>"$out/sscan_vars.log"
      ( if [[ $v == *=* ]]; then export "${v?}"; elif [[ $v != default ]]; then export SIXFOLD_SSCAN_KERNEL=$v; fi
        SIXFOLD_SSCAN_CASES=${SSCAN_CASES:-0,1,2} timeout 150 "$cli_new" bench selective_scan --backend cuda \
          --seconds 0.5 >>"$out/sscan_vars.log" 2>&1 )
    done
  done
  grep -E "^==|sixfold::|error|FAIL" "$out/sscan_vars.log" | cut -c1-160 | tee -a "$out/summary.txt"
fi
if want norm; then check test_norm; check test_norm_backward; fi
want sscan-ab && ab sscan SIXFOLD_SSCAN_CASES=${SSCAN_CASES:-0,1,2} -- selective_scan --backend cuda --seconds 0.5
want decode && ab decode SIXFOLD_SSCAN_CASES=decode -- selective_scan --backend cuda --seconds 0.5
want norm-bwd && ab norm_bwd SIXFOLD_NORM_CASES=backward SIXFOLD_NORM_SKIP_NAIVE=1 \
  SIXFOLD_NORM_SHAPES=${FWD_AB_SHAPES:-16384x8192,4096x4096,65536x1024} -- norm --backend cuda --seconds 0.25
want act-test && check test_activation
want norm-fwd && ab norm_fwd SIXFOLD_NORM_CASES=${FWD_AB_CASES:-forward,add} SIXFOLD_NORM_SKIP_NAIVE=1 \
  SIXFOLD_NORM_SHAPES=${FWD_AB_SHAPES:-16384x8192,4096x4096,65536x1024} -- norm --backend cuda --seconds 0.25

if want fwd-vars; then  # forward / fused add of the new CLI: default vs each SIXFOLD_NORM_FWD in FWD_VARS
  for v in ${FWD_VARS:-s8}; do
    el "test_norm with SIXFOLD_NORM_FWD=$v (GPU required), memcheck"
    SIXFOLD_NORM_FWD=$v SIXFOLD_REQUIRE_GPU=1 timeout 200 "$bin/test_norm" --gtest_filter='*Cuda*' >"$out/test_norm_$v.log" 2>&1
    echo "test_norm $v rc=$?" | tee -a "$out/summary.txt"
    SIXFOLD_NORM_FWD=$v SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 timeout 200 compute-sanitizer --tool memcheck \
      --error-exitcode 3 "$bin/test_norm" --gtest_filter='*Cuda*' >"$out/test_norm_${v}_memcheck.log" 2>&1
    echo "test_norm $v memcheck rc=$?" | tee -a "$out/summary.txt"
  done
  el "forward: default vs ${FWD_VARS:-s8} (${FWD_SHAPES:-65536x1024})"
  for round in 1 2; do
    for v in default ${FWD_VARS:-s8}; do
      echo "== fwd round $round: $v" >>"$out/fwd_vars.log"
      ( [[ $v != default ]] && export SIXFOLD_NORM_FWD=$v
        SIXFOLD_NORM_CASES=forward,add SIXFOLD_NORM_SKIP_NAIVE=1 SIXFOLD_NORM_SHAPES=${FWD_SHAPES:-65536x1024} \
        timeout 150 "$cli_new" bench norm --backend cuda --seconds 0.25 >>"$out/fwd_vars.log" 2>&1 )
    done
  done
  grep -E "^==|sixfold::" "$out/fwd_vars.log" | cut -c1-150 | tee -a "$out/summary.txt"
fi

if want norm-all; then  # every norm row of the new CLI (graph rows included) on the first three shapes
  el "norm bench, all cases, three shapes"
  SIXFOLD_NORM_SKIP_NAIVE=1 SIXFOLD_NORM_SHAPES=16384x8192,4096x4096,65536x1024 timeout 300 "$cli_new" bench norm \
    --backend cuda --seconds 0.25 >"$out/norm_all.log" 2>&1
  grep -E "sixfold::|copy" "$out/norm_all.log" | cut -c1-160 | tee -a "$out/summary.txt"
fi

if want norm-vars; then  # SIXFOLD_NORM_BWD_KERNEL variants of the new CLI (VARS), default first, two rounds
  el "norm backward variants: default ${VARS:-regs regspf}"
  for round in 1 2; do
    for v in default ${VARS:-regs regspf}; do
      echo "== variants round $round: $v" >>"$out/norm_vars.log"
      ( if [[ $v == *=* ]]; then export "${v?}"; elif [[ $v != default ]]; then export SIXFOLD_NORM_BWD_KERNEL=$v; fi
        SIXFOLD_NORM_CASES=backward SIXFOLD_NORM_SKIP_NAIVE=1 SIXFOLD_NORM_OPS=rms_norm_backward,layer_norm_backward,softmax_backward \
        SIXFOLD_NORM_SHAPES=${NV_SHAPES:-16384x8192,4096x4096,65536x1024} timeout 150 "$cli_new" bench norm --backend cuda \
        --seconds 0.25 >>"$out/norm_vars.log" 2>&1 )
    done
  done
  grep -E "^==|sixfold::" "$out/norm_vars.log" | cut -c1-150 | tee -a "$out/summary.txt"
fi

if want act-vars; then  # the activation rows of the new CLI, default and with each NAME=VALUE of ACT_VARS, two rounds
  el "activation variants: default ${ACT_VARS:-SIXFOLD_ACT_ROWS=2}"
  for round in 1 2; do
    for v in default ${ACT_VARS:-SIXFOLD_ACT_ROWS=2}; do
      echo "== act round $round: $v" >>"$out/act_vars.log"
      ( if [[ $v != default ]]; then for kv in ${v//,/ }; do export "${kv?}"; done; fi
        SIXFOLD_NORM_CASES=activation SIXFOLD_NORM_SKIP_NAIVE=1 SIXFOLD_NORM_SHAPES=${ACT_SHAPES:-4096x4096,65536x1024,16384x8192} \
        timeout 150 "$cli_new" bench norm --backend cuda --seconds 0.25 >>"$out/act_vars.log" 2>&1 )
    done
  done
  grep -E "^==|sixfold::" "$out/act_vars.log" | cut -c1-150 | tee -a "$out/summary.txt"
fi

if want ncu-norm; then
  el "ncu: layer_norm_backward (saved statistics) 16384x8192 bf16"
  SIXFOLD_NORM_CASES=backward SIXFOLD_NORM_SKIP_NAIVE=1 SIXFOLD_NORM_SHAPES=16384x8192 SIXFOLD_NORM_OPS=layer_norm_backward \
    timeout 200 "$ncu_bin" --clock-control none -k regex:bwd_rows_regs --launch-count 1 --import-source yes \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section SourceCounters \
    -o /tmp/norm_bwd -f "$cli_new" bench norm --backend cuda --seconds 0.001 >"$out/ncu_run.log" 2>&1
  echo "ncu rc=$?" | tee -a "$out/summary.txt"
  "$ncu_bin" --import /tmp/norm_bwd.ncu-rep >"$out/ncu_norm.txt" 2>&1
  "$ncu_bin" --import /tmp/norm_bwd.ncu-rep --page source --csv --print-source sass >"$out/ncu_norm_sass.csv" 2>&1
  grep -E "Duration|DRAM Throughput|Issued Ipc|Issue Slots Busy|No Eligible|Registers|Achieved Occupancy|Spilling" \
    "$out/ncu_norm.txt" | head -30 | tee -a "$out/summary.txt"
fi
if want ncu-fwd; then  # Nsight Compute: sixfold's forward register kernels and torch.compile's, same shapes
  secs=(--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats
        --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__cycles_active.avg)
  for op in ${NCU_OPS:-rms_norm layer_norm softmax}; do
    for shape in ${NCU_SHAPES:-65536x1024 4096x4096}; do
      el "ncu: sixfold $op $shape"
      SIXFOLD_NORM_CASES=forward SIXFOLD_NORM_SKIP_NAIVE=1 SIXFOLD_NORM_SHAPES=$shape SIXFOLD_NORM_OPS=$op \
        timeout 120 "$ncu_bin" --clock-control none -k regex:norm_rows --launch-skip 3 --launch-count 1 "${secs[@]}" \
        "$cli_new" bench norm --backend cuda --seconds 0.001 >"$out/ncu_fwd_${op}_$shape.txt" 2>&1
      echo "ncu rc=$?" | tee -a "$out/summary.txt"
    done
  done
  el "ncu: torch.compile forward kernels"
  timeout 300 "$ncu_bin" --clock-control none --profile-from-start off -k regex:triton "${secs[@]}" \
    python3 dev/norm/ncu_torch_fwd.py ${NCU_SHAPES:-65536x1024 4096x4096} >"$out/ncu_fwd_torch.txt" 2>&1
  echo "ncu torch rc=$?" | tee -a "$out/summary.txt"
  for f in "$out"/ncu_fwd_*.txt; do
    echo "== $(basename "$f")" | tee -a "$out/summary.txt"
    grep -E "^  [a-z_]+.*\(|profiling|Duration|DRAM Throughput|Registers Per|Block Size|Grid Size|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|Executed Instructions  |No Eligible|L1/TEX Hit|L2 Hit|dram__|lts__|sm__warps|smsp__cycles" \
      "$f" | cut -c1-120 | tee -a "$out/summary.txt"
  done
fi
if want ncu-sscan; then  # NCU_KERNEL (default selective_scan_seq), SSCAN_CASES (default 1: b8 L4096 d2048 n16)
  el "ncu: ${NCU_KERNEL:-selective_scan_seq}, selective scan case ${SSCAN_CASES:-1}"
  SIXFOLD_SSCAN_CASES=${SSCAN_CASES:-1} timeout 300 "$ncu_bin" --clock-control none -k regex:${NCU_KERNEL:-selective_scan_seq} \
    --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section SourceCounters \
    --section InstructionStats -o /tmp/sscan -f "$cli_new" bench selective_scan --backend cuda --seconds 0.001 \
    >"$out/ncu_sscan_run.log" 2>&1
  echo "ncu rc=$?" | tee -a "$out/summary.txt"
  "$ncu_bin" --import /tmp/sscan.ncu-rep >"$out/ncu_sscan.txt" 2>&1
  "$ncu_bin" --import /tmp/sscan.ncu-rep --page source --csv --print-source sass >"$out/ncu_sscan_sass.csv" 2>&1
  grep -E "Duration|DRAM Throughput|Issued Ipc|Issue Slots Busy|No Eligible|Registers|Achieved Occupancy|Spilling|Stall" \
    "$out/ncu_sscan.txt" | head -30 | tee -a "$out/summary.txt"
fi
if want torch; then
  el "torch side by side: bench/torch_norm.py ${TORCH_ARGS:-}"
  xz -dc "$bin/libsixfold.a.xz" >/tmp/libsixfold.a &&
    dev/build_pymod.sh /tmp/libsixfold.a /tmp/sfpy >"$out/pybuild.log" 2>&1
  echo "pybuild rc=$?" | tee -a "$out/summary.txt"
  # shellcheck disable=SC2086
  PYTHONPATH=/tmp/sfpy PYTHONUNBUFFERED=1 timeout 400 python3 bench/torch_norm.py ${TORCH_ARGS:-} \
    >"$out/torch_norm.txt" 2>&1
  echo "torch rc=$?" | tee -a "$out/summary.txt"
  cut -c1-170 "$out/torch_norm.txt" | tee -a "$out/summary.txt"
fi
if want torch-sscan; then  # bench/torch_selective_scan.py and the Python selective-scan tests, GPU required
  el "torch side by side: bench/torch_selective_scan.py ${TORCH_ARGS:-}"
  if [[ ! -d /tmp/sfpy/sixfold ]]; then
    xz -dc "$bin/libsixfold.a.xz" >/tmp/libsixfold.a &&
      dev/build_pymod.sh /tmp/libsixfold.a /tmp/sfpy >"$out/pybuild.log" 2>&1
    echo "pybuild rc=$?" | tee -a "$out/summary.txt"
  fi
  SIXFOLD_REQUIRE_GPU=1 PYTHONPATH=/tmp/sfpy timeout 200 python3 -m pytest -q python/tests/test_selective_scan.py \
    >"$out/pytest_sscan.txt" 2>&1
  echo "pytest rc=$?" | tee -a "$out/summary.txt"
  tail -3 "$out/pytest_sscan.txt" | tee -a "$out/summary.txt"
  # shellcheck disable=SC2086
  PYTHONPATH=/tmp/sfpy PYTHONUNBUFFERED=1 timeout 400 python3 bench/torch_selective_scan.py ${TORCH_ARGS:-} \
    >"$out/torch_sscan.txt" 2>&1
  echo "torch rc=$?" | tee -a "$out/summary.txt"
  cut -c1-170 "$out/torch_sscan.txt" | tee -a "$out/summary.txt"
fi
if want pytest; then  # Python tests (PYTESTS, default the norms' autograd and backward, frameworks), GPU required
  if [[ ! -d /tmp/sfpy/sixfold ]]; then
    xz -dc "$bin/libsixfold.a.xz" >/tmp/libsixfold.a &&
      dev/build_pymod.sh /tmp/libsixfold.a /tmp/sfpy >"$out/pybuild.log" 2>&1
    echo "pybuild rc=$?" | tee -a "$out/summary.txt"
  fi
  el "pytest ${PYTESTS:-test_torch_autograd.py test_norm_backward.py test_frameworks.py}"
  # shellcheck disable=SC2086
  (cd python/tests && SIXFOLD_REQUIRE_GPU=1 PYTHONPATH=/tmp/sfpy timeout 400 python3 -m pytest -q \
    ${PYTESTS:-test_torch_autograd.py test_norm_backward.py test_frameworks.py}) >"$out/pytest.txt" 2>&1
  echo "pytest rc=$?" | tee -a "$out/summary.txt"
  tail -5 "$out/pytest.txt" | tee -a "$out/summary.txt"
fi
if want act; then  # activations: tests, then the Python side by side of each library carried
  check test_activation
  pymods=()
  for lib in libsixfold_old libsixfold_mid libsixfold; do
    [[ -f $bin/$lib.a.xz ]] || continue
    xz -dc "$bin/$lib.a.xz" >"/tmp/$lib.a" && dev/build_pymod.sh "/tmp/$lib.a" "/tmp/py_$lib" >"$out/pybuild_$lib.log" 2>&1
    echo "pybuild $lib rc=$?" | tee -a "$out/summary.txt"
    pymods+=("$lib")
  done
  el "activations side by side: bench/torch_activation.py ${ACT_ARGS:---graph}"
  for round in 1 2; do
    for lib in "${pymods[@]}"; do
      args=${ACT_ARGS:---graph}
      [[ $lib == libsixfold ]] || args="$args --sixfold-only"
      echo "== round $round: $lib" >>"$out/torch_activation.txt"
      # shellcheck disable=SC2086
      PYTHONPATH=/tmp/py_$lib PYTHONUNBUFFERED=1 timeout 300 python3 bench/torch_activation.py $args \
        >>"$out/torch_activation.txt" 2>&1
    done
  done
  cut -c1-170 "$out/torch_activation.txt" | tee -a "$out/summary.txt"
fi
el "done"
