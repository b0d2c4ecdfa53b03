"""Measure the suite's real false-alarm rate on a correct backend over many independent seeds.

    python ci/false_alarm.py --backend cpu --profile ci --seeds 1000 --minutes 10 --workers 2
    python ci/false_alarm.py --backend triton --profile ci --device cuda --workers 4 --minutes 4

Each seed re-runs every statistical (check, case) pair with fresh samples. Reported per check:
how often it failed at its alpha, how often its p-value fell below 0.05 and 0.01 (calibration: a
correct test rejects at most that often), and for the whole run the fraction of seeds with any
failure against the family-wise budget, with a 95% Wilson interval.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from dataclasses import replace
from concurrent.futures import ProcessPoolExecutor, as_completed

from specverify.registry import get_backend
from specverify.checks import CHECKS, check_alpha, plan, run_check
from specverify.checks.stats import wilson_interval
from specverify.strategies import get_profile

_STATISTICAL = [(c, k) for c, k in plan(get_profile("ci")) if CHECKS[c].kind == "statistical"]


def _init_worker() -> None:
    import torch  # noqa: PLC0415
    torch.set_num_threads(1)


def _profile(name: str, device: str | None):
    profile = get_profile(name)
    return replace(profile, device=device) if device else profile


def one_seed(backend_name: str, profile_name: str, device: str | None, seed: int) -> list[tuple[str, str, float | None]]:
    backend, profile = get_backend(backend_name), _profile(profile_name, device)
    out = []
    for check, case in _STATISTICAL:
        r = run_check(backend, check, case, profile, run_seed=seed)
        out.append((r.id, r.status, r.p_value))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--profile", default="ci")
    ap.add_argument("--seeds", type=int, default=1000)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--device", default=None, help="override the profile's device (cuda: the device sampling path)")
    args = ap.parse_args(argv)
    profile = _profile(args.profile, args.device)
    deadline = time.time() + args.minutes * 60
    per_check: dict[str, list] = {}
    runs = failed_runs = 0
    start = time.time()
    # spawn, not fork: a forked child inherits torch's thread pool in a locked state
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_init_worker) as pool:
        pending = {pool.submit(one_seed, args.backend, args.profile, args.device, s): s for s in range(1, args.seeds + 1)}
        for fut in as_completed(pending):
            rows = fut.result()
            runs += 1
            failed_runs += any(status == "fail" for _, status, _ in rows)
            for rid, status, p in rows:
                per_check.setdefault(rid, []).append((status, p))
            if runs % 10 == 0:
                print(f"  {runs} seeds, {failed_runs} with a false alarm, {time.time() - start:.0f}s", file=sys.stderr)
            if time.time() > deadline:
                for f in pending:
                    f.cancel()
                break
    alpha = check_alpha(profile)
    print(f"false-alarm measurement: backend {args.backend!r}, profile {profile.name!r} on {profile.device}, "
          f"{runs} independent seeds, "
          f"{time.time() - start:.0f}s")
    print(f"per-check alpha {alpha:.2g} (family-wise budget {profile.family_alpha:g} over {len(_STATISTICAL)} checks)\n")
    print(f"| check | failures at alpha | rate | p < 0.05 | p < 0.01 |")
    print("| --- | --- | --- | --- | --- |")
    for rid, rows in sorted(per_check.items()):
        n = len(rows)
        fails = sum(s == "fail" for s, _ in rows)
        below05 = sum(p is not None and p < 0.05 for _, p in rows)
        below01 = sum(p is not None and p < 0.01 for _, p in rows)
        print(f"| {rid} | {fails}/{n} | {fails / n:.4f} | {below05 / n:.3f} | {below01 / n:.3f} |")
    lo, hi = wilson_interval(failed_runs, runs)
    verdict = "consistent with" if lo <= profile.family_alpha else "ABOVE"
    print(f"\nsuite: {failed_runs}/{runs} runs with any false alarm = {failed_runs / max(runs, 1):.4f}, "
          f"95% interval [{lo:.4f}, {hi:.4f}]: {verdict} the budget {profile.family_alpha:g}")
    return 0 if lo <= profile.family_alpha else 1


if __name__ == "__main__":
    sys.exit(main())
