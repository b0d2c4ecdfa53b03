#!/usr/bin/env bash
# dce6c2b on an NVIDIA H200 (torch 2.11, triton 3.6): ../next_call.sh stamps as it stood then, the sample bracket
# in one round of 64, 128 and 256 points for counts and masses alike (the top-p rows of 64 and 128 went down the
# slow path: one round's mass cells overflowed the gather), and 128 with the record's copy in two passes.
export PYTHONUNBUFFERED=1
S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
( timeout 560 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --stamps default \
    ONE_LAUNCH_ROUND_NG=64 ONE_LAUNCH_ROUND_NG=128 ONE_LAUNCH_ROUND_NG=256 \
    ONE_LAUNCH_ROUND_NG=128,ONE_LAUNCH_COPY_LANES=1 2>&1 | grep "^|" ) | tee $OUT/stamps.txt
