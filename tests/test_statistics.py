"""The statistical machinery itself: merging, outright failures, and that stated power is real power."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from specverify.checks import stats
from specverify.checks.cases import STAT_CASE_BY_NAME, STAT_CASES
from specverify.checks.result import CheckResult
from specverify.checks.statistical import EVALUATORS, check_alpha, stat_copies
from specverify.strategies import PROFILES, get_profile


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
    delta = stats.min_tv_detectable_by_chi2_test(n, bins - 1, alpha)
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
    delta = stats.min_shift_detectable_by_binomial_test(n, p0, alpha)
    rng = np.random.default_rng(2)
    rejections = sum(stats.binomial_test(int(rng.binomial(n, p0 + delta)), n, p0) < alpha for _ in range(400))
    assert rejections >= 388


# (minimum detectable discrepancy for n samples, minimum sample count for a discrepancy) of each test
FACES = {
    "chi2_tv": (lambda n: stats.min_tv_detectable_by_chi2_test(n, 7, 2.5e-5),
                lambda d: stats.min_num_samples_for_chi2_tv_test(d, 7, 2.5e-5)),
    "chi2_tv_power_0.8": (lambda n: stats.min_tv_detectable_by_chi2_test(n, 3, 1e-2, false_pass_rate=0.2),
                          lambda d: stats.min_num_samples_for_chi2_tv_test(d, 3, 1e-2, false_pass_rate=0.2)),
    "binomial_shift": (lambda n: stats.min_shift_detectable_by_binomial_test(n, 0.3, 1e-4),
                       lambda d: stats.min_num_trials_for_binomial_shift(d, 0.3, 1e-4)),
    "binomial_shift_near_1": (lambda n: stats.min_shift_detectable_by_binomial_test(n, 0.97, 1e-3),
                              lambda d: stats.min_num_trials_for_binomial_shift(d, 0.97, 1e-3)),
    "mean_shift": (lambda n: stats.min_mean_shift_detectable_by_z_test(n, 1.3, 1e-4),
                   lambda d: stats.min_num_samples_for_mean_shift(d, 1.3, 1e-4)),
}


@pytest.mark.parametrize("discrepancy", [0.3, 0.045, 0.0021])
@pytest.mark.parametrize("face", sorted(FACES))
def test_min_sample_count_is_the_inverse_of_the_min_detectable_discrepancy(face, discrepancy):
    """n samples detect the discrepancy and n - 1 do not: the two faces of each test agree exactly."""
    detectable, min_count = FACES[face]
    n = min_count(discrepancy)
    assert detectable(n) <= discrepancy < detectable(n - 1), (n, detectable(n), detectable(n - 1))


def test_mean_z_test_is_two_sided():
    """A sample mean 3 standard errors above or below the exact mean gives p = 2 * sf(3)."""
    up, down = stats.mean_z_test(1.03, 1.0, 0.25, 2500), stats.mean_z_test(0.97, 1.0, 0.25, 2500)
    assert up[0] == pytest.approx(3.0) and down[0] == pytest.approx(-3.0)
    assert up[1] == pytest.approx(0.0026997960632601866) and down[1] == pytest.approx(up[1])


# The sample counts the profiles' targets were chosen to give: 'smoke' for slow backends, 'ci' for every
# change, 'dev' for local runs, 'nightly' for the GPU run whose acceptance test sees the bf16 shift.
PROFILE_STAT_COPIES = {"smoke": 200, "ci": 8_000, "dev": 50_000, "nightly": 20_000_000}


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_sample_size_is_the_inverse_of_its_target_distance(name):
    """A profile's statistical sample size is the fewest copies with which every token_distribution
    check detects the profile's ``detect_tv`` at position 0 (power 0.99, at its per-position alpha),
    rounded up to one significant digit; each target gives its profile's established count."""
    profile = get_profile(name)
    copies = stat_copies(profile)
    assert copies == PROFILE_STAT_COPIES[name]
    needs = []
    for case in (c for c in STAT_CASES if "token_distribution" in c.checks):
        dof = int((case.position_distributions[0] > 0).sum()) - 1
        alpha = check_alpha(profile) / (case.k + 1)
        needs.append(stats.min_num_samples_for_chi2_tv_test(profile.detect_tv, dof, alpha))
        assert stats.min_tv_detectable_by_chi2_test(copies, dof, alpha) <= profile.detect_tv
    unit = 10 ** int(math.log10(max(needs)))
    assert math.ceil(max(needs) / unit) * unit == copies, (max(needs), copies)


