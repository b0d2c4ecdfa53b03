#!/usr/bin/env bash
# 23rd session, call 1: what the 22nd left unverified: stamps, maxnreg and SM-cap A/Bs, CUDA filter tests
export PYTHONUNBUFFERED=1 SPECVERIFY_COMMIT=$(cat probes/commit)
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader; echo "commit $(cat probes/commit)"
( timeout 120 python3 ci/filter_stages.py --B 1 --stamps --all-tensors 2>&1 | tail -14 ) | tee $OUT/stamps_all.txt
echo "t=$((SECONDS-T0))"
( timeout 90 python3 ci/filter_stages.py --B 1 --stamps 2>&1 | tail -14 ) | tee $OUT/stamps_own.txt
echo "t=$((SECONDS-T0))"
( timeout 90 python3 ci/filter_stages.py --B 1 --trace --all-tensors 2>&1 | grep trace ) | tee $OUT/trace.txt
echo "t=$((SECONDS-T0))"
( timeout 100 python3 ci/filter_stages.py --B 1 --latency default ONE_LAUNCH_MAXNREG=0 --rounds 3 2>&1 | tail -8 ) | tee $OUT/latency_maxnreg_own.txt
echo "t=$((SECONDS-T0))"
( timeout 100 python3 ci/filter_stages.py --B 4 --all-tensors --latency default ONE_LAUNCH_FIT_SMS=0 --rounds 3 2>&1 | tail -8 ) | tee $OUT/latency_fit_b4.txt
echo "t=$((SECONDS-T0))"
