#!/usr/bin/env bash
# 2026-11-28 at the commit "One round for count brackets alone" (NVIDIA H200, torch 2.11, triton 3.6): the latency
# in turn of B = 1 filtered calls against the unfiltered call, at the defaults then, with the count bracket in one
# round of 64 points, and with the record's copy in two passes as well; three rounds, one process.
bash docs/nightly/2026-11-28-h200-filters21/next_call.sh latency ONE_LAUNCH_ROUND_NG=64 \
    ONE_LAUNCH_ROUND_NG=64,ONE_LAUNCH_COPY_LANES=1
