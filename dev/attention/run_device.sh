#!/usr/bin/env bash
# dev/attention/run_device.sh LOGDIR [MODES...] — on a GPU machine: make sure the harness runs
# (rebuild it there if the carried binary does not start), then run the given modes (default:
# sass check memcheck bench), each logged to LOGDIR/<mode>.log; a summary goes to stdout.
set -uo pipefail
cd "$(dirname "$0")/../.."
log=$1; shift
modes=${*:-sass check memcheck bench}
mkdir -p "$log"
H=build-dev/attn_harness
nvcc=/usr/local/cuda/bin/nvcc
if ! $H info > "$log/info.log" 2>&1; then
  echo "carried harness does not start ($(tail -1 "$log/info.log")); rebuilding"
  mkdir -p build-dev
  $nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++20 -Iinclude --expt-relaxed-constexpr \
    -Xcompiler -fopenmp -o $H dev/attention/harness.cu src/runtime/error.cpp src/runtime/dtype.cpp \
    > "$log/build.log" 2>&1 || { tail -20 "$log/build.log"; exit 1; }
fi
head -1 "$log/info.log"
for m in $modes; do
  case $m in
    sass)
      cuobjdump --dump-sass $H > "$log/sass.txt" 2>&1
      awk '/Function :/{f=$3} / HGMMA| HMMA| LDL| STL/{for(i=1;i<=NF;i++) if($i ~ /^(HGMMA|HMMA|LDL|STL)/){split($i,a,"."); c[f" "a[1]]++}} END{for(k in c) print c[k], k}' "$log/sass.txt" | sort -k2 | grep -i attn | sed 's/_ZN7sixfold6detail4attn//' ;;
    check) timeout 240 $H check > "$log/check.log" 2>&1; echo "check rc=$?"; grep -v "^ok" "$log/check.log" | tail -40 ;;
    memcheck) timeout 200 compute-sanitizer --tool memcheck $H small > "$log/memcheck.log" 2>&1; echo "memcheck rc=$?"; tail -4 "$log/memcheck.log" ;;
    bench) timeout 200 $H bench > "$log/bench.log" 2>&1; echo "bench rc=$?"; cat "$log/bench.log" ;;
  esac
done
