#!/usr/bin/env bash
# 23rd session, call 2: the record's sub-phases (probes/t_sub: HEAD with stamps inside write_record and resolve,
# STAMPS_N 16), under two search settings; the four filter test files on CUDA at HEAD
export PYTHONUNBUFFERED=1 SPECVERIFY_COMMIT=$(cat probes/commit)
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader; echo "commit $(cat probes/commit)"
( cd probes/t_sub && for v in "" "--set FINISH_N=64" "--set TALLY_N=128 --set TALLY_TILE=16"; do
  echo "== $v"; timeout 100 python3 ci/filter_stages.py --B 1 --stamps --all-tensors $v 2>&1 | tail -6; done ) | tee $OUT/substamps.txt
echo "t=$((SECONDS-T0))"
( timeout 330 python3 -m pytest -q -p no:cacheprovider tests/test_triton_one_launch.py tests/test_triton_filters.py tests/test_triton_lazy_cut.py tests/test_filter_probe.py -n 16 2>&1 | tail -6 ) | tee $OUT/tests.txt
echo "t=$((SECONDS-T0))"
