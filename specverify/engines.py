"""Engine checks (SPEC 8): an engine's whole speculative loop against the target's own law.

An engine adapter (``Engine``) runs the engine's own speculative loop for one prompt and gives the
target's next-token law after the engine's processors. The harness enumerates the exact law of the
first ``L`` emitted tokens (``exact_law``: V^L sequences, V small) and tests the engine's samples
against it with the chi-square of SPEC 5 (``check_engine_sequences``); tests the first draft's
acceptance against the q the engine handed its verifier (``check_engine_acceptance``) and that q against
the drafter's law (``check_engine_draft_law``); and checks that greedy speculative output equals the
engine's own non-speculative greedy output (``check_engine_greedy``). Where the adapter can fix the uniforms its
verifier draws (``generate_at_coin``), ``specverify.engine_coins`` checks the emitted tokens at float32's boundary
coins. The cases, the protocol and the exact law are ``specverify.engine_cases``'s, re-exported here. The checks
are declared once in ``ENGINE_CHECKS`` and return ``CheckResult`` objects, so the report, the JSON, the verdict and the
declared deviations (an engine's ``deviations``) treat them like kernel checks.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from specverify.checks.deviations import matching, note_unmet
from specverify.checks.result import FAIL, KNOWN, NOT_APPLICABLE, PASS, CheckResult
from specverify.checks.stats import (MIN_EXPECTED, binomial_test, chi_square_gof, min_num_samples_for_chi2_tv_test,
                                     min_shift_detectable_by_binomial_test, min_tv_detectable_by_chi2_test)
from specverify.engine_cases import Engine, EngineCase, Sampling, drafter_law, engine_result, exact_law
from specverify.engine_coins import check_engine_boundary_coins
from specverify.registry import is_engine  # noqa: F401 - re-exported: the engine protocol's test
from specverify.strategies import Profile

# The TV distance of the L-token law each engine sequence case detects with probability 0.99, per
# profile (issue 32: 0.05 on ci, within a minute on 2 cores; 0.01 nightly, over every core).
ENGINE_DETECT_TV = {"smoke": 0.3, "ci": 0.05, "dev": 0.03, "nightly": 0.01}
DRAFT_LAW_TOLERANCE = 1e-5   # float32 softmax of the processed logits against the float64 law
Q_SHIFT = 0.05     # the shift of q a case must see (issue 32: "a case that cannot see a 5% shift of q is no case")
FORK_MIN_PER_WORKER = 200   # samples a forked worker must get for the fork and its pool to pay


def merged_dof(law: dict, samples: int) -> int:
    """Degrees of freedom of the chi-square over ``law`` at ``samples`` samples after bins under
    MIN_EXPECTED are merged (as ``chi_square_gof`` merges them)."""
    expected = np.array(sorted(law.values())) * samples
    big = int((expected >= MIN_EXPECTED).sum())
    tail = float(expected[expected < MIN_EXPECTED].sum())
    return max(1, big + (1 if tail >= MIN_EXPECTED else 0) - 1) if big or tail else 1


def engine_alpha(engine, profile: Profile) -> float:
    """The engine run's family budget over its statistical tests (Bonferroni): the sequence test of every
    sampled case, and the acceptance test of each with a drafter law."""
    sampled = [c for c in engine.cases if not c.sampling.greedy]
    acceptance = sum(1 for c in sampled if hasattr(engine, "first_accepted") and drafter_law(engine, c) is not None)
    return profile.family_alpha / max(1, len(sampled) + acceptance)


def samples_for(law: dict, tv: float, alpha: float) -> int:
    """Fewest samples with which the chi-square over ``law`` detects ``tv`` with power 0.99 at ``alpha``,
    the dof being the merged bins' at that count (a fixed point, from the unmerged dof down)."""
    n = min_num_samples_for_chi2_tv_test(tv, max(1, len(law) - 1), alpha)
    for _ in range(8):
        m = min_num_samples_for_chi2_tv_test(tv, merged_dof(law, n), alpha)
        if m == n:
            break
        n = m
    return int(math.ceil(n / 100) * 100)


