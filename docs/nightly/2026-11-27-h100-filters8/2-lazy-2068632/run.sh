#!/usr/bin/env bash
# 14th session #2: lazy cut, pass 1 branch per row: traces lazy on/off, CUDA filter tests
export PYTHONUNBUFFERED=1 SPECVERIFY_COMMIT=$(cat probes/commit)
T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
(timeout 400 python3 -m pytest tests/test_triton_filters.py -v -n 4 -p no:cacheprovider > $OUT/cuda_filter_tests.log 2>&1; echo "cuda tests rc=$? t=$((SECONDS-T0))" >> $OUT/cuda_filter_tests.log) &
S='none;top_k=50;top_p=0.9;min_p=0.1;top_k=50, top_p=0.9'
python ci/filter_stages.py --B 128 --trace --all-tensors --settings "$S" > $OUT/trace.txt 2>&1; grep -E "trace|us" $OUT/trace.txt | tail -6
python ci/filter_stages.py --B 128 --trace --all-tensors --settings 'top_p=0.9' --set LAZY_CUT=0 > $OUT/trace-eager.txt 2>&1; grep -E "us" $OUT/trace-eager.txt | tail -2
python ci/filter_stages.py --B 128 --trace --settings 'top_p=0.9' > $OUT/trace-ponly.txt 2>&1; grep -E "us" $OUT/trace-ponly.txt | tail -2
python ci/filter_stages.py --B 128 --trace --all-tensors --settings 'top_p=0.9' --set RECORD_WARPS=8 --set RECORD_MAXNREG=0 > $OUT/trace-rec8.txt 2>&1; grep -E "us" $OUT/trace-rec8.txt | tail -2
python ci/filter_stages.py --B 128 --trace --all-tensors --settings 'top_p=0.9' --set BRACKET_WARPS=8 --set BRACKET_MAXNREG=0 > $OUT/trace-br8.txt 2>&1; grep -E "us" $OUT/trace-br8.txt | tail -2
wait
tail -3 $OUT/cuda_filter_tests.log; grep -E "FAIL|Error" $OUT/cuda_filter_tests.log | head
