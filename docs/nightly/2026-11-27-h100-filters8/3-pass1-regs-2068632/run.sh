#!/usr/bin/env bash
# 14th session #3: pass 1 registers (triton 3.6) and top-k's pass 1 under register caps
export PYTHONUNBUFFERED=1 SPECVERIFY_COMMIT=$(cat probes/commit)
python ci/cut_sass.py --lazy --stages p1 --flags 1,1,1 2>&1 | grep "^stage"
python ci/cut_sass.py --stages p1 --flags 1,1,1 2>&1 | grep "^stage"
for r in 48 56 0; do python ci/cut_sass.py --lazy --stages p1 --flags 1,1,1 --set PASS1_MAXNREG=$r 2>&1 | grep "^stage"; done
for r in 48 56 0; do
python ci/filter_stages.py --B 128 --trace --all-tensors --settings 'top_k=50;top_p=0.9' --set PASS1_MAXNREG=$r > $OUT/trace-$r.txt 2>&1; echo "maxnreg $r"; grep -E "us" $OUT/trace-$r.txt | tail -2
done
