"""A PASS means checked: every hostile backend gets a failing verdict and a report naming why.

Each hostile backend (specverify/mutants/hostile.py) tries one way of getting a PASS it has not
earned. The CLI runs checks in worker processes under a timeout, so the tests run it for real, on a
selection of checks that keeps them short: one check the backend must fail, and
``synthetic_validation`` (which rejects every call before the backend's sampling code runs) to show
that the checks after a killed worker still run.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from reference import Noise, SpecBatch, SpecOutput
from specverify import Capabilities, get_backend
from specverify.checks import CHECKS, FAIL, NOT_APPLICABLE, PASS, CheckResult, run_check
from specverify.checks.runner import CheckFailure, GuardedBackend, Needs, not_applicable_because, output_problems
from specverify.cli import main
from specverify.mutants import hostile
from specverify.strategies import get_profile
from specverify.verdict import parse_requirements, verdict

HOSTILE = "specverify.mutants.hostile:"
CI = get_profile("ci")


def _cli(tmp_path, capsys, backend: str, *args: str):
    report = tmp_path / "report.json"
    status = main(["check", HOSTILE + backend, "--json", str(report), *args])
    return status, capsys.readouterr().out, json.loads(report.read_text())


@pytest.mark.parametrize("backend, failing, message", [
    ("Hang", "determinism", "hung: call 1 ("),   # the first call's rule: the determinism check rotates them
    ("Segfault", "determinism", "crashed the worker process (SIGSEGV)"),
    ("SysExit", "determinism", "called sys.exit(0)"),
    ("OsExit", "determinism", "exited with status 0"),
    ("MutatingCover", "differential_injected", "wrote into its inputs: temperature"),
    ("WritesLogitsAfter", "determinism", "wrote into its inputs: target_logits"),
    ("Int32Outputs", "determinism", "expected int64"),
])
def test_hostile_backend_fails_its_check_and_the_remaining_checks_still_run(tmp_path, capsys, backend, failing,
                                                                            message):
    """The hostile behaviour becomes a FAIL line naming it, the exit status is 1, the JSON is written, and
    synthetic_validation (after it in the plan) still ran and passed in a fresh worker (after a hang, with
    --keep-going: by default the run stops calling a hung backend, tests/test_failfast.py)."""
    # the others end on their own; 300 s only bounds a regression
    limits = ["--timeout", "3", "--keep-going"] if backend == "Hang" else ["--timeout", "300"]
    # the failing check's first case: each hostile behaviour shows on any call, and a check that fails on
    # all ten differential cases spent 10 s reducing each failure
    cases = ",".join((CHECKS[failing].cases[0],) + CHECKS["synthetic_validation"].cases)
    status, printed, doc = _cli(tmp_path, capsys, backend, "--checks", f"{failing},synthetic_validation",
                                "--cases", cases, *limits, "-n", "1")
    assert status == 1, printed
    by_check = {}
    for r in doc["results"]:
        by_check.setdefault(r["check"], []).append(r)
    assert any(r["status"] == FAIL and message in r["message"] for r in by_check[failing]), printed
    assert [r["status"] for r in by_check["synthetic_validation"]] == [PASS], printed
    assert doc["passed"] is False and message in printed


def test_backend_declaring_nothing_fails_the_run(tmp_path, capsys):
    """Every check is n/a (interface parity alone passes): the verdict says nothing was checkable."""
    status, printed, doc = _cli(tmp_path, capsys, "DeclaresNothing")
    assert status == 1
    assert "FAILED" in printed and "declares nothing checkable" in printed
    assert doc["passed"] is False
    assert any("declares nothing checkable" in reason for reason in doc["verdict"]["reasons"])
    assert all(r["status"] == NOT_APPLICABLE for r in doc["results"] if r["check"] != "interface_parity")


def test_a_margin_wider_than_the_harness_is_refused_when_the_backend_is_loaded(tmp_path, capsys):
    """bf16 draft probabilities behind a self-declared 1e-2 margin: refused before any check, exit 2,
    the JSON says why; a tighter margin than the harness's is accepted."""
    status, _, doc = _cli(tmp_path, capsys, "WideMarginBf16")
    assert status == 2 and "ambiguity_margin=0.01 is refused" in doc["error"] and doc["passed"] is False
    with pytest.raises(ValueError, match="ambiguity_margin"):
        get_backend(hostile.WideMarginBf16())
    tight = hostile.WideMarginBf16()
    tight.capabilities = Capabilities(devices=frozenset({"cpu"}), ambiguity_margin=1e-7)
    assert get_backend(tight) is tight