def first_token_law(p, q, q_seen):
    """[V] the first emitted token's law when the first draft is drawn from ``q`` and the verifier is handed
    ``q_seen`` (SPEC 3: a draft x is kept with probability min(1, p(x) / q_seen(x)), never where q_seen(x)
    is 0; at a rejection the residual max(p - q_seen, 0), normalised). It is ``p`` when ``q_seen`` is ``q``."""
    p, q, q_seen = (np.asarray(a, dtype=np.float64) for a in (p, q, q_seen))
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = np.where(q_seen > 0, q * np.minimum(1.0, p / q_seen), 0.0)
    residual = np.maximum(p - q_seen, 0.0)
    residual = residual / residual.sum() if residual.sum() > 0 else p
    return keep + (1.0 - keep.sum()) * residual


def q_shift_seen(p, q, shift: float = Q_SHIFT) -> float:
    """How far a ``shift`` of q moves the first emitted token's law (total variation): the largest move over
    the shifts that carry ``shift`` of q's mass from one token to another, the drafts still drawn from q. A
    case whose det99 is above it cannot see such a wrong q (given stale, or from the wrong processors)."""
    q = np.asarray(q, dtype=np.float64)
    seen = 0.0
    for i in np.flatnonzero(q >= shift):
        for j in range(q.size):
            if j != i:
                moved = q.copy()
                moved[i] -= shift
                moved[j] += shift
                seen = max(seen, 0.5 * float(np.abs(first_token_law(p, q, moved) - p).sum()))
    return seen


def _draw_seeds(engine, case: EngineCase, seeds) -> tuple:
    """({sequence: count}, [first drafts accepted, first steps seen], None or (seed, short sequence))."""
    counts: dict = {}
    accepted = [0, 0]
    traced = getattr(engine, "first_accepted", None)
    for seed in seeds:
        seq = tuple(int(t) for t in engine.generate(case, case.prompt, seed))
        if len(seq) != case.length:
            return counts, accepted, (seed, seq)
        counts[seq] = counts.get(seq, 0) + 1
        first = traced() if traced else None
        if first is not None:
            accepted[0] += first >= 1
            accepted[1] += 1
    return counts, accepted, None


_FORKED: dict = {}
_DRAWN: dict = {}    # the last draw, shared by the two checks of one case


def _draw_forked(args) -> tuple:
    case, seeds = args
    return _draw_seeds(_FORKED["engine"], case, seeds)


def draw(engine, case: EngineCase, n: int, workers: int = 1) -> tuple:
    """``_draw_seeds`` over seeds 0..n-1 (seed i for sample i). With ``workers`` > 1 the seeds are split
    over forked processes and the tallies summed: the same tallies for a stateless engine."""
    key = (engine, case, n)   # the engine itself, not its id: a freed engine's id may be reused
    if key in _DRAWN:
        return _DRAWN[key]
    if workers <= 1 or n < FORK_MIN_PER_WORKER * workers:
        drawn = _draw_seeds(engine, case, range(n))
    else:
        import multiprocessing  # noqa: PLC0415
        _FORKED["engine"] = engine
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                parts = pool.map(_draw_forked, [(case, range(i, n, workers)) for i in range(workers)])
        finally:
            _FORKED.clear()
        counts, accepted, short = {}, [0, 0], None
        for part, acc, part_short in parts:
            short = short or part_short
            accepted = [accepted[0] + acc[0], accepted[1] + acc[1]]
            for seq, k in part.items():
                counts[seq] = counts.get(seq, 0) + k
        drawn = counts, accepted, short
    _DRAWN.clear()
    _DRAWN[key] = drawn
    return drawn


def case_samples(engine, case: EngineCase, profile: Profile, alpha: float) -> int:
    law = exact_law(engine, case.prompt, case.sampling, case.length)
    return samples_for(law, ENGINE_DETECT_TV.get(profile.name, 0.05), alpha)


