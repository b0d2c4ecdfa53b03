"""Engine checks (SPEC 8) on transformers' assisted generation, on the CPU.

transformers is the ``specverify[transformers]`` extra, which CI installs: without it these tests fail
(ImportError), they are not skipped. Sample counts here are small (``CATCH``: 50 to 375 per mutant and case):
each mutant fails its check on its cases beyond a margin (p < 1e-6 where the ci profile tests at alpha
1.4e-4), and the correct engine passes the same checks on the same cases; the profiles size the real runs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from specverify.checks.result import FAIL, PASS
from specverify.strategies import get_profile

SPEC = "specverify.adapters.transformers:assisted"
CI = get_profile("ci")
MARGIN = 1e-6    # the p-value a caught mutant must be under: 140 times below the ci alpha, so a catch has room

# Samples (seeds 0 to n - 1) of each mutant on each case a test catches it on: the fewest, in steps of 25,
# with which its check gives p < MARGIN with probability at least 0.995 under the mutant's law on that case
# (the law estimated from seeds these tests do not draw; the commit that set the counts gives the figures).
CATCH = {("greedy_drafter", "top_p_min_p"): 50, ("greedy_drafter", "temperature_alone"): 75,
         ("q_dropped", "top_p_min_p"): 275, ("q_dropped", "temperature_alone"): 125,
         ("q_stale", "top_p_min_p"): 250,
         ("q_before_processors", "top_p_min_p"): 225, ("q_before_processors", "temperature_alone"): 375}
CLEAN_CASES = sorted({case for _, case in CATCH}) + ["greedy", "greedy_prompt_lookup"]   # the correct engine's run


@pytest.fixture(scope="module")
def engine():
    from specverify.adapters.transformers import assisted  # ImportError without the extra: a failure
    return assisted()


def _case(engine, name):
    return next(c for c in engine.cases if c.name == name)


def test_exact_law_is_the_product_of_the_target_laws(engine):
    from specverify.engines import exact_law
    case = _case(engine, "sharp_drafter")
    law = exact_law(engine, case.prompt, case.sampling, 2)
    assert abs(sum(law.values()) - 1) < 1e-12
    k = case.sampling.top_k
    assert len(law) == k * k      # top-k at each of two positions: k * k sequences of positive probability
    first = engine.target_law(case.prompt, case.sampling)
    for (a, b), prob in law.items():
        second = engine.target_law(case.prompt + (a,), case.sampling)
        assert prob == pytest.approx(first[a] * second[b], rel=1e-12)
    assert np.count_nonzero(first) == k


@pytest.fixture(scope="module")
def clean_cli_run(tmp_path_factory):
    """(exit status, printed report, JSON report, JUnit XML) of one CLI run of the correct engine, on the smoke
    profile, on the cases the mutants are caught on and the two greedy cases: the run whose verdicts and whose
    report the two tests below check, started once."""
    import contextlib
    import io

    from specverify.cli import main
    out = tmp_path_factory.mktemp("engine-clean")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["check", SPEC, "--profile", "smoke", "--cases", ",".join(CLEAN_CASES), "-n", "1",
                     "--json", str(out / "report.json"), "--junit", str(out / "j.xml"), "--require", "greedy"])
    return code, printed.getvalue(), json.loads((out / "report.json").read_text()), (out / "j.xml").read_text()


def test_the_clean_library_passes(clean_cli_run):
    """transformers 5.24.0 as installed passes where the mutants fail: its law and its acceptance hold on each
    case a mutant is caught on (the smoke profile's samples, at the ci alpha), greedy speculation equals plain
    greedy, and the one thing that does not hold is the declared deviation (the drafter's warpers applied
    twice), reported as known, never as a pass."""
    from specverify.checks.result import KNOWN
    _, text, doc, _ = clean_cli_run
    want = {("engine_greedy", "greedy"): PASS, ("engine_greedy", "greedy_prompt_lookup"): PASS}
    for case in {case for _, case in CATCH}:
        want.update({("engine_sequences", case): PASS, ("engine_acceptance", case): PASS,
                     ("engine_draft_law", case): KNOWN})
    # the zero-uniform defect, declared where a filter cuts tokens (tests below); without filters nothing to cut
    want.update({("engine_boundary_coins", "top_p_min_p"): KNOWN, ("engine_boundary_coins", "temperature_alone"): PASS})
    assert {(r["check"], r["case"]): r["status"] for r in doc["results"]} == want, text
    for r in doc["results"]:
        if r["kind"] == "statistical":
            assert r["samples"] >= 200 and 0 < r["alpha"] < CI.family_alpha and r["detectable"] < 1, r


def test_cli_runs_the_engine_checks(clean_cli_run):
    """The CLI runs every engine check that applies to the cases asked for, reports each, and writes the JSON
    and the JUnit XML."""
    code, text, doc, junit = clean_cli_run
    assert code == 0, text
    assert "engine_sequences[top_p_min_p]" in text and "engine_greedy[greedy]" in text and "det99=" in text
    assert doc["passed"] and doc["engine"] and {r["check"] for r in doc["results"]} == {
        "engine_sequences", "engine_acceptance", "engine_draft_law", "engine_boundary_coins", "engine_greedy"}
    assert all(r["detectable_measure"] in ("tv", "acceptance") for r in doc["results"] if r["kind"] == "statistical")
    assert junit.count("<testcase") == len(doc["results"])


class _Undeclared:
    """The engine with no declared deviation (the zero-uniform one would excuse what the test looks for), and
    optionally an adapter that takes coin= and ignores it."""

    deviations = ()

    def __init__(self, engine, ignore_coins: bool = False):
        self._engine, self._ignore = engine, ignore_coins

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def generate_at_coin(self, case, prompt, seed, coin):
        if self._ignore:
            return self._engine.generate(case, prompt, seed)
        return self._engine.generate_at_coin(case, prompt, seed, coin)


def test_a_zero_coin_through_the_whole_loop_emits_a_sequence_the_targets_filters_cut(engine):
    """transformers' verifier tests r <= p / q, so r = 0 (torch.rand_like draws it once in 2^24) accepts a draft the
    target's top-p and min-p cut: fixed at 0 through generate_at_coin, about half of the calls emit a sequence of
    probability 0 under the exact law, and nothing else fails (the other coins, the coins' decisions). Declared by
    the adapter (known); without a filter no token has probability 0 and the check passes."""
    from specverify.checks.result import KNOWN
    from specverify.engines import run_engine_check
    bare = _Undeclared(engine)
    result = run_engine_check(bare, "engine_boundary_coins", _case(engine, "top_p_min_p"), CI)
    failures = result.message.split("; ")[1:]
    assert result.status == FAIL and failures, result.line()
    assert all(f.startswith("every uniform at 0: seed ") and f.endswith("of probability 0") for f in failures)
    assert run_engine_check(engine, "engine_boundary_coins", _case(engine, "top_p_min_p"), CI).status == KNOWN
    assert run_engine_check(bare, "engine_boundary_coins", _case(engine, "temperature_alone"), CI).status == PASS


def test_a_verifier_that_never_accepts_a_ratio_of_zero_passes_the_boundary_coins(engine, monkeypatch):
    """The control of the test above: transformers' verifier with the fix its defect needs (a draft whose p(x) / q(x)
    is 0 is never accepted, whatever the uniform: its draw of ``torch.rand_like(ratio)`` reads 1 there) passes the
    filtered case at every coin, with nothing declared."""
    import transformers.generation.utils as utils
    from specverify.adapters import conventions
    from specverify.engines import run_engine_check
    original = utils._speculative_sampling

    def fixed(*args, **kwargs):
        draw = torch.rand_like

        def guarded(ratio, *a, **k):
            return torch.where(ratio > 0, draw(ratio, *a, **k), torch.ones_like(ratio))
        with conventions.patch_points(torch, {"rand_like": guarded}, "torch"):
            return original(*args, **kwargs)
    monkeypatch.setattr(utils, "_speculative_sampling", fixed)
    result = run_engine_check(_Undeclared(engine), "engine_boundary_coins", _case(engine, "top_p_min_p"), CI)
    assert result.status == PASS, result.line()


def test_an_adapter_that_ignores_its_coins_fails_where_they_decide(engine):
    """Hostile: generate_at_coin drawing the seed's own uniform. The first draft's decision is then the same at
    2^-24 and 1 - 2^-24, so a draft of p(x) / q(x) < 1 accepted at one is accepted at the other; at 1 - 2^-24 the
    rule rejects it."""
    from specverify.engines import run_engine_check
    result = run_engine_check(_Undeclared(engine, ignore_coins=True), "engine_boundary_coins",
                              _case(engine, "temperature_alone"), CI)
    assert result.status == FAIL and "the coins do not decide" in result.message, result.line()


def test_engines_without_fixed_coins_or_uniforms_are_not_applicable(engine):
    """An adapter without generate_at_coin, and a case whose verifier draws no uniform (prompt lookup): n/a with
    the reason, never a pass."""
    from specverify.engines import run_engine_check

    class NoCoins:
        def __getattr__(self, name):
            if name == "generate_at_coin":
                raise AttributeError(name)
            return getattr(engine, name)
    result = run_engine_check(NoCoins(), "engine_boundary_coins", _case(engine, "top_p_min_p"), CI)
    assert result.status == "n/a" and "generate_at_coin" in result.message, result.line()
    result = run_engine_check(engine, "engine_boundary_coins", _case(engine, "prompt_lookup"), CI)
    assert result.status == "n/a" and "prompt lookup" in result.message, result.line()


@pytest.mark.parametrize("mutant", ["greedy_drafter", "q_dropped", "q_stale", "q_before_processors"])
def test_engine_mutant_is_caught(engine, mutant):
    """Each bug class re-planted in the library moves its first case far from the exact law (or, for q
    dropped, which is lossless in law, the first draft's acceptance): p < MARGIN at its count in CATCH."""
    from specverify.engines import run_engine_check
    from specverify.mutants.engines import ENGINE_MUTANTS
    m = ENGINE_MUTANTS[mutant]
    case = _case(engine, m.cases[0])
    result = run_engine_check(m.wrap(engine), m.check, case, CI, samples=CATCH[mutant, case.name])
    assert result.status == FAIL and result.p_value < MARGIN, result.line()


@pytest.mark.parametrize("mutant", ["greedy_drafter", "q_dropped", "q_before_processors"])
def test_the_temperature_case_catches_the_mutants_it_lists(engine, mutant):
    """temperature_alone (temperature without filters, one draft, constant schedule, the first token's law)
    catches each mutant that lists it, as their first cases do: p < MARGIN at its count in CATCH. q stale does
    not list it: at L = 1 every call is one step at the same prompt, so the previous step's q is the same law."""
    from specverify.engines import run_engine_check
    from specverify.mutants.engines import ENGINE_MUTANTS
    m = ENGINE_MUTANTS[mutant]
    assert "temperature_alone" in m.cases and "temperature_alone" not in ENGINE_MUTANTS["q_stale"].cases
    result = run_engine_check(m.wrap(engine), m.check, _case(engine, "temperature_alone"), CI,
                              samples=CATCH[mutant, "temperature_alone"])
    assert result.status == FAIL and result.p_value < MARGIN, result.line()


def test_q_before_the_processors_is_not_excused_by_the_declared_deviation(engine):
    """The declared deviation excuses a q that is the drafter's law with its processors applied twice, and
    nothing else: a q taken before the processors (the mutant) still fails engine_draft_law."""
    from specverify.engines import run_engine_check
    from specverify.mutants.engines import ENGINE_MUTANTS
    result = run_engine_check(ENGINE_MUTANTS["q_before_processors"].wrap(engine), "engine_draft_law",
                              _case(engine, "sharp_drafter"), CI)
    assert result.status == FAIL and "applied twice" not in result.message, result.line()


def test_transformers_applies_the_drafters_warpers_twice(engine):
    """The defect behind the declared deviation, on transformers 5.24.0: the q the assistant hands the
    verifier is its law after the warpers applied twice, not once (a temperature of T reaches the drafter
    as T squared). When transformers fixes it this fails: remove the deviation."""
    from specverify.engines import _handed_q
    case = _case(engine, "top_p_min_p")
    handed = _handed_q(engine, case)
    once = engine.draft_law(case, case.prompt)
    twice = engine._law(engine.models[case.drafter], case.prompt, case.sampling, times=2)
    assert np.abs(handed - twice).max() < 1e-5 < np.abs(handed - once).max()


def test_every_drafter_case_sees_a_five_percent_shift_of_q(engine):
    """Issue 32: a case that cannot see a 5% shift of q is no case. For each sampled case with a drafter, the
    worst single 5% transfer of the q handed over moves the first token's law (a lower bound on the move of
    the L-token law; that law itself where L = 1) by at least 0.045, against a ci det99 of at most 0.05 on the
    L-token law."""
    from specverify.engines import _handed_q, case_samples, engine_alpha, exact_law, merged_dof, q_shift_seen
    from specverify.checks.stats import min_tv_detectable_by_chi2_test
    alpha = engine_alpha(engine, CI)
    for case in engine.cases:
        if case.sampling.greedy or engine.draft_law(case, case.prompt) is None:
            continue
        seen = q_shift_seen(engine.target_law(case.prompt, case.sampling), _handed_q(engine, case))
        n = case_samples(engine, case, CI, alpha)
        det = min_tv_detectable_by_chi2_test(n, merged_dof(exact_law(engine, case.prompt, case.sampling,
                                                                     case.length), n), alpha)
        assert seen >= 0.045 and det <= 0.05, (case.name, seen, det)


def test_the_patches_are_undone(engine):
    """A mutant patches the library only while its loop runs."""
    import transformers.generation.utils as utils
    from specverify.mutants.engines import ENGINE_MUTANTS
    before = utils._speculative_sampling
    case = _case(engine, "sharp_drafter")
    ENGINE_MUTANTS["q_dropped"].wrap(engine).generate(case, case.prompt, 0)
    assert utils._speculative_sampling is before


def test_the_registry_tells_engines_from_backends():
    from specverify.registry import get_engine
    assert get_engine("cpu") is None
    assert get_engine("specverify.kernels.cpu:CpuBackend") is None
    assert get_engine(SPEC).cases


def test_list_names_every_engine_check_and_an_engines_cases_with_the_checks_its_plan_runs(engine, capsys):
    """`specverify list` is where a user finds what a run would check: the engine checks beside the kernel
    checks, and for an engine adapter each case with exactly the checks ``engine_plan`` gives it (the greedy
    cases get ``engine_greedy`` alone). A kernel backend gets its plan instead (tests/test_cli_inputs.py)."""
    from specverify.checks import CHECKS
    from specverify.cli import main
    from specverify.engines import ENGINE_CHECKS, engine_plan
    assert main(["list"]) == 0
    listed = [line.split()[:2] for line in capsys.readouterr().out.splitlines() if line and not line[0].isspace()]
    for name, check in {**CHECKS, **ENGINE_CHECKS}.items():
        assert [name, check.kind] in listed, name
    assert main(["list", SPEC]) == 0
    lines = capsys.readouterr().out.splitlines()
    planned = {}
    for name, case in engine_plan(engine):
        planned.setdefault(case.name, []).append(name)
    assert set(planned) == {case.name for case in engine.cases}
    for case in engine.cases:
        at = next(i for i, line in enumerate(lines) if line.startswith(case.name + " "))
        assert lines[at + 1].split("checks: ")[1].split(", ") == planned[case.name], case.name
    assert planned["greedy"] == ["engine_greedy"]
    assert main(["list", "cpu"]) == 0 and "on the ci profile" in capsys.readouterr().out.splitlines()[0]


MUTANT = "specverify.mutants.engines:greedy_drafter_engine"


@pytest.fixture(scope="module")
def mutant_cli_run(tmp_path_factory):
    """(exit status, printed report, failures directory) of one CLI run of the greedy-drafter mutant on its
    cheapest case, which the smoke profile's samples fail far beyond chance: the run whose report and
    reproducer the two tests below check, started once."""
    import contextlib
    import io

    from specverify.cli import main
    failures = tmp_path_factory.mktemp("engine-failures")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["check", MUTANT, "--profile", "smoke", "--cases", "temperature_alone",
                     "--checks", "engine_sequences", "-n", "1", "--failures-dir", str(failures)])
    return code, printed.getvalue(), failures


def test_cli_fails_an_engine_mutant_and_leaves_a_reproducer(mutant_cli_run):
    code, text, failures = mutant_cli_run
    assert code == 1 and "FAIL  engine_sequences[temperature_alone]" in text, text
    assert list(failures.glob("*.txt")) and "replay: specverify replay" in text


def test_an_engine_reproducer_replays(mutant_cli_run, capsys):
    """``specverify replay`` on an engine reproducer re-runs the failing check on its case and profile (the
    same seeds): STILL FAILS (exit 1) on the mutant that failed, PASSES (exit 0) on the correct engine."""
    from specverify.cli import main
    mutant = MUTANT
    (reproducer,) = mutant_cli_run[2].glob("*.json")
    capsys.readouterr()
    assert main(["replay", str(reproducer), mutant]) == 1 and "STILL FAILS" in capsys.readouterr().out
    assert main(["replay", str(reproducer), SPEC]) == 0 and "PASSES" in capsys.readouterr().out


def test_samples_split_over_workers_give_the_same_counts(engine, monkeypatch):
    """Seed i draws sample i whichever worker runs it, so splitting the seeds over forked workers and summing
    their counts gives the serial run's tallies exactly (the nightly profile's every-core run relies on it).
    The test lowers the count at which a run forks: the property is per seed, and the split must happen."""
    import multiprocessing

    from specverify import engines
    case, n = _case(engine, "top_p_min_p"), 50
    serial = engines._draw_seeds(engine, case, range(n))
    started, context = [], multiprocessing.get_context

    def spied(method=None):
        started.append(method)
        return context(method)
    monkeypatch.setattr(multiprocessing, "get_context", spied)
    monkeypatch.setattr(engines, "FORK_MIN_PER_WORKER", n // 2)
    engines._DRAWN.clear()
    forked = engines.draw(engine, case, n, workers=2)
    assert started == ["fork"] and forked == serial and sum(serial[0].values()) == serial[1][1] == n


def test_nightly_splits_samples_over_every_core(tmp_path, capsys):
    """-n defaults to every core, and the engine run splits its samples over that many workers (nightly too,
    whose profile names a GPU the engine checks do not use)."""
    import os

    from specverify.cli import main
    out = tmp_path / "nightly.json"
    # one greedy case, the cheapest: the worker count is the run's, whatever it checks
    assert main(["check", SPEC, "--profile", "nightly", "--checks", "engine_greedy", "--cases", "greedy_prompt_lookup",
                 "--json", str(out)]) == 0
    assert f"samples split over {os.cpu_count()} worker(s)" in capsys.readouterr().err
    assert json.loads(out.read_text())["workers"] == os.cpu_count()
