#!/usr/bin/env bash
# The twenty-sixth session's first device calls (written by the twenty-fifth, not yet run), from the repository
# root, $OUT the output folder: `bash next_call.sh slow` (about 450 s), `bash next_call.sh b128` (about 300 s), then
# `bash next_call.sh tests` (about 300 s).
# slow: the slow path's cost a call, every bracket missed (BRACKET_SIGMAS=-3), in tiles of 128 reduced a tile
# (the default, SLOW_TILE=0) and in wide tiles (512, 1,024) summed once a read, from the row's max and, below a
# bracket, just below it first (SLOW_TILE, built untimed); then the misses on fresh logits a call at the
# defaults' 4 standard deviations and at 2 (220 slow rows of 40,000 for top-p, wherever they fall), each without
# and with SLOW_TILE=512: a slow row's cost is (mean - median) * calls / slow rows. b128: the same at B = 128,
# whose record launch waits for its slowest row (the three launches' record, SLOW_TILE 0, 256 and 512). tests: the
# five filter test files on CUDA, including the wide tiles' records against the reduced tiles' and the slow path's
# test kernel.
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
if [ "$1" = slow ]; then
  ( timeout 240 python3 ci/filter_misses.py --B 1 --all-tensors --settings "$S" --calls 100 --rounds 2 \
      BRACKET_SIGMAS=-3 BRACKET_SIGMAS=-3,SLOW_TILE=512 BRACKET_SIGMAS=-3,SLOW_TILE=1024 2>&1 | grep "^|" ) \
      | tee $OUT/forced.txt
  echo "t=$((SECONDS-T0))"
  ( timeout 270 python3 ci/filter_misses.py --B 1 --all-tensors --settings "$S" --calls 4000 --rounds 2 \
      default SLOW_TILE=512 BRACKET_SIGMAS=2 BRACKET_SIGMAS=2,SLOW_TILE=512 2>&1 | grep "^|" ) | tee $OUT/misses.txt
elif [ "$1" = b128 ]; then
  # B = 128's 640 rows: at 4 standard deviations about 1 call in 20 of top-p's has a slow row (3 of 40,000 rows at
  # B = 1), and its record launch waits for that row, which a median hides
  ( timeout 400 python3 ci/filter_misses.py --B 128 --all-tensors --settings "$S" --calls 300 --rounds 2 \
      default SLOW_TILE=256 SLOW_TILE=512 2>&1 | grep "^|" ) | tee $OUT/misses_b128.txt
else
  ( timeout 330 python3 -m pytest -q -p no:cacheprovider tests/test_triton_one_launch.py tests/test_triton_filters.py \
      tests/test_triton_lazy_cut.py tests/test_filter_probe.py tests/test_triton_slow_path.py -n 16 2>&1 | tail -4 ) \
      | tee $OUT/tests.txt
fi
echo "t=$((SECONDS-T0))"