def _handed_q(engine, case: EngineCase):
    """The q the engine handed its verifier for the first draft of a call (seed 0), by its trace
    (``first_q``), or None where it traces none: a function of the prompt and the drafter alone."""
    if not hasattr(engine, "first_q"):
        return None
    engine.generate(case, case.prompt, 0)
    q = engine.first_q()
    return None if q is None else np.asarray(q, dtype=np.float64)


def check_engine_acceptance(engine, case: EngineCase, profile: Profile, samples: int | None = None,
                            alpha: float | None = None, workers: int = 1) -> CheckResult:
    """Binomial test of the first draft's acceptance at the first step against ``alpha_0 = sum_v
    min(p(v), q(v))`` (SPEC 3), p the target's law at the prompt and q the one the engine handed its
    verifier (its trace; else the drafter's law): the drafts are drawn from that q and verified with it."""
    result = engine_result(engine, "engine_acceptance", case, "statistical")
    law = drafter_law(engine, case)
    if law is None or not hasattr(engine, "first_accepted"):
        result.status, result.message = NOT_APPLICABLE, ("greedy, drafts not drawn from a q (no acceptance law), "
                                                         "or the engine does not trace its acceptances")
        return result
    alpha = alpha if alpha is not None else engine_alpha(engine, profile)
    n = samples or case_samples(engine, case, profile, alpha)
    _, (accepted, steps), short = draw(engine, case, n, workers)
    handed = _handed_q(engine, case)
    q = law if handed is None else handed
    p = np.asarray(engine.target_law(case.prompt, case.sampling), dtype=np.float64)
    a0 = float(np.minimum(p, q).sum())
    p_value = binomial_test(accepted, steps, a0)
    det = min_shift_detectable_by_binomial_test(steps, a0, alpha)
    result.statistic, result.p_value, result.alpha, result.samples = accepted / max(steps, 1), p_value, alpha, steps
    result.detectable, result.detectable_measure, result.detectable_by_position = det, "acceptance", [det]
    result.covered = ["standard", "seeded"]
    source = "as handed" if handed is not None else "the drafter's law"
    where = (f"{case.describe()}; first draft accepted at the first step {accepted}/{steps} = "
             f"{accepted / max(steps, 1):.4f}, exact {a0:.4f} (sum min(p, q), q {source}); "
             f"sum p*q (q dropped) = {float(p @ q):.4f}")
    if short or steps < n:
        result.fail(f"{where}; only {steps} of {n} calls traced a first step")
    elif p_value < alpha:
        result.fail(f"{where}; p = {p_value:.3g} < alpha {alpha:.2g}", _repro(engine, case, n))
    else:
        result.message = where
    return result


def check_engine_draft_law(engine, case: EngineCase, profile: Profile, **_) -> CheckResult:
    """The q the engine hands its verifier for the first draft is the drafter's law at the prompt after the
    case's processors (SPEC 8), to DRAFT_LAW_TOLERANCE: exact, one call."""
    result = engine_result(engine, "engine_draft_law", case, "exact")
    law = drafter_law(engine, case)
    handed = None if law is None else _handed_q(engine, case)
    if handed is None:
        result.status, result.message = NOT_APPLICABLE, ("greedy, drafts not drawn from a q, or the engine does not "
                                                         "trace the q it hands its verifier")
        return result
    gap = np.abs(handed - law)
    result.samples, result.covered = 1, ["standard", "seeded"]
    where = f"{case.describe()}; q handed {np.round(handed, 4).tolist()}, drafter law {np.round(law, 4).tolist()}"
    if float(gap.max()) > DRAFT_LAW_TOLERANCE:
        diagnosis = getattr(engine, "diagnose_q", lambda *a: None)(case, case.prompt, handed)
        result.fail(f"the first q handed to the verifier is not the drafter's law after the processors: max |diff| "
                    f"{float(gap.max()):.3g} at token {int(gap.argmax())}; {where}"
                    + (f"; {diagnosis}" if diagnosis else ""), _repro(engine, case, 1, case.prompt))
    else:
        result.message = f"max |diff| {float(gap.max()):.2g}; {where}"
    return result


