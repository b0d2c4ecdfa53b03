"""The harness's faces (CLI, pytest plugin + shipped suite) and its ambiguity classification.

The faces are thin wrappers over the same check functions; these tests make sure the wrappers
report failures (exit status, failing test ids, JSON) rather than only that they ran.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from reference import Noise, SpecBatch, SpecOutput
from specverify.checks.differential import compare_to_reference
from specverify.cli import main
from specverify.plugin import load_args

MUTANT = "specverify.mutants.samplers:SyntheticRateDefaultsToZero"


def test_cli_exits_nonzero_and_names_the_failing_check_for_a_buggy_backend(tmp_path, capsys):
    """A backend whose unset synthetic rate defaults to 0 fails synthetic_validation and passes
    determinism: exit 1, the report says FAIL on that line only, the JSON records both, and the
    failure's reproducer (the call the reference rejects and the backend accepts) is written."""
    out = tmp_path / "r.json"
    status = main(["check", MUTANT, "--checks", "synthetic_validation,determinism", "--json", str(out),
                   "--failures-dir", str(tmp_path / "failures")])
    printed = capsys.readouterr().out
    assert status == 1
    assert "FAIL  synthetic_validation[bad_rates]" in printed and "FAILED: 1 passed, 1 failed" in printed
    doc = json.loads(out.read_text())
    assert doc["passed"] is False
    assert {r["check"]: r["status"] for r in doc["results"]} == {"determinism": "pass", "synthetic_validation": "fail"}
    failed = next(r for r in doc["results"] if r["status"] == "fail")
    assert failed["replay"] == f"specverify replay {failed['reproducer']} {MUTANT}" and failed["replay"] in printed
    assert main(["replay", failed["reproducer"], MUTANT]) == 1
    assert main(["replay", failed["reproducer"], "cpu"]) == 0
    assert "the reference raises ValueError" in capsys.readouterr().out


def test_cli_exits_zero_for_a_correct_backend(capsys):
    """A correct backend passes a selection that includes a core check (a structural-only selection
    would check no core property and must not pass). One case of each check: the exit status and the
    report's verdict are under test, and the cpu backend's every case is in the conformance tests."""
    status = main(["check", "cpu", "--checks", "determinism,differential_injected", "--cases", "random,standard"])
    assert status == 0 and "PASSED: 2 passed" in capsys.readouterr().out


def test_cli_rejects_unknown_backend_and_check_with_status_2(capsys):
    assert main(["check", "no-such-backend"]) == 2
    assert main(["check", "cpu", "--checks", "no_such_check"]) == 2
    err = capsys.readouterr().err
    assert "unknown backend 'no-such-backend'" in err and "no_such_check" in err


def test_shipped_suite_under_xdist_fails_on_the_buggy_check_only(tmp_path):
    """pytest --pyargs specverify.suite with a MODULE:ATTR backend, two xdist workers: the mutant's
    synthetic_validation test fails, its determinism test passes, the failure leaves a reproducer."""
    env = dict(os.environ, SPECVERIFY_PROFILE="ci")
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "specverify.suite", f"--specverify-backend={MUTANT}",
           "-n", "2", "-q", "-p", "no:cacheprovider", "-k", "determinism or synthetic_validation",
           f"--specverify-failures-dir={tmp_path}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=os.path.dirname(__file__), timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "FAILED" in proc.stdout and "synthetic_validation" in proc.stdout
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["synthetic_rate_defaults_to_zero-synthetic_validation-bad_rates.pt",
                                                          "synthetic_rate_defaults_to_zero-synthetic_validation-bad_rates.txt"]


def _one_request(p_x_logit: float, u: float) -> tuple[SpecBatch, Noise]:
    """One random request, one draft (token 0) with q one-hot: accept iff u <= p(0)."""
    logits = torch.tensor([[p_x_logit, 0.0], [0.0, 0.0]], dtype=torch.float32)
    batch = SpecBatch(torch.tensor([1]), torch.tensor([0]), logits, None, torch.tensor([1.0]))
    return batch, Noise(torch.tensor([u]), torch.tensor([[1.0, 2.0]]))


def test_divergence_within_float32_rounding_is_ambiguous_and_beyond_it_is_real():
    """p(0) = 0.5 exactly; u one float32 ulp above 0.5 makes the reference reject. A backend accepting
    there is within rounding (ambiguous); with u = 0.6 the same acceptance is a real error."""
    for u, ambiguous in ((0.5 + 2 ** -24, True), (0.6, False)):
        batch, noise = _one_request(0.0, u)
        accepted = SpecOutput(torch.tensor([[0, 1]]), torch.tensor([1]))
        cmp = compare_to_reference(batch, accepted, noise)
        assert len(cmp.divergences) == 1
        assert cmp.divergences[0].ambiguous is ambiguous, cmp.divergences[0]


