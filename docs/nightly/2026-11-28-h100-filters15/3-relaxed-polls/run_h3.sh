#!/usr/bin/env bash
# 22nd session, call 3: the handoff.s polls relaxed, one acquire after them
export PYTHONUNBUFFERED=1 SPECVERIFY_COMMIT=$(cat probes/commit)
mkdir -p $OUT; T0=$SECONDS
for t in probes/t_relaxed; do
  echo "== $t"; ( cd $t && timeout 100 python3 ci/filter_stages.py --B 1 --trace --all-tensors 2>&1 | grep trace )
  echo "t=$((SECONDS-T0))"
done | tee $OUT/traces.txt
