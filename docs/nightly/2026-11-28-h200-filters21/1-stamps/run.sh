#!/usr/bin/env bash
# 7d17f88 on an NVIDIA H200 (torch 2.11, triton 3.6): the phases of B = 1's one launch at the defaults, with the
# record's copy in two passes, with the bracket's first round tallied with pass 1, and both; one process.
# This is ../../2026-11-28-h200-filters20/next_call.sh stamps, its timeout raised from 420 to 540 s.
export PYTHONUNBUFFERED=1
S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
( timeout 540 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --stamps default \
    ONE_LAUNCH_COPY_LANES=1 ONE_LAUNCH_EARLY_ROUND=1 ONE_LAUNCH_COPY_LANES=1,ONE_LAUNCH_EARLY_ROUND=1 2>&1 \
    | grep "^|" ) | tee $OUT/stamps.txt
