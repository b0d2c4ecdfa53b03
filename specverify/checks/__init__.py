"""The harness's checks: each declared once, with its kind, its cases and what it needs.

``CHECKS`` is the declaration; ``plan`` lists the (check, case) pairs of a run and ``run_check`` /
``run_suite`` execute them through the one runner (``specverify.checks.runner.execute``), which
decides n/a, guards every backend call and turns exceptions into FAIL results. The CLI, the pytest
plugin and the shipped suite are thin faces over these functions; nothing here knows about pytest
or mutants.
"""

from __future__ import annotations

from dataclasses import replace

from specverify.checks.agreement import (DIFFERENTIAL_CASES, LARGE_VOCABS_ONLY, SEEDED_CASES,
                                         check_differential_injected, check_differential_seeded,
                                         differential_needs)
from specverify.checks.cases import STAT_CASE_BY_NAME, STAT_CASES, runs_on
from specverify.checks.coins import COIN_CASES, check_boundary_coins, coin_needs
from specverify.checks.greedy import GREEDY_CASES, check_greedy_agreement, greedy_needs
from specverify.checks.graphs import GRAPH_CASES, GRAPH_NEEDS, check_cuda_graphs
from specverify.checks.large_vocab import LARGE_VOCAB_CASES, LARGE_VOCAB_NEEDS, check_large_vocab_structure
from specverify.checks.nonfinite import NONFINITE_CASES, NONFINITE_NEEDS, check_nonfinite_rows
from specverify.checks.misuse import ANY_BACKEND, check_interface_parity, check_request_alignment, \
    check_synthetic_validation
from specverify.checks.placement import PLACEMENT_CASES, PLACEMENT_NEEDS, check_device_placement
from specverify.checks.result import FAIL, KNOWN, NOT_APPLICABLE, NOT_RUN, PASS, CheckResult
from specverify.checks.runner import CORE_KINDS, Check, Needs, execute
from specverify.checks.offsets import OFFSET_CASES, OFFSET_NEEDS, check_int64_offsets
from specverify.checks.strided import STRIDED_CASES, STRIDED_NEEDS, check_strided_inputs
from specverify.checks.statistical import (check_accepted_length, check_acceptance_rate, check_alpha,
                                           check_recovered_distribution, check_sequence_distribution,
                                           check_synthetic_rate, check_token_distribution, statistical_needs,
                                           statistical_test_count)
from specverify.checks.structural import (EMPTY_BATCH, SHARED_NOISE, check_batch_invariance, check_determinism,
                                          check_empty_batch,
                                          check_input_integrity, check_output_structure, check_repeated_calls,
                                          check_uninitialized_memory, check_zero_draft_layouts)
from specverify.strategies import Profile, get_profile


def _stat_cases(check: str) -> tuple:
    return tuple(c.name for c in STAT_CASES if check in c.checks)


def _always(needs: Needs):
    return lambda case: needs


