#!/usr/bin/env bash
# device run 2026-11-27 (11th session) #2: same-machine A/B of each launch, HEAD (.base) vs the working tree
# (bracket tallies [NG, tile] with multiply-adds, ex2 without subnormals where e is only weighed), knobs
export PYTHONUNBUFFERED=1
echo "base commit $(cat probes/commit) + working tree"
nvidia-smi --query-gpu=name --format=csv,noheader
S="top_p=0.9;top_k=50;top_k=50, top_p=0.9;min_p=0.1"
(cd .base && timeout 150 python3 ci/filter_stages.py --B 128 --trace --all-tensors --settings "$S") > $OUT/trace-base.txt 2>&1; echo "base rc=$?"
timeout 150 python3 ci/filter_stages.py --B 128 --trace --all-tensors --settings "$S" > $OUT/trace-new.txt 2>&1; echo "new rc=$?"
timeout 100 python3 ci/filter_stages.py --B 128 --trace --all-tensors --settings "top_p=0.9;top_k=50" --set SAMPLE_TILE=128 > $OUT/trace-tile128.txt 2>&1; echo "tile128 rc=$?"
timeout 100 python3 ci/filter_stages.py --B 128 --trace --all-tensors --settings "top_p=0.9;top_k=50, top_p=0.9" --set RECORD_MAXNREG=128 > $OUT/trace-rec128.txt 2>&1; echo "rec128 rc=$?"
timeout 100 python3 ci/filter_stages.py --B 128 --trace --all-tensors --settings "top_p=0.9" --set RECORD_MAXNREG=168 > $OUT/trace-rec168.txt 2>&1; echo "rec168 rc=$?"
grep -h "trace" $OUT/trace-*.txt
(cd .base && timeout 100 python3 ci/filter_stages.py --B 1 --trace --all-tensors --settings "none;top_p=0.9;top_k=50") > $OUT/b1-base.txt 2>&1; echo "b1 base rc=$?"
timeout 100 python3 ci/filter_stages.py --B 1 --trace --all-tensors --settings "none;top_p=0.9;top_k=50" > $OUT/b1-new.txt 2>&1; echo "b1 new rc=$?"
timeout 100 python3 ci/filter_stages.py --B 1 --trace --all-tensors --settings "top_p=0.9;top_k=50" --set SAMPLE_TILE=128 > $OUT/b1-tile128.txt 2>&1; echo "b1 tile128 rc=$?"
grep -h "trace" $OUT/b1-*.txt
