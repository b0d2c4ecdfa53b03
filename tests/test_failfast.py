"""A broken backend gets its red verdict in minutes (SPEC 7): a hung call stops the run after one call
timeout, ``--maxfail``/``-x`` stop after N failed checks, ``--deadline`` bounds the whole run. What did
not run is reported "not run" with the reason, in the report, the JSON and the JUnit XML, and fails
the run.
"""

import json
import time
from xml.etree import ElementTree

import torch

from specverify.checks import FAIL, NOT_RUN, PASS
from specverify.checks.repro import load
from specverify.cli import main

HOSTILE = "specverify.mutants.hostile:"


def _run(tmp_path, capsys, backend: str, *args: str):
    """(status, what the run printed: its report, then its progress and plan on stderr, the JSON report, the JUnit
    XML, seconds) of ``specverify check`` on a hostile backend."""
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    start = time.perf_counter()
    status = main(["check", HOSTILE + backend, "--json", str(report), "--junit", str(junit),
                   "--failures-dir", str(tmp_path / "failures"), *args])
    seconds = time.perf_counter() - start
    printed = capsys.readouterr()
    return status, printed.out + printed.err, json.loads(report.read_text()), ElementTree.parse(junit), seconds


def test_a_hung_call_is_named_once_and_the_backend_is_not_called_again(tmp_path, capsys):
    """Every call of Hang sleeps forever. Without the call timeout each of the 48 checks would wait
    its whole --timeout; with it, the first hung call fails its check, names the call, leaves the call
    itself as a reproducer, and every other check is reported not run: the run ends in seconds."""
    # every call of Hang hangs, so no call that would have finished is cut short: a second is enough
    status, printed, doc, junit, seconds = _run(tmp_path, capsys, "Hang", "--call-timeout", "1", "-n", "2")
    assert status == 1 and doc["passed"] is False
    assert seconds < 60, f"a hung backend took {seconds:.0f} s to get its verdict"
    failed = [r for r in doc["results"] if r["status"] == FAIL]
    assert len(failed) == 1, printed                      # named once, though two workers were in hung calls
    assert failed[0]["message"].startswith("hung: call 1 (") and "--call-timeout" in failed[0]["message"]
    rest = [r for r in doc["results"] if r["status"] != FAIL]
    assert rest and all(r["status"] == NOT_RUN and f"hung in {failed[0]['check']}" in r["message"]
                        for r in rest), printed
    assert doc["hang"].startswith(f"{failed[0]['check']}[{failed[0]['case']}], call 1")
    assert any(line.startswith("VERDICT: the backend hung") for line in printed.splitlines()), printed
    repro = load(failed[0]["reproducer"])
    assert repro.kind == "call" and repro.call is not None and "hung" in repro.message
    assert junit.getroot().get("errors") == str(len(rest)) and junit.getroot().get("failures") == "1"


def test_keep_going_times_out_each_hung_call_instead_of_each_check(tmp_path, capsys):
    """--keep-going calls a hung backend on, but each call still ends at --call-timeout, well before the
    check's own --timeout."""
    status, printed, doc, _, seconds = _run(tmp_path, capsys, "Hang", "--checks", "determinism,synthetic_validation",
                                            "--call-timeout", "2", "--timeout", "300", "--keep-going", "-n", "1")
    statuses = {r["check"]: r["status"] for r in doc["results"]}
    assert status == 1 and statuses == {"determinism": FAIL, "synthetic_validation": PASS}, printed
    assert seconds < 60


def test_maxfail_stops_after_the_first_failed_check(tmp_path, capsys):
    """Int32Outputs fails every check that calls it: with -x the first failure ends the run and the
    rest are not run, saying why; the verdict fails."""
    status, printed, doc, junit, _ = _run(tmp_path, capsys, "Int32Outputs", "--checks",
                                          "determinism,output_structure,input_integrity", "-x", "-n", "1")
    statuses = [r["status"] for r in doc["results"]]
    assert status == 1 and statuses == [FAIL, NOT_RUN, NOT_RUN], printed
    assert all("--maxfail 1" in r["message"] for r in doc["results"][1:])
    assert doc["maxfail"] == 1 and "--maxfail 1" in doc["stopped"]
    errors = junit.getroot().findall(".//error")
    assert len(errors) == 2 and all("--maxfail 1" in e.get("message") for e in errors)


