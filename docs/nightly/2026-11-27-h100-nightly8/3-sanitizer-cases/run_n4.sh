#!/usr/bin/env bash
# 17th session: racecheck of the filtered cases 0-4 at HEAD (+ masked load) and at e482ee7
export PYTHONUNBUFFERED=1
T0=$SECONDS
S="compute-sanitizer --error-exitcode 99 --print-limit 5 --tool racecheck"
timeout 170 $S python3 probes/san_cases.py . 0 1 2 3 4 > $OUT/racecheck-head.log 2>&1; echo "racecheck head rc=$? t=$((SECONDS-T0))"; grep -E "SUMMARY|Race|^B=" $OUT/racecheck-head.log | head -12
timeout 170 $S python3 probes/san_cases.py probes/old_tree 0 1 2 3 4 > $OUT/racecheck-e482ee7.log 2>&1; echo "racecheck e482ee7 rc=$? t=$((SECONDS-T0))"; grep -E "SUMMARY|Race|^B=" $OUT/racecheck-e482ee7.log | head -12
