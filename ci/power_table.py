"""The mutant table of docs/power.md: which checks catch each mutant, with what samples, how fast.

    python ci/power_table.py [--workers 2] > power_rows.md

Every mutant runs each of its expected checks (all cases, or the cases it names) at its profile's
sizes on the CPU; the correct backend runs the first catching check as a control.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from specverify.checks import CHECKS, FAIL, check_request_alignment, run_check
from specverify.mutants import MUTANTS
from specverify.strategies import get_profile


def _row(name: str) -> str:
    import torch  # noqa: PLC0415
    torch.set_num_threads(1)
    mutant = MUTANTS[name]
    profile = replace(get_profile(mutant.profile), device="cpu")
    caught = []
    start = time.perf_counter()
    if mutant.kind == "alignment":
        r = check_request_alignment(mutant.build(), name=name)
        caught = [r] if r.status == FAIL else []
    else:
        backend = mutant.build()
        for check in mutant.expected_checks:
            for case in CHECKS[check].cases:
                if case == "large_vocab" or (mutant.cases and case not in mutant.cases):
                    continue
                r = run_check(backend, check, case, profile)
                if r.status == FAIL:
                    caught.append(r)
    seconds = time.perf_counter() - start
    first = caught[0] if caught else None
    checks = ", ".join(r.id for r in caught) or "**NOT CAUGHT**"
    samples = f"{first.samples:,}" if first and first.samples else "-"
    return (f"| `{name}` | {mutant.bug_class} | {mutant.seed} | {profile.name} | {checks} | {samples} | "
            f"{first.seconds:.1f} | {seconds:.1f} |" if first else
            f"| `{name}` | {mutant.bug_class} | {mutant.seed} | {profile.name} | {checks} | - | - | {seconds:.1f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    names = sorted(MUTANTS)
    print("| mutant | bug class | seed | profile | caught by (every failing expected check) | samples (first) "
          "| first catch (s) | all expected checks (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for row in pool.map(_row, names):
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
