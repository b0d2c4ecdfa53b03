#!/usr/bin/env bash
# The thirtieth session's device calls, from the repository root, $OUT the output folder.
# `bash next_call.sh stamps V1 V2 ...`: the phases of B = 1's one launch under each variant of the settings;
# `bash next_call.sh latency V1 V2 ...`: the latency in turn of each variant against the unfiltered call;
# `bash next_call.sh both "V1 V2 ..." "W1 W2 ..."`: stamps of the first list, then the latency of the second;
# `bash next_call.sh tests`: the six filter test files on CUDA, after a default changes.
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
stamps() {      # stamps TIMEOUT V1 V2 ...
    local limit=$1; shift
    ( timeout $limit python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --stamps "$@" 2>&1 \
        | grep "^|" ) | tee -a $OUT/stamps.txt
    echo "t=$((SECONDS-T0))"
}
latency() {     # latency TIMEOUT V1 V2 ...
    local limit=$1; shift
    ( timeout $limit python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --latency "$@" --rounds 3 \
        2>&1 | grep "^|" ) | tee -a $OUT/latency.txt
    echo "t=$((SECONDS-T0))"
}
case "$1" in
stamps) shift; stamps 560 "$@" ;;
latency) shift; latency 560 "$@" ;;
both) stamps 330 $2; latency $((570 - (SECONDS - T0))) $3 ;;
tests)
    timeout 560 python3 -m pytest tests/test_triton_filters.py tests/test_triton_lazy_cut.py \
        tests/test_triton_one_launch.py tests/test_filter_probe.py tests/test_triton_slow_path.py \
        tests/test_triton_copies.py -p no:cacheprovider -q -n 16 2>&1 | tail -15 | tee $OUT/tests.txt
    echo "t=$((SECONDS-T0))" ;;
*)
    echo "usage: next_call.sh stamps V ... | latency V ... | both 'V ...' 'W ...' | tests" >&2; exit 2 ;;
esac
