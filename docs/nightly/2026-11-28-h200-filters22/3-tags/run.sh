#!/usr/bin/env bash
# 2026-11-28 at 021e97e (NVIDIA H200, torch 2.11, triton 3.6): the phases with pass 1's loads ahead, with and
# without its partials published as tagged words (HANDOFF_TAGS=1, reverted after); then the latency in turn of the
# defaults then, the loads ahead, and both, three rounds, one process.
OUT=$OUT/3-tags bash docs/nightly/2026-11-28-h200-filters22/next_call.sh both \
    "ONE_LAUNCH_PASS1_AHEAD=1 ONE_LAUNCH_PASS1_AHEAD=1,HANDOFF_TAGS=1" \
    "default ONE_LAUNCH_PASS1_AHEAD=1 ONE_LAUNCH_PASS1_AHEAD=1,HANDOFF_TAGS=1"
