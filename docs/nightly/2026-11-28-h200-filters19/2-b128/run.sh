#!/usr/bin/env bash
# Call 2 of the twenty-sixth session (H200), from the repository root, $OUT the output folder: the misses at
# B = 128, whose record launch waits for its slowest row, at the defaults (SLOW_TILE=0 then), in wide tiles of
# 1,024, and in wide tiles with a bracket of 3 standard deviations.
export PYTHONUNBUFFERED=1; mkdir -p $OUT; nvidia-smi --query-gpu=name --format=csv,noheader
S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
( timeout 540 python3 ci/filter_misses.py --B 128 --all-tensors --settings "$S" --calls 300 --rounds 2 default \
    SLOW_TILE=1024 SLOW_TILE=1024,BRACKET_SIGMAS=3 2>&1 | grep "^|" ) | tee $OUT/misses_b128.txt; echo t=$SECONDS