class _Crashing:
    """A backend that declares everything and crashes on every call."""

    name = "crashing"

    def __init__(self):
        from specverify import Capabilities
        self.capabilities = Capabilities(devices=frozenset({"cpu", "cuda"}), cuda_graphs=True)

    def __call__(self, batch, *, method="standard", noise=None, seed=None, synthetic_acceptance_rate=None,
                 num_speculative_steps=None):
        raise RuntimeError("kernel launch failed")

    def sample_into(self, *args, **kwargs):
        raise RuntimeError("kernel launch failed")


def test_a_backend_that_raises_gets_a_failed_result_from_every_check_never_none():
    """An exception inside a check becomes a FAIL result naming it (the report must never lose a check)."""
    from specverify.checks import plan, run_check
    from specverify.strategies import get_profile
    profile = get_profile("smoke")
    for check, case in plan(profile):
        result = run_check(_Crashing(), check, case, profile)
        assert result is not None and result.check == check
        if check in ("cuda_graphs", "accepted_length") or case in ("filters", "filtered_target", "placeholders",
                                                                    "block") or case.startswith("tree"):
            # CUDA only; filters, placeholders, block and trees not declared
            assert result.status == "n/a", result.line()
        else:
            assert result.status == "fail" and "kernel launch failed" in result.message, result.line()


RECORD_VISIBLE_DEVICES = '''
import os, pathlib, pytest

@pytest.mark.parametrize("i", range(8))
def test_record(i, worker_id):
    pathlib.Path(os.environ["PIN_OUT"], f"{worker_id}-{i}").write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "unset"))
'''


@pytest.mark.parametrize("spec, visible, expected", [("3,5", None, {"gw0": "3,5", "gw1": "5,3"}),
                                                     ("auto", "4,6", {"gw0": "4,6", "gw1": "6,4"})])
def test_xdist_workers_are_pinned_to_one_gpu_each(tmp_path, spec, visible, expected):
    """Nightly sharding (one xdist worker per GPU) needs worker gwN to see GPU N mod count first (its
    cuda:0) and the others after it, set before the tests run. 'auto' resolves within $CUDA_VISIBLE_DEVICES, so this runs without a GPU:
    the plugin only sets the variable, and the recorded values show which worker saw which device.
    Under `pytest -n auto` the inner run starts inside a worker and inherits $PYTEST_XDIST_WORKER: it
    must still act as its own controller."""
    (tmp_path / "test_record.py").write_text(RECORD_VISIBLE_DEVICES)
    out = tmp_path / "seen"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "SPECVERIFY_GPUS")}
    env["PIN_OUT"] = str(out)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    # without Hypothesis's plugin: the recording test draws nothing, and each of the run's three processes
    # would import Hypothesis for it (about a second apiece)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                           *load_args(), "-n", "2", f"--specverify-gpus={spec}", str(tmp_path / "test_record.py")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    records = list(out.iterdir())
    seen: dict[str, set[str]] = {}
    for f in records:
        seen.setdefault(f.name.split("-")[0], set()).add(f.read_text())
    assert len(records) == 8
    assert seen == {w: {d} for w, d in expected.items()}


def test_divergence_is_classified_at_the_decision_that_differs_not_the_first_differing_entry():
    """V = 1: a rejection emits the only token, which equals the draft the reference accepted, so the
    lists first differ one position later. The decision that differs is the acceptance at position 0,
    where u = 1 - 2^-53 is 1.0 in float32: ambiguous by 2^-53, not the real margin of position 1."""
    batch = SpecBatch(torch.tensor([2]), torch.tensor([0, 0]), torch.tensor([[18.65], [20.97], [21.59]]), None,
                      torch.tensor([0.001]))
    noise = Noise(torch.tensor([1 - 2 ** -53, 0.7538], dtype=torch.float64), torch.tensor([[1e-30]], dtype=torch.float64))
    got = SpecOutput(torch.tensor([[0, -1, -1]]), torch.tensor([0]))
    (divergence,) = compare_to_reference(batch, got, noise).divergences
    assert divergence.position == 0 and divergence.ambiguous and divergence.margin < 1e-15
