"""Failures a developer can act on: reproducers that reduce, print as Python that rebuilds the exact
call, replay against any backend, and a JUnit report CI systems read."""

import copy
from dataclasses import replace
from xml.etree import ElementTree

import pytest
import torch

import reference
from specverify.checks import FAIL, run_check
from specverify.checks.differential import compare_to_reference
from specverify.checks.repro import load, tensor_source, write_reproducer
from specverify.cli import main
from specverify.mutants import MUTANTS
from specverify.mutants.statistical_only import OwnStreamCpuBackend
from specverify.report import junit_xml
from specverify.strategies import get_profile

DROPPED = "specverify.mutants.samplers:DraftProbsDropped"


def _failed(mutant: str, check: str, case: str, profile=None):
    result = run_check(MUTANTS[mutant].build(), check, case, profile or get_profile("ci"))
    assert result.status == FAIL, result.line()
    return result


@pytest.fixture(scope="module")
def dropped():
    """The failed differential_injected[standard] of draft_probs_dropped, with its shrunk counterexample and
    reduced reproducer: three tests read it (as pasted Python, through replay, in the JUnit report), and
    finding and shrinking it is most of each one's time."""
    return _failed("draft_probs_dropped", "differential_injected", "standard")


@pytest.mark.parametrize("tensor", [
    torch.tensor([[0.1, float("-inf")], [3.0, -0.0]], dtype=torch.float32),
    torch.tensor([1e-3, 7.0, float("inf")], dtype=torch.bfloat16),
    torch.tensor([65504.0, 6e-8], dtype=torch.float16),
    torch.randn(40, 17, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16),
    torch.empty(0, 2, dtype=torch.float32),
    torch.empty(0, dtype=torch.int64),
    torch.tensor([2 ** 62 + 1, -1], dtype=torch.int64),
], ids=["float32-inf", "bf16", "fp16-extremes", "bf16-large-as-bytes", "empty-2d", "empty-1d", "int64-wide"])
def test_printed_tensor_rebuilds_bit_for_bit(tensor):
    """Every dtype a batch holds, infinities, empty shapes and large tensors (printed as bytes) come
    back exactly: same dtype, shape and bits."""
    rebuilt = eval(tensor_source(tensor), {"torch": torch})  # noqa: S307 - the printed source is ours
    assert rebuilt.dtype == tensor.dtype and rebuilt.shape == tensor.shape
    assert torch.equal(rebuilt.reshape(-1).view(torch.uint8), tensor.reshape(-1).view(torch.uint8))


def test_pasted_counterexample_reproduces_the_failure(dropped):
    """The counterexample a failing differential check prints is Python that rebuilds the call: run
    as written, the mutant still diverges from the reference and the correct backend does not."""
    namespace = {}
    exec(dropped.counterexample, namespace)  # noqa: S102 - the printed source is ours
    batch, noise, kwargs = namespace["batch"], namespace["noise"], namespace["kwargs"]
    got = MUTANTS["draft_probs_dropped"].build()(batch, noise=noise, **kwargs)
    assert compare_to_reference(batch, got, noise, **kwargs).real
    correct = reference.sample(batch, noise=noise, **kwargs)
    assert not compare_to_reference(batch, correct, noise, **kwargs).divergences


def test_precision_bug_in_a_replicated_case_reduces_to_a_few_requests():
    """A float16 exponential race diverges on a handful of the 8000 copies of a statistical case: the
    reproducer keeps at most a few requests, and still fails on replay."""
    result = _failed("race_low_precision", "differential_injected", "replicated")
    repro = result.repro
    assert repro.kind == "call" and repro.full_requests >= 1000 and 1 <= len(repro.requests) <= 3
    assert repro.outcome.category == "divergence" and repro.call.batch.num_requests == len(repro.requests)


def test_replay_fails_on_the_buggy_backend_and_passes_on_correct_ones(tmp_path, capsys, dropped):
    """specverify replay: exit 1 with the per-request difference on the mutant, 0 on cpu and on the
    reference (which shows its own answer), 2 when the backend cannot take the call."""
    result = copy.copy(dropped)    # writing takes the reproducer out of the result: the others keep theirs
    path = write_reproducer(result, tmp_path, spec=DROPPED)
    assert result.replay == f"specverify replay {path} {DROPPED}"
    assert main(["replay", path, DROPPED]) == 1
    assert "STILL FAILS (divergence)" in capsys.readouterr().out
    assert main(["replay", path, "cpu"]) == 0
    assert main(["replay", path, "reference"]) == 0
    printed = capsys.readouterr().out
    assert "request 0: agrees, emitted" in printed and "no failure: 'reference'" in printed
    assert main(["replay", path, "cpu", "--device", "meta"]) == 2
    assert main(["replay", str(tmp_path / "missing.pt"), "cpu"]) == 2


def test_failure_no_single_call_shows_gets_a_check_reproducer(tmp_path, capsys):
    """batch_invariance compares calls; with the backend's own seeded stream (keyed by the whole
    batch) no single call fails alone, so the reproducer names the check and its case, and replay
    re-runs that check on the recorded profile: still failing there, passing on cpu. The smoke profile,
    half ci's examples, is recorded and replayed: the check's three runs are most of the test's time."""
    smoke = get_profile("smoke")
    result = run_check(OwnStreamCpuBackend(), "batch_invariance", "random", smoke)
    assert result.status == FAIL and result.repro.kind == "check" and result.repro.call is None
    path = write_reproducer(result, tmp_path, smoke)
    assert load(path).check == "batch_invariance" and load(path).profile == "smoke"
    assert "replay re-runs the check" in (tmp_path / "cpu_own_stream-batch_invariance-random.txt").read_text()
    assert main(["replay", path, "specverify.mutants.statistical_only:OwnStreamCpuBackend"]) == 1
    assert main(["replay", path, "cpu"]) == 0
    assert capsys.readouterr().out.count("batch_invariance[random] (profile smoke)") == 2


def test_junit_report_has_one_case_per_check_with_failures_and_skips(dropped):
    """A failure is a <failure> with its message, an n/a a <skipped> with the reason."""
    failed = dropped
    na = run_check(MUTANTS["draft_probs_dropped"].build(), "cuda_graphs", "shapes",
                   replace(get_profile("ci"), device="cpu"))
    suite = ElementTree.fromstring(junit_xml([failed, na], "draft_probs_dropped", 1.0))
    assert suite.get("tests") == "2" and suite.get("failures") == "1" and suite.get("skipped") == "1"
    cases = suite.findall("testcase")
    assert cases[0].find("failure").get("message").startswith("1 real divergence")
    assert "CUDA" in cases[1].find("skipped").get("message")
