#!/usr/bin/env bash
# Call 6 of the twenty-sixth session (H200), at 751af4a: the filter benchmark at B = 128 and 1 (no FlashInfer
# carried), then B = 1's phase stamps at the defaults.
export PYTHONUNBUFFERED=1; mkdir -p $OUT; nvidia-smi --query-gpu=name --format=csv,noheader
( timeout 300 python3 ci/bench_gpu.py --filters --markdown $OUT/filters.md --json $OUT/filters.json 2>&1 \
    | tail -30 ) | tee $OUT/bench.txt; echo t=$SECONDS
( timeout 80 python3 ci/filter_stages.py --B 1 --all-tensors --stamps default 2>&1 | grep "^|" ) | tee $OUT/stamps.txt
echo t=$SECONDS
