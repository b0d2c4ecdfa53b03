#!/usr/bin/env bash
# 22nd session, call 2: bisect min-p's +5.5 us between 8a9dcec and 598665a; a 1-D cut_row_norms at HEAD
export PYTHONUNBUFFERED=1 SPECVERIFY_COMMIT=$(cat probes/commit)
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader; echo "commit $(cat probes/commit)"
for t in probes/t_a2e8726 probes/t_123b289 probes/t_norms; do
  echo "== $t"; ( cd $t && timeout 100 python3 ci/filter_stages.py --B 1 --trace --all-tensors 2>&1 | grep trace )
  echo "t=$((SECONDS-T0))"
done | tee $OUT/traces.txt