CHECKS: dict[str, Check] = {c.name: c for c in (
    Check("differential_injected", "exact", check_differential_injected, DIFFERENTIAL_CASES,
          "same tokens as the reference under shared injected noise (trees: also single-path trees equal to the "
          "backend's own chains)", differential_needs("injected"), LARGE_VOCABS_ONLY),
    Check("differential_seeded", "exact", check_differential_seeded, SEEDED_CASES,
          "same tokens as the reference under shared per-request seeds", differential_needs("philox"),
          LARGE_VOCABS_ONLY),
    Check("greedy_agreement", "exact", check_greedy_agreement, GREEDY_CASES,
          "all-greedy batches (ties, near-ties) give the reference's tokens on every noise path: no noise to share",
          greedy_needs),
    Check("token_distribution", "statistical", check_token_distribution, _stat_cases("token_distribution"),
          "emitted token at each position follows the exact distribution", statistical_needs),
    Check("recovered_distribution", "statistical", check_recovered_distribution, _stat_cases("recovered_distribution"),
          "the token emitted at a rejection follows its exact law given the rejection", statistical_needs),
    Check("acceptance_rate", "statistical", check_acceptance_rate, _stat_cases("acceptance_rate"),
          "acceptances per position follow alpha_j (or the synthetic c_j)", statistical_needs),
    Check("accepted_length", "statistical", check_accepted_length, _stat_cases("accepted_length"),
          "mean accepted length of the block or tree rule equals its exact law's, at least the standard rule's "
          "(a tree's: its first-child chain's)",
          statistical_needs),
    Check("sequence_distribution", "statistical", check_sequence_distribution, _stat_cases("sequence_distribution"),
          "the whole emitted sequence follows the exact joint law", statistical_needs),
    Check("synthetic_rate", "statistical", check_synthetic_rate, _stat_cases("synthetic_rate"),
          "mean joint acceptance equals the configured synthetic rate", statistical_needs),
    Check("output_structure", "structural", check_output_structure, ("random",),
          "-1 padding, num_accepted consistent, ids in [0, V) and in the support"),
    Check("large_vocab_structure", "structural", check_large_vocab_structure, LARGE_VOCAB_CASES,
          "at V = 151,936 and 262,144 (4,099 on the CPU), any noise path: ids in [0, V) and in the support",
          _always(LARGE_VOCAB_NEEDS)),
    Check("boundary_coins", "structural", check_boundary_coins, COIN_CASES,
          "every uniform at 0, 2^-24 or 1 - 2^-24 (injected, or the backend's own coins fixed): emitted tokens in "
          "the support, and where a coin decides, its decisions", coin_needs),
    Check("nonfinite_rows", "structural", check_nonfinite_rows, NONFINITE_CASES,
          "NaN / +inf / all -inf rows (SPEC 3.6): ValueError, or valid ids and finite requests unaffected",
          _always(NONFINITE_NEEDS)),
    Check("uninitialized_memory", "structural", check_uninitialized_memory, ("random",),
          "outputs independent of unwritten memory"),
    Check("batch_invariance", "structural", check_batch_invariance, ("random",),
          "a request's output independent of the rest of the batch", _always(Needs(noise="batch_invariant"))),
    Check("determinism", "structural", check_determinism, ("random",), "same seed or noise, same output"),
    Check("zero_draft_layouts", "structural", check_zero_draft_layouts, ("layouts",),
          "zero-draft requests anywhere and all-zero batches"),
    Check("empty_batch", "structural", check_empty_batch, ("empty",),
          "a batch of no requests, on every declared path and method", _always(EMPTY_BATCH)),
    Check("repeated_calls", "structural", check_repeated_calls, ("same_shapes",),
          "each call sees its own draft probabilities (no stale state)",
          _always(replace(SHARED_NOISE, dense_draft_probs=True))),
    Check("input_integrity", "structural", check_input_integrity, ("random",),
          "the backend never writes into its inputs (batch, noise, seeds)"),
    Check("strided_inputs", "structural", check_strided_inputs, STRIDED_CASES,
          "inputs as views that are not contiguous (padded rows, every other element): the same outputs as "
          "contiguous ones, or a refusal naming the tensor", _always(STRIDED_NEEDS)),
    Check("interface_parity", "structural", check_interface_parity, ("convention",),
          "full convention accepted; undeclared combinations raise UnsupportedError", _always(ANY_BACKEND)),
    Check("synthetic_validation", "structural", check_synthetic_validation, ("bad_rates",),
          "unset or out-of-range synthetic rate is a ValueError", _always(Needs(method="synthetic"))),
    Check("cuda_graphs", "structural", check_cuda_graphs, GRAPH_CASES,
          "capture once, replay on fresh inputs: equal to eager and to the reference (CUDA only)",
          _always(GRAPH_NEEDS)),
    Check("int64_offsets", "structural", check_int64_offsets, OFFSET_CASES,
          "logits past 2^31 and 2^32 elements (10,800 and 20,640 rows at V = 262,144): every request its own "
          "tokens, the rows past the limit as the reference decides them (CUDA only)", _always(OFFSET_NEEDS)),
    Check("device_placement", "structural", check_device_placement, PLACEMENT_CASES,
          "outputs on the batch's device, work on the caller's stream of that device, nothing on another device "
          "(CUDA only; other_device needs 2 GPUs)", _always(PLACEMENT_NEEDS)),
)}

# Checks of what only a CUDA device has (streams, a second GPU): planned only where the profile's device is
# cuda, or when named; on a CPU run they could only add an n/a line to every report.
CUDA_ONLY = frozenset({"device_placement", "int64_offsets"})


def plan(profile: Profile | None = None, checks=None) -> list[tuple[str, str]]:
    """Every (check, case) pair of a run, in a stable order."""
    profile = profile or get_profile()
    names = checks or [name for name in CHECKS if name not in CUDA_ONLY or profile.device == "cuda"]
    return [(name, case) for name in names for case in CHECKS[name].cases
            if not (case in CHECKS[name].large_vocabs_only and not profile.large_vocabs)
            and (case not in STAT_CASE_BY_NAME or runs_on(STAT_CASE_BY_NAME[case], profile))]


def run_check(backend, check: str, case: str, profile: Profile | None = None, deviations: tuple = (),
              **options) -> CheckResult:
    """One (check, case) on ``backend``, in this process, with the run's declared ``deviations``; options
    such as a statistical check's ``run_seed`` (fresh samples per seed) go to the check."""
    return execute(CHECKS[check], backend, case, profile or get_profile(), deviations, **options)


def run_suite(backend, profile: Profile | None = None, checks=None, progress=None,
              deviations: tuple = ()) -> list[CheckResult]:
    """All checks on one backend, in this process; ``progress(i, n, result)`` is called after each."""
    profile = profile or get_profile()
    pairs = plan(profile, checks)
    results = []
    for i, (check, case) in enumerate(pairs):
        results.append(run_check(backend, check, case, profile, deviations))
        if progress:
            progress(i + 1, len(pairs), results[-1])
    return results


__all__ = ["CHECKS", "CORE_KINDS", "CUDA_ONLY", "FAIL", "KNOWN", "NOT_APPLICABLE", "NOT_RUN", "PASS", "Check", "CheckResult", "Needs", "check_alpha",
           "check_request_alignment", "plan", "run_check", "run_suite", "statistical_test_count"]
