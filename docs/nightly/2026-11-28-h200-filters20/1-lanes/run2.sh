#!/usr/bin/env bash
# Call 2 of the twenty-seventh session (call 1's machine still held, its Triton cache warm): run.sh's phases again
# with four variants, since call 1's five cold compiles ran past the 300 s that run.sh gave them (its stamps.txt
# came back with the table's header alone). This call's table is stamps.txt.
mkdir -p $OUT; S='top_k=50;top_p=0.9;top_k=50, top_p=0.9'
( timeout 480 python3 ci/filter_stages.py --B 1 --all-tensors --settings "$S" --stamps default ONE_LAUNCH_SCAN_GATHER=2 \
    TALLY_TILE=256 ONE_LAUNCH_SCAN_GATHER=2,TALLY_TILE=256 2>&1 | grep -v Warn ) | tee $OUT/stamps.txt; echo t=$SECONDS
