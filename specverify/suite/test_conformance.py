"""Every check of specverify.checks against the backend named by --specverify-backend.

One test per (check, case) pair, so pytest-xdist spreads them over workers and a failure names the
property. The test bodies are the shared check functions; this file adds the assertion, and turns
an n/a into a skip that says why (never a pass). The plugin judges the whole run at the end: it
fails when no core property was checked or a --specverify-require is unmet.
"""

import pytest

from specverify.checks import (CHECKS, KNOWN, NOT_APPLICABLE, NOT_RUN, PASS, CheckResult, check_request_alignment,
                               plan, run_check)
from specverify.checks.statistical import sample_group
from specverify.strategies import get_profile

# The plugin exports --specverify-profile as $SPECVERIFY_PROFILE before collection, so every xdist
# worker collects the same plan.
PLAN = plan(get_profile())




def _param(check: str, case: str):
    """A statistical pair carries its case as its xdist group: under ``--dist loadgroup`` the case's
    checks run in one worker, which draws the case once for all of them."""
    group = sample_group(check, case)
    marks = () if group is None else (pytest.mark.xdist_group(group),)
    return pytest.param(check, case, id=f"{check}[{case}]", marks=marks)


@pytest.mark.parametrize("check,case", [_param(c, k) for c, k in PLAN])
def test_backend_satisfies_property(specverify_backend, specverify_profile, specverify_deviations, specverify_record,
                                    specverify_guard, check, case):
    """A backend must pass every check that applies to what it declares; a failure a declared
    deviation matches is an xfail with its reason. Past the run's deadline, or once a call of the
    backend has hung, the check is not run (a skip saying why; the session's verdict fails)."""
    why = specverify_guard.why_not_run()
    if why:
        specverify_record(CheckResult(check=check, case=case, backend=specverify_backend.name,
                                      kind=CHECKS[check].kind, status=NOT_RUN, message=why))
        pytest.skip(why)
    result = specverify_record(specverify_guard.run(
        check, case, str(specverify_backend.name),
        lambda: run_check(specverify_backend, check, case, specverify_profile, specverify_deviations)))
    print(result.line())
    if result.status == NOT_APPLICABLE:
        pytest.skip(f"n/a: {result.message}")
    if result.status == KNOWN:
        pytest.xfail(result.message)
    assert result.status == PASS, result.line()


def test_backend_alignment_helper_skips_zero_draft_requests(specverify_backend):
    """SPEC 4.8 on the backend's own alignment helper (``align_draft_probs``); n/a without one."""
    align = getattr(specverify_backend, "align_draft_probs", None)
    if align is None:
        pytest.skip("n/a: the backend ships no align_draft_probs helper")
    result = check_request_alignment(align, name=specverify_backend.name)
    assert result.status == PASS, result.line()
