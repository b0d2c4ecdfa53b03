#!/usr/bin/env bash
# Call 3 of the twenty-fifth session (H200), from the repository root, $OUT the output folder: the bracket's width.
# Each token inside the sample bracket costs the read, the pack and the record (top-p's bracket holds about 130 a
# split, and its read is 8.9 us against top-k's 4.4); BRACKET_SIGMAS narrows it, NS=16384 halves its sample
# spread at a cost to the bracket's tally, SEARCH_TILE=512 doubles the record's copy tile. Phases in one process,
# then the latency in turn of the narrower brackets against the defaults.
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
( timeout 300 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --stamps default BRACKET_SIGMAS=3 \
    BRACKET_SIGMAS=2.5 NS=16384 NS=16384,BRACKET_SIGMAS=3 SEARCH_TILE=512 2>&1 | grep "^|" ) | tee $OUT/stamps.txt
echo "t=$((SECONDS-T0))"
( timeout 230 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --latency default BRACKET_SIGMAS=3 \
    BRACKET_SIGMAS=2.5 --rounds 3 2>&1 | grep "^|" ) | tee $OUT/latency.txt
echo "t=$((SECONDS-T0))"
