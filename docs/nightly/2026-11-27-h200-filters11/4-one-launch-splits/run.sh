#!/usr/bin/env bash
# 17th session #4: the one launch's own split count (ONE_LAUNCH_PROGRAMS 128, at most 32 a row): traces, latency A/B, CUDA tests
export PYTHONUNBUFFERED=1
T0=$SECONDS
echo "commit $(cat probes/commit) + working tree"; nvidia-smi --query-gpu=name --format=csv,noheader
S='none;top_k=50;top_p=0.9;min_p=0.1;top_k=50, top_p=0.9'
for set in "--set ONE_LAUNCH_PROGRAMS=80 --set ONE_LAUNCH_SPLITS=16" "" "--set ONE_LAUNCH_PROGRAMS=132"; do
  n=$(echo "$set" | tr -c 'A-Za-z0-9\n' '_')
  timeout 100 python3 ci/filter_stages.py --B 1 --trace --all-tensors --settings "$S" $set > $OUT/trace$n.txt 2>&1; echo "trace [$set] rc=$? t=$((SECONDS-T0))"; grep trace $OUT/trace$n.txt
done
timeout 120 python3 ci/filter_stages.py --B 2 --trace --all-tensors --settings "$S" > $OUT/trace-b2.txt 2>&1; echo "trace B=2 rc=$?"; grep trace $OUT/trace-b2.txt
timeout $((580-(SECONDS-T0))) python3 -m pytest tests/test_triton_filters.py -q -n 8 -p no:cacheprovider > $OUT/cuda_filter_tests.log 2>&1; echo "cuda tests rc=$? t=$((SECONDS-T0))"; tail -2 $OUT/cuda_filter_tests.log; grep -E "FAIL|Error" $OUT/cuda_filter_tests.log | head
