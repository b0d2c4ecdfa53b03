"""The device-placement check (SPEC 7, issue 31): planned only on CUDA profiles, n/a with its reason
where it cannot run (never a pass), its stale inputs able to show a stale read, and the "cuda2" mutants.

The check itself runs only on a GPU (two for other_device): those tests are skipped here, saying why.
"""

from dataclasses import replace

import pytest
import torch

import reference
from specverify.checks import CHECKS, NOT_APPLICABLE, PASS, plan, run_check
from specverify.checks.placement import PLACEMENT_CASES, difference, placement_inputs
from specverify.mutants import GPUS_REQUIRED, MUTANTS, Mutant
from specverify.registry import get_backend
from specverify.strategies import get_profile

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
NIGHTLY_CUDA = get_profile("nightly")
ON_GPU = pytest.mark.skipif(GPUS < 1, reason=f"device_placement runs on a GPU; this process sees {GPUS}")


def test_plan_lists_the_check_only_on_a_cuda_profile():
    """`specverify check cpu` (ci on the CPU) does not list it at all; the nightly (cuda) plans both cases."""
    assert not [p for p in plan(get_profile("ci")) if p[0] == "device_placement"]
    assert [p for p in plan(NIGHTLY_CUDA) if p[0] == "device_placement"] == [("device_placement", c)
                                                                            for c in PLACEMENT_CASES]
    assert CHECKS["device_placement"].kind == "structural"


def test_named_on_a_cpu_profile_it_is_planned_and_not_applicable():
    """Asked for by name, the check is never silently dropped: it runs and is n/a, saying why."""
    profile = get_profile("ci")
    assert plan(profile, ["device_placement"]) == [("device_placement", c) for c in PLACEMENT_CASES]
    for case in PLACEMENT_CASES:
        result = run_check(get_backend("cpu"), "device_placement", case, profile)
        assert result.status == NOT_APPLICABLE and "profile device is cpu" in result.message, result.line()


@pytest.mark.skipif(GPUS > 0, reason="checks the no-CUDA path: this process has CUDA")
@pytest.mark.parametrize("case", PLACEMENT_CASES)
def test_without_cuda_a_cuda_profile_gives_not_applicable_with_its_reason(case):
    """The reference backend declares cuda, so the declaration allows the check; the check finds no CUDA."""
    result = run_check(get_backend("reference"), "device_placement", case, NIGHTLY_CUDA)
    assert result.status == NOT_APPLICABLE, result.line()
    assert "torch.cuda.is_available() is False" in result.message


@pytest.mark.parametrize("path", ["seeded", "injected"])
def test_stale_inputs_share_the_layout_and_give_other_tokens(path):
    """The buffers hold the stale call before the real one is copied in: same layout, tensor for tensor,
    and other tokens under the reference, so that a backend reading the stale call is seen."""
    profile, caps = get_profile("ci"), get_backend("triton").capabilities
    real, stale = (placement_inputs(profile, caps, path, s) for s in (False, True))
    assert torch.equal(real.batch.num_draft_tokens, stale.batch.num_draft_tokens)
    assert [(t.shape, t.dtype) for t in real.tensors()] == [(t.shape, t.dtype) for t in stale.tensors()]
    outputs = [reference.sample(c.batch, **(dict(seed=c.seeds) if path == "seeded" else dict(noise=c.noise)))
               for c in (real, stale)]
    why = difference(*outputs)
    assert why is not None and why.startswith(f"{real.batch.num_requests} of {real.batch.num_requests}"), why
    assert difference(outputs[0], outputs[0]) is None


def test_cuda2_is_a_requirement_of_two_gpus():
    """A mutant may require two GPUs ("cuda2"); anything else unknown is refused at declaration."""
    assert GPUS_REQUIRED == {None: 0, "cuda": 1, "cuda2": 2}
    Mutant("two_gpus", object, "bug", "public", ("device_placement",), requires="cuda2")
    with pytest.raises(ValueError, match="requires must be one of"):
        Mutant("four_gpus", object, "bug", "public", ("device_placement",), requires="cuda4")
    assert {n: (m.requires, m.cases) for n, m in MUTANTS.items() if "device_placement" in m.expected_checks} == {
        "outputs_on_current_device": ("cuda2", ("other_device",)),
        "launch_without_device_guard": ("cuda2", ("other_device",)),
        "work_on_default_stream": ("cuda", ("stream",))}


def _triton_on_cuda():
    return get_backend("triton"), replace(get_profile("ci"), device="cuda")


@ON_GPU
def test_triton_passes_the_stream_case():
    backend, profile = _triton_on_cuda()
    result = run_check(backend, "device_placement", "stream", profile)
    assert result.status == PASS, result.line()


@pytest.mark.skipif(GPUS < 2, reason=f"other_device needs 2 GPUs; this process sees {GPUS}")
def test_triton_passes_the_other_device_case():
    backend, profile = _triton_on_cuda()
    result = run_check(backend, "device_placement", "other_device", profile)
    assert result.status == PASS, result.line()


@pytest.mark.skipif(GPUS != 1, reason=f"checks the one-GPU n/a; this process sees {GPUS}")
def test_other_device_on_one_gpu_is_not_applicable_never_a_pass():
    backend, profile = _triton_on_cuda()
    result = run_check(backend, "device_placement", "other_device", profile)
    assert result.status == NOT_APPLICABLE and "needs 2 GPUs" in result.message, result.line()
