#!/usr/bin/env bash
# The twenty-fourth session's first device calls (written by the twenty-third, not yet run), from the repository
# root, $OUT the output folder: `bash next_call.sh stamps` (about 480 s: 32 plans to compile), then
# `bash next_call.sh check VARIANT` (about 420 s: the latency of the best variant against the defaults, and the
# four filter test files on CUDA, compile-bound), VARIANT as --latency takes it (ONE_LAUNCH_ROW_TALLY=1,TALLY_N=256).
export PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader; git rev-parse --short HEAD 2>/dev/null
if [ "$1" = stamps ]; then
  # the record's phases and the splits' waits (4422196, 4129f0a) with the tie group's division skipped (34bcc67);
  # the read's scan gather (459eace); larger samples; the row's bucket tallies at finer keys (6c3953d): a row a
  # variant, in one process on the same inputs
  ( timeout 560 python3 ci/filter_stages.py --B 1 --all-tensors --stamps default ONE_LAUNCH_SCAN_GATHER=1 \
      ONE_LAUNCH_SCAN_GATHER=1,ONE_LAUNCH_TILE=1024 NS=8192 NS=16384 ONE_LAUNCH_ROW_TALLY=1 \
      ONE_LAUNCH_ROW_TALLY=1,TALLY_N=256 ONE_LAUNCH_ROW_TALLY=1,TALLY_N=1024 2>&1 | grep "^|" ) | tee $OUT/stamps.txt
  # min-p's tensor alone: its pass 1 and handoff ended at 13.9 us, not 7.7 (folder 1); its plan holds 104 registers
  # (ci/cut_sass.py --flags 0,0,1), where two programs fit an SM: are two of its 125 placed on one SM?
  ( timeout 40 python3 ci/filter_stages.py --B 1 --stamps --settings "min_p=0.1" 2>&1 | grep "^|" ) \
    | tee $OUT/stamps_min_p_alone.txt
else
  ( timeout 240 python3 ci/filter_stages.py --B 1 --all-tensors --latency default "$2" --rounds 3 2>&1 | tail -10 ) \
    | tee $OUT/latency.txt
  echo "t=$((SECONDS-T0))"
  ( timeout 330 python3 -m pytest -q -p no:cacheprovider tests/test_triton_one_launch.py tests/test_triton_filters.py \
      tests/test_triton_lazy_cut.py tests/test_filter_probe.py -n 16 2>&1 | tail -4 ) | tee $OUT/tests.txt
fi
echo "t=$((SECONDS-T0))"
