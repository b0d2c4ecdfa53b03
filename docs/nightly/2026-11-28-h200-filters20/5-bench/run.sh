#!/usr/bin/env bash
# Call 5 of the twenty-seventh session (H200, the same machine), from the repository root, $OUT the output folder:
# the B = 1 table at the new defaults (FlashInfer not carried).
export PYTHONUNBUFFERED=1; mkdir -p $OUT
( timeout 200 python3 ci/bench_gpu.py --filters --filter-batches 1 2>&1 | grep -v Warn ) | tee $OUT/bench_b1.txt
echo t=$SECONDS
