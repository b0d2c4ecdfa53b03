#!/usr/bin/env bash
# The twenty-fifth session's first device call (written by the twenty-fourth, not yet run), from the repository
# root, $OUT the output folder, about 300 s: where the record's key searches spend their 4.4 us (top-k, at most 4
# tokens) and 7.0 us (top-p): the search's entry, its last tokens copied, ranked (d27121c, slots 21-23); then the
# stamps' CUDA test, which checks those stamps' order, and the latency in turn at the defaults.
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
( timeout 100 python3 ci/filter_stages.py --B 1 --all-tensors --stamps 2>&1 | grep "^|" ) | tee $OUT/stamps.txt
echo "t=$((SECONDS-T0))"
( timeout 80 python3 ci/filter_stages.py --B 1 --stamps 2>&1 | grep "^|" ) | tee $OUT/stamps_own.txt
echo "t=$((SECONDS-T0))"
( timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_filter_probe.py -n 4 2>&1 | tail -4 ) \
    | tee $OUT/tests.txt
echo "t=$((SECONDS-T0))"
