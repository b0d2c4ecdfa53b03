#!/usr/bin/env bash
# The twenty-fifth session's first device calls (written by the twenty-fourth, not yet run), from the repository
# root, $OUT the output folder: `bash next_call.sh slots` (about 330 s), then `bash next_call.sh tests` (about 300 s).
# slots: the bucket slots (ONE_LAUNCH_BUCKET_SLOTS, built untimed): a search whose interval is one bucket ranks
# the slots' tokens where they lie, where the defaults copy them out of the whole list (top-k's copy 2.7 us of its
# 4.4 us search, top-p's 4.9 of 7.0: folder 5). The phases and search steps at 0, 16 and 32 slots in one process,
# then the latency of the better against the defaults. tests: the four filter test files on CUDA (the slots'
# cases, and the stamps' CUDA test, whose search steps folder 5 could not finish in its 70 s).
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
if [ "$1" = slots ]; then
  ( timeout 200 python3 ci/filter_stages.py --B 1 --all-tensors --stamps default ONE_LAUNCH_BUCKET_SLOTS=16 \
      ONE_LAUNCH_BUCKET_SLOTS=32 2>&1 | grep "^|" ) | tee $OUT/stamps.txt
  echo "t=$((SECONDS-T0))"
  ( timeout 200 python3 ci/filter_stages.py --B 1 --all-tensors --latency default ONE_LAUNCH_BUCKET_SLOTS=16 \
      --rounds 3 2>&1 | grep "^|" ) | tee $OUT/latency.txt
else
  ( timeout 330 python3 -m pytest -q -p no:cacheprovider tests/test_triton_one_launch.py tests/test_triton_filters.py \
      tests/test_triton_lazy_cut.py tests/test_filter_probe.py -n 16 2>&1 | tail -4 ) | tee $OUT/tests.txt
fi
echo "t=$((SECONDS-T0))"
