#!/usr/bin/env bash
# at 82a1a7c: the whole-sample counts in pass 1's wait, from the grid's inverse (sample loaded before pass 1)
OUT=$OUT/2-wait bash docs/nightly/2026-11-29-h200-filters23/next_call.sh both \
    "ONE_LAUNCH_WHOLE_SAMPLE=0 ONE_LAUNCH_WHOLE_SAMPLE=1" "default ONE_LAUNCH_WHOLE_SAMPLE=1"
