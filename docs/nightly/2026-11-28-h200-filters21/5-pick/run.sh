#!/usr/bin/env bash
# b6fb923 (NVIDIA H200, torch 2.11, triton 3.6): ../next_call.sh pick, the latency in turn and the phases of B = 1
# with a key search's last few tokens picked from the list into registers (ONE_LAUNCH_COPY_LANES=2, removed after
# this run by the revert of b6fb923) against the defaults.
bash docs/nightly/2026-11-28-h200-filters21/next_call.sh pick
