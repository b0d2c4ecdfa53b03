#!/usr/bin/env bash
# Call 4 of the twenty-seventh session (H200, call 3's machine still held), from the repository root, $OUT the
# output folder: the twenty-sixth session's `next_call.sh b128`. Every bracket missed at B = 128 (BRACKET_SIGMAS=-3),
# so that each call's mean is the three launches' slow path, at SLOW_TILE 0, 256 and 1,024 (the default).
export PYTHONUNBUFFERED=1; mkdir -p $OUT
( timeout 270 python3 ci/filter_misses.py --B 128 --all-tensors --settings 'top_k=50;top_p=0.9' --calls 15 --rounds 2 \
    BRACKET_SIGMAS=-3,SLOW_TILE=0 BRACKET_SIGMAS=-3,SLOW_TILE=256 BRACKET_SIGMAS=-3 2>&1 | grep "^|" ) \
    | tee $OUT/forced_b128.txt; echo t=$SECONDS
