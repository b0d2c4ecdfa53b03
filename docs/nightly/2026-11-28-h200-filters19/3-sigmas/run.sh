#!/usr/bin/env bash
# Call 3 of the twenty-sixth session (H200), at SLOW_TILE=1024 (751af4a's default, then uncommitted): the five
# filter test files on CUDA, cut by their 330 s timeout three or so tests short (call 4 ran them whole), then the
# misses at B = 1 at 4, 3 and 2.5 standard deviations.
export PYTHONUNBUFFERED=1; mkdir -p $OUT; nvidia-smi --query-gpu=name --format=csv,noheader
S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
( timeout 330 python3 -m pytest -q -p no:cacheprovider tests/test_triton_one_launch.py tests/test_triton_filters.py \
    tests/test_triton_lazy_cut.py tests/test_filter_probe.py tests/test_triton_slow_path.py -n 16 2>&1 | tail -4 ) \
    | tee $OUT/tests_cut_at_330s.txt; echo t=$SECONDS
( timeout 220 python3 ci/filter_misses.py --B 1 --all-tensors --settings "$S" --calls 2500 --rounds 2 default \
    BRACKET_SIGMAS=3 BRACKET_SIGMAS=2.5 2>&1 | grep "^|" ) | tee $OUT/sigmas.txt; echo t=$SECONDS
