"""The statistical checks' sampling (specverify.checks.sampling): the per-position plan, the device-side
tally, the chunked launches and the budget cut. These are the harness's own machinery: a plan that
under-samples a late position, or a tally that drops or double-counts a chunk, would make every
statistical verdict weaker than it says."""

from dataclasses import replace

import pytest
import torch

from reference import SpecOutput
from specverify.kernels.cpu import CpuBackend
from specverify.checks import run_check, sampling, stats
from specverify.checks.result import CheckResult
from specverify.checks.cases import STAT_CASE_BY_NAME, STAT_CASES
from specverify.checks.statistical import EVALUATORS, case_plan, check_alpha, stat_copies
from specverify.strategies import get_profile

PLANNED = replace(get_profile("ci"), detect_tv=0.05, detect_tv_later=0.08)


@pytest.mark.parametrize("case", [c for c in STAT_CASES if "token_distribution" in c.checks], ids=lambda c: c.name)
def test_plan_gives_every_position_its_target_power(case):
    """With detect_tv_later set, each position's expected samples (copies times the exact reach
    probability) detect its target TV with power 0.99 at the check's per-position alpha: late positions,
    which few requests reach, are what the plan is for."""
    alpha = check_alpha(PLANNED) / (case.depth + 1)
    chosen = case_plan(case, PLANNED)
    assert chosen.target == (0.05,) + (0.08,) * case.depth
    for j, samples in enumerate(chosen.samples()):
        if chosen.reach[j] > 0:
            detectable = stats.min_tv_detectable_by_chi2_test(samples, sampling.position_dof(case, j), alpha)
            assert detectable <= chosen.target[j], (j, samples, detectable)


def test_plan_without_later_targets_keeps_the_profiles_copies_and_caps():
    """The CPU profiles keep their sizes: position 0's common count, and the cases' own caps (the
    production-vocabulary case's included), so that their run times do not move."""
    ci = get_profile("ci")
    assert case_plan(STAT_CASE_BY_NAME["dense_q"], ci).copies == stat_copies(ci)
    capped = case_plan(STAT_CASE_BY_NAME["large_vocab_tiles"], ci)
    assert capped.copies == ci.large_case_copies and capped.fixed


def test_a_fixed_count_keeps_the_cases_caps_where_the_profile_keeps_them():
    """A profile that fixes the count (``stat_copies``) for its small cases, as the float64 reference's
    CPU test profile does, still caps the production-vocabulary case at its ``large_case_copies`` and a
    capped case at its own cap: a fixed count is for the cheap cases. The nightly profile lifts the caps."""
    ci = replace(get_profile("ci"), stat_copies=2_000, large_case_copies=250)
    assert case_plan(STAT_CASE_BY_NAME["dense_q"], ci).copies == 2_000
    assert case_plan(STAT_CASE_BY_NAME["large_vocab_tiles"], ci).copies == 250
    assert case_plan(STAT_CASE_BY_NAME["tile_boundary"], ci).copies == STAT_CASE_BY_NAME["tile_boundary"].max_copies
    nightly = replace(get_profile("nightly"), stat_copies=1_000_000)
    assert case_plan(STAT_CASE_BY_NAME["large_vocab_tiles"], nightly).copies == 1_000_000


def test_reach_is_the_exact_probability_of_reaching_each_position():
    """reach_0 = 1 and reach_{j+1} = reach_j * P(accept at j | reached j), from the exact law."""
    case = STAT_CASE_BY_NAME["dense_q"]
    r = sampling.reach(case)
    assert r[0] == pytest.approx(1.0)
    for j in range(case.depth):
        assert r[j + 1] == pytest.approx(r[j] * float(case.acceptance_by_position[j]), rel=1e-9)


