#!/usr/bin/env bash
# The next session's first device call (written by the twenty-seventh, not yet run), from the repository root, $OUT
# the output folder: `bash next_call.sh copy` (about 400 s on a fresh machine). The record's copy of its key
# search's interval out of the row's whole list takes 6 us of top-p's record at B = 1 and 3 of top-k's (folder
# 2-slots: "last search: entered" to "copied"); ONE_LAUNCH_COPY_LANES=1 copies in two passes, each lane counting its
# tokens and then storing them from its place, where the default scans each tile across the program. Phases, then
# the latency in turn; if the copy is faster, make it the default and run the five filter test files on CUDA.
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
case "$1" in
copy)
    ( timeout 200 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --stamps default \
        ONE_LAUNCH_COPY_LANES=1 2>&1 | grep "^|" ) | tee $OUT/stamps.txt
    echo "t=$((SECONDS-T0))"
    ( timeout 200 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --latency default \
        ONE_LAUNCH_COPY_LANES=1 --rounds 3 2>&1 | grep "^|" ) | tee $OUT/latency.txt
    echo "t=$((SECONDS-T0))" ;;
tests)
    timeout 450 python3 -m pytest tests/test_triton_filters.py tests/test_triton_lazy_cut.py \
        tests/test_triton_one_launch.py tests/test_filter_probe.py tests/test_triton_slow_path.py \
        tests/test_triton_copies.py -p no:cacheprovider -q -n 16 2>&1 | tail -15 | tee $OUT/tests.txt
    echo "t=$((SECONDS-T0))" ;;
*)
    echo "usage: next_call.sh copy|tests" >&2; exit 2 ;;
esac
