#!/usr/bin/env bash
export PYTHONUNBUFFERED=1
timeout 100 python3 probes/takeover.py 0 2>&1 | tail -2
for tool in racecheck memcheck synccheck; do
timeout 150 compute-sanitizer --tool $tool --print-limit 4 python3 probes/takeover.py 0 2>&1 | grep -v "Host Frame" | grep -v "^=========     [a-zA-Z_]* \[" | tail -12
done
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_triton_one_launch.py tests/test_triton_filters.py tests/test_triton_lazy_cut.py -n 4 2>&1 | tail -4
