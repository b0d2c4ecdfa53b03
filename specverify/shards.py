"""Shards of a check run, for CI matrices over several hosts.

``specverify check BACKEND --shard K/N`` runs a deterministic share of the run's plan: the (check, case)
pairs are dealt longest first, each to the shard with the least cost so far (ties: the lower shard; a
statistical case's checks together, as one draw serves them),
costs taken from a previous report's measured seconds (``--costs REPORT.json``) where it has them and
from ``COST_HINTS`` otherwise. Every shard of one run computes the same deal, whatever host it is on.

``specverify merge A.json B.json ...`` checks that the reports are the N shards of one run (one
backend, profile, device and commit; shards 1..N each given once; the same plan) and puts them back
together: the merged verdict, coverage and n/a list are those of one run of the whole plan. Each
shard already tests at the whole run's per-check alpha (the family alpha split over every statistical
check of the suite, not of the shard), so the family-wise false-alarm budget is the run's.
"""

from __future__ import annotations

import json

from specverify.checks.statistical import sample_group

# seconds a check of each kind takes, roughly, on a CPU backend: enough to spread the long ones
COST_HINTS = {"statistical": 4.0, "exact": 2.0, "structural": 1.0}
LARGE_CASE_COST = 20.0


class ShardError(ValueError):
    """The reports given to merge are not the shards of one run; the message names the report."""


def parse_shard(text: str) -> tuple[int, int]:
    """"2/3" -> (2, 3); anything else is a ValueError naming the form."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes K/N with whole numbers 1 <= K <= N, got {text!r}") from None
    if not 1 <= k <= n:
        raise ValueError(f"--shard takes K/N with whole numbers 1 <= K <= N, got {text!r}")
    return k, n


def cost(check: str, case: str, kind: str, measured: dict | None = None) -> float:
    """Seconds the pair is expected to take: measured in an earlier report, else a hint by kind."""
    if measured and f"{check}[{case}]" in measured:
        return float(measured[f"{check}[{case}]"])
    return LARGE_CASE_COST if case.startswith("large_vocab") else COST_HINTS.get(kind, 1.0)


def read_report(path: str, what: str = "report") -> dict:
    """The JSON object of a report written by ``specverify check --json``; ValueError naming the file and what is
    wrong where it cannot be opened, is not JSON, or holds another JSON value than an object."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as exc:
        raise ValueError(f"cannot read {what} {path!r}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {what} {path!r}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"cannot read {what} {path!r}: it holds a JSON {type(doc).__name__}, not a report's object")
    return doc


def measured_costs(path: str) -> dict:
    """{check id: seconds} from a report written by ``specverify check --json``."""
    doc = read_report(path, "--costs report")
    return {f"{r['check']}[{r['case']}]": r["seconds"] for r in doc.get("results", ())
            if r.get("status") in ("pass", "fail", "known deviation")}


def share(pairs: list[tuple[str, str]], kinds: dict, k: int, n: int, measured: dict | None = None) -> list:
    """The pairs of shard ``k`` of ``n``, in plan order. ``kinds`` maps a check name to its kind. A
    statistical case's checks go to one shard together: one draw serves them (``sample_group``)."""
    units: dict = {}     # the pairs dealt as one, keyed by their group (a pair alone: itself)
    for i, (check, case) in enumerate(pairs):
        units.setdefault(sample_group(check, case) or (check, case), []).append(i)
    costs = {key: sum(cost(*pairs[i], kinds[pairs[i][0]], measured) for i in members)
             for key, members in units.items()}
    load = [0.0] * n
    owner = [0] * len(pairs)
    for key in sorted(units, key=lambda key: (-costs[key], units[key][0])):
        shard = min(range(n), key=lambda s: (load[s], s))
        for i in units[key]:
            owner[i] = shard
        load[shard] += costs[key]
    return [pair for i, pair in enumerate(pairs) if owner[i] == k - 1]


def _identity(doc: dict) -> tuple:
    return (doc.get("backend"), doc.get("profile"), doc.get("device"),
            (doc.get("environment") or {}).get("commit"))


def check_shards(docs: list[tuple[str, dict]]) -> list[str]:
    """The run's plan (check ids, in order) once ``docs`` [(path, report)] are found to be the shards of
    one run; a ShardError naming the report otherwise."""
    if not docs:
        raise ShardError("merge needs the shard reports of one run")
    first_path, first = docs[0]
    seen: dict[int, str] = {}
    total = None
    for path, doc in docs:
        shard = doc.get("shard")
        if not shard:
            raise ShardError(f"{path} is not a shard report (written without --shard)")
        k, n = parse_shard(shard)
        if total is None:
            total = n
        if n != total:
            raise ShardError(f"{path} is shard {shard}, but {first_path} is of {total} shards")
        if _identity(doc) != _identity(first):
            what = ("backend", "profile", "device", "commit")
            diff = [f"{w} {a!r} vs {b!r}" for w, a, b in zip(what, _identity(doc), _identity(first)) if a != b]
            raise ShardError(f"{path} is not of the same run as {first_path}: {', '.join(diff)}")
        if doc.get("plan") != first.get("plan"):
            raise ShardError(f"{path} was planned with other checks than {first_path} (--checks, or the version)")
        if k in seen:
            raise ShardError(f"shard {k}/{n} is given twice: {seen[k]} and {path}")
        seen[k] = path
    missing = [f"{k}/{total}" for k in range(1, total + 1) if k not in seen]
    if missing:
        raise ShardError(f"shard(s) {', '.join(missing)} missing: got {', '.join(seen[k] for k in sorted(seen))}")
    plan = list(first.get("plan") or ())
    ids = [f"{r['check']}[{r['case']}]" for _, doc in docs for r in doc.get("results", ())]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ShardError(f"check(s) reported by more than one shard: {', '.join(twice[:5])}")
    if sorted(ids) != sorted(plan):
        absent = [i for i in plan if i not in ids][:5]
        raise ShardError(f"the shards do not cover the run's plan: missing {', '.join(absent)}")
    return plan


__all__ = ["COST_HINTS", "ShardError", "check_shards", "cost", "measured_costs", "parse_shard", "read_report",
           "share"]
