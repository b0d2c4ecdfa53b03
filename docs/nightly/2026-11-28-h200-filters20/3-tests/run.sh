#!/usr/bin/env bash
# Call 3 of the twenty-seventh session (H200), from the repository root, $OUT the output folder: at the new defaults
# (the lane gather, PACK_TILE=256), B = 4's latency in turn against the old ones (its splits read about 25,000
# logits each, so the lanes' second pass reads four times B = 1's), then the five filter test files on CUDA.
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
( timeout 130 python3 ci/filter_stages.py --B 4 --all-tensors --settings "$S" --latency default \
    ONE_LAUNCH_SCAN_GATHER=0,PACK_TILE=32 --rounds 2 2>&1 | grep "^|" ) | tee $OUT/latency_b4.txt
echo "t=$((SECONDS-T0))"
timeout 420 python3 -m pytest tests/test_triton_filters.py tests/test_triton_lazy_cut.py tests/test_triton_one_launch.py \
    tests/test_filter_probe.py tests/test_triton_slow_path.py -p no:cacheprovider -q -n 16 2>&1 | tail -15 \
    | tee $OUT/tests.txt
echo "t=$((SECONDS-T0))"
