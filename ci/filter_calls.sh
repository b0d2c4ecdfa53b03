#!/usr/bin/env bash
# The device calls that time and test B = 1's one launch (issue 29), from the repository root, $OUT the output folder;
# a nightly folder names the commit and the lines it ran.
# `bash ci/filter_calls.sh stamps V1 V2 ...`: the phases of B = 1's one launch under each variant of the settings;
#   (LIMIT=SECONDS: its time limit, 560 unless set)
# `bash ci/filter_calls.sh latency V1 V2 ...`: the latency in turn of each variant against the unfiltered call;
# `bash ci/filter_calls.sh both "V1 V2 ..." "W1 W2 ..."`: stamps of the first list, then the latency of the second;
# `bash ci/filter_calls.sh tests [FILE ...]`: the filter test files on CUDA (or those named), after a default changes;
#   (NPROC=N: its pytest workers, 16 unless set; LIMIT=s: its time limit, 560 unless set)
# `bash ci/filter_calls.sh misses V1 V2 ...`: how often B = 1's rows take the slow path under each variant
#   (S=...: the filter settings; CALLS=N: calls a round, 4000 unless set)
# `bash ci/filter_calls.sh ncu`: one call of each setting's one launch under Nsight Compute, its warp-state samples by
#   SASS instruction (source.csv.gz) and its details (LIMIT=s: the profiled run's limit, 200 unless set; NCU_FLAGS=...:
#   more ncu options, '--cache-control none' to keep the caches warm between passes)
# `bash ci/filter_calls.sh check "V1 V2 ..."`: the latency of each variant, then the one launch's and the filter cases'
# test files on CUDA in what is left of 530 s (a call that must both time and test a new default).
# Stamps print a row as each variant is measured, so that a call cut off by its limit keeps what it reached.
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
S=${S:-'top_k=50;top_p=0.9;top_k=50, top_p=0.9'}     # the filter settings, ';' between them (S=... to narrow)
SL=${SL:-$S}     # the latency's filter settings where they differ from the stamps' (SL=...)
stamps() {      # stamps TIMEOUT V1 V2 ...
    local limit=$1; shift
    ( timeout $limit python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --stamps "$@" 2>&1 \
        | grep --line-buffered "^|" ) | tee -a $OUT/stamps.txt
    echo "t=$((SECONDS-T0))"
}
latency() {     # latency TIMEOUT V1 V2 ...
    local limit=$1; shift
    ( timeout $limit python3 ci/filter_stages.py --B 1 --all-tensors --settings "$SL" --latency "$@" --rounds 3 \
        2>&1 | grep --line-buffered "^|" ) | tee -a $OUT/latency.txt
    echo "t=$((SECONDS-T0))"
}
case "$1" in
stamps) shift; stamps ${LIMIT:-560} "$@" ;;     # LIMIT=s: two narrowed calls in one
latency) shift; latency 560 "$@" ;;
both) stamps ${LIMIT:-330} $2; latency $((570 - (SECONDS - T0))) $3 ;;     # LIMIT=s: the stamps' share
tests)
    shift
    # the filter test files, or those named (they need more than one call's 560 s on a cold cache: name a part of
    # them, or pass --deselect for what a call finished); verbose into the file as they finish, so that a run cut
    # off by the limit keeps every result it reached
    files=${*:-tests/test_triton_filters.py tests/test_triton_lazy_cut.py tests/test_triton_one_launch*.py \
        tests/test_filter_probe.py tests/test_triton_slow_path.py tests/test_triton_copies.py \
        tests/test_triton_sample_counts.py tests/test_triton_rank.py}
    timeout ${LIMIT:-560} python3 -m pytest $files -p no:cacheprovider -v -n ${NPROC:-16} > $OUT/tests.txt 2>&1
    echo "rc=$? t=$((SECONDS-T0))"
    grep -cE " PASSED " $OUT/tests.txt; grep -E " FAILED | ERROR |passed|failed" $OUT/tests.txt | tail -20 ;;
misses)
    shift
    timeout 560 python3 ci/filter_misses.py --B 1 --all-tensors --settings "$S" --calls ${CALLS:-4000} --rounds 2 \
        "$@" 2>&1 | tee $OUT/misses.txt | grep --line-buffered "^|"
    echo "t=$((SECONDS-T0))" ;;
ncu)
    # the cut's launch alone (-k), the clocks left alone; each setting's one call after warm calls (--ncu)
    timeout ${LIMIT:-200} ncu --profile-from-start off --clock-control none ${NCU_FLAGS:-} -k regex:_cut_kernel \
        --section SourceCounters --section WarpStateStats --section LaunchStats -f -o $OUT/b1 \
        python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --ncu > $OUT/ncu.log 2>&1
    echo "rc=$? t=$((SECONDS-T0))"; tail -5 $OUT/ncu.log
    ncu -i $OUT/b1.ncu-rep --page source --print-source sass --csv 2>&1 | gzip > $OUT/source.csv.gz
    ncu -i $OUT/b1.ncu-rep --page details > $OUT/details.txt 2>&1
    echo "t=$((SECONDS-T0))"; ls -la $OUT; head -c 600 $OUT/details.txt ;;
check)
    latency 190 $2
    timeout $((530 - (SECONDS - T0))) python3 -m pytest tests/test_triton_one_launch*.py tests/test_triton_filters.py \
        -p no:cacheprovider -v -n 16 > $OUT/tests.txt 2>&1
    echo "rc=$? t=$((SECONDS-T0))"
    grep -cE " PASSED " $OUT/tests.txt; grep -E " FAILED | ERROR |passed|failed" $OUT/tests.txt | tail -20 ;;
*)
    echo "usage: filter_calls.sh stamps V ... | latency V ... | both 'V ...' 'W ...' | tests | misses V ... | ncu |" \
        "check 'V ...'" >&2
    exit 2 ;;
esac
