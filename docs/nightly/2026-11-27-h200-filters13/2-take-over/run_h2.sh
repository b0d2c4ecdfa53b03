#!/usr/bin/env bash
export PYTHONUNBUFFERED=1
timeout 120 python3 probes/takeover.py 0 2>&1 | tail -3
timeout 200 compute-sanitizer --tool memcheck --print-limit 5 python3 probes/takeover.py 0 2>&1 | grep -v "^=========     Host Frame" | head -60
