#!/usr/bin/env bash
# Call 5 of the twenty-sixth session (H200), at 751af4a: B = 1's latency in turn, filtered against unfiltered, at
# the new default (SLOW_TILE=1024) and the old (0), every filter setting; records compared with the default's.
export PYTHONUNBUFFERED=1; mkdir -p $OUT; nvidia-smi --query-gpu=name --format=csv,noheader
( timeout 380 python3 ci/filter_stages.py --B 1 --all-tensors --latency default SLOW_TILE=0 --rounds 3 2>&1 \
    | grep "^|" ) | tee $OUT/latency.txt; echo t=$SECONDS
