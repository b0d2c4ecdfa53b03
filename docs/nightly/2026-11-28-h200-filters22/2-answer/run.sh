#!/usr/bin/env bash
# 2026-11-28 (NVIDIA H200, torch 2.11, triton 3.6): the phases with pass 1's loads ahead, at 6079a5f (base/, from
# an untracked copy of that commit's tree) and at 2d2c5ab (head/: the publishing atomic's answer as the first look),
# one after the other on one machine.
N=docs/nightly/2026-11-28-h200-filters22/next_call.sh
(cd ab && OUT=$OUT/2-answer/base bash ../$N stamps ONE_LAUNCH_PASS1_AHEAD=1) && \
    OUT=$OUT/2-answer/head bash $N stamps ONE_LAUNCH_PASS1_AHEAD=1
