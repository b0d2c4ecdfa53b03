#!/usr/bin/env bash
# 2026-11-28 at 6079a5f (NVIDIA H200, torch 2.11, triton 3.6): the phases of B = 1's one launch at the defaults then,
# with pass 1's loads three tiles ahead (ONE_LAUNCH_PASS1_AHEAD=1), with the read's tile at 1,024 and both; then the
# latency in turn of the defaults then and of the loads ahead, three rounds, one process.
OUT=$OUT/1-ahead bash docs/nightly/2026-11-28-h200-filters22/next_call.sh both \
    "default ONE_LAUNCH_PASS1_AHEAD=1 ONE_LAUNCH_TILE=1024 ONE_LAUNCH_PASS1_AHEAD=1,ONE_LAUNCH_TILE=1024" \
    "default ONE_LAUNCH_PASS1_AHEAD=1"
