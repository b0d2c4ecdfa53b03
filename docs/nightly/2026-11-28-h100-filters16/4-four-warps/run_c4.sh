#!/usr/bin/env bash
# 23rd session, call 4: the one launch at 4 warps: its phases (probes/t_sub's sub-stamps) and latency A/B at HEAD
export PYTHONUNBUFFERED=1 SPECVERIFY_COMMIT=$(cat probes/commit)
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader; echo "commit $(cat probes/commit)"
( cd probes/t_sub && for v in "--set READ_WARPS=4" "--set READ_WARPS=4 --set SEARCH_TILE=128 --set TALLY_TILE=16"; do
  echo "== $v"; timeout 100 python3 ci/filter_stages.py --B 1 --stamps --all-tensors $v 2>&1 | tail -6; done ) | tee $OUT/substamps.txt
echo "t=$((SECONDS-T0))"
( timeout 200 python3 ci/filter_stages.py --B 1 --all-tensors --latency default READ_WARPS=4 --rounds 3 2>&1 | tail -10 ) | tee $OUT/latency.txt
echo "t=$((SECONDS-T0))"
