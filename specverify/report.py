"""The readable report of a run: header with the error budget, one line per property, a summary."""

from __future__ import annotations

import json
import platform

import torch

from specverify.checks import FAIL, NOT_APPLICABLE, CheckResult, check_alpha, statistical_test_count
from specverify.strategies import Profile


def header(backend_name: str, profile: Profile) -> str:
    m = statistical_test_count()
    return (f"specverify: backend {backend_name!r}, profile {profile.name!r}, device {profile.device}\n"
            f"error budget: family-wise false-alarm rate {profile.family_alpha:g} per run, Bonferroni over "
            f"{m} statistical checks (alpha {check_alpha(profile):.2g} each); exact and structural checks "
            f"have no false alarms\n"
            f"power: tv99 = smallest total-variation distance detected with probability 0.99 at that alpha\n"
            f"torch {torch.__version__}, python {platform.python_version()}")


def summary(results: list[CheckResult], seconds: float) -> str:
    failed = [r for r in results if r.status == FAIL]
    na = [r for r in results if r.status == NOT_APPLICABLE]
    verdict = "FAILED" if failed else "PASSED"
    text = (f"{verdict}: {len(results) - len(failed) - len(na)} passed, {len(failed)} failed, {len(na)} not applicable "
            f"in {seconds:.1f}s")
    if failed:
        text += "\nfailed: " + ", ".join(r.id for r in failed)
    return text


def render(results: list[CheckResult], backend_name: str, profile: Profile, seconds: float) -> str:
    lines = [header(backend_name, profile), ""]
    lines += [r.line() for r in results]
    lines += ["", summary(results, seconds)]
    return "\n".join(lines)


def write_json(path: str, results: list[CheckResult], backend_name: str, profile: Profile, seconds: float) -> None:
    doc = {"backend": backend_name, "profile": profile.name, "device": profile.device,
           "family_alpha": profile.family_alpha, "check_alpha": check_alpha(profile), "seconds": seconds,
           "passed": not any(r.status == FAIL for r in results), "results": [r.to_json() for r in results]}
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