def _exact_outputs(case, chunks, size, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [case.draw_exact(size, g) for _ in range(chunks)]


@pytest.mark.parametrize("name", ["dense_q", "block", "tree_onehot_topk"])
def test_tally_of_chunks_equals_the_tally_of_their_concatenation(name):
    """Counting launch by launch gives the counts of one big launch: token counts per position, the
    num_accepted histogram, the accepted sum and the sequences; so every check's statistic is the same."""
    case = STAT_CASE_BY_NAME[name]
    outs = _exact_outputs(case, 3, 500)
    chunked = sampling.Tally(case.depth, case.vocab_size, sequences=True)
    for out in outs:
        chunked.add(out)
    whole = sampling.Tally.of(case, SpecOutput(torch.cat([o.token_ids for o in outs]),
                                               torch.cat([o.num_accepted for o in outs])))
    assert torch.equal(chunked.tokens(), whole.tokens()) and torch.equal(chunked.stops(), whole.stops())
    assert [chunked.reached(j) for j in range(case.depth + 2)] == [whole.reached(j) for j in range(case.depth + 2)]
    assert chunked.accepted_sum() == whole.accepted_sum() and chunked.samples == whole.samples == 1500
    assert chunked.sequences == whole.sequences


def test_tally_counts_each_stop_token_at_the_position_its_request_stopped():
    """The token after a rejection at j (num_accepted == j) counts at j among the stops, the bonus at k; the
    accepted tokens before it count among the tokens only."""
    case = STAT_CASE_BY_NAME["dense_q"]          # k = 3
    out = SpecOutput(torch.tensor([[5, -1, -1, -1], [1, 2, -1, -1], [1, 2, 3, 4], [7, 6, -1, -1]]),
                     torch.tensor([0, 1, 3, 1]))
    stops = sampling.Tally.of(case, out).stops()
    assert stops.sum(1).tolist() == [1, 2, 0, 1]
    assert stops[0, 5] == 1 and stops[1, 2] == 1 and stops[1, 6] == 1 and stops[3, 4] == 1


def test_tally_names_ids_outside_the_vocabulary_by_position():
    """An id outside [0, V) at a reached position is recorded there (and fails token_distribution);
    one past num_accepted is not the check's business (output_structure's)."""
    case = STAT_CASE_BY_NAME["dense_q"]
    V = case.vocab_size
    out = SpecOutput(torch.tensor([[1, V, -1, -1], [2, 3, V + 5, -1]]), torch.tensor([1, 1]))
    tally = sampling.Tally.of(case, out)
    assert tally.outside == {1: [V]}
    result = CheckResult("token_distribution", "dense_q", "x", "statistical", "pass", alpha=1e-3)
    EVALUATORS["token_distribution"](result, case, tally)
    assert result.status == "fail" and f"position 1: emitted ids outside [0, {V})" in result.message


def test_counts_outside_the_num_accepted_range_are_kept_apart():
    """num_accepted below 0 or past the depth lands in the histogram's end bins: it never counts as a
    request that reached position 0 (below) and counts as reaching every position (above)."""
    case = STAT_CASE_BY_NAME["dense_q"]
    out = SpecOutput(torch.tensor([[1, -1, -1, -1], [1, 2, 3, 4], [0, -1, -1, -1]]), torch.tensor([-1, 9, 0]))
    tally = sampling.Tally.of(case, out)
    assert tally.reached(0) == 2 and tally.reached(case.depth) == 1 and tally.accepted_sum() == 8


def test_statistical_result_records_its_plan_and_speed():
    """The JSON of a statistical check carries the plan (reach, targets, expected samples per position)
    and the speed (copies, launches, samples/s, the backend's share): the nightly's figures come from it."""
    result = run_check(CpuBackend(), "acceptance_rate", "dense_q", replace(get_profile("ci"), stat_copies=2_000))
    s = result.to_json()["sampling"]
    assert s["copies"] == 2_000 and s["launches"] == 1 and s["samples_per_second"] > 0
    assert 0 < s["backend_share"] <= 1 and len(s["reach"]) == 4 and s["budget_cut"] is None
    assert "samples/s" in result.line()


def test_a_planned_profile_draws_what_the_budget_buys_and_says_so(monkeypatch):
    """On a profile with later-position targets, a production-vocabulary case (one with a launch size)
    draws until its budget's time is spent, never n/a and never silently: the result names the cut and
    says where the power falls short of the plan. The case is dense_q given a launch size, and every
    clock reading is 10 s after the last: a launch reads it four times, so the check before the fourth
    launch finds the 100 s spent, after the probe of 4 copies and two launches of 50."""
    clock = iter(range(0, 10 ** 6, 10))
    monkeypatch.setattr(sampling, "_clock", lambda: next(clock))
    slow = replace(STAT_CASE_BY_NAME["dense_q"], name="large_vocab_tiles", launch_copies=50)
    monkeypatch.setitem(STAT_CASE_BY_NAME, "large_vocab_tiles", slow)
    profile = replace(get_profile("ci"), detect_tv=0.05, detect_tv_later=0.08, large_case_budget=100.0)
    result = run_check(CpuBackend(), "token_distribution", "large_vocab_tiles", profile)
    cut, copies = result.sampling["budget_cut"], result.sampling["copies"]
    assert cut and copies < result.sampling["planned_copies"], result.line()
    assert copies == 104 and "the profile's budget is 100 s" in cut and "ran out" in cut
    assert "power short of the plan" in result.message


def test_over_budget_is_not_applicable_on_an_unplanned_profile(monkeypatch):
    """The CPU profiles keep the old rule: a probe projecting far over the budget makes the case n/a,
    with the measurement in the reason."""
    clock = iter(range(0, 10 ** 6, 10))
    monkeypatch.setattr(sampling, "_clock", lambda: next(clock))
    slow = replace(STAT_CASE_BY_NAME["dense_q"], name="large_vocab_tiles", launch_copies=50)
    monkeypatch.setitem(STAT_CASE_BY_NAME, "large_vocab_tiles", slow)
    result = run_check(CpuBackend(), "token_distribution", "large_vocab_tiles",
                       replace(get_profile("ci"), large_case_budget=100.0))
    assert result.status == "n/a" and "over the profile's budget of 100 s" in result.message


class CountingBackend(CpuBackend):
    """The CPU backend, counting its calls."""

    calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return super().__call__(*args, **kwargs)


def test_one_draw_serves_every_check_of_a_case():
    """A case's statistical checks share its draw (half the device time of the nightly): the second check
    of dense_q calls the backend no more, says which check drew its samples and tests the same count;
    another run seed draws afresh."""
    backend, profile = CountingBackend(), replace(get_profile("ci"), stat_copies=2_000)
    first = run_check(backend, "token_distribution", "dense_q", profile)
    calls = backend.calls
    second = run_check(backend, "acceptance_rate", "dense_q", profile)
    assert calls >= 1 and backend.calls == calls, "the second check drew again"
    assert first.sampling["drawn_for"] is None and second.sampling["drawn_for"] == "token_distribution"
    assert second.sampling["copies"] == first.sampling["copies"] == 2_000
    assert second.covered == first.covered and "standard" in second.covered   # the draw's coverage is its too
    run_check(backend, "acceptance_rate", "dense_q", profile, run_seed=1)
    assert backend.calls > calls


def test_fresh_drafts_follow_each_positions_q():
    """A chain case launched again keeps its rows and draws new drafts: x_j ~ q_j per copy, copy-major as
    in ``batch``. 20,000 copies put each frequency within 0.02 of q_j (over 5 standard deviations), while
    the three q rows differ by more than that: a transposed layout fails."""
    case = STAT_CASE_BY_NAME["dense_q"]
    g = torch.Generator().manual_seed(5)
    drafts = case.fresh_drafts(20_000, g).view(20_000, case.k)
    for j in range(case.k):
        freq = torch.bincount(drafts[:, j], minlength=case.vocab_size).double() / 20_000
        assert (freq - case.q[j]).abs().max() < 0.02, j
        assert all((case.q[j] - case.q[i]).abs().max() > 0.04 for i in range(case.k) if i != j)
    built = case.batch(10, g)
    again = built.with_drafts(case.fresh_drafts(10, g))
    assert again.target_logits is built.target_logits and again.draft_probs is built.draft_probs
    assert not torch.equal(again.draft_token_ids, built.draft_token_ids)


def test_with_drafts_refuses_ids_outside_the_vocabulary():
    """Only the drafts are validated: a wrong shape or an id outside [0, V) is a ValueError naming it."""
    built = STAT_CASE_BY_NAME["dense_q"].batch(4, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"must lie in \[0, V\) = \[0, 8\), got values in \[0, 8\]"):
        built.with_drafts(torch.tensor([0, 1, 2] * 3 + [0, 1, 8]))
    with pytest.raises(ValueError, match=r"shape \[T\] = \[12\]"):
        built.with_drafts(torch.zeros(11, dtype=torch.int64))


def test_check_pool_runs_a_cases_checks_in_one_worker():
    """The pool hands a statistical case's other checks to the worker that started it, so the case is
    drawn once, though two workers are free and the pairs are listed check by check."""
    from specverify.pool import CheckPool  # noqa: PLC0415

    pairs = [("token_distribution", "dense_q"), ("token_distribution", "onehot_drafter"),
             ("acceptance_rate", "dense_q"), ("acceptance_rate", "onehot_drafter")]
    pool = CheckPool("cpu", replace(get_profile("ci"), stat_copies=2_000), workers=2)
    try:
        results = pool.run(pairs)
    finally:
        pool.close()
    assert [r.status for r in results] == ["pass"] * 4, [r.line() for r in results]
    assert [r.sampling["drawn_for"] for r in results] == [None, None, "token_distribution", "token_distribution"]


@pytest.mark.parametrize("samples,r", [(4_000_000, 0.05), (16_000_000, 1.0), (30_000, 0.48), (100, 0.01)])
def test_planned_copies_reach_each_position_short_only_four_deviations_below_the_mean(samples, r):
    """The plan's copies c give position j Binomial(c, r) samples; c is the fewest whose mean sits at least
    four standard deviations above the samples needed (a late position came up 0.2% short of its target
    when planned on the mean)."""
    c = sampling.copies_reaching(samples, r)
    mean, sd = c * r, (c * r * (1 - r)) ** 0.5
    assert mean - sampling.REACH_Z * sd >= samples - 1e-6
    below = c - 1
    assert below * r - sampling.REACH_Z * (below * r * (1 - r)) ** 0.5 < samples


def test_the_steady_rate_leaves_out_the_first_launch(monkeypatch):
    """A case's first launch compiles the backend's kernels in a fresh worker: seconds, where a launch of
    the same copies takes milliseconds after it. The JSON states the rate after the first launch beside
    the whole draw's, so that a short draw's speed is not its compile time. Here the clock reads 1 s
    more at each reading, except 100 s more when the first launch ends."""
    readings = iter([0, 1] + [101 + k for k in range(10 ** 4)])
    monkeypatch.setattr(sampling, "_clock", lambda: next(readings))
    case = STAT_CASE_BY_NAME["dense_q"]
    profile = replace(get_profile("ci"), stat_copies=1_000, large_case_budget=None)
    _, timing = sampling.draw(CpuBackend(), replace(case, launch_copies=250), profile, 1,
                              sampling.Plan(1_000, tuple(sampling.reach(case)), (None,) * (case.depth + 1)))
    got = timing.to_json()
    assert got["launches"] == 4 and got["samples_per_second"] < 10
    assert got["steady_samples_per_second"] == 750 / (timing.total_seconds - timing.first_seconds)
    assert got["steady_samples_per_second"] > 5 * got["samples_per_second"]