def test_require_fails_a_run_that_does_not_check_what_it_names(tmp_path, capsys):
    """--require names what a team expects: a backend without the synthetic method fails it; an unknown
    name is a usage error naming it. The run checks differential_injected's standard case alone: it
    covers 'standard', and an undeclared method fails the requirement whatever else ran (the three other
    cases this backend takes more than doubled the run's CPU time)."""
    status = main(["check", "docs.adapter_example:make_backend", "--checks", "differential_injected",
                   "--cases", "standard", "--require", "standard,synthetic"])
    printed = capsys.readouterr().out
    assert status == 1 and "required 'synthetic' is not declared" in printed
    with pytest.raises(ValueError, match="'greedyy'"):
        parse_requirements("standard,greedyy")


def test_interrupted_run_writes_the_finished_checks_and_exits_130(tmp_path):
    """Ctrl-C mid-run: the report of what finished is printed, the JSON marks the rest as not run.

    SIGINT goes out once the progress line says synthetic_validation passed, so determinism (the Hang
    backend sleeps forever) is in flight. Output goes to files, not pipes: the pool's fork server and
    multiprocessing's resource tracker inherit the CLI's stdout and stderr, and a pipe reaches EOF only
    once they too have shut down after the CLI exits; the test waits for the CLI alone.

    The CLI starts with Python's own Ctrl-C handler, as in a terminal: a pytest started in the background
    by a script (``cmd &``, nohup) ignores SIGINT, its children inherit that, and Python then installs no
    handler, so the CLI would never see the signal."""
    report, out_path, err_path = tmp_path / "r.json", tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    argv = ["specverify", "check", HOSTILE + "Hang", "-n", "1", "--checks", "synthetic_validation,determinism",
            "--json", str(report)]
    as_in_a_terminal = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                        f"sys.argv = {argv!r}; runpy.run_module('specverify.cli', run_name='__main__')")
    with open(out_path, "w") as out_file, open(err_path, "w") as err_file:
        # its own process group: a failing test can end the CLI's fork server and workers with it
        proc = subprocess.Popen([sys.executable, "-c", as_in_a_terminal], stdout=out_file, stderr=err_file,
                                cwd=tmp_path, start_new_session=True)
    try:
        # Bounds, not expected durations: on two busy cores (pytest -n auto) start-up (torch, the fork
        # server's preload, the worker's backend load) and the exit after SIGINT can each take tens of seconds.
        deadline = time.monotonic() + 300
        while "synthetic_validation[bad_rates] pass" not in err_path.read_text():
            assert proc.poll() is None, f"the run ended before the check finished:\n{err_path.read_text()}"
            assert time.monotonic() < deadline, f"no progress line in 300 s:\n{err_path.read_text()}"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        returncode = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = out_path.read_text()
    assert returncode == 130, out + err_path.read_text()
    assert "interrupted (Ctrl-C)" in out
    doc = json.loads(report.read_text())
    statuses = {r["check"]: r["status"] for r in doc["results"]}
    assert statuses == {"determinism": "not run", "synthetic_validation": "pass"}
    assert doc["interrupted"] is True and doc["passed"] is False


