#!/usr/bin/env bash
# 2026-11-28 at the commit "One launch: one count round and the two-pass copy by default" (NVIDIA H200, torch
# 2.11, triton 3.6, cold Triton cache): the six filter test files on CUDA.
bash docs/nightly/2026-11-28-h200-filters21/next_call.sh tests
