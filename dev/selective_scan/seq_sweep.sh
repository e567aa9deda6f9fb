#!/usr/bin/env bash
# dev/selective_scan/seq_sweep.sh LOGDIR [BIN] — version 6's configurations (SIXFOLD_SSCAN_KERNEL=cfg:S,P,Tc,K,minblocks,
# f32 only) against the default and version 5 on the bench shapes, one process per run, one round.
set -uo pipefail
out=${1:?log folder}; bin=${2:-build-topk/carry/sixfold}
mkdir -p "$out"
run() {  # run CASES VARIANT...
  local cases=$1; shift
  for v in "$@"; do
    echo "== $v" >>"$out/seq_sweep.log"
    ( [[ $v != default ]] && export SIXFOLD_SSCAN_KERNEL=$v
      SIXFOLD_SSCAN_CASES=$cases timeout 120 "$bin" bench selective_scan --backend cuda --seconds 0.3 >>"$out/seq_sweep.log" 2>&1 )
  done
}
run 0,1 ${SWEEP16:-default v5 cfg:4,4,32,1,1 cfg:2,8,32,1,1 cfg:4,4,16,1,2 cfg:2,8,16,1,2 cfg:4,4,16,2,1 cfg:2,8,16,2,1}
run 2 ${SWEEP64:-default v5 cfg:16,4,16,1,1 cfg:8,8,16,2,1 cfg:16,4,16,1,2 cfg:8,8,16,1,2 cfg:8,8,32,1,1}
grep -E "^==|sixfold::|rror" "$out/seq_sweep.log" | cut -c1-150
