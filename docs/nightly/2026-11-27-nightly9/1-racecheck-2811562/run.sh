#!/usr/bin/env bash
# 18th session #1: racecheck/memcheck/initcheck of the sanitizer driver with row_norms' fixed-point sum,
# then the CUDA filter tests
export PYTHONUNBUFFERED=1 SPECVERIFY_COMMIT=$(cat probes/commit)
R=/tmp/r1; mkdir -p $R; T0=$SECONDS
echo "commit $(cat probes/commit)"; nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install --no-deps --no-build-isolation --no-index -q -e . > $R/install.log 2>&1
st() { local n=$1; shift; local t=$SECONDS; "$@" > $R/$n.log 2>&1; echo -e "$n\t$([ $? -eq 0 ] && echo pass || echo FAIL)\t$((SECONDS-t))" | tee -a $R/steps.tsv; }
for tool in racecheck memcheck initcheck; do st sanitizer-$tool compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 50 python3 ci/sanitizer_driver.py; done
st filter-kernels timeout $((560-(SECONDS-T0)-20)) python3 -m pytest tests/test_triton_filters.py -p no:cacheprovider -n 8 -q -rA
grep -h "SUMMARY\|hazard\|Race" $R/sanitizer-*.log | head -20; tail -2 $R/filter-kernels.log
tar czf $OUT/r1.tgz -C /tmp r1
