#!/usr/bin/env bash
# The twenty-eighth session's device calls, from the repository root, $OUT the output folder.
# `bash next_call.sh stamps`: the phases of B = 1's one launch at the defaults and with the sample bracket in one
#   round (ONE_LAUNCH_ROUND_NG) of 64, 128 and 256 points, and 128 with the record's copy in two passes;
# `bash next_call.sh latency V1 V2 ...`: the latency in turn of each variant against the defaults;
# `bash next_call.sh pick`: the latency in turn and the phases with a search's last tokens picked into registers
#   (ONE_LAUNCH_COPY_LANES=2) against the defaults, at b6fb923 (the setting's value 2 was removed after it);
# `bash next_call.sh tests`: the six filter test files on CUDA, after a default changes.
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
case "$1" in
stamps)
    ( timeout 560 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --stamps default \
        ONE_LAUNCH_ROUND_NG=64 ONE_LAUNCH_ROUND_NG=128 ONE_LAUNCH_ROUND_NG=256 \
        ONE_LAUNCH_ROUND_NG=128,ONE_LAUNCH_COPY_LANES=1 2>&1 | grep "^|" ) | tee $OUT/stamps.txt
    echo "t=$((SECONDS-T0))" ;;
latency)
    shift
    ( timeout 560 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --latency default "$@" --rounds 3 \
        2>&1 | grep "^|" ) | tee $OUT/latency.txt
    echo "t=$((SECONDS-T0))" ;;
pick)
    ( timeout 250 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --latency default \
        ONE_LAUNCH_COPY_LANES=2 --rounds 3 2>&1 | grep "^|" ) | tee $OUT/latency.txt
    echo "t=$((SECONDS-T0))"
    ( timeout 250 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --stamps default \
        ONE_LAUNCH_COPY_LANES=2 2>&1 | grep "^|" ) | tee $OUT/stamps.txt
    echo "t=$((SECONDS-T0))" ;;
tests)
    timeout 560 python3 -m pytest tests/test_triton_filters.py tests/test_triton_lazy_cut.py \
        tests/test_triton_one_launch.py tests/test_filter_probe.py tests/test_triton_slow_path.py \
        tests/test_triton_copies.py -p no:cacheprovider -q -n 16 2>&1 | tail -15 | tee $OUT/tests.txt
    echo "t=$((SECONDS-T0))" ;;
*)
    echo "usage: next_call.sh stamps | latency VARIANT ... | pick | tests" >&2; exit 2 ;;
esac
