"""Statistical checks (SPEC 4.2 and 5): one launch of many replicated requests per case.

token_distribution  token emitted at position j (given the request reached j) against the exact
                    distribution: Pearson chi-square, bins under 5 expected merged, a token of
                    probability 0 fails outright; positions combined by Bonferroni
recovered_distribution  token emitted at position j by the requests that stopped there (a rejection at
                    j) against its exact law given the rejection: the same chi-square, positions < depth
acceptance_rate     acceptances at position j against alpha_j = sum min(p_j, q_j) (or the synthetic
                    c_j): exact binomial tests, Bonferroni over positions
synthetic_rate      mean joint acceptance (num_accepted / n) against the configured rate r: z-test with
                    the exact variance of num_accepted
accepted_length     mean num_accepted against the exact (block, tree) law's: z-test; the law's mean must
                    be at least the standard rule's (a tree's: its first-child chain's)
sequence_distribution  whole emitted sequences against the exact joint law: one Pearson chi-square over
                    every possible sequence, bins under 5 expected merged

Each check runs at alpha = family_alpha / (number of statistical checks in the suite), so a whole
run's false-alarm probability on a correct backend is at most family_alpha (Bonferroni).
Drafts are drawn from q; the backend's own seeded noise is used when it has a seeded path.
"""

from __future__ import annotations

import functools
import hashlib
import weakref
from collections import OrderedDict
from dataclasses import dataclass, replace

import torch

from reference import exact
from reference.sample import synthetic_rates_f32
from specverify.checks import sampling, stats
from specverify.checks.cases import STAT_CASE_BY_NAME, STAT_CASES, StatCase, runs_on
from specverify.checks.runner import Context, Needs, NotApplicable
from specverify.strategies import Profile

STATISTICAL_CHECKS = ("token_distribution", "recovered_distribution", "acceptance_rate", "synthetic_rate",
                      "accepted_length", "sequence_distribution")


def statistical_test_count(profile: Profile) -> int:
    """The statistical (check, case) pairs of ``profile``'s plan."""
    return sum(1 for case in STAT_CASES if runs_on(case, profile) for c in case.checks if c in STATISTICAL_CHECKS)


def sample_group(check: str, case: str) -> str | None:
    """The case whose one draw a statistical (check, case) pair shares with the case's other checks (run
    them in one worker, in a row, to draw once); None for a pair of another kind."""
    return case if check in STATISTICAL_CHECKS else None


def check_alpha(profile: Profile) -> float:
    return profile.family_alpha / statistical_test_count(profile)


def stat_copies(profile: Profile) -> int:
    """Replicated requests per statistical case: ``profile.stat_copies`` when the profile sets it, else
    the fewest with which every token_distribution check detects ``profile.detect_tv`` at position 0
    (where every request contributes a sample) with power 0.99, at that check's per-position alpha.
    The count is rounded up to one significant digit (any need from 7,001 to 8,000 gives 8,000):
    rounding up keeps the guarantee, and one digit keeps sample counts round."""
    if profile.stat_copies is not None:
        return profile.stat_copies
    return _copies_to_detect(profile.detect_tv, check_alpha(profile))


@functools.lru_cache(maxsize=64)
def _copies_to_detect(tv: float, alpha: float) -> int:
    need = max(stats.min_num_samples_for_chi2_tv_test(tv, sampling.position_dof(case, 0), alpha / (case.depth + 1))
               for case in STAT_CASES if "token_distribution" in case.checks)
    return sampling.round_up_to_one_significant_digit(need)


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:7], "little")


def case_plan(case: StatCase, profile: Profile) -> sampling.Plan:
    """The copies of ``case`` under ``profile`` (see specverify.checks.sampling.plan)."""
    return sampling.plan(case, profile, check_alpha(profile), stat_copies(profile))


def part_copies(copies: int, part: tuple[int, int]) -> int:
    """Copies of part k of n (0-based k): the copies dealt evenly, the first ones one more."""
    k, n = part
    return copies // n + (1 if k < copies % n else 0)


def sample_case(backend, case: StatCase, profile: Profile, run_seed=0, sequences: bool = False,
                part: tuple[int, int] | None = None):
    """The case sampled by its plan: (Tally, Timing, Plan). Raises NotApplicable where a
    production-vocabulary case's measured speed projects it over ``profile.large_case_budget``.
    ``part`` (k, n): only part k's share of the copies, from its own seed (the case's seed with the
    part's index and count hashed in, so no two parts share a stream)."""
    chosen = case_plan(case, profile)
    seed = _seed(case.name, profile.name, run_seed) if part is None else \
        _seed(case.name, profile.name, run_seed, "part", *part)
    if part is not None:
        chosen = replace(chosen, copies=part_copies(chosen.copies, part))
    try:
        tally, timing = sampling.draw(backend, case, profile, seed, chosen, sequences=sequences)
    except sampling.OverBudget as e:
        raise NotApplicable(str(e)) from None
    return tally, timing, chosen