def test_shipped_suite_is_not_green_for_a_backend_declaring_nothing(tmp_path):
    """Under pytest every check is skipped with its reason, and the plugin fails the session."""
    from specverify.plugin import load_args
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "specverify.suite", *load_args(),
           f"--specverify-backend={HOSTILE}DeclaresNothing", "-q", "-p", "no:cacheprovider", "-rs"]
    env = dict(os.environ, SPECVERIFY_PROFILE="ci")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "declares nothing checkable" in proc.stdout and "skipped" in proc.stdout
    assert "n/a: backend does not declare method 'standard'" in proc.stdout


# ---- the guard and the runner, without processes ---------------------------------------------------------
def _batch():
    g = torch.Generator().manual_seed(0)
    return SpecBatch(torch.tensor([2, 0]), torch.tensor([1, 3]), torch.randn(4, 5, generator=g),
                     torch.softmax(torch.randn(2, 5, generator=g), -1), torch.tensor([0.7, 0.0]))


def test_guard_names_a_write_into_noise_or_seeds():
    """Writing into injected noise or the seed tensor is caught like a write into the batch."""
    class NoiseWriter(hostile.CpuBackend):
        def _sample(self, batch, noise=None, seed=None, **kwargs):
            out = super()._sample(batch, noise=noise, seed=seed, **kwargs)
            (noise.uniform if noise is not None else seed).mul_(2)
            return out

    batch = _batch()
    guarded = GuardedBackend(NoiseWriter())
    with pytest.raises(CheckFailure, match="noise.uniform"):
        guarded(batch, noise=Noise.draw(batch, torch.Generator().manual_seed(1)))
    with pytest.raises(CheckFailure, match="seed"):
        guarded(batch, seed=torch.tensor([5, 6]))


def test_output_on_another_device_than_the_batch_is_a_structure_problem():
    """A CUDA backend returning CPU tensors: the output device must equal the batch's."""
    batch = _batch()
    out = SpecOutput(torch.tensor([[1, 3, -1], [2, -1, -1]]), torch.tensor([1, 0]))
    assert output_problems(batch, out) == []
    problems = output_problems(batch, out, device=torch.device("cuda"))
    assert any("the batch is on cuda" in p for p in problems)


def test_not_applicable_reasons_name_what_is_missing():
    caps = Capabilities(methods=frozenset({"standard"}), noise=frozenset({"seeded"}), seeded_stream="own")
    assert not_applicable_because(Needs(method="synthetic"), caps, CI) == "backend does not declare method 'synthetic'"
    assert "checked statistically" in not_applicable_because(Needs(noise="philox"), caps, CI)
    assert not_applicable_because(Needs(noise="injected"), caps, CI) == "backend does not declare injected noise"
    assert not_applicable_because(Needs(), caps, CI) is None


def test_repeated_calls_bound_excused_disagreements():
    """A backend inside the tolerance on every decision but disagreeing too often fails: every check that
    compares with the reference bounds ambiguous divergences by one rule."""
    from specverify.checks.runner import Context, _bound_ambiguous
    result = CheckResult("repeated_calls", "same_shapes", "x", "structural", PASS)
    ctx = Context(GuardedBackend(get_backend("cpu")), CI, result, decisions=100, ambiguous=["d"] * 3)
    _bound_ambiguous(ctx)
    assert result.status == FAIL and "too many ambiguous" in result.message


def test_verdict_counts_only_core_checks_that_ran():
    caps = get_backend("cpu").capabilities
    structural = CheckResult("determinism", "random", "cpu", "structural", PASS, covered=["standard", "seeded"])
    core = CheckResult("differential_seeded", "standard", "cpu", "exact", PASS, covered=["standard", "seeded"])
    assert not verdict([structural], caps).passed
    assert verdict([structural, core], caps).passed
    assert not verdict([structural, core], caps, ("injected",)).passed
    assert run_check(hostile.DeclaresNothing(), "determinism", "random", CI).status == NOT_APPLICABLE


