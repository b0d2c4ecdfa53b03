"""One statistical check drawn by several workers side by side (SPEC 5), each on its own GPU: the check
pool's split of a production-vocabulary case over the GPUs its workers are pinned to.

    parts_for(check, case, gpus, deviations) -> n      how many parts (1: drawn whole, in one worker)
    merge_parts(check, case, profile, parts) -> CheckResult
                                                       the parts' counts summed and tested once

Part k of n draws its share of the case's planned copies (``statistical.part_copies``) from its own
seed: the case's seed with ("part", k, n) hashed in, so no two parts share a noise stream, and a part
run again draws the same samples. Each part runs as the check itself in a worker (the guard, the
call timeout, a hang or a crash are the part's, as for any check) and returns its counts instead of a
verdict. The parent sums the counts and runs the one test, at the check's alpha: what one worker
drawing every copy would test, at 1/n of the wall time. A part that fails, is n/a or is not run makes
the check's result, naming the part.
"""

from __future__ import annotations

from specverify.checks.cases import STAT_CASE_BY_NAME
from specverify.checks.result import PASS, CheckResult
from specverify.checks.sampling import Tally
from specverify.checks.statistical import STATISTICAL_CHECKS, case_plan, check_alpha, evaluate
from specverify.strategies import Profile


def parts_for(check: str, case: str, gpus: int, deviations=()) -> int:
    """Parts of (check, case) in a pool whose workers are pinned to ``gpus`` GPUs: each GPU draws a share
    of a statistical production-vocabulary case (one whose launches are capped: the longest draws of a
    run) that has no other check to share its draw with and no declared deviation (matched in one
    worker's result). Everything else, and everything on one GPU or the CPU (where parts would only
    repeat each draw's fixed costs on the same device), is drawn whole."""
    spec = STAT_CASE_BY_NAME.get(case)
    if check not in STATISTICAL_CHECKS or spec is None or not spec.launch_copies or len(spec.checks) != 1:
        return 1
    if any(d.covers(check, case) for d in deviations):
        return 1
    return max(1, gpus)


def _merged_timing(parts: list[CheckResult]) -> dict:
    """The parts' sampling figures as one draw's: copies, launches and backend time summed; the wall time
    is the longest part's (they run side by side)."""
    got = [p.sampling or {} for p in parts]
    copies = sum(g.get("copies", 0) for g in got)
    seconds = max(g.get("seconds", 0.0) for g in got)
    backend = sum(g.get("backend_seconds", 0.0) for g in got)
    busy = sum(g.get("seconds", 0.0) for g in got)
    cuts = [f"part {k + 1}: {g['budget_cut']}" for k, g in enumerate(got) if g.get("budget_cut")]
    return {"copies": copies, "launches": sum(g.get("launches", 0) for g in got),
            "budget_cut": "; ".join(cuts) or None,
            "samples_per_second": copies / seconds if seconds > 0 else None,
            # parts draw side by side: their steady rates add
            "steady_samples_per_second": None if any(g.get("steady_samples_per_second") is None for g in got)
            else sum(g["steady_samples_per_second"] for g in got),
            "backend_share": backend / busy if busy > 0 else None,
            "backend_seconds": round(backend, 4), "seconds": round(seconds, 4), "drawn_for": None,
            "parts": len(parts), "part_copies": [g.get("copies", 0) for g in got]}


def merge_parts(check: str, case: str, profile: Profile, parts: list[CheckResult]) -> CheckResult:
    """The check's result from its parts [n] (every part, in part order): the first part that did not
    pass, named; else one test on the summed counts."""
    for k, part in enumerate(parts):
        if part.status != PASS or getattr(part, "drawn", None) is None:
            part.message = f"part {k + 1} of {len(parts)}: {part.message or 'drew nothing'}"
            part.seconds = max(p.seconds for p in parts)
            return part
    result = CheckResult(check=check, case=case, backend=parts[0].backend, kind="statistical", status=PASS)
    result.alpha = check_alpha(profile)
    result.sampling = {**case_plan(STAT_CASE_BY_NAME[case], profile).to_json(), **_merged_timing(parts)}
    evaluate(result, STAT_CASE_BY_NAME[case], check, Tally.summed([p.drawn for p in parts]))
    result.message += f" ({len(parts)} parts drawn side by side, counts summed)"
    result.covered = sorted(set().union(*(p.covered for p in parts)))
    result.seconds = max(p.seconds for p in parts)
    gpus = sorted({p.gpu for p in parts if p.gpu is not None})
    result.gpu = ",".join(gpus) if gpus else None
    return result


__all__ = ["merge_parts", "parts_for"]
