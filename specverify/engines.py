"""Engine checks (SPEC 8): an engine's whole speculative loop against the target's own law.

An engine adapter (``Engine``) runs the engine's own speculative loop for one prompt and gives the
target's next-token law after the engine's processors. The harness enumerates the exact law of the
first ``L`` emitted tokens (``exact_law``: V^L sequences, V small) and tests the engine's samples
against it with the chi-square of SPEC 5 (``check_engine_sequences``), and checks that greedy
speculative output equals the engine's own non-speculative greedy output (``check_engine_greedy``).
The checks are declared once in ``ENGINE_CHECKS`` and return ``CheckResult`` objects, so the report,
the JSON and the verdict treat them like kernel checks.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, runtime_checkable

import numpy as np

from specverify.checks.result import FAIL, NOT_APPLICABLE, PASS, CheckResult
from specverify.checks.stats import (MIN_EXPECTED, binomial_test, chi_square_gof, min_num_samples_for_chi2_tv_test,
                                     min_shift_detectable_by_binomial_test, min_tv_detectable_by_chi2_test)
from specverify.registry import is_engine  # noqa: F401 - re-exported: the engine protocol's test
from specverify.strategies import Profile

# The TV distance of the L-token law each engine sequence case detects with probability 0.99, per
# profile. The targets are 0.05 (ci) and 0.01 (nightly); ci is sized to fit its 2-core budget
# (about 170 samples/s per core): 0.05 would take about 4 minutes there.
ENGINE_DETECT_TV = {"smoke": 0.3, "ci": 0.08, "dev": 0.05, "nightly": 0.01}
_LAW_FLOOR = 1e-300


@dataclass(frozen=True)
class Sampling:
    """The engine's sampling settings (SPEC 8): temperature 0 is greedy; 0 / 1 / 0 turn the filters off."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def describe(self) -> str:
        if self.greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        parts += [f"top_k={self.top_k}"] if self.top_k else []
        parts += [f"top_p={self.top_p:g}"] if self.top_p < 1 else []
        parts += [f"min_p={self.min_p:g}"] if self.min_p > 0 else []
        return ", ".join(parts)


@dataclass(frozen=True)
class EngineCase:
    """One engine case: the prompt(s), the sampling, the drafter and its draft schedule, and L, the
    number of emitted tokens whose joint law is tested. ``prompts`` (greedy cases) are all checked."""

    name: str
    prompt: tuple
    sampling: Sampling
    drafter: str = "flat"             # the adapter's name for the drafter model
    draft_tokens: int = 2
    schedule: str = "constant"
    length: int = 2
    prompts: tuple = ()
    doc: str = ""

    def describe(self) -> str:
        return (f"{self.sampling.describe()}; drafter {self.drafter}, {self.draft_tokens} draft token(s), "
                f"{self.schedule} schedule; law of the first {self.length} tokens")


@runtime_checkable
class Engine(Protocol):
    """What an engine adapter gives (SPEC 8)."""

    name: str
    vocab_size: int
    cases: tuple

    def generate(self, case: EngineCase, prompt: tuple, seed: int) -> list:
        """The engine's speculative loop for one prompt: the ``case.length`` new token ids."""

    def generate_plain(self, case: EngineCase, prompt: tuple, seed: int) -> list:
        """The same engine without speculation."""

    def target_law(self, prefix: tuple, sampling: Sampling):
        """[V] float64: the target's next-token law for ``prefix`` after the engine's own processors."""


def exact_law(engine, prompt: tuple, sampling: Sampling, length: int) -> dict:
    """{sequence of ``length`` token ids: probability} in float64, by enumeration: the product of the
    target's laws along the sequence, one ``target_law`` call per prefix of positive probability."""
    law = {(): 1.0}
    for _ in range(length):
        grown = {}
        for seq, prob in law.items():
            nxt = np.asarray(engine.target_law(tuple(prompt) + seq, sampling), dtype=np.float64)
            if not (np.all(nxt >= 0) and abs(nxt.sum() - 1) < 1e-9):
                raise ValueError(f"{engine.name}.target_law({tuple(prompt) + seq}) is not a distribution: {nxt}")
            for v in np.flatnonzero(nxt > 0):
                grown[seq + (int(v),)] = prob * float(nxt[v])
        law = grown
    return law