def check_engine_sequences(engine, case: EngineCase, profile: Profile, samples: int | None = None,
                           alpha: float | None = None, workers: int = 1) -> CheckResult:
    """Chi-square of the first ``case.length`` emitted tokens against their exact law (SPEC 8)."""
    result = engine_result(engine, "engine_sequences", case, "statistical")
    if case.sampling.greedy:
        result.status, result.message = NOT_APPLICABLE, "a greedy case: checked by engine_greedy"
        return result
    alpha = alpha if alpha is not None else engine_alpha(engine, profile)
    law = exact_law(engine, case.prompt, case.sampling, case.length)
    n = samples or samples_for(law, ENGINE_DETECT_TV.get(profile.name, 0.05), alpha)
    counts, _, short = draw(engine, case, n, workers)
    if short:
        result.fail(f"seed {short[0]}: the engine emitted {len(short[1])} tokens, {case.length} asked: {short[1]}")
        return result
    gof = chi_square_gof(law, counts)
    tv = 0.5 * sum(abs(counts.get(s, 0) / n - law.get(s, 0.0)) for s in set(law) | set(counts))
    det = min_tv_detectable_by_chi2_test(n, max(gof.dof, merged_dof(law, n)), alpha)
    result.statistic, result.p_value, result.alpha, result.samples = gof.statistic, gof.p_value, alpha, n
    result.detectable, result.detectable_measure, result.detectable_by_position = det, "tv", [det]
    result.covered = ["standard", "seeded"]
    worst = sorted(law, key=lambda s: -abs(counts.get(s, 0) - n * law[s]) / math.sqrt(n * law[s]))[:3]
    detail = ", ".join(f"{list(s)}: {counts.get(s, 0)} seen, {n * law[s]:.1f} expected" for s in worst)
    where = f"{case.describe()}; observed tv {tv:.4f} over {len(law)} sequences"
    q = _handed_q(engine, case) if drafter_law(engine, case) is not None else None
    if q is not None:
        seen = q_shift_seen(engine.target_law(case.prompt, case.sampling), q)
        where += f"; a {Q_SHIFT:.0%} shift of the first q moves the first token's law by {seen:.3f} tv"
    if gof.impossible:
        result.fail(f"{where}: sequences of probability 0 emitted: {gof.impossible[:5]}",
                    _repro(engine, case, n))
    elif gof.p_value < alpha:
        result.fail(f"{where}; p = {gof.p_value:.3g} < alpha {alpha:.2g}; largest deviations: {detail}",
                    _repro(engine, case, n))
    else:
        result.message = where
    return result


def check_engine_greedy(engine, case: EngineCase, profile: Profile, **_) -> CheckResult:
    """Greedy speculative output equals the engine's own non-speculative greedy output (SPEC 8)."""
    result = engine_result(engine, "engine_greedy", case, "exact")
    if not case.sampling.greedy:
        result.status, result.message = NOT_APPLICABLE, "a sampled case: checked by engine_sequences"
        return result
    prompts = case.prompts or (case.prompt,)
    for i, prompt in enumerate(prompts):
        got = [int(t) for t in engine.generate(case, prompt, i)]
        want = [int(t) for t in engine.generate_plain(case, prompt, i)]
        if got != want:
            result.fail(f"prompt {list(prompt)}: speculative greedy {got} != plain greedy {want}",
                        _repro(engine, case, 1, prompt))
            break
    result.samples, result.covered = len(prompts), ["greedy"]
    if result.status == PASS:
        result.message = f"{len(prompts)} prompts, {case.length} tokens each, token for token; {case.describe()}"
    return result


