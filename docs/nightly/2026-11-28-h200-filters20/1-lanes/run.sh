#!/usr/bin/env bash
# Call 1 of the twenty-seventh session (H200), from the repository root, $OUT the output folder. The lane gather
# (ONE_LAUNCH_SCAN_GATHER=2: each lane's tokens counted in the read and stored in a second pass, no atomic a tile)
# and the pack's tile (TALLY_TILE: the row tally's bucket_pack copies and tallies a split's tokens 32 a step,
# about five dependent steps for top-p's 130): phases in one process, then the latency in turn of both together.
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
( timeout 300 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --stamps default ONE_LAUNCH_SCAN_GATHER=2 \
    TALLY_TILE=128 TALLY_TILE=256 ONE_LAUNCH_SCAN_GATHER=2,TALLY_TILE=256 2>&1 | grep -v Warn ) | tee $OUT/stamps.txt
echo "t=$((SECONDS-T0))"
( timeout 230 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --latency default \
    ONE_LAUNCH_SCAN_GATHER=2,TALLY_TILE=256 --rounds 3 2>&1 | grep "^|" ) | tee $OUT/latency.txt
echo "t=$((SECONDS-T0))"
