"""Proof of power: the ci profile of the suite catches every mutant, with the check the registry names.

Each mutant is a correct sampler with exactly one bug from SPEC section 6 or the classic kernel
bugs. The checks here are the very functions the CLI and the shipped suite run; a mutant that
slips through every expected check means the harness lost power, and this test fails.
"""

from dataclasses import replace

import pytest
import torch

import reference
from specverify.registry import get_backend
from specverify.checks import FAIL, NOT_APPLICABLE, PASS, check_request_alignment, run_check
from specverify.mutants import GPUS_REQUIRED, MUTANTS, cpu_plan
from specverify.mutants.statistical_only import OwnStreamCpuBackend
from specverify.strategies import get_profile

CONTROL = get_backend("cpu")   # the correct backend the mutants are variations of
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def profile_for(mutant):
    """The mutant's profile on the CPU: nightly sample sizes run here too for the cases it names (at the
    mutant's own fixed count where it declares one: the nightly's plan is sized for a GPU).
    Mutants that require one or two GPUs (the GPU checks are n/a on the CPU) run on the CUDA device. Failing
    examples are not shrunk, and failures get no reproducer (``first_catch``): this test asks only which
    check fails (tests/test_repro.py covers the shrunk and reduced counterexamples)."""
    profile = replace(get_profile(mutant.profile), device="cuda" if mutant.requires else "cpu", shrink=False)
    return profile if mutant.stat_copies is None else replace(profile, stat_copies=mutant.stat_copies)


def control_for(mutant):
    """The correct backend with the mutant's noise path (a mutant with its own stream gets a control
    with its own stream); the mutant's own control backend when it names one (the Triton backend for
    the GPU mutants)."""
    if mutant.control != "cpu":
        return get_backend(mutant.control)
    return OwnStreamCpuBackend() if mutant.build().capabilities.seeded_stream == "own" else CONTROL


def _param(name):
    """Mutants that need CUDA ("cuda": one GPU, "cuda2": two) carry it in their test id and are skipped,
    visibly and saying how many GPUs this host has, where fewer are visible."""
    needs = MUTANTS[name].requires
    if needs is None:
        return pytest.param(name, id=name)
    short = GPUS < GPUS_REQUIRED[needs]
    return pytest.param(name, id=f"{name}-requires-{needs}",
                        marks=pytest.mark.skipif(short, reason=f"{name} needs {needs} ({GPUS_REQUIRED[needs]} GPU(s)); "
                                                               f"this process sees {GPUS}: runs on a GPU machine, not "
                                                               "covered here"))


def first_catch(mutant, short_of_memory: list | None = None):
    """Run the mutant's expected checks in order; return the first failing result, else None. Results that the
    GPU's memory decided (n/a for want of it, or out of memory) go to ``short_of_memory`` instead."""
    if mutant.kind == "alignment":
        result = check_request_alignment(mutant.build(), name=mutant.name)
        return result if result.status == FAIL else None
    backend = mutant.build()
    for check, case in cpu_plan(mutant):
        # no reproducer: reducing a statistical case's failing call (8,000 requests replayed against the
        # float64 reference) took 40% of this file's time, and the catch does not depend on it
        result = run_check(backend, check, case, profile_for(mutant), reproducer=False)
        if mutant.requires and short_of_memory is not None and _short_of_memory(result):
            short_of_memory.append(result)
        elif result.status == FAIL:
            return result
    return None


def _short_of_memory(result) -> bool:
    """int64_offsets' cases ask up to 87 GiB free: on a smaller or busier GPU they are n/a, or a backend's own
    copies run out of memory; neither says whether the mutant is caught."""
    return (result.status == NOT_APPLICABLE and "GiB free of" in result.message) or \
        (result.status == FAIL and "OutOfMemoryError" in result.message)


@pytest.mark.parametrize("name", [_param(n) for n in sorted(MUTANTS)])
def test_mutant_is_caught_by_its_named_check(name):
    """The bug class named by the mutant is detected in the ci profile by a check it lists."""
    mutant = MUTANTS[name]
    short = []
    caught = first_catch(mutant, short)
    if caught is None and short:
        pytest.skip(f"{name}: not covered on this GPU, for its memory: {short[0].line()}")
    assert caught is not None, f"{name} ({mutant.bug_class}) passed {mutant.expected_checks}"
    # A catch counts only if the same check passes on the correct backend: a harness error or an
    # over-strict check would "catch" everything.
    if mutant.kind == "alignment":
        control = check_request_alignment(reference.align_draft_probs)
    else:
        control = run_check(control_for(mutant), caught.check, caught.case, profile_for(mutant))
    assert control.status == PASS, f"control failed the catching check: {control.line()}"
    print(f"{name}: caught by {caught.id}: {caught.message[:200]}")


def test_bf16_draft_probs_shift_exceeds_the_distance_its_profile_detects():
    """The hardest mutant's effect (bf16 rounding of q raises acceptance on the bf16_sensitive case) is
    larger than the distance the acceptance test detects with power 0.99 at the profile the mutant is caught
    at: the power claim is computed, not hoped for. The shift is computed exactly from the case's p and q."""
    from specverify.checks.cases import STAT_CASE_BY_NAME
    from specverify.checks.stats import min_shift_detectable_by_binomial_test
    from specverify.checks import check_alpha
    from specverify.checks.statistical import stat_copies
    case = STAT_CASE_BY_NAME["bf16_sensitive"]
    q32, q16 = case.q[0].float().double(), case.q[0].float().to(torch.bfloat16).double()
    alpha32 = float((case.q[0] * torch.clamp(case.p[0] / q32, max=1)).sum())
    alpha16 = float((case.q[0] * torch.clamp(case.p[0] / q16, max=1)).sum())
    profile = profile_for(MUTANTS["draft_probs_bf16_own_stream"])
    detectable = min_shift_detectable_by_binomial_test(stat_copies(profile), alpha32, check_alpha(profile))
    assert alpha16 - alpha32 > detectable, (alpha16 - alpha32, detectable)
    # the ci profile's 8,000 copies do not detect it: the mutant's profile is the one that does
    assert alpha16 - alpha32 < min_shift_detectable_by_binomial_test(stat_copies(get_profile("ci")), alpha32,
                                                                     check_alpha(get_profile("ci")))


def test_a_gpu_mutant_short_of_gpu_memory_is_set_aside_never_passed(monkeypatch):
    """The unsigned-offsets mutant through this file's own path, at the CPU's shrunk sizes (tests/shrunk_offsets.py):
    caught by int64_offsets[rows_past_2_32] where the GPU has room; where it has 8 GiB free the case is n/a, and
    the result is set aside for the test to skip with it, not counted as a catch or a pass."""
    from shrunk_offsets import shrink
    shrink(monkeypatch)
    mutant = MUTANTS["row_offsets_in_uint32"]
    short = []
    caught = first_catch(mutant, short)
    assert caught is not None and caught.id == "int64_offsets[rows_past_2_32]" and not short, caught
    from specverify.checks import offsets
    monkeypatch.setattr(offsets, "needed_bytes", lambda requests: 87 << 30)    # the real case's ask
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (8 << 30, 80 << 30))
    assert first_catch(mutant, short) is None
    assert len(short) == 1 and short[0].status == NOT_APPLICABLE and "8.0 GiB free of 80.0" in short[0].message
