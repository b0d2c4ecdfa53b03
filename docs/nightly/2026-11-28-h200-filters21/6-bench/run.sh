#!/usr/bin/env bash
# b6fb923, whose defaults are 7c764a4's (NVIDIA H200, the machine of call 5, its Triton cache warm): the issue's
# B = 1 table (FlashInfer not carried). The host was slow in this call: the unfiltered call took 50-57 us.
mkdir -p $OUT; ( timeout 140 python3 ci/bench_gpu.py --filters --filter-batches 1 2>&1 | grep -v Warn ) \
    | tee $OUT/bench_b1.txt
