#!/usr/bin/env bash
# device run 2026-11-27 (11th session) #9: NC_GPU = 4 (tree on 382c55b) through the CUDA filter tests and the suite's filter cases, then its trace
export PYTHONUNBUFFERED=1 SPECVERIFY_COMMIT=$(cat probes/commit)
T0=$SECONDS
(timeout 200 python3 -m pytest tests/test_triton_filters.py -q -n 6 -p no:cacheprovider > $OUT/cuda_filter_tests.log 2>&1; echo "cuda tests rc=$? t=$((SECONDS-T0))" >> $OUT/cuda_filter_tests.log) &
(timeout 200 python3 -m pytest -p specverify.plugin --pyargs specverify.suite --specverify-backend=triton --specverify-profile=nightly -n 4 --dist loadgroup -k filter --specverify-json $OUT/suite.json > $OUT/suite.log 2>&1; echo "suite rc=$? t=$((SECONDS-T0))" >> $OUT/suite.log) &
wait
tail -3 $OUT/cuda_filter_tests.log; tail -3 $OUT/suite.log
timeout 45 python3 ci/filter_stages.py --B 128 --trace --all-tensors --settings "top_p=0.9;top_k=50, top_p=0.9;top_k=50" > $OUT/trace.txt 2>&1; echo "trace rc=$?"
grep -h trace $OUT/trace.txt
