"""Goodness-of-fit and binomial tests with stated power (SPEC section 5). Plain functions, float64.

Power is stated as the smallest total-variation distance a test detects with probability 0.99 at
its alpha and sample size. For a chi-square test with n samples, a deviation d of TV distance delta
has non-centrality n * sum(d^2 / p0) >= 4 n delta^2 (Cauchy-Schwarz), so 4 n delta^2 is the
worst-case non-centrality and the stated distance holds for every direction of deviation.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

POWER = 0.99
MIN_EXPECTED = 5.0


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
    return GofResult(stat, float(stats.chi2.sf(stat, dof)), dof, n, len(e), [])


def _smallest_in_unit_interval(holds) -> float:
    """The smallest x in (0, 1] for which ``holds(x)`` is true, for a predicate that stays true above
    it (60 halvings: float64 resolution). Every minimum detectable deviation is found this way."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if holds(mid):
            hi = mid
        else:
            lo = mid
    return hi


@functools.lru_cache(maxsize=4096)
def detectable_tv_chi2(samples: int, dof: int, alpha: float, power: float = POWER) -> float:
    """Smallest TV distance detected with ``power`` by a chi-square test (worst-case direction)."""
    if samples <= 0 or dof <= 0:
        return math.inf
    crit = stats.chi2.isf(alpha, dof)
    if stats.ncx2.sf(crit, dof, 4 * samples) < power:
        return math.inf
    return _smallest_in_unit_interval(lambda delta: stats.ncx2.sf(crit, dof, 4 * samples * delta ** 2) >= power)


def binomial_test(successes: int, trials: int, p0: float) -> float:
    """Exact two-sided binomial p-value; p0 of 0 or 1 makes any contrary outcome a p-value of 0."""
    if trials == 0:
        return 1.0
    if p0 <= 0.0:
        return 1.0 if successes == 0 else 0.0
    if p0 >= 1.0:
        return 1.0 if successes == trials else 0.0
    return float(stats.binomtest(successes, trials, p0).pvalue)


def detectable_delta_binomial(trials: int, p0: float, alpha: float, power: float = POWER) -> float:
    """Smallest |p - p0| (the TV distance of two Bernoullis) detected with ``power`` (normal approximation
    of the exact test; conservative by using the larger variance of the two hypotheses)."""
    if trials <= 0:
        return math.inf
    z_a, z_b = stats.norm.isf(alpha / 2), stats.norm.isf(1 - power)

    def detected(delta: float) -> bool:
        var = max(p0 * (1 - p0), min(max(p0 + delta, 0), 1) * (1 - min(max(p0 + delta, 0), 1)),
                  min(max(p0 - delta, 0), 1) * (1 - min(max(p0 - delta, 0), 1)), 1e-12)
        return delta * math.sqrt(trials) >= (z_a + z_b) * math.sqrt(var)

    return _smallest_in_unit_interval(detected)


def bonferroni(p_values: list[float]) -> float:
    """Family p-value of several sub-tests: min p times their number (capped at 1)."""
    return min(1.0, min(p_values) * len(p_values)) if p_values else 1.0


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion."""
    if n == 0:
        return 0.0, 1.0
    z = stats.norm.isf((1 - confidence) / 2)
    phat = k / n
    denom = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
