#!/usr/bin/env bash
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 400 python probes/sort_probe.py 2>&1 | tail -30


