#!/usr/bin/env bash
export PYTHONUNBUFFERED=1
timeout 100 python3 probes/takeover.py 0 2>&1 | tail -2
timeout 150 compute-sanitizer --tool racecheck --print-limit 4 python3 probes/takeover.py 0 2>&1 | grep -v "Host Frame" | grep -v "^=========     [a-zA-Z_]* \[" | head -40
timeout 150 compute-sanitizer --tool memcheck --print-limit 3 python3 probes/takeover.py 0 2>&1 | grep -v "Host Frame" | tail -8
