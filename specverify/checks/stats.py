"""Statistical tests with stated power (SPEC section 5). Plain functions, float64.

Each test has three faces, named by what they guarantee:

- the test itself: ``chi_square_gof``, ``binomial_test``, ``mean_z_test`` (p-values);
- the minimum detectable discrepancy: the smallest deviation the test, run at false-fail rate
  ``false_fail_rate`` (its alpha) on a given number of samples, detects with probability
  ``1 - false_pass_rate``: ``min_tv_detectable_by_chi2_test``, ``min_shift_detectable_by_binomial_test``,
  ``min_mean_shift_detectable_by_z_test``;
- its inverse, the minimum sample count that detects a given discrepancy at those two rates:
  ``min_num_samples_for_chi2_tv_test``, ``min_num_trials_for_binomial_shift``,
  ``min_num_samples_for_mean_shift``. The count n it returns is the smallest for which the detectable
  discrepancy is at most the given one: at n - 1 it is larger.

The chi-square test's discrepancy is a total-variation distance. With n samples, a deviation d of TV
distance delta has non-centrality n * sum(d^2 / p0) >= 4 n delta^2 (Cauchy-Schwarz), so 4 n delta^2 is
the worst-case non-centrality and the stated distance holds for every direction of deviation.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

FALSE_PASS_RATE = 0.01     # 1 - power: every stated detectable discrepancy has power 0.99
MIN_EXPECTED = 5.0
_MAX_COUNT = 2 ** 62


@functools.cache
def _scipy():
    """(scipy.stats, the Boost routine behind ``stats.ncx2.sf`` or None), imported on the first test or
    power figure: scipy.stats takes about 1.5 s to import, and the processes that compute neither (the
    CLI's parent, ``specverify merge`` and ``replay``, a run of structural checks) never pay it. The
    check pool's fork server imports it before forking (``specverify._worker_preload``)."""
    from scipy import stats  # noqa: PLC0415
    try:  # the routine at a positive non-centrality, without the per-call argument handling of scipy's
        # distribution classes (most of the cost of a power bisection)
        from scipy.special._ufuncs import _ncx2_sf  # noqa: PLC0415
    except ImportError:  # pragma: no cover (a scipy that moved it)
        _ncx2_sf = None
    return stats, _ncx2_sf


@dataclass(frozen=True)
class GofResult:
    statistic: float
    p_value: float
    dof: int
    samples: int
    bins: int
    impossible: list      # (category, count) observed where the expected probability is 0


def merge_small_bins(expected: np.ndarray, observed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bins with expected count under 5 are merged into one tail bin (kept only if it reaches 5;
    otherwise folded into the smallest remaining bin)."""
    big = expected >= MIN_EXPECTED
    e, o = list(expected[big]), list(observed[big])
    tail_e, tail_o = float(expected[~big].sum()), float(observed[~big].sum())
    if tail_e > 0:
        if tail_e >= MIN_EXPECTED or not e:
            e.append(tail_e)
            o.append(tail_o)
        else:
            i = int(np.argmin(e))
            e[i] += tail_e
            o[i] += tail_o
    return np.asarray(e, dtype=np.float64), np.asarray(o, dtype=np.float64)


def _smallest_in_unit_interval(holds) -> float:
    """The smallest x in (0, 1] for which ``holds(x)`` is true, for a predicate that stays true above
    it (60 halvings: float64 resolution). Every minimum detectable discrepancy is found this way."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if holds(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _smallest_count(detectable, discrepancy: float) -> int:
    """The smallest n >= 1 with ``detectable(n) <= discrepancy``, for a ``detectable`` that does not grow
    with n. Every minimum sample count is found this way, from the matching minimum detectable
    discrepancy, so the two faces of a test agree exactly. The search starts at the count the scaling
    discrepancy ~ 1 / sqrt(n) predicts (exact for the chi-square and z-tests, close for the binomial),
    gallops until the answer is bracketed, then bisects: a few evaluations of ``detectable``."""
    if not discrepancy > 0:
        raise ValueError(f"a discrepancy of {discrepancy} is not detectable with any number of samples")
    m = 1
    while math.isinf(detectable(m)):
        m *= 2
        if m > _MAX_COUNT:
            raise ValueError("the test detects nothing with any number of samples")
    lo, hi, step = 0, max(1, math.ceil(m * (detectable(m) / discrepancy) ** 2)), 1
    while detectable(hi) > discrepancy:             # too few: gallop up
        lo, hi, step = hi, hi + step, 2 * step
        if hi > _MAX_COUNT:
            raise ValueError(f"a discrepancy of {discrepancy} needs more than {_MAX_COUNT} samples")
    lo, step = max(lo, hi - 1), 1
    while lo > 0 and detectable(lo) <= discrepancy:  # enough: gallop down
        hi, lo, step = lo, max(lo - step, 0), 2 * step
    while hi - lo > 1:                              # detectable(lo) > discrepancy (or lo == 0) >= detectable(hi)
        mid = (lo + hi) // 2
        if detectable(mid) <= discrepancy:
            hi = mid
        else:
            lo = mid
    return hi


def chi_square_gof(probabilities: dict, counts: dict) -> GofResult:
    """Pearson chi-square of observed ``counts`` against exact ``probabilities`` (both keyed by category).

    A count in a category of probability 0 (or absent from ``probabilities``) is reported in
    ``impossible`` and gives p-value 0: that is an outright failure, never averaged away.
    """
    n = int(sum(counts.values()))
    impossible = [(c, k) for c, k in counts.items() if k > 0 and probabilities.get(c, 0.0) <= 0.0]
    if impossible:
        return GofResult(math.inf, 0.0, 0, n, 0, impossible)
    cats = [c for c, prob in probabilities.items() if prob > 0]
    expected = np.array([probabilities[c] for c in cats], dtype=np.float64)
    expected = expected / expected.sum() * n
    observed = np.array([counts.get(c, 0) for c in cats], dtype=np.float64)
    e, o = merge_small_bins(expected, observed)
    if len(e) < 2:
        return GofResult(0.0, 1.0, 0, n, len(e), [])
    stat = float(((o - e) ** 2 / e).sum())
    dof = len(e) - 1
    return GofResult(stat, float(_scipy()[0].chi2.sf(stat, dof)), dof, n, len(e), [])


@functools.lru_cache(maxsize=4096)
def min_tv_detectable_by_chi2_test(samples: int, dof: int, false_fail_rate: float,
                                   false_pass_rate: float = FALSE_PASS_RATE) -> float:
    """Smallest TV distance a chi-square test on ``dof`` degrees of freedom and ``samples`` samples, run
    at ``false_fail_rate``, detects with probability ``1 - false_pass_rate`` (worst-case direction);
    inf when even a TV distance of 1 is not detected that reliably."""
    if samples <= 0 or dof <= 0:
        return math.inf
    crit, power = _scipy()[0].chi2.isf(false_fail_rate, dof), 1 - false_pass_rate
    if _ncx2_survival(crit, dof, 4 * samples) < power:
        return math.inf
    return _smallest_in_unit_interval(lambda delta: _ncx2_survival(crit, dof, 4 * samples * delta ** 2) >= power)


def _ncx2_survival(x: float, dof: int, nc: float) -> float:
    """``stats.ncx2.sf(x, dof, nc)`` for x > 0, the same number: the routine scipy itself calls where nc > 0.
    The bisections call it 60 times per detectable distance, once per position of every statistical result."""
    stats, ncx2_sf = _scipy()
    if ncx2_sf is None or not nc > 0:
        return float(stats.ncx2.sf(x, dof, nc))
    return float(ncx2_sf(x, dof, nc))


@functools.lru_cache(maxsize=256)
def min_num_samples_for_chi2_tv_test(tv: float, dof: int, false_fail_rate: float,
                                     false_pass_rate: float = FALSE_PASS_RATE) -> int:
    """Fewest samples with which a chi-square test on ``dof`` degrees of freedom, run at
    ``false_fail_rate``, detects every deviation of TV distance ``tv`` with probability
    ``1 - false_pass_rate``."""
    return _smallest_count(lambda n: min_tv_detectable_by_chi2_test(n, dof, false_fail_rate, false_pass_rate), tv)


@functools.cache
def _binomial_routines():
    """(pmf, cdf, sf) of the binomial distribution as the Boost routines behind ``scipy.stats.binom``, called
    without the distribution class's per-call argument handling (50 times faster), or None where scipy has
    moved them."""
    _scipy()
    try:
        from scipy.special._ufuncs import _binom_cdf, _binom_pmf, _binom_sf  # noqa: PLC0415
    except ImportError:  # pragma: no cover (a scipy that moved them)
        return None
    return _binom_pmf, _binom_cdf, _binom_sf


def binomial_test(successes: int, trials: int, p0: float) -> float:
    """Exact two-sided binomial p-value: the probability under p0 of the observed count's tail and of the
    counts on the other side of the mean no likelier than it (within a relative 1e-7, so that ties in exact
    arithmetic stay ties), as ``scipy.stats.binomtest`` defines it. p0 of 0 or 1 makes any contrary outcome
    a p-value of 0."""
    if trials == 0:
        return 1.0
    if p0 <= 0.0:
        return 1.0 if successes == 0 else 0.0
    if p0 >= 1.0:
        return 1.0 if successes == trials else 0.0
    routines = _binomial_routines()
    if routines is None:  # pragma: no cover
        return float(_scipy()[0].binomtest(successes, trials, p0).pvalue)
    pmf, cdf, sf = routines
    k, n, mean = successes, trials, trials * p0
    if k == mean:
        return 1.0
    likelihood = pmf(k, n, p0) * (1 + 1e-7)
    # the pmf falls away from the mean on either side: a bisection finds where the other side's counts
    # become no likelier than k
    if k < mean:
        lo, hi = math.ceil(mean), n             # the first count at or above the mean that is no likelier
        while lo <= hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid - 1) if pmf(mid, n, p0) <= likelihood else (mid + 1, hi)
        other = sf(lo - 1, n, p0) if lo <= n else 0.0
        return min(1.0, float(cdf(k, n, p0) + other))
    lo, hi = 0, math.floor(mean)                # the last count at or below the mean that is no likelier
    while lo <= hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if pmf(mid, n, p0) <= likelihood else (lo, mid - 1)
    other = cdf(hi, n, p0) if hi >= 0 else 0.0
    return min(1.0, float(sf(k - 1, n, p0) + other))


@functools.lru_cache(maxsize=256)
def _normal_quantiles(false_fail_rate: float, false_pass_rate: float) -> tuple[float, float]:
    """(z of a two-sided test at false_fail_rate, z of power 1 - false_pass_rate)."""
    norm = _scipy()[0].norm
    return float(norm.isf(false_fail_rate / 2)), float(norm.isf(false_pass_rate))


def min_shift_detectable_by_binomial_test(trials: int, p0: float, false_fail_rate: float,
                                          false_pass_rate: float = FALSE_PASS_RATE) -> float:
    """Smallest |p - p0| (the TV distance of two Bernoullis) the binomial test on ``trials`` trials, run at
    ``false_fail_rate``, detects with probability ``1 - false_pass_rate`` (normal approximation of the
    exact test; conservative by using the larger variance of the two hypotheses)."""
    if trials <= 0:
        return math.inf
    z_a, z_b = _normal_quantiles(false_fail_rate, false_pass_rate)

    def detected(delta: float) -> bool:
        var = max(p0 * (1 - p0), min(max(p0 + delta, 0), 1) * (1 - min(max(p0 + delta, 0), 1)),
                  min(max(p0 - delta, 0), 1) * (1 - min(max(p0 - delta, 0), 1)), 1e-12)
        return delta * math.sqrt(trials) >= (z_a + z_b) * math.sqrt(var)

    return _smallest_in_unit_interval(detected)


def min_num_trials_for_binomial_shift(shift: float, p0: float, false_fail_rate: float,
                                      false_pass_rate: float = FALSE_PASS_RATE) -> int:
    """Fewest trials with which the binomial test against ``p0``, run at ``false_fail_rate``, detects a
    shift of the success probability by ``shift`` (either way) with probability ``1 - false_pass_rate``."""
    return _smallest_count(
        lambda n: min_shift_detectable_by_binomial_test(n, p0, false_fail_rate, false_pass_rate), shift)


def mean_z_test(sample_mean: float, mean: float, variance: float, samples: int) -> tuple[float, float]:
    """(z, two-sided p-value) of the mean of ``samples`` independent draws against the exact ``mean`` and
    ``variance`` of one draw (normal approximation of the sample mean)."""
    z = (sample_mean - mean) / math.sqrt(max(variance, 1e-300) / samples)
    return z, float(2 * _scipy()[0].norm.sf(abs(z)))


def min_mean_shift_detectable_by_z_test(samples: int, variance: float, false_fail_rate: float,
                                        false_pass_rate: float = FALSE_PASS_RATE) -> float:
    """Smallest shift of the mean the z-test on ``samples`` draws of the given ``variance``, run at
    ``false_fail_rate``, detects with probability ``1 - false_pass_rate``."""
    if samples <= 0:
        return math.inf
    return float(sum(_normal_quantiles(false_fail_rate, false_pass_rate)) * math.sqrt(variance / samples))


def min_num_samples_for_mean_shift(shift: float, variance: float, false_fail_rate: float,
                                   false_pass_rate: float = FALSE_PASS_RATE) -> int:
    """Fewest draws of the given ``variance`` with which the z-test, run at ``false_fail_rate``, detects a
    shift of the mean by ``shift`` (either way) with probability ``1 - false_pass_rate``."""
    return _smallest_count(
        lambda n: min_mean_shift_detectable_by_z_test(n, variance, false_fail_rate, false_pass_rate), shift)


def bonferroni(p_values: list[float]) -> float:
    """Family p-value of several sub-tests: min p times their number (capped at 1)."""
    return min(1.0, min(p_values) * len(p_values)) if p_values else 1.0


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion."""
    if n == 0:
        return 0.0, 1.0
    z = _scipy()[0].norm.isf((1 - confidence) / 2)
    phat = k / n
    denom = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