def _repro(engine, case: EngineCase, n: int, prompt: tuple | None = None) -> str:
    spec = getattr(engine, "spec", engine.name)
    return (f"from specverify.engines import run_engine_check; from specverify.registry import get_engine\n"
            f"engine = get_engine({spec!r})\n"
            f"case = next(c for c in engine.cases if c.name == {case.name!r})  # {case.describe()}\n"
            + (f"engine.generate(case, {tuple(prompt)!r}, 0)\n" if prompt is not None else
               f"# {n} samples: engine.generate(case, case.prompt, seed) for seed in range({n})\n"))


@dataclass(frozen=True)
class EngineCheck:
    """One engine check: it runs on the engine's greedy cases or on its sampled ones, never on both."""

    name: str
    kind: str
    fn: Callable
    doc: str
    greedy: bool = False

    def applies(self, case: EngineCase) -> bool:
        return case.sampling.greedy == self.greedy


ENGINE_CHECKS = {c.name: c for c in (
    EngineCheck("engine_sequences", "statistical", check_engine_sequences,
                "the first L emitted tokens follow the exact law of the target after its processors"),
    EngineCheck("engine_acceptance", "statistical", check_engine_acceptance,
                "the first draft is accepted at the first step with probability sum min(p, q)"),
    EngineCheck("engine_draft_law", "exact", check_engine_draft_law,
                "the q handed to the verifier for the first draft is the drafter's law after the processors"),
    EngineCheck("engine_boundary_coins", "structural", check_engine_boundary_coins,
                "with every uniform the verifier draws at 0, 2^-24 or 1 - 2^-24, the first L tokens stay in the support "
                "and the coins decide the first draft"),
    EngineCheck("engine_greedy", "exact", check_engine_greedy,
                "greedy speculative output equals the engine's own non-speculative greedy output", greedy=True),
)}


def engine_plan(engine, checks=None, cases=None) -> list:
    """(check, case) pairs of an engine run, in a stable order."""
    names = checks or list(ENGINE_CHECKS)
    return [(name, case) for case in engine.cases for name in names   # a case's checks share its draw
            if ENGINE_CHECKS[name].applies(case) and (cases is None or case.name in cases)]


def run_engine_check(engine, check: str, case: EngineCase, profile: Profile, **kw) -> CheckResult:
    """One engine check, timed; an exception is a FAIL naming it."""
    start = time.perf_counter()
    try:
        result = ENGINE_CHECKS[check].fn(engine, case, profile, **kw)
    except Exception as exc:  # noqa: BLE001 - every failure of the engine is a FAIL line
        result = engine_result(engine, check, case, ENGINE_CHECKS[check].kind)
        result.status, result.message = FAIL, f"{type(exc).__name__}: {exc}"
    result.seconds = time.perf_counter() - start
    declared = [d for d in getattr(engine, "deviations", ()) if d.covers(check, case.name)]
    known = matching(result.message or "", declared) if result.status == FAIL else None
    if known is not None:     # a declared deviation (SPEC 7): reported as known, never as a pass
        result.status, result.deviation = KNOWN, known.reason
        result.message = f"known deviation ({known.reason}): {result.message}"
    elif result.status == PASS:
        note_unmet(result, declared)
    return result


def run_engine_suite(engine, profile: Profile, progress=None, checks=None, cases=None, workers: int = 1) -> list:
    pairs = engine_plan(engine, checks, cases)
    results = []
    for i, (check, case) in enumerate(pairs):
        results.append(run_engine_check(engine, check, case, profile, workers=workers))
        if progress:
            progress(i + 1, len(pairs), results[-1])
    return results


__all__ = ["ENGINE_CHECKS", "ENGINE_DETECT_TV", "Engine", "EngineCase", "Sampling", "check_engine_acceptance",
           "check_engine_boundary_coins",
           "check_engine_draft_law", "check_engine_greedy", "q_shift_seen",
           "check_engine_sequences", "engine_alpha", "engine_plan", "exact_law", "is_engine", "run_engine_check",
           "run_engine_suite", "samples_for"]
