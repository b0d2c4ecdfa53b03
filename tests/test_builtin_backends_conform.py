"""Correct backends pass every check of the ci profile: the other half of the proof of power.

The same (check, case) plan the CLI and the shipped suite run, applied to each built-in backend.
The Triton backend runs in the Triton interpreter on CPU tensors here (tests/conftest.py), which
executes every program instance in Python: it gets a lighter "smoke" profile (below), without
the statistical checks. Its seeded stream is the reference's Philox stream, so the replicated
differential case compares the very batches the statistical checks would sample, token for token,
under the same noise: a stronger check than 200 samples' statistics. Its statistical checks run at
full size in the nightly GPU job, and in `specverify check triton --profile smoke`.
"""

from dataclasses import replace

import pytest

from specverify.registry import BUILTIN_BACKENDS, get_backend
from specverify.checks import CHECKS, NOT_APPLICABLE, PASS, plan, run_check
from specverify.strategies import get_profile

PROFILE = get_profile("ci")
PLAN = plan(PROFILE)
# The interpreter runs each program instance in Python: here the structural and differential cases take
# fewer Hypothesis examples, batches of at most 5 requests and half-size bulk batches than the smoke
# profile's (which the README's `TRITON_INTERPRET=1 specverify check triton --profile smoke` runs in
# full, as does the GPU nightly).
# Its structural production-vocabulary calls take seconds each there: V = 151,936 alone (the partial last
# tile and the split above 100,000; the smoke profile and the GPU add 262,144).
# The V = 151,936 statistical case at a quarter of the ci profile's 1,000 copies: `specverify check cpu`,
# the README's first command and CI's, runs it in full; here it checks the plumbing at both backends (the
# reference, which samples request by request in float64, at a tenth: five times the CPU backend's time).
LARGE_CASE_COPIES = 250
REFERENCE_LARGE_CASE_COPIES = 100
PROFILE_FOR = {"triton": replace(get_profile("smoke"), examples=6, max_requests=5, bulk_requests=48,
                                 production_vocabs=(151_936,)),
               # the reference decides in float64, request by request for the block rule: its statistics
               # run at a quarter of the ci sample size (the ci profile checks the other backends in full)
               "reference": replace(PROFILE, stat_copies=2_000, large_case_copies=REFERENCE_LARGE_CASE_COPIES),
               "cpu": replace(PROFILE, large_case_copies=LARGE_CASE_COPIES)}
# The reference against itself under shared noise is the identity: its exact cases would only re-run
# reference.sample twice (tests/test_reference.py holds it to its per-request definition and its seeded
# stream to the injected path); its statistical and structural checks stay.
SKIPPED_KINDS = {"triton": "statistical", "reference": "exact"}
_BACKENDS = {}


def backend(name):
    if name not in _BACKENDS:
        _BACKENDS[name] = get_backend(name)
    return _BACKENDS[name]


# In the interpreter, filters, placeholders and token trees run on the injected path only: the seeded path
# differs only in where the noise comes from, which the other seeded cases cover (the GPU runs both).
SKIPPED_CASES = {"triton": {("differential_seeded", case) for case in ("filters", "placeholders", "tree",
                                                                     "tree_path_equals_chain")}}
CASES = [pytest.param(name, check, case, id=f"{name}-{check}[{case}]") for name in BUILTIN_BACKENDS
         for check, case in PLAN if CHECKS[check].kind != SKIPPED_KINDS.get(name)
         and (check, case) not in SKIPPED_CASES.get(name, ())]


@pytest.mark.parametrize("name,check,case", CASES)
def test_builtin_backend_passes_check(name, check, case):
    """Every built-in backend satisfies every property it declares; n/a only for undeclared features."""
    result = run_check(backend(name), check, case, PROFILE_FOR.get(name, PROFILE))
    print(result.line())
    assert result.status in (PASS, NOT_APPLICABLE), result.line()
    if result.status == NOT_APPLICABLE:
        # built-ins declare every method, noise path, filter and placeholder: n/a may only come from the device,
        # from a production-vocabulary case whose measured cost is over the profile's budget (the float64
        # reference's, at V = 151,936), or from the graph-capturable entry of a backend that declares none
        assert "does not run on" in result.message or result.message.startswith("profile device is cpu") \
            or (case.startswith("large_vocab") and "over the profile's budget" in result.message) \
            or ("(cuda_graphs)" in result.message and not backend(name).capabilities.cuda_graphs), result.line()
