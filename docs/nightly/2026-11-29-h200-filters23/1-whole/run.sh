#!/usr/bin/env bash
# at 43f6cc3: the whole-sample bracket counted after the norms (its binary search), against the shared round
OUT=$OUT/1-whole bash docs/nightly/2026-11-29-h200-filters23/next_call.sh both \
    "ONE_LAUNCH_WHOLE_SAMPLE=0 ONE_LAUNCH_WHOLE_SAMPLE=1" "default ONE_LAUNCH_WHOLE_SAMPLE=1"