# One draw serves every check of its case: the checks test different statistics of the same samples,
# and Bonferroni bounds the family's false alarms whatever their dependence. A worker keeps its latest
# draws per backend object (the suite and the check pool hand a case's checks to one worker in a row).
DRAWS_KEPT = 2
_draws: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@dataclass
class Draw:
    tally: sampling.Tally
    timing: sampling.Timing
    plan: sampling.Plan
    covered: frozenset          # what the draw's calls covered (methods, noise paths, dtypes)
    check: str                  # the check it was drawn for


def _drawn(ctx: Context, case: StatCase, check: str, run_seed, part=None) -> tuple[Draw, bool]:
    """(the case's draw, whether an earlier check of this backend drew it)."""
    try:
        kept = _draws.setdefault(ctx.backend.wrapped, OrderedDict())
    except TypeError:       # a backend that cannot be weakly referenced draws for every check
        kept = OrderedDict()
    key = (case.name, ctx.profile, run_seed, part)
    if key in kept:
        kept.move_to_end(key)
        draw = kept[key]
        ctx.backend.covered.update(draw.covered)
        return draw, True
    sequences = "sequence_distribution" in case.checks
    tally, timing, chosen = sample_case(ctx.backend, case, ctx.profile, run_seed, sequences, part)
    kept[key] = draw = Draw(tally, timing, chosen, frozenset(ctx.backend.covered), check)
    while len(kept) > DRAWS_KEPT:
        kept.popitem(last=False)
    return draw, False


def _sampled(ctx: Context, case_name: str, check: str, run_seed, part=None):
    """The frame every statistical check shares: its alpha, then the case's draw, which the result
    records with the sampling speed (and, where an earlier check drew it, which one)."""
    case = STAT_CASE_BY_NAME[case_name]
    ctx.result.alpha = check_alpha(ctx.profile)
    limit = getattr(ctx.backend.capabilities, "max_tree_depth", None)
    if case.parents is not None and limit is not None and case.depth > limit:
        raise NotApplicable(f"the case's tree is {case.depth} deep; the backend declares at most {limit}")
    draw, shared = _drawn(ctx, case, check, run_seed, part)
    ctx.result.sampling = {**draw.plan.to_json(), **draw.timing.to_json(),
                           "drawn_for": draw.check if shared else None}
    return case, draw.tally


def statistical_needs(case_name: str) -> Needs:
    case = STAT_CASE_BY_NAME[case_name]
    return Needs(method=case.method, noise="any", max_draft=case.k, target_filters=case.filters is not None,
                 dense_draft_probs=case.q is not None, q_as_given=case.q_over_one)


def _tally(case: StatCase, data, sequences: bool = False) -> sampling.Tally:
    """The evaluators take a Tally (the checks) or a whole output (the calibration's exact draws)."""
    return data if isinstance(data, sampling.Tally) else sampling.Tally.of(case, data, sequences)


def _token_distribution(result, case: StatCase, data) -> None:
    tally = _tally(case, data)
    _positions_fit(result, case, tally, tally.tokens(), case.position_distributions, "token distribution")


def _recovered_distribution(result, case: StatCase, data) -> None:
    """The token after a rejection, among the requests that stopped at j, against its law given the stop: a
    wrong residual (or a wrong fallback where it is zero everywhere) concentrated on the few rejections shows
    here at full weight, where the token at j over every request that reached j dilutes it."""
    tally = _tally(case, data)
    stops = tally.stops()[: case.depth]
    _positions_fit(result, case, tally, stops, case.stop_distributions, "recovered token distribution")
    result.samples = int(stops.sum())
    if result.passed:
        result.message = f"{result.samples:,} rejections; " + result.message


