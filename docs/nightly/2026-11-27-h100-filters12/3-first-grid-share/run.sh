#!/usr/bin/env bash
# 19th session #3: fast pre-move + first grid on a quarter of the sample; traces B=1 and B=128, A/B, stamps
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
echo "commit $(cat probes/commit) (working tree)"
mkdir -p $OUT
for v in "" "--set FIRST_SHARE=1" "--set FIRST_SHARE=1 --set TALLY_N=0"; do
  echo "== B=1 $v"; timeout 100 python3 ci/filter_stages.py --B 1 --trace --all-tensors $v 2>&1 | grep trace
done | tee $OUT/trace_b1.txt
for v in "" "--set FIRST_SHARE=1"; do
  echo "== B=128 $v"; timeout 100 python3 ci/filter_stages.py --B 128 --trace --all-tensors $v 2>&1 | grep trace
done | tee $OUT/trace_b128.txt
( timeout 170 python3 probes/ab_sets.py 3 "TALLY_N=0,FIRST_SHARE=1" "default" 2>&1 | tail -12 ) | tee $OUT/ab.txt
cp probes/stamped/*.py specverify/kernels/
( timeout 100 python3 probes/stamps2.py 2>&1 | tail -40 ) | tee $OUT/stamps.txt
