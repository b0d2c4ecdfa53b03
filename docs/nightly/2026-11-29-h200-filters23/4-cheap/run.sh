#!/usr/bin/env bash
# The sample's addresses in int32 and, with the whole sample loaded after pass 1, computed there: phases of both
# settings, the whole sample's and the bracket's tests on CUDA (verbose, so that a cut-off run keeps its results),
# then latency in turn with what is left of the call.
export PYTHONUNBUFFERED=1
OUT=$OUT/4-cheap; mkdir -p $OUT; T0=$SECONDS
S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
( timeout 200 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --stamps ONE_LAUNCH_WHOLE_SAMPLE=0 \
    ONE_LAUNCH_WHOLE_SAMPLE=2 2>&1 | grep "^|" ) | tee $OUT/stamps.txt
echo "t=$((SECONDS-T0))"
K="counts or whole or split_limit or sharing or one_round or reading_ahead or refused"
timeout 200 python3 -m pytest tests/test_triton_sample_counts.py tests/test_triton_one_launch.py -p no:cacheprovider \
    -v -n 16 -k "$K" > $OUT/tests.txt 2>&1
echo "tests rc=$? t=$((SECONDS-T0))"; grep -E "passed|failed|PASSED|FAILED|ERROR" $OUT/tests.txt | tail -40
( timeout $((540 - (SECONDS - T0))) python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --latency default \
    ONE_LAUNCH_WHOLE_SAMPLE=2 --rounds 3 2>&1 | grep "^|" ) | tee $OUT/latency.txt
echo "t=$((SECONDS-T0))"
