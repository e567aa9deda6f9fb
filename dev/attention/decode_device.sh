#!/usr/bin/env bash
# dev/attention/decode_device.sh LOGDIR — on a GPU machine, one pass for the decode split / PDL
# change: build the attention tests and the CLI (scripts/gpu_quick.sh) while the carried harness
# (build-dec/attn_harness, rebuilt here if it does not start) sweeps decode split counts with and
# without the programmatic-dependent merge launch; then the GPU tests, a memcheck of the decode
# tests, and `sixfold bench attention --backend cuda` with the new default. Logs in LOGDIR.
set -uo pipefail
cd "$(dirname "$0")/../.."
log=$1
mkdir -p "$log"
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
scripts/gpu_quick.sh test_attention_cuda test_attention sixfold_cli > "$log/build.log" 2>&1 &
build=$!
H=build-dec/attn_harness
if ! $H info > "$log/sweep.log" 2>&1; then
  stamp "carried harness does not start; rebuilding"
  mkdir -p build-dec
  /usr/local/cuda/bin/nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++20 -Iinclude --expt-relaxed-constexpr \
    -Xcompiler -fopenmp -o $H dev/attention/harness.cu src/runtime/error.cpp src/runtime/dtype.cpp >> "$log/sweep.log" 2>&1
fi
stamp "sweep (merge launched as a programmatic dependent)"
timeout 90 $H decode >> "$log/sweep.log" 2>&1; echo "rc=$?" >> "$log/sweep.log"
stamp "sweep without PDL"
echo "=== SIXFOLD_ATTENTION_CUDA_NO_PDL=1" >> "$log/sweep.log"
SIXFOLD_ATTENTION_CUDA_NO_PDL=1 timeout 90 $H decode >> "$log/sweep.log" 2>&1; echo "rc=$?" >> "$log/sweep.log"
grep -E "copy|splits|rc=|===" "$log/sweep.log"
stamp "waiting for the build"
wait $build; rc=$?
stamp "build rc=$rc"; tail -3 "$log/build.log"
[ $rc -eq 0 ] || exit 1
export SIXFOLD_REQUIRE_GPU=1
{
  timeout 120 build-gpu/tests/test_attention_cuda; echo "test_attention_cuda rc=$?"
  timeout 120 build-gpu/tests/test_attention --gtest_filter='AttentionCuda.*'; echo "test_attention rc=$?"
} > "$log/tests.log" 2>&1
grep -E "PASSED|FAILED|rc=" "$log/tests.log"; stamp "tests done"
timeout 100 compute-sanitizer --tool memcheck build-gpu/tests/test_attention_cuda \
  --gtest_filter='*DecodeSplitCounts*:*RepeatedCall*' > "$log/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -3 "$log/memcheck.log"; stamp "memcheck done"
timeout 100 build-gpu/tools/sixfold/sixfold bench attention --backend cuda > "$log/bench.log" 2>&1
echo "bench rc=$?"; grep -E "q1 |kv8192|kv32768|kv131072" "$log/bench.log" | head -20; stamp "bench done"
