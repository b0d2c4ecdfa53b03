#!/usr/bin/env bash
# 24th session, call 2: where min-p alone's programs run and its every-filter plan; the row tally's latency A/B
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader; git rev-parse --short HEAD
( timeout 100 python3 ci/filter_stages.py --B 1 --settings "min_p=0.1" --stamps ONE_LAUNCH_EVERY_FILTER=0 default \
    2>&1 | grep "^|" ) | tee $OUT/stamps_min_p_alone.txt
echo "t=$((SECONDS-T0))"
( timeout 100 python3 ci/filter_stages.py --B 1 --settings "min_p=0.1" --latency ONE_LAUNCH_EVERY_FILTER=0 default \
    --rounds 3 2>&1 | grep "^|" ) | tee $OUT/latency_min_p_alone.txt
echo "t=$((SECONDS-T0))"
( timeout 300 python3 ci/filter_stages.py --B 1 --all-tensors --latency default ONE_LAUNCH_ROW_TALLY=1,TALLY_N=256 \
    --rounds 3 2>&1 | grep "^|" ) | tee $OUT/latency_row_tally.txt
echo "t=$((SECONDS-T0))"
