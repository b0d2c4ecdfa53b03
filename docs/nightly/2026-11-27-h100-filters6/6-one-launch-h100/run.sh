#!/usr/bin/env bash
# device run 2026-11-27 (12th session) #6: each launch at B = 1 and 128 after the one-launch plan's atomic gather
nvidia-smi --query-gpu=name --format=csv,noheader
S='none;top_k=50;top_p=0.9;min_p=0.1;top_k=50, top_p=0.9'
python ci/filter_stages.py --B 1 --trace --all-tensors --settings "$S" > $OUT/trace-b1.txt 2>&1; grep trace $OUT/trace-b1.txt
python ci/filter_stages.py --B 128 --trace --all-tensors --settings "$S" > $OUT/trace.txt 2>&1; grep trace $OUT/trace.txt
timeout 100 python3 -m pytest tests/test_triton_filters.py -q -n 4 -p no:cacheprovider -k "one_launch or ranking" 2>&1 | tail -2
