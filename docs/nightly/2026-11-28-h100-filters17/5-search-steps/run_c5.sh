#!/usr/bin/env bash
# 24th session, call 5 (the session's last 261 s of device time): the record's last key search in steps
# (d27121c's slots 21-23) at the defaults, all tensors, then the stamps' CUDA test, which checks their order
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
( timeout 90 python3 ci/filter_stages.py --B 1 --all-tensors --stamps 2>&1 | grep "^|" ) | tee $OUT/stamps.txt
echo "t=$((SECONDS-T0))"
( timeout 70 python3 -m pytest -q -p no:cacheprovider tests/test_filter_probe.py -k gpu 2>&1 | tail -3 ) \
    | tee $OUT/tests.txt
echo "t=$((SECONDS-T0))"