def test_a_profile_that_sets_stat_copies_uses_that_count():
    """``replace(profile, stat_copies=...)`` fixes the count (a run of a given size); replacing another
    field keeps the count sized from the target."""
    ci = get_profile("ci")
    assert stat_copies(replace(ci, stat_copies=1_234)) == 1_234
    assert stat_copies(replace(ci, device="cuda")) == stat_copies(ci)


def test_binomial_with_certain_outcome_fails_on_any_contrary_sample():
    """alpha_j = 1 (q == p) means every draft is accepted: one rejection is impossible."""
    assert stats.binomial_test(999, 1000, 1.0) == 0.0 and stats.binomial_test(1000, 1000, 1.0) == 1.0


def test_wilson_interval_covers_the_observed_rate():
    lo, hi = stats.wilson_interval(3, 1000)
    assert lo < 0.003 < hi and hi < 0.01


NULL_OUTPUTS = 300
CI_COPIES = stat_copies(get_profile("ci"))   # requests per output, as the ci profile samples them


@pytest.mark.parametrize("case_check", [f"{case.name}:{check}" for case in STAT_CASES for check in case.checks
                                        if check in EVALUATORS])
def test_statistical_check_rejects_exact_null_outputs_at_its_nominal_rate(case_check):
    """Each check's evaluation, fed outputs drawn from the case's exact joint (a perfect sampler), must
    reject at level 0.05 about 5% of the time. A liberal test (a wrong degrees-of-freedom count, bins
    not merged, a one-sided binomial) would raise the suite's false alarms above its stated budget.
    300 null outputs (ci profile size, or the case's own cap) per case, fixed generator: the bound of 30 (10%) is 4.1 standard
    deviations above 15, so a calibrated check exceeds it with probability ~3e-5; a check rejecting
    12% of the time is caught with probability ~0.8."""
    name, check = case_check.split(":")
    case = STAT_CASE_BY_NAME[name]
    g = torch.Generator().manual_seed(len(case_check))
    rejected = 0
    for _ in range(NULL_OUTPUTS):
        result = CheckResult(check, name, "exact-null", "statistical", "pass", alpha=1e-4)
        EVALUATORS[check](result, case, case.draw_exact(min(CI_COPIES, case.max_copies or CI_COPIES), g))
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


def test_binomial_test_gives_scipys_exact_two_sided_p_value():
    """binomial_test computes the exact two-sided p-value with scipy's Boost routines directly, not through
    ``scipy.stats.binomtest``: it must give binomtest's value, to a relative 1e-9, at small and large trial
    counts, at rates near 0, 1/2 and 1, at counts in both tails, at the mean and at the ends, and where the
    mean is a whole count (its ties)."""
    from scipy import stats as scipy_stats
    rng = np.random.default_rng(29)
    for n in (1, 2, 5, 10, 37, 1000, 10_000, 123_457):
        for p0 in (1e-6, 0.01, 0.3, 0.5, 0.6180339, 0.97, 1 - 1e-6):
            sd = math.sqrt(n * p0 * (1 - p0))
            ks = {0, n, n // 2, int(n * p0), int(n * p0) + 1} | set(rng.integers(0, n + 1, 6).tolist())
            ks |= {min(n, max(0, int(n * p0 + z * sd))) for z in (-5, -3, -1.5, -0.5, 0.5, 1.5, 3, 5)}
            for k in sorted(ks):
                want = scipy_stats.binomtest(k, n, p0).pvalue
                got = stats.binomial_test(k, n, p0)
                assert abs(got - want) <= 1e-9 * want + 1e-300, (k, n, p0, got, want)
