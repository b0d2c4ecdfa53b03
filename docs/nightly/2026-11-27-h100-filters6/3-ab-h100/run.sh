#!/bin/bash
# the ballot read: CUDA filter tests, then each launch against the last commit's (.base), same machine
nvidia-smi --query-gpu=name --format=csv
S='none;top_k=50;top_p=0.9;min_p=0.1;top_k=50, top_p=0.9'
(cd .base && python ci/filter_stages.py --B 128 --trace --all-tensors --settings "$S" 2>&1 | grep trace | sed 's/^/base /') | tee $OUT/trace-base.txt
python ci/filter_stages.py --B 128 --trace --all-tensors --settings "$S" 2>&1 | grep trace | sed 's/^/new /' | tee $OUT/trace-new.txt
python ci/filter_stages.py --B 128 --trace --all-tensors --settings 'top_k=50;top_k=50, top_p=0.9' --set PASS1_MAXNREG=0 2>&1 | grep trace | sed 's/^/new-p1r0 /' | tee $OUT/trace-new-p1r0.txt
timeout 300 python -m pytest -n 4 -q tests/test_triton_filters.py 2>&1 | tail -15 | tee $OUT/tests.txt
