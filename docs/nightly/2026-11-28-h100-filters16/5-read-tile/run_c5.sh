#!/usr/bin/env bash
# 23rd session, call 5: the one launch's read tile (ONE_LAUNCH_TILE: 256, its atomic gather's stalls a tile) at
# 1024 and 512: phases, and latency in one process
export PYTHONUNBUFFERED=1 SPECVERIFY_COMMIT=$(cat probes/commit)
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader; echo "commit $(cat probes/commit)"
( timeout 80 python3 ci/filter_stages.py --B 1 --stamps --all-tensors --set ONE_LAUNCH_TILE=1024 2>&1 | tail -5 ) | tee $OUT/stamps_1024.txt
echo "t=$((SECONDS-T0))"
( timeout 150 python3 ci/filter_stages.py --B 1 --all-tensors --latency default ONE_LAUNCH_TILE=1024 ONE_LAUNCH_TILE=512 --rounds 2 2>&1 | tail -13 ) | tee $OUT/latency.txt
echo "t=$((SECONDS-T0))"
