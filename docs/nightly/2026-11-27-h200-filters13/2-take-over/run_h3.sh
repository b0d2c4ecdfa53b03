#!/usr/bin/env bash
export PYTHONUNBUFFERED=1
timeout 100 python3 probes/takeover.py 0 2>&1 | tail -2
timeout 150 compute-sanitizer --tool memcheck --print-limit 3 python3 probes/takeover.py 0 2>&1 | grep -v "Host Frame" | tail -12
timeout 150 compute-sanitizer --tool racecheck --print-limit 3 python3 probes/takeover.py 0 2>&1 | grep -v "Host Frame" | tail -8
timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/test_triton_one_launch.py 2>&1 | grep -v "^    " | tail -20
