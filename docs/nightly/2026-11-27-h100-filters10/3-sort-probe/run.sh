#!/usr/bin/env bash
# 16th session #3: tl.sort latency in one program (a sort-based cut of the gathered tokens?)
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 250 python3 probes/sort_probe.py 2>&1 | tail -40