def test_an_empty_batch_crash_does_not_mask_other_failures():
    """The empty batch is its own check and the other checks draw at least one request, so a backend
    that crashes on B = 0 and also emits an id past V at V = 1 gets both failures, each named."""
    from specverify.checks import run_check
    from specverify.mutants.hostile import EmptyBatchCrashAndIdPastV
    from specverify.strategies import get_profile
    backend = EmptyBatchCrashAndIdPastV()
    empty = run_check(backend, "empty_batch", "empty", get_profile("ci"))
    other = run_check(backend, "differential_injected", "standard", get_profile("ci"))
    assert empty.status == "fail" and "IndexError" in empty.message, empty.line()
    assert other.status == "fail" and "outside [0, 1)" in other.message, other.line()


def test_declared_limits_are_listed_in_the_report_header():
    """max_draft, no empty batches and a caller-sampled bonus token appear in what the header declares."""
    from dataclasses import replace
    from specverify.backends import Capabilities
    from specverify.verdict import describe
    text = describe(replace(Capabilities(), max_draft=4, empty_batches=False, bonus_sampled_by_caller=True))
    assert "at most 4 drafts per request" in text and "no empty batches" in text and "sampled by the caller" in text


def test_checks_stay_inside_a_declared_draft_limit():
    """A backend taking at most 2 drafts per request: generated batches stay inside (no
    UnsupportedError), statistical cases of 3 drafts are n/a with the reason, and a call beyond the
    limit is an UnsupportedError naming it."""
    from dataclasses import replace
    import pytest as _pytest
    from reference import Noise, SpecBatch
    from specverify.backends import UnsupportedError
    from specverify.checks import run_check
    from specverify.kernels.cpu import CpuBackend
    from specverify.strategies import get_profile

    class TwoDrafts(CpuBackend):
        name = "two_drafts"
        capabilities = replace(CpuBackend.capabilities, max_draft=2)

    assert run_check(TwoDrafts(), "differential_injected", "standard", get_profile("ci")).status == "pass"
    na = run_check(TwoDrafts(), "token_distribution", "dense_q", get_profile("ci"))
    assert na.status == "n/a" and "at most 2" in na.message
    batch = SpecBatch(torch.tensor([3]), torch.tensor([0, 1, 2]), torch.zeros(4, 5), None, torch.ones(1))
    with _pytest.raises(UnsupportedError, match="3 drafts in one request"):
        TwoDrafts()(batch, noise=Noise.draw(batch))


def test_a_float32_only_backend_is_sent_float32_only_and_the_report_says_so():
    """A backend that declares float32 logits alone is sent float32 batches only (a bfloat16 one would fail
    with its own UnsupportedError): the checks whose generated batches span every logit dtype (the
    differential, structure and input-integrity checks) stay inside what it declares and pass, and the
    verdict lists the dtypes the calls sent, so a reader sees bfloat16 was never checked. The smoke profile's
    ten examples a check suffice: the control below shows the same check sending all three dtypes to a
    backend that declares them."""
    from dataclasses import replace
    from specverify.kernels.cpu import CpuBackend

    class Float32Only(CpuBackend):
        name = "float32_only"
        capabilities = replace(CpuBackend.capabilities, logit_dtypes=frozenset({torch.float32}))

    smoke = get_profile("smoke")
    pairs = [("differential_injected", "standard"), ("differential_seeded", "standard"),
             ("output_structure", "random"), ("input_integrity", "random")]
    results = [run_check(Float32Only(), check, case, smoke) for check, case in pairs]
    assert [r.status for r in results] == [PASS] * len(pairs), [r.message for r in results]
    outcome = verdict(results, Float32Only.capabilities)
    assert outcome.dtypes == {"float32": len(pairs)}
    assert "  logit dtypes sent: float32 (4 checks)" in outcome.lines()
    everything = verdict([run_check(get_backend("cpu"), *pairs[0], smoke)], CpuBackend.capabilities)
    assert set(everything.dtypes) == {"float32", "bfloat16", "float16"}