def _positions_fit(result, case: StatCase, tally, counts_by_position, laws, what: str) -> None:
    """Pearson chi-square of each position's counts [V] against its law [V], Bonferroni over the positions; a
    token of probability 0, or an id outside [0, V) at a position tested, fails outright."""
    alpha, tested = result.alpha, len(laws)
    p_values, worst, detectable = [], None, []
    for j in range(tested):
        if j in tally.outside:
            result.fail(f"position {j}: emitted ids outside [0, {case.vocab_size}): {tally.outside[j]}")
            return
        counts = counts_by_position[j]
        if int(counts.sum()) == 0:
            continue
        expected = laws[j]
        # only the tokens that can or did occur: the same test, without V-sized dicts at large V
        seen = torch.nonzero((expected > 0) | (counts > 0)).flatten().tolist()
        gof = stats.chi_square_gof({v: float(expected[v]) for v in seen}, {v: int(counts[v]) for v in seen})
        if gof.impossible:
            result.fail(f"position {j}: token(s) of probability 0 emitted (token, count): {gof.impossible}")
            return
        p_values.append(gof.p_value)
        detectable.append(stats.min_tv_detectable_by_chi2_test(gof.samples, gof.dof, alpha / tested))
        if j == 0:
            result.samples = gof.samples
        if worst is None or gof.p_value < worst[1].p_value:
            worst = (j, gof)
    _state_power(result, detectable, "tv")
    result.p_value = stats.bonferroni(p_values)
    result.statistic = worst[1].statistic if worst else None
    result.message = (f"{len(p_values)} positions; least likely position {worst[0]}: chi2={worst[1].statistic:.2f} "
                      f"on {worst[1].dof} dof" if worst else "no samples")
    if result.p_value < alpha:
        result.fail(f"{what} differs from the exact one: " + result.message)


def _acceptance_rate(result, case: StatCase, data) -> None:
    tally = _tally(case, data)
    expected = case.acceptance_by_position
    p_values, lines, detectable = [], [], []
    for j in range(case.depth):
        trials, accepted = tally.reached(j), tally.reached(j + 1)
        if trials == 0:
            continue
        p_values.append(stats.binomial_test(accepted, trials, float(expected[j])))
        lines.append(f"pos {j}: {accepted}/{trials}={accepted / trials:.4f} vs {float(expected[j]):.4f}")
        detectable.append(stats.min_shift_detectable_by_binomial_test(trials, float(expected[j]),
                                                                      result.alpha / case.depth))
        if j == 0:
            result.samples, result.statistic = trials, accepted / trials
    _state_power(result, detectable, "acceptance")
    result.p_value = stats.bonferroni(p_values)
    result.message = "; ".join(lines)
    if result.p_value < result.alpha:
        result.fail("acceptance rate differs from theory: " + result.message)


def _synthetic_rate(result, case: StatCase, data) -> None:
    tally = _tally(case, data)
    dist = exact.synthetic_num_accepted(synthetic_rates_f32(case.rate, case.steps).double(), case.k)
    m = torch.arange(case.k + 1, dtype=torch.float64)
    mean = float((dist * m).sum())
    var = float((dist * (m - mean) ** 2).sum())
    N = tally.samples
    observed = tally.accepted_sum() / N
    result.samples = N
    result.statistic, result.p_value = stats.mean_z_test(observed, mean, var, N)
    _state_power(result, [stats.min_mean_shift_detectable_by_z_test(N, var, result.alpha) / case.steps], "rate")
    result.message = (f"mean joint acceptance {observed / case.steps:.4f} vs configured r={case.rate} "
                      f"(exact mean num_accepted {mean:.4f})")
    if result.p_value < result.alpha:
        result.fail("synthetic rate differs: " + result.message)


def _accepted_length(result, case: StatCase, data) -> None:
    """Mean num_accepted against the exact law (block or tree); the law's own mean must be at least its
    baseline's (``case.baseline``: the standard rule on the same rows, Sun et al. 2024, Theorem 2; a
    tree's first-child chain, SPEC 3.8), computed exactly: a bound, not a tolerance."""
    law = case.sequences
    m = torch.tensor([len(s) - 1 for s in law], dtype=torch.float64)
    w = torch.tensor(list(law.values()), dtype=torch.float64)
    mean, var = float((w * m).sum()), float((w * (m - (w * m).sum()) ** 2).sum())
    baseline, standard = case.baseline
    standard_mean = sum(p * (len(s) - 1) for s, p in standard.items())
    tally = _tally(case, data)
    N = tally.samples
    observed = tally.accepted_sum() / N
    result.samples = N
    result.statistic, result.p_value = stats.mean_z_test(observed, mean, var, N)
    _state_power(result, [stats.min_mean_shift_detectable_by_z_test(N, var, result.alpha)], "accepted")
    result.message = f"mean accepted {observed:.4f} vs exact {mean:.4f} ({baseline} {standard_mean:.4f})"
    if mean < standard_mean - 1e-12:
        result.fail(f"the {case.method} law accepts less than the {baseline}: " + result.message)
    elif result.p_value < result.alpha:
        result.fail(f"mean accepted length differs from the {case.method} law: " + result.message)


