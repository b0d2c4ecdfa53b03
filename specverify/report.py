"""The readable report of a run and its JSON document, shared by the CLI and the pytest plugin."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import platform
import subprocess
from xml.etree import ElementTree

import torch

from specverify.checks import FAIL, KNOWN, NOT_APPLICABLE, NOT_RUN, CheckResult, check_alpha, statistical_test_count
from specverify.checks.statistical import stat_copies
from specverify.strategies import Profile
from specverify.verdict import Verdict


def header(backend_name: str, profile: Profile, capabilities: str = "") -> str:
    m = statistical_test_count(profile)
    lines = [f"specverify: backend {backend_name!r}, profile {profile.name!r}, device {profile.device}"]
    if capabilities:
        lines.append(f"declares: {capabilities}")
    lines += [f"error budget: family-wise false-alarm rate {profile.family_alpha:g} per run, Bonferroni over "
              f"{m} statistical checks (alpha {check_alpha(profile):.2g} each); exact and structural checks "
              "have no false alarms",
              "power: det99 = the smallest deviation each statistical check detects with probability 0.99 at "
              "its alpha, at the worst position it tests: tv = total-variation distance of the token "
              "distribution, acceptance = shift of an acceptance probability, accepted = shift of the mean "
              "accepted length, rate = shift of the mean joint "
              "acceptance rate",
              f"torch {torch.__version__}, python {platform.python_version()}"]
    return "\n".join(lines)


def summary(results: list[CheckResult], seconds: float, verdict: Verdict | None = None) -> str:
    failed = [r for r in results if r.status == FAIL]
    na = [r for r in results if r.status == NOT_APPLICABLE]
    known = [r for r in results if r.status == KNOWN]
    unfinished = [r for r in results if r.status == NOT_RUN]
    passed = verdict.passed if verdict is not None else not failed
    text = (f"{'PASSED' if passed else 'FAILED'}: "
            f"{len(results) - len(failed) - len(na) - len(known) - len(unfinished)} passed, "
            f"{len(failed)} failed, {len(na)} not applicable"
            + (f", {len(known)} known deviation(s)" if known else "")
            + (f", {len(unfinished)} not run" if unfinished else "") + f" in {seconds:.1f}s")
    if failed:
        text += "\nfailed: " + ", ".join(r.id for r in failed)
    return text


def render(results: list[CheckResult], backend_name: str, profile: Profile, seconds: float,
           verdict: Verdict | None = None, capabilities: str = "") -> str:
    lines = [header(backend_name, profile, capabilities), ""]
    lines += [r.line() for r in results]
    if verdict is not None:
        lines += [""] + verdict.lines()
    lines += ["", summary(results, seconds, verdict)]
    return "\n".join(lines)


def source_commit(path: str) -> str | None:
    """HEAD's hash of the git checkout holding ``path``, with "-dirty" appended where a tracked file differs
    from it: a tree copied beside a stale ``.git``, or edited, is not that commit. None outside a checkout."""
    def git(*args):
        return subprocess.run(["git", "-C", path, *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "--verify", "-q", "HEAD").stdout.strip()
        if not head:
            return None
        # exit 1: tracked files differ from HEAD; anything else but 0 is an error, which says nothing of them
        changed = git("diff", "--quiet", "HEAD", "--").returncode == 1
    except (OSError, subprocess.SubprocessError):
        return None
    return head + "-dirty" if changed else head


def environment(profile: Profile) -> dict:
    """Versions, device and profile parameters: what a reader needs to reproduce a report."""
    try:
        version = importlib.metadata.version("specverify")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    commit = os.environ.get("SPECVERIFY_COMMIT") or source_commit(os.path.dirname(os.path.abspath(__file__)))
    params = {k: (str(v) if not isinstance(v, (int, float, str, type(None))) else v)
              for k, v in dataclasses.asdict(profile).items()}
    params["stat_copies"] = stat_copies(profile)
    return {"specverify": version, "commit": commit, "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "cuda": torch.version.cuda, "device": profile.device, "profile_parameters": params}


def document(results: list[CheckResult], backend_name: str, profile: Profile, seconds: float,
             verdict: Verdict | None = None, **extra) -> dict:
    """The JSON report: every result, the verdict with its coverage, and the environment."""
    passed = verdict.passed if verdict is not None else not any(r.status == FAIL for r in results)
    doc = {"backend": backend_name, "profile": profile.name, "device": profile.device,
           "family_alpha": profile.family_alpha, "check_alpha": check_alpha(profile), "seconds": seconds,
           "passed": passed, "verdict": verdict.to_json() if verdict is not None else None,
           "environment": environment(profile), "results": [r.to_json() for r in results]}
    doc.update(extra)
    return doc


def junit_xml(results: list[CheckResult], backend_name: str, seconds: float) -> str:
    """JUnit XML for CI systems: one test case per (check, case); a FAIL is a failure, n/a a skip
    with its reason, a check that did not run an error."""
    suite = ElementTree.Element("testsuite", name=f"specverify[{backend_name}]", tests=str(len(results)),
                                failures=str(sum(r.status == FAIL for r in results)),
                                skipped=str(sum(r.status in (NOT_APPLICABLE, KNOWN) for r in results)),
                                errors=str(sum(r.status == NOT_RUN for r in results)), time=f"{seconds:.3f}")
    for r in results:
        case = ElementTree.SubElement(suite, "testcase", classname=f"specverify.{backend_name}.{r.check}",
                                      name=r.id, time=f"{r.seconds:.3f}")
        if r.status == FAIL:
            failure = ElementTree.SubElement(case, "failure", message=r.message[:1000])
            failure.text = r.line()
        elif r.status in (NOT_APPLICABLE, KNOWN):
            ElementTree.SubElement(case, "skipped", message=r.message)
        elif r.status == NOT_RUN:
            ElementTree.SubElement(case, "error", message=r.message or "not run")
    return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True)


def write_json(path: str, doc: dict) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
