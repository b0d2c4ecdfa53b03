#!/usr/bin/env bash
# The next session's first device calls (written by the twenty-seventh, not yet run), from the repository root, $OUT
# the output folder. Two settings built after this session's calls, each off:
# - ONE_LAUNCH_COPY_LANES=1: the record copies its key search's interval out of the row's whole list in two passes,
#   each lane counting its tokens and then storing them from its place (the copy takes 6 us of top-p's record at
#   B = 1 and 3 of top-k's: folder 2-slots, "last search: entered" to "copied");
# - ONE_LAUNCH_EARLY_ROUND=1: each split tallies its share of the bracket's first round with its pass-1 partials,
#   with drops from the sample's max, and publishes both at once (the first round's own share and wait take 3 us
#   of top-k's launch and 4.5 of top-p's: "norms" to "round 1 all"); 229 registers a thread against 188.
# `bash next_call.sh stamps` (about 300 s on a fresh machine): the phases under each, and both, in one process;
# `bash next_call.sh latency V` (about 250 s): the latency in turn of variant V against the defaults;
# `bash next_call.sh tests` (about 400 s cold): the six filter test files on CUDA, after a default changes.
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
case "$1" in
stamps)
    ( timeout 420 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --stamps default \
        ONE_LAUNCH_COPY_LANES=1 ONE_LAUNCH_EARLY_ROUND=1 ONE_LAUNCH_COPY_LANES=1,ONE_LAUNCH_EARLY_ROUND=1 2>&1 \
        | grep "^|" ) | tee $OUT/stamps.txt
    echo "t=$((SECONDS-T0))" ;;
latency)
    ( timeout 300 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --latency default "$2" --rounds 3 \
        2>&1 | grep "^|" ) | tee $OUT/latency.txt
    echo "t=$((SECONDS-T0))" ;;
tests)
    timeout 480 python3 -m pytest tests/test_triton_filters.py tests/test_triton_lazy_cut.py \
        tests/test_triton_one_launch.py tests/test_filter_probe.py tests/test_triton_slow_path.py \
        tests/test_triton_copies.py -p no:cacheprovider -q -n 16 2>&1 | tail -15 | tee $OUT/tests.txt
    echo "t=$((SECONDS-T0))" ;;
*)
    echo "usage: next_call.sh stamps | latency VARIANT | tests" >&2; exit 2 ;;
esac
