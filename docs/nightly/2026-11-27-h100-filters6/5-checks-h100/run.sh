#!/usr/bin/env bash
# device run 2026-11-27 (12th session) #5: the ballot read through the trace, CUDA filter tests, suite filter cases, memcheck
export PYTHONUNBUFFERED=1 SPECVERIFY_COMMIT=$(cat probes/commit)
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
S='none;top_k=50;top_p=0.9;min_p=0.1;top_k=50, top_p=0.9'
python ci/filter_stages.py --B 128 --trace --all-tensors --settings "$S" > $OUT/trace.txt 2>&1; grep trace $OUT/trace.txt
python ci/filter_stages.py --B 1 --trace --all-tensors --settings "$S" > $OUT/trace-b1.txt 2>&1; grep trace $OUT/trace-b1.txt
(timeout 300 python3 -m pytest tests/test_triton_filters.py -v -n 4 -p no:cacheprovider > $OUT/cuda_filter_tests.log 2>&1; echo "cuda tests rc=$? t=$((SECONDS-T0))" >> $OUT/cuda_filter_tests.log) &
(timeout 300 python3 -m pytest -p specverify.plugin --pyargs specverify.suite --specverify-backend=triton --specverify-profile=nightly -n 4 --dist loadgroup -k filter --specverify-json $OUT/suite.json > $OUT/suite.log 2>&1; echo "suite rc=$? t=$((SECONDS-T0))" >> $OUT/suite.log) &
wait
tail -3 $OUT/cuda_filter_tests.log; tail -8 $OUT/suite.log
timeout $((590-(SECONDS-T0))) compute-sanitizer --tool memcheck --error-exitcode 99 python3 ci/sanitizer_driver.py > $OUT/memcheck.log 2>&1; echo "memcheck rc=$? t=$((SECONDS-T0))"
tail -6 $OUT/memcheck.log
