#!/usr/bin/env bash
# dev/selective_scan/gpu_run.sh LOGDIR [PHASE...] — the selective scan's checks on a Hopper GPU
# machine, most important first. Phases (default: core):
#   core    build (build-gpu, only the scan's targets), the C++ CUDA tests with the GPU required
#           (also with SIXFOLD_SSCAN_CW=2,4,8: the widths the bench shapes use),
#           the launch sweep (dev/selective_scan/sweep_launch.cpp, each launch checked against
#           the CPU backend), a previous kernel when PREV_KERNEL names its .cu (e.g. v3:
#           `git show 6c07e05:src/cuda/selective_scan.cu > /tmp/v3.cu`; same entry points, linked
#           in place of the library's) timed in the same run, compute-sanitizer memcheck on the
#           small CUDA cases, the CLI bench rows (GPU)
#   profile Nsight Compute on the default launch, shape $PROFILE_SHAPE (default 1): sections as
#           text (ncu.txt) and per-SASS-instruction stall samples (ncu_sass.csv)
#   racecheck  compute-sanitizer racecheck on the small CUDA scan cases
#   python  the Python extension, its tests with the GPU required, the PyTorch peers
#           (bench/torch_selective_scan.py --shapes $TORCH_SHAPES, default 0,1,2)
# Logs land in LOGDIR (at most 8 files); a summary is printed last.
set -uo pipefail
out=${1:?usage: dev/selective_scan/gpu_run.sh LOGDIR [core] [racecheck] [python]}
shift
phases=" ${*:-core} "
want() { [[ $phases == *" $1 "* ]]; }
mkdir -p "$out"
cd "$(dirname "$0")/../.."
t0=$SECONDS
stamp() { echo "== $* ($((SECONDS - t0)) s)" | tee -a "$out/checks.log"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >>"$out/checks.log" 2>&1

stamp "build"
# A previous kernel (PREV_KERNEL) as one object, compiled beside the library build.
mkdir -p /tmp/v3 && rm -f /tmp/v3/selective_scan.cu.o /tmp/v3/build.log
v3pid=
if [[ -n ${PREV_KERNEL:-} ]]; then
  cp "$PREV_KERNEL" src/cuda/zz_v3_tmp.cu
  (/usr/local/cuda/bin/nvcc -DSIXFOLD_WITH_CUDA=1 -Iinclude -O3 -DNDEBUG -std=c++20 --expt-relaxed-constexpr \
     -gencode=arch=compute_90a,code=sm_90a -Xcompiler=-fPIC -c src/cuda/zz_v3_tmp.cu -o /tmp/v3/selective_scan.cu.o \
     >/tmp/v3/build.log 2>&1; echo "previous kernel object: exit $?" >>/tmp/v3/build.log) &
  v3pid=$!
fi
scripts/gpu_quick.sh sixfold test_selective_scan sixfold_cli >"$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
if [[ -n $v3pid ]]; then
  wait $v3pid
  cat /tmp/v3/build.log >>"$out/build.log"
  rm -f src/cuda/zz_v3_tmp.cu
fi
grep -E "warning" "$out/build.log" | grep -i selective_scan | head -5

if want core; then
  stamp "C++ CUDA tests, GPU required"
  SIXFOLD_REQUIRE_GPU=1 timeout 150 build-gpu/tests/test_selective_scan --gtest_filter='*Cuda*' >>"$out/checks.log" 2>&1
  echo "tests exit $?" | tee -a "$out/checks.log"
  # The tests' shapes are small, so the default launch gives them Cw = 1: force the wider ones.
  for cw in 2 4 8; do
    SIXFOLD_SSCAN_CW=$cw SIXFOLD_REQUIRE_GPU=1 timeout 100 build-gpu/tests/test_selective_scan \
      --gtest_filter='SelectiveScanCuda.MatchesReference' >>"$out/checks.log" 2>&1
    echo "tests SIXFOLD_SSCAN_CW=$cw exit $?" | tee -a "$out/checks.log"
  done
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|Expected|Which is" "$out/checks.log" | head -12

  stamp "launch sweep (library kernel) + previous kernel (default launch), same run"
  flags=(-std=c++20 -O2 -fopenmp -Iinclude -I/usr/local/cuda/include dev/selective_scan/sweep_launch.cpp)
  libs=(-L/usr/local/cuda/lib64 -lcudart -lcublas)
  g++ "${flags[@]}" build-gpu/libsixfold.a "${libs[@]}" -o /tmp/sweep >>"$out/build.log" 2>&1 &&
    timeout 150 /tmp/sweep >"$out/sweep.txt" 2>&1
  echo "sweep exit $?" >>"$out/sweep.txt"
  if [[ -f /tmp/v3/selective_scan.cu.o ]]; then
    cp build-gpu/libsixfold.a /tmp/v3/lib.a && ar d /tmp/v3/lib.a selective_scan.cu.o &&
      ar r /tmp/v3/lib.a /tmp/v3/selective_scan.cu.o &&
      g++ "${flags[@]}" /tmp/v3/lib.a "${libs[@]}" -o /tmp/sweep_v3 >>"$out/build.log" 2>&1 &&
      { echo "---- previous kernel ($PREV_KERNEL), default launch"; timeout 60 /tmp/sweep_v3 --default; } >>"$out/sweep.txt" 2>&1
  fi
  grep -E "default|floor|exit|previous" "$out/sweep.txt"

  stamp "memcheck (small CUDA cases)"
  SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 \
    build-gpu/tests/test_selective_scan --gtest_filter='*Cuda*' >"$out/memcheck.log" 2>&1
  echo "memcheck exit $?" | tee -a "$out/memcheck.log"
  SIXFOLD_SSCAN_CW=8 SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 timeout 120 compute-sanitizer --tool memcheck \
    --error-exitcode 3 build-gpu/tests/test_selective_scan --gtest_filter='SelectiveScanCuda.MatchesReference' \
    >>"$out/memcheck.log" 2>&1
  echo "memcheck (SIXFOLD_SSCAN_CW=8) exit $?" | tee -a "$out/memcheck.log"
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log" | tail -4

  stamp "sixfold bench selective_scan (GPU rows)"
  timeout 90 build-gpu/tools/sixfold/sixfold bench selective_scan --backend cuda >"$out/bench_cuda.txt" 2>&1
  cat "$out/bench_cuda.txt"
fi

if want profile; then
  stamp "ncu (default launch, shape ${PROFILE_SHAPE:-1})"
  ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  [[ -x /tmp/sweep ]] || g++ -std=c++20 -O2 -fopenmp -Iinclude -I/usr/local/cuda/include dev/selective_scan/sweep_launch.cpp \
    build-gpu/libsixfold.a -L/usr/local/cuda/lib64 -lcudart -lcublas -o /tmp/sweep >>"$out/build.log" 2>&1
  timeout 150 "$ncu_bin" --clock-control none --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section Occupancy --section InstructionStats --section LaunchStats --section MemoryWorkloadAnalysis \
    --section SourceCounters -k regex:selective_scan_warps -c 1 -f -o /tmp/prof /tmp/sweep --once "${PROFILE_SHAPE:-1}" \
    >"$out/ncu.txt" 2>&1
  "$ncu_bin" --import /tmp/prof.ncu-rep >>"$out/ncu.txt" 2>&1
  "$ncu_bin" --import /tmp/prof.ncu-rep --page source --csv --print-source sass >"$out/ncu_sass.csv" 2>&1
  grep -E "Stall|Issued|Eligible|Achieved Occupancy|Registers|Executed Ipc|Warp Cycles Per|L1/TEX Hit|L2 Hit|Throughput" "$out/ncu.txt" | head -40
fi

if want racecheck; then
  stamp "racecheck (small CUDA scan cases)"
  SIXFOLD_SSCAN_CW=4 SIXFOLD_TEST_SMALL=1 SIXFOLD_REQUIRE_GPU=1 timeout 90 compute-sanitizer --tool racecheck \
    --error-exitcode 3 build-gpu/tests/test_selective_scan --gtest_filter='*Cuda*MatchesReference' >>"$out/memcheck.log" 2>&1
  echo "racecheck exit $?" | tee -a "$out/memcheck.log"
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$out/memcheck.log" | tail -2
fi

if want python; then
  stamp "python extension + pytest + torch peers"
  pkg=/tmp/sixfold-pkg
  if { cmake -S . -B build-gpu -DSIXFOLD_BUILD_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)" &&
       cmake --build build-gpu -j "$(nproc)" --target _C; } >>"$out/build.log" 2>&1; then
    mkdir -p "$pkg/sixfold" && cp python/sixfold/*.py "$pkg/sixfold/" && cp build-gpu/python/_C*.so "$pkg/sixfold/"
    (cd python/tests && SIXFOLD_REQUIRE_GPU=1 PYTHONPATH="$pkg" timeout 60 python3 -m pytest -q -rs test_selective_scan.py) \
      >>"$out/checks.log" 2>&1
    tail -2 "$out/checks.log"
    PYTHONUNBUFFERED=1 PYTHONPATH="$pkg" timeout 110 python3 bench/torch_selective_scan.py --shapes "${TORCH_SHAPES:-0,1,2}" \
      --json "$out/torch.json" >"$out/torch.txt" 2>&1
    cat "$out/torch.txt"
  else
    echo "python extension did not build (see build.log)"; tail -5 "$out/build.log"
  fi
fi
stamp "done"
