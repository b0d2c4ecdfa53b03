#!/usr/bin/env bash
# The next session's first device call (written by the twenty-sixth, not yet run), from the repository root, $OUT
# the output folder: `bash next_call.sh b128` (about 200 s on a fresh machine). Every bracket missed at B = 128
# (BRACKET_SIGMAS=-3), so that each call's mean is the three launches' slow path: in tiles of 128 reduced a tile
# (0), of 256 (no more spills than 0 under the record's 96-register cap) and of 1,024 (the default, 3,848 bytes
# spilled). If 256 is the fastest there, the three launches' record wants its own tile.
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
( timeout 300 python3 ci/filter_misses.py --B 128 --all-tensors --settings 'top_k=50;top_p=0.9' --calls 15 \
    --rounds 2 BRACKET_SIGMAS=-3,SLOW_TILE=0 BRACKET_SIGMAS=-3,SLOW_TILE=256 BRACKET_SIGMAS=-3 2>&1 | grep "^|" ) \
    | tee $OUT/forced_b128.txt
echo "t=$((SECONDS-T0))"
