"""A statistical check split over the GPUs (specverify.checks.parts, issue 31): each part draws its own
share from its own stream, the parent sums the counts and tests once, and a part that fails fails the
check. A split that reused a stream, dropped a part's counts or let a failed part through would make the
multi-GPU verdict weaker than one worker's."""

from dataclasses import replace

import pytest
import torch

from specverify.checks import PASS, run_check
from specverify.checks.parts import merge_parts, parts_for
from specverify.checks.result import CheckResult
from specverify.backends import Deviation
from specverify.kernels.cpu import CpuBackend
from specverify.mutants import MUTANTS
from specverify.strategies import get_profile

PROFILE = replace(get_profile("ci"), stat_copies=4_000)


def _parts(backend, check: str, case: str, n: int = 2) -> list[CheckResult]:
    return [run_check(backend, check, case, PROFILE, part=(k, n)) for k in range(n)]


def test_parts_draw_their_share_from_their_own_streams_and_sum_to_the_plan():
    """Two parts of dense_q draw 2,000 copies each from different seeds (their counts differ); the merged
    result tests the 4,000 summed, as one draw of the plan would, and passes on the correct backend."""
    parts = _parts(CpuBackend(), "token_distribution", "dense_q")
    assert [p.status for p in parts] == [PASS, PASS] and [p.sampling["copies"] for p in parts] == [2_000, 2_000]
    assert not torch.equal(parts[0].drawn.tokens(), parts[1].drawn.tokens())
    summed = parts[0].drawn.tokens() + parts[1].drawn.tokens()
    merged = merge_parts("token_distribution", "dense_q", PROFILE, parts)
    assert merged.status == PASS and merged.samples == 4_000, merged.line()
    assert merged.sampling["parts"] == 2 and merged.sampling["copies"] == 4_000
    assert int(summed[0].sum()) == merged.samples
    again = run_check(CpuBackend(), "token_distribution", "dense_q", PROFILE, part=(1, 2))
    assert torch.equal(again.drawn.tokens(), parts[1].drawn.tokens()), "a part run again draws the same samples"


def test_a_mutant_split_into_parts_is_caught_by_the_summed_test():
    """residual_from_p shifts dense_q's token law: its two parts each pass as draws, and the one test on
    their summed counts fails."""
    parts = _parts(MUTANTS["residual_from_p"].build(), "token_distribution", "dense_q")
    assert [p.status for p in parts] == [PASS, PASS]
    merged = merge_parts("token_distribution", "dense_q", PROFILE, parts)
    assert merged.status == "fail" and "token distribution differs" in merged.message, merged.line()


def test_a_part_that_did_not_pass_decides_the_check_and_is_named():
    """A failed (or n/a, or not run) part is the check's result, its message saying which part."""
    parts = _parts(CpuBackend(), "acceptance_rate", "dense_q")
    parts[1].fail("hung: a backend call did not return")
    merged = merge_parts("acceptance_rate", "dense_q", PROFILE, parts)
    assert merged.status == "fail" and merged.message.startswith("part 2 of 2: hung"), merged.message


@pytest.mark.parametrize("check,case,gpus,deviations,parts", [
    ("token_distribution", "large_vocab_tiles", 2, (), 2),
    ("token_distribution", "large_vocab_262k", 4, (), 4),
    ("token_distribution", "large_vocab_tiles", 1, (), 1),
    ("token_distribution", "dense_q", 2, (), 1),
    ("differential_seeded", "large_vocab", 2, (), 1),
    ("token_distribution", "large_vocab_tiles", 2,
     (Deviation("token_distribution", "large_vocab_tiles", "known", "differs"),), 1),
])
def test_only_production_vocabulary_draws_are_split_over_gpus(check, case, gpus, deviations, parts):
    """The split takes the run's longest draws over two or more GPUs, and nothing else: a case whose
    draw other checks share, one GPU or the CPU, a declared deviation (matched in a worker) keep a whole
    draw."""
    assert parts_for(check, case, gpus, deviations) == parts


def test_check_pool_splits_a_production_vocabulary_case_over_its_gpus():
    """Workers pinned to two (made-up) GPU ids on the CPU: the V = 151,936 case is drawn in two parts,
    one per GPU, summed and tested once; the JSON-facing result names both GPUs. A fixed 300 copies keep
    the draw short: the split, not the power, is under test."""
    from specverify.pool import CheckPool  # noqa: PLC0415

    pool = CheckPool("cpu", replace(get_profile("ci"), stat_copies=300), workers=2, gpus=["0", "1"])
    try:
        (result,) = pool.run([("token_distribution", "large_vocab_tiles")])
    finally:
        pool.close()
    assert result.status == PASS, result.line()
    assert result.sampling["parts"] == 2 and result.sampling["part_copies"] == [150, 150]
    assert result.samples == 300 and result.gpu == "0,1" and "2 parts side by side on GPUs 0,1" in result.line()


@pytest.mark.parametrize("spec,expected", [
    ("specverify.mutants.hostile:Segfault", "crashed the worker process (SIGSEGV)"),
    ("specverify.mutants.hostile:Hang", "hung: "),
])
def test_a_part_that_crashes_or_hangs_fails_its_check_naming_the_part(spec, expected):
    """A split pair's part dies or hangs like any check: the pair is one FAIL naming the part, recorded
    once however many parts die, and the run goes on to report every pair."""
    from specverify.pool import CheckPool  # noqa: PLC0415

    # every call of Hang hangs (and Segfault's crash needs no timeout): a second cuts no call short
    pool = CheckPool(spec, get_profile("ci"), workers=2, gpus=["0", "1"], call_timeout=1.0)
    try:
        results = pool.run([("token_distribution", "large_vocab_tiles"), ("empty_batch", "empty")])
    finally:
        pool.close()
    split = results[0]
    assert split.status == "fail" and split.message.startswith("part ") and expected in split.message, split.line()
    assert len(results) == 2
