#!/usr/bin/env bash
# 24th session, call 3: the new defaults (row tally at 256 keys, min-p alone's every-filter plan): the four filter
# test files on CUDA, then the one launch's phases and the latency in turn at B = 1, all tensors
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
( timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_triton_one_launch.py tests/test_triton_filters.py \
    tests/test_triton_lazy_cut.py tests/test_filter_probe.py -n 16 2>&1 | tail -4 ) | tee $OUT/tests.txt
echo "t=$((SECONDS-T0))"
( timeout 100 python3 ci/filter_stages.py --B 1 --all-tensors --stamps 2>&1 | grep "^|" ) | tee $OUT/stamps.txt
echo "t=$((SECONDS-T0))"
( timeout 160 python3 ci/filter_stages.py --B 1 --all-tensors --latency default --rounds 3 2>&1 | grep "^|" ) \
    | tee $OUT/latency.txt
echo "t=$((SECONDS-T0))"
