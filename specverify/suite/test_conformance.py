"""Every check of specverify.checks against the backend named by --specverify-backend.

One test per (check, case) pair, so pytest-xdist spreads them over workers and a failure names the
property. The test bodies are the shared check functions; this file adds nothing but the assertion.
"""

import pytest

import reference
from specverify.checks import NOT_APPLICABLE, check_request_alignment, plan, run_check
from specverify.strategies import get_profile

# The plugin exports --specverify-profile as $SPECVERIFY_PROFILE before collection, so every xdist
# worker collects the same plan.
PLAN = plan(get_profile())


@pytest.mark.parametrize("check,case", PLAN, ids=[f"{c}[{k}]" for c, k in PLAN])
def test_backend_satisfies_property(specverify_backend, specverify_profile, check, case):
    """A backend must pass every check that applies to what it declares."""
    result = run_check(specverify_backend, check, case, specverify_profile)
    print(result.line())
    assert result.status in ("pass", NOT_APPLICABLE), result.line()


def test_request_alignment_skips_zero_draft_requests(specverify_backend):
    """SPEC 4.8 on the backend's own alignment helper if it ships one, else on the reference's."""
    align = getattr(specverify_backend, "align_draft_probs", reference.align_draft_probs)
    result = check_request_alignment(align)
    assert result.passed, result.line()
