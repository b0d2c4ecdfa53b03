#!/usr/bin/env bash
# 24th session, call 4: at 256 row-tally keys, 2 of 10 top-p rows leave their crossing's search more than FINISH_N
# = 16 tokens (9-23, docs/nightly/2026-11-28-h100-filters17/0-vm): the record's phases with the ranked end at 32,
# and at 512 keys, then the latency of FINISH_N=32 against the defaults (B = 1, all tensors)
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
( timeout 250 python3 ci/filter_stages.py --B 1 --all-tensors --settings "top_k=50;top_p=0.9;top_k=50, top_p=0.9" \
    --stamps default FINISH_N=32 TALLY_N=512 TALLY_N=512,FINISH_N=32 2>&1 | grep "^|" ) | tee $OUT/stamps.txt
echo "t=$((SECONDS-T0))"
( timeout 170 python3 ci/filter_stages.py --B 1 --all-tensors --settings "top_p=0.9;top_k=50, top_p=0.9" \
    --latency default FINISH_N=32 --rounds 3 2>&1 | grep "^|" ) | tee $OUT/latency.txt
echo "t=$((SECONDS-T0))"
