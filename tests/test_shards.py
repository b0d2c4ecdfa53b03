"""Shards of a run and their merge (specverify.shards): the shards of one run, put back together, give
the report one run of the whole plan gives, and anything else is refused naming the report."""

import json
import re

import pytest

from specverify.checks import CHECKS, plan
from specverify.checks.cases import STAT_CASE_BY_NAME
from specverify.cli import main
from specverify.shards import ShardError, check_shards, parse_shard, share
from specverify.strategies import get_profile

KINDS = {name: c.kind for name, c in CHECKS.items()}
CHECK_LIST = "acceptance_rate,empty_batch,synthetic_validation"


def test_shards_deal_every_pair_once_and_deterministically():
    """Every pair of the ci plan lands in exactly one of N shards, the same way on every call, a
    statistical case's checks in one shard (one draw serves them), and the expected costs of the shards
    differ by at most the costliest case's."""
    pairs = plan(get_profile("ci"))
    for n in (1, 2, 3, 5):
        shards = [share(pairs, KINDS, k, n) for k in range(1, n + 1)]
        assert sorted(p for s in shards for p in s) == sorted(pairs)
        assert shards == [share(pairs, KINDS, k, n) for k in range(1, n + 1)]
        for case in STAT_CASE_BY_NAME:
            assert sum(any(k == case and KINDS[c] == "statistical" for c, k in s) for s in shards) <= 1, (n, case)
    from specverify.shards import cost
    costs = [sum(cost(c, k, KINDS[c]) for c, k in share(pairs, KINDS, s, 2)) for s in (1, 2)]
    assert abs(costs[0] - costs[1]) <= max(sum(cost(c, k, KINDS[c]) for c, k in pairs if k == case)
                                           for case in {k for _, k in pairs})


def test_shard_needs_k_of_n():
    assert parse_shard("2/3") == (2, 3)
    for bad in ("0/2", "3/2", "1", "a/b", "1/0"):
        with pytest.raises(ValueError, match="K/N"):
            parse_shard(bad)


@pytest.fixture(autouse=True)
def _one_commit(monkeypatch):
    """Every run of a test reports one commit (a checkout being committed to meanwhile would not)."""
    monkeypatch.setenv("SPECVERIFY_COMMIT", "0" * 40)


def _run(tmp_path, capsys, name: str, backend: str, *args: str):
    """One run of CHECK_LIST on the smoke profile: the ci plan at 200 samples per statistical case, since the
    deal and the merge, not the power, are under test."""
    path = tmp_path / f"{name}.json"
    status = main(["check", backend, "--checks", CHECK_LIST, "--profile", "smoke", "-n", "1", "--json", str(path),
                   "--failures-dir", str(tmp_path / "failures"), *args])
    capsys.readouterr()
    return status, str(path)


def _summary(doc: dict) -> tuple:
    return (doc["passed"], [(r["check"], r["case"], r["status"]) for r in doc["results"]],
            doc["verdict"]["coverage"], doc["verdict"]["not_applicable"], doc["family_alpha"], doc["check_alpha"])


def test_two_shards_merged_give_the_verdict_of_one_run(tmp_path, capsys):
    """--shard 1/2 and 2/2 of the cpu backend, merged: the same checks, statuses, coverage, n/a list and
    alphas as the whole run, and exit 0."""
    whole_status, whole = _run(tmp_path, capsys, "whole", "cpu")
    shards = [_run(tmp_path, capsys, f"s{k}", "cpu", "--shard", f"{k}/2")[1] for k in (1, 2)]
    merged = tmp_path / "merged.json"
    assert main(["merge", *shards, "--json", str(merged)]) == whole_status == 0
    capsys.readouterr()
    assert _summary(json.loads(merged.read_text())) == _summary(json.loads(open(whole).read()))


def test_a_failure_in_one_shard_fails_the_merged_run(tmp_path, capsys):
    """Draft probabilities never reaching the sampler (seed 002) fail acceptance_rate in the shards that
    run its cases, while the other checks pass: the merged run fails, naming them. The shards run as a CI
    matrix that wants only the verdict does, with --no-reproducers: no failure is reduced or written."""
    backend = "specverify.mutants.samplers:DraftProbsDropped"
    shards = [_run(tmp_path, capsys, f"m{k}", backend, "--shard", f"{k}/2", "--no-reproducers") for k in (1, 2)]
    assert 1 in [status for status, _ in shards]
    assert not (tmp_path / "failures").exists()
    failed = [r for _, path in shards for r in json.loads(open(path).read())["results"] if r["status"] == "fail"]
    assert failed and not any(r["reproducer"] or r["counterexample"] for r in failed)
    assert main(["merge", *(path for _, path in shards)]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "failed: acceptance_rate[" in out


def _doc(shard, backend="cpu", profile="ci", commit="abc", plan_ids=("a[x]", "b[y]"), results=("a[x]",)):
    return {"shard": shard, "backend": backend, "profile": profile, "device": "cpu",
            "environment": {"commit": commit}, "plan": list(plan_ids),
            "results": [{"check": r.split("[")[0], "case": r.split("[")[1][:-1]} for r in results]}


@pytest.mark.parametrize("docs, message", [
    ([("a.json", _doc("1/2"))], "shard(s) 2/2 missing"),
    ([("a.json", _doc("1/2")), ("b.json", _doc("1/2", results=("b[y]",)))], "given twice: a.json and b.json"),
    ([("a.json", _doc("1/2")), ("b.json", _doc("2/2", backend="triton", results=("b[y]",)))],
     "b.json is not of the same run as a.json: backend"),
    ([("a.json", _doc("1/2")), ("b.json", _doc("2/2", commit="def", results=("b[y]",)))], "commit"),
    ([("a.json", _doc("1/2")), ("b.json", _doc("2/2", profile="nightly", results=("b[y]",)))], "profile"),
    ([("a.json", _doc("1/2")), ("b.json", _doc("2/3", results=("b[y]",)))], "of 2 shards"),
    ([("a.json", _doc(None))], "a.json is not a shard report"),
    ([("a.json", _doc("1/2")), ("b.json", _doc("2/2", results=("a[x]",)))], "more than one shard"),
    ([("a.json", _doc("1/2")), ("b.json", _doc("2/2", results=()))], "missing b[y]"),
])
def test_merge_refuses_reports_that_are_not_the_shards_of_one_run(docs, message):
    with pytest.raises(ShardError, match=re.escape(message)):
        check_shards(docs)


def test_a_report_names_a_tree_that_differs_from_its_commit_dirty(tmp_path):
    """A report's commit says what ran: the device machines copy the working tree beside a stale ``.git``, and a
    report stamped with that HEAD alone named a commit whose tree never ran. A tracked file that differs from HEAD
    appends "-dirty"; an untracked one does not; outside a checkout there is no commit."""
    import subprocess

    from specverify.report import source_commit

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    assert source_commit(str(tmp_path)) is None
    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "kernel.py").write_text("x = 1\n")
    git("add", "kernel.py")
    git("commit", "-q", "-m", "one")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert source_commit(str(tmp_path)) == head
    (tmp_path / "notes.txt").write_text("untracked\n")
    assert source_commit(str(tmp_path)) == head
    (tmp_path / "kernel.py").write_text("x = 2\n")
    assert source_commit(str(tmp_path)) == head + "-dirty"
