#!/usr/bin/env bash
# Call 4 of the twenty-fifth session (H200), from the repository root, $OUT the output folder, the default
# BRACKET_SIGMAS at 3 (call 3 timed 4, 3 and 2.5 by the median): how often each width misses its crossing, and the
# mean a call pays for the slow path, on fresh N(0, 9) logits a call (ci/filter_misses.py); then the four filter
# test files on CUDA at the new default.
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
( timeout 230 python3 ci/filter_misses.py --B 1 --all-tensors --settings 'top_k=50;top_p=0.9;top_k=50, top_p=0.9' \
    --calls 4000 --rounds 2 default BRACKET_SIGMAS=4 BRACKET_SIGMAS=2.5 BRACKET_SIGMAS=2 2>&1 | grep "^|" ) \
    | tee $OUT/misses.txt
echo "t=$((SECONDS-T0))"
( timeout 290 python3 -m pytest -q -p no:cacheprovider tests/test_triton_one_launch.py tests/test_triton_filters.py \
    tests/test_triton_lazy_cut.py tests/test_filter_probe.py -n 16 2>&1 | tail -4 ) | tee $OUT/tests.txt
echo "t=$((SECONDS-T0))"