def _sequence_distribution(result, case: StatCase, data) -> None:
    """Emitted sequences (accepted prefix and extra token) against the exact joint law: one chi-square
    over every possible sequence, small cells merged."""
    counts = _tally(case, data, sequences=True).sequences
    gof = stats.chi_square_gof(case.sequences, counts)
    result.samples, result.statistic, result.p_value = gof.samples, gof.statistic, gof.p_value
    if gof.impossible:
        result.fail(f"sequence(s) of probability 0 emitted (sequence, count): {gof.impossible[:5]}")
        return
    _state_power(result, [stats.min_tv_detectable_by_chi2_test(gof.samples, gof.dof, result.alpha)], "tv")
    result.message = (f"{len(counts)} distinct sequences of {len(case.sequences)} possible; chi2={gof.statistic:.2f} "
                      f"on {gof.dof} dof")
    if result.p_value < result.alpha:
        result.fail("emitted sequences differ from the exact joint law: " + result.message)


def _state_power(result, detectable: list[float], measure: str) -> None:
    """Power at every position tested; the report shows the worst (largest) detectable deviation."""
    result.detectable_by_position = detectable
    result.detectable = max(detectable) if detectable else None
    result.detectable_measure = measure


# The statistics of each check, given a case and an output of replicated requests: the checks above and
# ci/null_calibration.py (outputs drawn from the exact joint) share them.
EVALUATORS = {"token_distribution": _token_distribution, "recovered_distribution": _recovered_distribution,
              "acceptance_rate": _acceptance_rate,
              "synthetic_rate": _synthetic_rate, "accepted_length": _accepted_length,
              "sequence_distribution": _sequence_distribution}


def evaluate(result, case: StatCase, check: str, tally: sampling.Tally) -> None:
    """The check's test on ``tally``, and where the sample fell short of the plan's power target (a
    budget cut); ``result.sampling`` holds the plan."""
    EVALUATORS[check](result, case, tally)
    targets = (result.sampling or {}).get("target_tv") or []
    # the plan sizes the draw for the tokens at each position reached; the rejections are what they are
    if check == "recovered_distribution" or result.detectable_measure != "tv" or not result.detectable_by_position:
        return
    short = [f"position {j}: det99 {det:.4f} over the target {tv:g}"
             for j, (det, tv) in enumerate(zip(result.detectable_by_position, targets)) if tv and det > tv]
    if short:
        result.message += " (power short of the plan: " + "; ".join(short) + ")"


def _evaluated(ctx: Context, case_name: str, check: str, run_seed: int, part=None) -> None:
    """Sample and evaluate; a part (k, n) of a split draw only samples, and hands its counts over in
    ``result.drawn`` (specverify.checks.parts sums the parts and tests once)."""
    case, tally = _sampled(ctx, case_name, check, run_seed, part)
    if part is None:
        evaluate(ctx.result, case, check, tally)
        return
    ctx.result.drawn = tally.cpu()
    ctx.result.message = f"part {part[0] + 1} of {part[1]}: {ctx.result.sampling['copies']:,} copies drawn"


def check_token_distribution(ctx: Context, case_name: str, run_seed: int = 0, part=None) -> None:
    """Emitted token at each position ~ its exact distribution (p_j for the standard rule)."""
    _evaluated(ctx, case_name, "token_distribution", run_seed, part)


def check_recovered_distribution(ctx: Context, case_name: str, run_seed: int = 0, part=None) -> None:
    """Token emitted at a rejection at position j ~ its exact law given the rejection."""
    _evaluated(ctx, case_name, "recovered_distribution", run_seed, part)


def check_acceptance_rate(ctx: Context, case_name: str, run_seed: int = 0, part=None) -> None:
    """Acceptances at each position ~ Binomial(reached, alpha_j) (or c_j for the synthetic rule)."""
    _evaluated(ctx, case_name, "acceptance_rate", run_seed, part)


def check_accepted_length(ctx: Context, case_name: str, run_seed: int = 0, part=None) -> None:
    """Mean accepted length equals the block law's, which is at least the standard rule's."""
    _evaluated(ctx, case_name, "accepted_length", run_seed, part)


def check_sequence_distribution(ctx: Context, case_name: str, run_seed: int = 0, part=None) -> None:
    """The whole emitted sequence follows the exact joint law (not only each position's marginal)."""
    _evaluated(ctx, case_name, "sequence_distribution", run_seed, part)


def check_synthetic_rate(ctx: Context, case_name: str, run_seed: int = 0, part=None) -> None:
    """Mean joint acceptance (mean num_accepted / n) equals the configured synthetic rate r."""
    _evaluated(ctx, case_name, "synthetic_rate", run_seed, part)


__all__ = ["EVALUATORS", "STATISTICAL_CHECKS", "check_accepted_length", "check_acceptance_rate", "check_alpha",
           "check_sequence_distribution", "check_synthetic_rate",
           "check_token_distribution", "evaluate", "part_copies", "sample_case", "sample_group", "stat_copies", "statistical_needs", "statistical_test_count"]
