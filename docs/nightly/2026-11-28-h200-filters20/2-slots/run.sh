#!/usr/bin/env bash
# Call 2 of the twenty-seventh session (H200), from the repository root, $OUT the output folder. Call 1's lane
# gather and pack tile of 256 cut top-p's launch by 6 us; its record still copies the crossing's few tokens out of
# the whole list (6 us for top-p, 3.2 for top-k). With the pack one step a split, bucket slots (the count add waits
# for its answer, once a split now) may pay: phases at B = 1, then the latency in turn.
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
L=ONE_LAUNCH_SCAN_GATHER=2,TALLY_TILE=256
( timeout 250 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --stamps default $L \
    $L,ONE_LAUNCH_BUCKET_SLOTS=16 2>&1 | grep "^|" ) | tee $OUT/stamps.txt
echo "t=$((SECONDS-T0))"
( timeout 240 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --latency default $L \
    $L,ONE_LAUNCH_BUCKET_SLOTS=16 --rounds 3 2>&1 | grep "^|" ) | tee $OUT/latency.txt
echo "t=$((SECONDS-T0))"
