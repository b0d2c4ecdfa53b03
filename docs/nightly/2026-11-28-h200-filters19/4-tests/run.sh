#!/usr/bin/env bash
# Call 4 of the twenty-sixth session (H200, call 3's machine still held, its Triton cache warm), at 751af4a: the
# five filter test files on CUDA, whole, with the slowest durations.
export PYTHONUNBUFFERED=1; mkdir -p $OUT
( timeout 480 python3 -m pytest -q -p no:cacheprovider tests/test_triton_one_launch.py tests/test_triton_filters.py \
    tests/test_triton_lazy_cut.py tests/test_filter_probe.py tests/test_triton_slow_path.py -n 16 --durations=8 \
    2>&1 | tail -16 ) | tee $OUT/tests.txt; echo t=$SECONDS
