#!/usr/bin/env bash
# at a1cd17f: the whole sample loaded before pass 1 (1) and after it (2), counted in pass 1's wait
OUT=$OUT/3-after bash docs/nightly/2026-11-29-h200-filters23/next_call.sh both \
    "ONE_LAUNCH_WHOLE_SAMPLE=0 ONE_LAUNCH_WHOLE_SAMPLE=1 ONE_LAUNCH_WHOLE_SAMPLE=2" \
    "default ONE_LAUNCH_WHOLE_SAMPLE=1 ONE_LAUNCH_WHOLE_SAMPLE=2"