def merged_dof(law: dict, samples: int) -> int:
    """Degrees of freedom of the chi-square over ``law`` at ``samples`` samples after bins under
    MIN_EXPECTED are merged (as ``chi_square_gof`` merges them)."""
    expected = np.array(sorted(law.values())) * samples
    big = int((expected >= MIN_EXPECTED).sum())
    tail = float(expected[expected < MIN_EXPECTED].sum())
    return max(1, big + (1 if tail >= MIN_EXPECTED else 0) - 1) if big or tail else 1


def engine_alpha(engine, profile: Profile) -> float:
    """The engine run's family budget over its statistical tests (Bonferroni): two per sampled case."""
    return profile.family_alpha / max(1, 2 * sum(1 for c in engine.cases if not c.sampling.greedy))


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


def _result(engine, check: str, case: EngineCase, kind: str) -> CheckResult:
    return CheckResult(check=check, case=case.name, backend=engine.name, kind=kind, status=PASS)


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
    if workers <= 1 or n < 200 * workers:
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


def check_engine_acceptance(engine, case: EngineCase, profile: Profile, samples: int | None = None,
                            alpha: float | None = None, workers: int = 1) -> CheckResult:
    """Binomial test of the first draft's acceptance at the first step against
    ``alpha_0 = sum_v min(p(v), q(v))`` (SPEC 3), p the target's law and q the drafter's at the prompt."""
    result = _result(engine, "engine_acceptance", case, "statistical")
    if case.sampling.greedy or not hasattr(engine, "draft_law") or not hasattr(engine, "first_accepted"):
        result.status, result.message = NOT_APPLICABLE, "greedy, or the engine does not trace its acceptances"
        return result
    alpha = alpha if alpha is not None else engine_alpha(engine, profile)
    n = samples or case_samples(engine, case, profile, alpha)
    _, (accepted, steps), short = draw(engine, case, n, workers)
    p = np.asarray(engine.target_law(case.prompt, case.sampling), dtype=np.float64)
    q = np.asarray(engine.draft_law(case, case.prompt), dtype=np.float64)
    a0 = float(np.minimum(p, q).sum())
    p_value = binomial_test(accepted, steps, a0)
    det = min_shift_detectable_by_binomial_test(steps, a0, alpha)
    result.statistic, result.p_value, result.alpha, result.samples = accepted / max(steps, 1), p_value, alpha, steps
    result.detectable, result.detectable_measure, result.detectable_by_position = det, "acceptance", [det]
    result.covered = ["standard", "seeded"]
    where = (f"{case.describe()}; first draft accepted at the first step {accepted}/{steps} = "
             f"{accepted / max(steps, 1):.4f}, exact {a0:.4f} (sum min(p, q)); sum p*q (q dropped) = {float(p @ q):.4f}")
    if short or steps < n:
        result.fail(f"{where}; only {steps} of {n} calls traced a first step")
    elif p_value < alpha:
        result.fail(f"{where}; p = {p_value:.3g} < alpha {alpha:.2g}", _repro(engine, case, n))
    else:
        result.message = where
    return result


def check_engine_sequences(engine, case: EngineCase, profile: Profile, samples: int | None = None,
                           alpha: float | None = None, workers: int = 1) -> CheckResult:
    """Chi-square of the first ``case.length`` emitted tokens against their exact law (SPEC 8)."""
    result = _result(engine, "engine_sequences", case, "statistical")
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
    result = _result(engine, "engine_greedy", case, "exact")
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
    name: str
    kind: str
    fn: Callable
    doc: str
    applies: Callable = field(default=lambda case: True)


ENGINE_CHECKS = {c.name: c for c in (
    EngineCheck("engine_sequences", "statistical", check_engine_sequences,
                "the first L emitted tokens follow the exact law of the target after its processors",
                lambda case: not case.sampling.greedy),
    EngineCheck("engine_acceptance", "statistical", check_engine_acceptance,
                "the first draft is accepted at the first step with probability sum min(p, q)",
                lambda case: not case.sampling.greedy),
    EngineCheck("engine_greedy", "exact", check_engine_greedy,
                "greedy speculative output equals the engine's own non-speculative greedy output",
                lambda case: case.sampling.greedy),
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
        result = _result(engine, check, case, ENGINE_CHECKS[check].kind)
        result.status, result.message = FAIL, f"{type(exc).__name__}: {exc}"
    result.seconds = time.perf_counter() - start
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
           "check_engine_greedy",
           "check_engine_sequences", "engine_alpha", "engine_plan", "exact_law", "is_engine", "run_engine_check",
           "run_engine_suite", "samples_for"]
