#!/usr/bin/env bash
# 19th session #4: tallies + bucket-ordered pack + preset; traces, A/B latency, stamps, CUDA one-launch tests
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
echo "commit $(cat probes/commit) (working tree)"
mkdir -p $OUT
for v in "" "--set TALLY_N=0" "--set TALLY_N=32"; do
  echo "== B=1 $v"; timeout 90 python3 ci/filter_stages.py --B 1 --trace --all-tensors $v 2>&1 | grep trace
done | tee $OUT/trace_b1.txt
( timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_triton_one_launch.py 2>&1 | tail -5 ) | tee $OUT/tests.txt
( timeout 150 python3 probes/ab_sets.py 3 "TALLY_N=0" "default" 2>&1 | tail -12 ) | tee $OUT/ab.txt
cp probes/stamped/*.py specverify/kernels/
( timeout 90 python3 probes/stamps2.py 2>&1 | tail -40 ) | tee $OUT/stamps.txt
