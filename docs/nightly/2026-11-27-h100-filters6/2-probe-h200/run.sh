#!/bin/bash
# gather variants at 4 logits a thread: each launch's time, top-p and top-k at B = 128
nvidia-smi --query-gpu=name --format=csv
run() { tag=$1; shift; GATHER_VARIANT=$tag python probes/gather_probe.py ci/filter_stages.py --B 128 --trace --all-tensors --settings 'top_p=0.9;top_k=50' "$@" 2>&1 | grep trace | sed "s/^/$tag $* : /"; }
run atomic
run warp4 --set BLOCK_READ=1024 --set READ_MAXNREG=64
run warp4 --set BLOCK_READ=1024 --set READ_MAXNREG=0
run atomic --set BLOCK_READ=1024 --set READ_MAXNREG=64
run warp