def test_maxfail_n_counts_failures_before_it_stops(tmp_path, capsys):
    """--maxfail 2 lets the first failure pass and stops at the second: two FAIL lines, then not run, as the run's
    plan announced; and without --maxfail every check runs (the stop comes from the option, not from the
    backend)."""
    checks = "determinism,output_structure,input_integrity,zero_draft_layouts"
    status, printed, doc, _, _ = _run(tmp_path, capsys, "Int32Outputs", "--checks", checks, "--maxfail", "2",
                                      "-n", "1")
    assert status == 1 and [r["status"] for r in doc["results"]] == [FAIL, FAIL, NOT_RUN, NOT_RUN], printed
    assert doc["maxfail"] == 2 and "2 check(s) failed (--maxfail 2)" in doc["stopped"]
    assert "or after 2 failed check(s)" in printed       # the plan says so before it starts
    status, printed, doc, _, _ = _run(tmp_path, capsys, "Int32Outputs", "--checks", checks, "-n", "1")
    assert [r["status"] for r in doc["results"]] == [FAIL] * 4 and doc["stopped"] is None, printed
    assert "failed check(s)" not in printed


def test_deadline_stops_the_check_in_flight_and_reports_the_rest_not_run(tmp_path, capsys):
    """The run's deadline passes during a (hung, but not yet timed-out) call: that check is reported as
    stopped, the next as not run, and the run fails."""
    status, printed, doc, _, seconds = _run(tmp_path, capsys, "Hang", "--checks", "determinism,output_structure",
                                            "--deadline", "1", "--call-timeout", "300", "-n", "1")
    results = doc["results"]
    assert status == 1 and [r["status"] for r in results] == [NOT_RUN, NOT_RUN], printed
    assert results[0]["message"].startswith("stopped while running: the run's deadline of 1 s passed")
    assert results[1]["message"].startswith("not run: the run's deadline of 1 s passed")
    assert seconds < 60 and doc["passed"] is False


def test_call_watch_names_the_call_it_records():
    """The description the pool prints for a hung call names its method, noise path and sizes."""
    from reference import Noise, SpecBatch
    from specverify.checks.repro import Call
    from specverify.watch import describe_call

    batch = SpecBatch(torch.tensor([2, 0]), torch.tensor([1, 2]), torch.zeros(4, 5), None, torch.ones(2))
    call = Call(batch, Noise.draw(batch, torch.Generator().manual_seed(0)), None, {"method": "block"})
    assert describe_call(3, call) == "call 3 (block, injected noise, B = 2, max drafts 2, V = 5, float32)"


def _suite(tmp_path, backend: str, *args: str):
    import os
    import subprocess
    import sys

    from specverify.plugin import load_args
    report = tmp_path / "suite.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *load_args(), "-n", "0",
                           "--pyargs", "specverify.suite", f"--specverify-backend={HOSTILE}{backend}",
                           f"--specverify-json={report}", f"--specverify-failures-dir={tmp_path / 'failures'}",
                           *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    return proc, json.loads(report.read_text())


def test_shipped_suite_stops_calling_a_hung_backend(tmp_path):
    """Under pytest the first hung call fails its test, naming the call; every later check is a skip
    saying it was not run, and the session fails: one call timeout, not one per check."""
    start = time.perf_counter()
    proc, doc = _suite(tmp_path, "Hang", "--specverify-call-timeout=1")    # every call of Hang hangs
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert time.perf_counter() - start < 120
    statuses = [r["status"] for r in doc["results"]]
    assert statuses.count(FAIL) == 1 and statuses.count(NOT_RUN) == len(statuses) - 1, proc.stdout[-3000:]
    failed = next(r for r in doc["results"] if r["status"] == FAIL)
    assert failed["message"].startswith("hung: call 1 (") and load(failed["reproducer"]).kind == "call"
    assert "1 failed" in proc.stdout and "did not run" in proc.stdout


def test_shipped_suite_under_exitfirst_reports_the_rest_not_run(tmp_path):
    """pytest's own -x applies to the shipped suite; the JSON lists every check of the plan that did not
    run as not run, with pytest's reason, and the verdict fails."""
    proc, doc = _suite(tmp_path, "Int32Outputs", "-x")
    statuses = [r["status"] for r in doc["results"]]
    assert proc.returncode == 1 and statuses.count(FAIL) == 1, proc.stdout[-3000:]
    not_run = [r for r in doc["results"] if r["status"] == NOT_RUN]
    assert len(not_run) > 10 and all("pytest stopped the session" in r["message"] for r in not_run)
    assert doc["passed"] is False
