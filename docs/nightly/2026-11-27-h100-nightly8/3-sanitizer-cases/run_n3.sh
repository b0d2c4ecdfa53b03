#!/usr/bin/env bash
# 17th session: racecheck of the one-launch case at HEAD and at e482ee7; initcheck of the PRE cases at HEAD + the masked load
export PYTHONUNBUFFERED=1
T0=$SECONDS
echo "commit $(cat probes/commit) + working tree"; nvidia-smi --query-gpu=name --format=csv,noheader
S="compute-sanitizer --error-exitcode 99 --print-limit 5"
timeout 150 $S --tool initcheck python3 probes/san_cases.py . 5 6 > $OUT/initcheck-head.log 2>&1; echo "initcheck head PRE rc=$? t=$((SECONDS-T0))"; grep -E "SUMMARY|errors|  at " $OUT/initcheck-head.log | sort | uniq -c | head
timeout 120 $S --tool racecheck python3 probes/san_cases.py . 2 > $OUT/racecheck-head.log 2>&1; echo "racecheck head rc=$? t=$((SECONDS-T0))"; grep -E "SUMMARY|Race|from" $OUT/racecheck-head.log | head -4
timeout 120 $S --tool racecheck python3 probes/san_cases.py probes/old_tree 2 > $OUT/racecheck-e482ee7.log 2>&1; echo "racecheck e482ee7 rc=$? t=$((SECONDS-T0))"; grep -E "SUMMARY|Race|from" $OUT/racecheck-e482ee7.log | head -4
