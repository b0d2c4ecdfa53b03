#!/usr/bin/env bash
# 2026-11-28 at 0f3c48a (NVIDIA H200, torch 2.11, triton 3.6, cold Triton cache): the six filter test files on CUDA
# at the new default (pass 1's loads ahead).
OUT=$OUT/4-tests bash docs/nightly/2026-11-28-h200-filters22/next_call.sh tests
