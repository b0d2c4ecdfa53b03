"""The statistical machinery itself: merging, outright failures, and that stated power is real power."""

import numpy as np
import pytest
import torch

from specverify.checks import stats
from specverify.checks.cases import STAT_CASE_BY_NAME, STAT_CASES
from specverify.checks.result import CheckResult
from specverify.checks.statistical import EVALUATORS
from specverify.strategies import get_profile


def test_sample_in_zero_probability_bin_fails_outright():
    """One sample where the exact distribution has no mass must fail however large n is."""
    gof = stats.chi_square_gof({0: 0.5, 1: 0.5, 2: 0.0}, {0: 5000, 1: 4999, 2: 1})
    assert gof.p_value == 0.0 and gof.impossible == [(2, 1)]


def test_bins_with_expected_count_under_five_are_merged_into_a_tail_bin():
    """Ten rare categories (expected 1 each) become one tail bin; the big ones stay."""
    expected = np.array([500.0, 490.0] + [1.0] * 10)
    observed = np.array([505.0, 480.0] + [2.0] * 5 + [1.0] * 5)
    e, o = stats.merge_small_bins(expected, observed)
    assert e.tolist() == [500.0, 490.0, 10.0] and o.tolist() == [505.0, 480.0, 15.0]


def test_correct_samples_pass_and_shifted_samples_fail():
    """A multinomial sample of p passes at alpha 1e-3; the same sample against a shifted p fails."""
    rng = np.random.default_rng(0)
    p = np.array([0.4, 0.3, 0.2, 0.1])
    counts = rng.multinomial(20000, p)
    ok = stats.chi_square_gof(dict(enumerate(p)), dict(enumerate(counts)))
    shifted = stats.chi_square_gof(dict(enumerate([0.35, 0.35, 0.2, 0.1])), dict(enumerate(counts)))
    assert ok.p_value > 1e-3 and shifted.p_value < 1e-6


@pytest.mark.parametrize("n,bins,alpha", [(2000, 4, 1e-2), (8000, 8, 1e-4)])
def test_stated_detectable_distance_is_detected_with_power_099(n, bins, alpha):
    """Simulate the least detectable deviation (|d| proportional to p0, signs half + half -) at the
    stated TV distance: the test must reject in at least 97% of 400 trials (power 0.99 stated;
    the binomial 1e-3 lower quantile of 400 trials at 0.99 is above 0.97)."""
    delta = stats.detectable_tv_chi2(n, bins - 1, alpha)
    p0 = np.full(bins, 1.0 / bins)
    sign = np.where(np.arange(bins) < bins // 2, 1.0, -1.0)
    p1 = p0 + sign * 2 * delta * p0
    rng = np.random.default_rng(1)
    rejections = sum(
        stats.chi_square_gof(dict(enumerate(p0)), dict(enumerate(rng.multinomial(n, p1)))).p_value < alpha
        for _ in range(400))
    assert rejections >= 388
    # and half that distance is not reliably detected: the stated distance is not loose by 2x
    p_half = p0 + sign * delta * p0
    weak = sum(stats.chi_square_gof(dict(enumerate(p0)), dict(enumerate(rng.multinomial(n, p_half)))).p_value < alpha
               for _ in range(400))
    assert weak < 388


def test_binomial_detectable_delta_is_detected_with_power_099():
    """Exact binomial test at the stated delta: rejection in at least 97% of 400 trials."""
    n, p0, alpha = 8000, 0.3, 1e-4
    delta = stats.detectable_delta_binomial(n, p0, alpha)
    rng = np.random.default_rng(2)
    rejections = sum(stats.binomial_test(int(rng.binomial(n, p0 + delta)), n, p0) < alpha for _ in range(400))
    assert rejections >= 388


def test_binomial_with_certain_outcome_fails_on_any_contrary_sample():
    """alpha_j = 1 (q == p) means every draft is accepted: one rejection is impossible."""
    assert stats.binomial_test(999, 1000, 1.0) == 0.0 and stats.binomial_test(1000, 1000, 1.0) == 1.0


def test_wilson_interval_covers_the_observed_rate():
    lo, hi = stats.wilson_interval(3, 1000)
    assert lo < 0.003 < hi and hi < 0.01


NULL_OUTPUTS = 300
CI_COPIES = get_profile("ci").stat_copies   # requests per output, as the ci profile samples them


@pytest.mark.parametrize("case_check", [f"{case.name}:{check}" for case in STAT_CASES for check in case.checks
                                        if check in EVALUATORS])
def test_statistical_check_rejects_exact_null_outputs_at_its_nominal_rate(case_check):
    """Each check's evaluation, fed outputs drawn from the case's exact joint (a perfect sampler), must
    reject at level 0.05 about 5% of the time. A liberal test (a wrong degrees-of-freedom count, bins
    not merged, a one-sided binomial) would raise the suite's false alarms above its stated budget.
    300 null outputs (ci profile size) per case, fixed generator: the bound of 30 (10%) is 4.1 standard
    deviations above 15, so a calibrated check exceeds it with probability ~3e-5; a check rejecting
    12% of the time is caught with probability ~0.8."""
    name, check = case_check.split(":")
    case = STAT_CASE_BY_NAME[name]
    g = torch.Generator().manual_seed(len(case_check))
    rejected = 0
    for _ in range(NULL_OUTPUTS):
        result = CheckResult(check, name, "exact-null", "statistical", "pass", alpha=1e-4)
        EVALUATORS[check](result, case, case.draw_exact(CI_COPIES, g))
        rejected += result.p_value < 0.05
    assert rejected <= 30, f"{rejected}/{NULL_OUTPUTS} exact-null outputs rejected at 0.05"


def test_exact_null_outputs_follow_the_exact_joint():
    """draw_exact, which the calibration relies on, must itself sample the exact joint: the empirical
    frequency of position-0 tokens is within 5 standard errors of the exact distribution."""
    case = STAT_CASE_BY_NAME["dense_q"]
    out = case.draw_exact(200_000, torch.Generator().manual_seed(5))
    emp = torch.bincount(out.token_ids[:, 0], minlength=case.vocab_size).double() / 200_000
    want = case.position_distributions[0]
    se = (want * (1 - want) / 200_000).sqrt()
    assert bool(((emp - want).abs() <= 5 * se + 1e-12).all()), (emp, want)
    assert bool(((out.token_ids >= 0).sum(1) == out.num_accepted + 1).all())
