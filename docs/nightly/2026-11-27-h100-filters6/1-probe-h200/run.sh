#!/bin/bash
# gather variants: each launch's time, top-p and top-k at B = 128
set -x
nvidia-smi --query-gpu=name,clocks.sm --format=csv
for v in atomic warp none; do
  GATHER_VARIANT=$v python probes/gather_probe.py ci/filter_stages.py --B 128 --trace --all-tensors --settings 'top_p=0.9;top_k=50' > $OUT/trace-$v.txt 2>&1
  tail -30 $OUT/trace-$v.txt
done
