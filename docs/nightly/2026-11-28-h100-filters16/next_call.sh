#!/usr/bin/env bash
# The twenty-fourth session's first device call (written by the twenty-third, not yet run): what 4422196, 34bcc67
# and 459eace left unverified, and the A/Bs they were built for. From the repository root, $OUT the output folder.
# About 420 s on a warm H100 (the tests are compile-bound): split it in two calls where 600 s is the limit.
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader; git rev-parse --short HEAD 2>/dev/null
# the record's phases and the splits' waits in-tree (4422196, 4129f0a), the tie group's division skipped
# (34bcc67), then the read's scan gather (459eace) and larger samples
for v in "" "--set ONE_LAUNCH_SCAN_GATHER=1" "--set ONE_LAUNCH_SCAN_GATHER=1 --set ONE_LAUNCH_TILE=1024" \
         "--set NS=8192" "--set NS=16384"; do
  echo "== $v"; timeout 75 python3 ci/filter_stages.py --B 1 --stamps --all-tensors $v 2>&1 | grep "^|"
done | tee $OUT/stamps.txt
echo "t=$((SECONDS-T0))"
( timeout 240 python3 ci/filter_stages.py --B 1 --all-tensors --latency default ONE_LAUNCH_SCAN_GATHER=1 \
    --rounds 3 2>&1 | tail -10 ) | tee $OUT/latency.txt
echo "t=$((SECONDS-T0))"
( timeout 330 python3 -m pytest -q -p no:cacheprovider tests/test_triton_one_launch.py tests/test_triton_filters.py \
    tests/test_triton_lazy_cut.py tests/test_filter_probe.py -n 16 2>&1 | tail -4 ) | tee $OUT/tests.txt
echo "t=$((SECONDS-T0))"
