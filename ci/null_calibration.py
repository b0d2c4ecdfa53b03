"""Calibration of the statistical checks under an exact null: no backend, no kernel.

    python ci/null_calibration.py [--profile ci] [--sims 2000] [--minutes 10] [--seed 0] [--cases 'PATTERN,...']

For every statistical check of every case, ``--sims`` outputs of ``stat_copies(profile)`` requests are
drawn directly from the case's exact joint distribution (StatCase.draw_exact), and each output is scored
by the same evaluation the check uses (specverify.checks.statistical.EVALUATORS). A calibrated test
rejects at most a fraction a of these at level a. The script prints that fraction at 0.05, 0.01 and 0.001
with 95% Wilson intervals. ci/false_alarm.py measures the same thing on a backend, with the backend's
sampling noise in the loop. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import fnmatch
import time

import numpy as np
import torch

from specverify.checks.cases import STAT_CASES
from specverify.checks.result import CheckResult
from specverify.checks.stats import wilson_interval
from specverify.checks.statistical import EVALUATORS, check_alpha, stat_copies
from specverify.strategies import get_profile

LEVELS = (0.05, 0.01, 0.001)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="ci")
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--minutes", type=float, default=10.0, help="stop each check's loop when the time is up")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", default="*", help="only the cases whose names match one of these comma-separated "
                                                  "patterns (fnmatch), as specverify check --cases")
    args = ap.parse_args(argv)
    if args.sims < 1 or args.minutes <= 0:
        ap.error("--sims must be >= 1 and --minutes > 0")
    profile = get_profile(args.profile)
    alpha, copies = check_alpha(profile), stat_copies(profile)
    patterns = [p.strip() for p in args.cases.split(",") if p.strip()]
    pairs = [(case, check) for case in STAT_CASES for check in case.checks
             if check in EVALUATORS and any(fnmatch.fnmatchcase(case.name, p) for p in patterns)]
    if not pairs:
        ap.error(f"--cases {args.cases!r} matches no statistical case: "
                 f"{', '.join(sorted({c.name for c in STAT_CASES}))}")
    deadline = time.time() + args.minutes * 60
    budget_each = args.minutes * 60 / len(pairs)
    print(f"profile {profile.name}: {copies:,} requests per output, check alpha {alpha:.2g}; "
          f"up to {args.sims} outputs per check, {args.minutes:g} min in all")
    print("| check | outputs | " + " | ".join(f"p < {a:g} (95% interval)" for a in LEVELS) + f" | p < {alpha:.2g} |")
    print("| --- | ---: |" + " --- |" * len(LEVELS) + " ---: |")
    for i, (case, check) in enumerate(pairs):
        g = torch.Generator().manual_seed(args.seed * 1000 + i)
        evaluate = EVALUATORS[check]
        stop = min(deadline, time.time() + budget_each)
        p_values = []
        while len(p_values) < args.sims and time.time() < stop:
            result = CheckResult(check, case.name, "exact-null", "statistical", "pass", alpha=alpha)
            evaluate(result, case, case.draw_exact(copies, g))
            p_values.append(result.p_value)
        p = np.asarray(p_values)
        cells = []
        for level in LEVELS:
            k = int((p < level).sum())
            lo, hi = wilson_interval(k, len(p))
            cells.append(f"{k / len(p):.4f} ({lo:.4f}-{hi:.4f})")
        print(f"| {check}[{case.name}] | {len(p)} | " + " | ".join(cells) + f" | {int((p < alpha).sum())} |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
