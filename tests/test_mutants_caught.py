"""Proof of power: the ci profile of the suite catches every mutant, with the check the registry names.

Each mutant is a correct sampler with exactly one bug from SPEC section 6 or the classic kernel
bugs. The checks here are the very functions the CLI and the shipped suite run; a mutant that
slips through every expected check means the harness lost power, and this test fails.
"""

import pytest

import reference
from specverify.backends import get_backend
from specverify.checks import CHECKS, FAIL, PASS, check_request_alignment, run_check
from specverify.mutants import MUTANTS
from specverify.strategies import get_profile

PROFILE = get_profile("ci")
CONTROL = get_backend("cpu")   # the correct backend the mutants are variations of


def first_catch(mutant):
    """Run the mutant's expected checks in order; return the first failing result, else None."""
    if mutant.kind == "alignment":
        result = check_request_alignment(mutant.build(), name=mutant.name)
        return result if result.status == FAIL else None
    backend = mutant.build()
    for check in mutant.expected_checks:
        for case in CHECKS[check].cases:
            if case == "large_vocab":
                continue
            result = run_check(backend, check, case, PROFILE)
            if result.status == FAIL:
                return result
    return None


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught_by_its_named_check(name):
    """The bug class named by the mutant is detected in the ci profile by a check it lists."""
    mutant = MUTANTS[name]
    caught = first_catch(mutant)
    assert caught is not None, f"{name} ({mutant.bug_class}) passed {mutant.expected_checks}"
    # A catch counts only if the same check passes on the correct backend: a harness error or an
    # over-strict check would "catch" everything.
    if mutant.kind == "alignment":
        control = check_request_alignment(reference.align_draft_probs)
    else:
        control = run_check(CONTROL, caught.check, caught.case, PROFILE)
    assert control.status == PASS, f"control failed the catching check: {control.line()}"
    print(f"{name}: caught by {caught.id}: {caught.message[:200]}")
