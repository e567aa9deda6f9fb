#!/usr/bin/env bash
# dev/attention/decode_device.sh LOGDIR — on a GPU machine, one pass for a decode kernel change:
# the harness (dev/attention/harness.cu) checks every kernel against the float64 reference,
# sweeps decode split counts (stream and CUDA-graph timings) and prints the host cost per call;
# then the attention GPU tests, a memcheck of the decode tests and `sixfold bench attention
# --backend cuda`. Logs in LOGDIR.
set -uo pipefail
cd "$(dirname "$0")/../.."
log=$1
mkdir -p "$log"
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
scripts/gpu_quick.sh test_attention_cuda test_attention sixfold_cli > "$log/build.log" 2>&1 &
build=$!
H=/tmp/attn_harness
/usr/local/cuda/bin/nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++20 -Iinclude --expt-relaxed-constexpr \
  -Xcompiler -fopenmp -o $H dev/attention/harness.cu src/runtime/error.cpp src/runtime/dtype.cpp > "$log/sweep.log" 2>&1
stamp "harness built rc=$?"
timeout 120 $H check > "$log/check.log" 2>&1; echo "harness check rc=$?"; tail -2 "$log/check.log"
stamp "sweep"
timeout 120 $H decode split >> "$log/sweep.log" 2>&1; echo "rc=$?" >> "$log/sweep.log"
timeout 60 $H decode1 >> "$log/sweep.log" 2>&1
grep -E "copy|splits|rc=|host|===" "$log/sweep.log"
stamp "waiting for the build"
wait $build; rc=$?
stamp "build rc=$rc"; tail -3 "$log/build.log"
[ $rc -eq 0 ] || exit 1
export SIXFOLD_REQUIRE_GPU=1
{
  timeout 150 build-gpu/tests/test_attention_cuda; echo "test_attention_cuda rc=$?"
  timeout 120 build-gpu/tests/test_attention --gtest_filter='AttentionCuda.*'; echo "test_attention rc=$?"
} > "$log/tests.log" 2>&1
grep -E "PASSED|FAILED|rc=" "$log/tests.log"; stamp "tests done"
timeout 150 compute-sanitizer --tool memcheck build-gpu/tests/test_attention_cuda \
  --gtest_filter='*DecodeSplitCounts*:*RepeatedCall*' > "$log/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -3 "$log/memcheck.log"; stamp "memcheck done"
timeout 100 build-gpu/tools/sixfold/sixfold bench attention --backend cuda > "$log/bench.log" 2>&1
echo "bench rc=$?"; grep -E "q1 |kv8192|kv32768|kv131072" "$log/bench.log" | head -20; stamp "bench done"
