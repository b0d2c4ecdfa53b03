"""Engine checks (SPEC 8) on transformers' assisted generation, on the CPU.

transformers is the ``specverify[transformers]`` extra, which CI installs: without it these tests fail
(ImportError), they are not skipped. Sample counts here are small (400 per case, about 2.5 s): every
engine mutant moves its case far enough to fail at that count; the profiles size the real runs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from specverify.checks.result import FAIL, PASS
from specverify.strategies import get_profile

SPEC = "specverify.adapters.transformers:assisted"
N = 400
CI = get_profile("ci")


@pytest.fixture(scope="module")
def engine():
    from specverify.adapters.transformers import assisted  # ImportError without the extra: a failure
    return assisted()


def _case(engine, name):
    return next(c for c in engine.cases if c.name == name)


def test_exact_law_is_the_product_of_the_target_laws(engine):
    from specverify.engines import exact_law
    case = _case(engine, "top_k")
    law = exact_law(engine, case.prompt, case.sampling, 2)
    assert abs(sum(law.values()) - 1) < 1e-12
    k = case.sampling.top_k
    assert len(law) == k * k      # top-k at each of two positions: k * k sequences of positive probability
    first = engine.target_law(case.prompt, case.sampling)
    for (a, b), prob in law.items():
        second = engine.target_law(case.prompt + (a,), case.sampling)
        assert prob == pytest.approx(first[a] * second[b], rel=1e-12)
    assert np.count_nonzero(first) == k


def test_the_clean_library_passes(engine):
    from specverify.engines import run_engine_check
    for check, name in (("engine_sequences", "one_draft"), ("engine_acceptance", "one_draft"),
                        ("engine_greedy", "greedy")):
        result = run_engine_check(engine, check, _case(engine, name), CI, samples=N)
        assert result.status == PASS, result.line()
        if check != "engine_greedy":
            assert result.samples == N and 0 < result.alpha < CI.family_alpha and result.detectable < 1


@pytest.mark.parametrize("mutant", ["greedy_drafter", "q_dropped", "q_stale", "q_before_processors"])
def test_engine_mutant_is_caught(engine, mutant):
    from specverify.engines import run_engine_check
    from specverify.mutants.engines import ENGINE_MUTANTS
    m = ENGINE_MUTANTS[mutant]
    result = run_engine_check(m.wrap(engine), m.check, _case(engine, m.cases[0]), CI, samples=N)
    assert result.status == FAIL and result.p_value < 1e-6, result.line()


def test_the_patches_are_undone(engine):
    import transformers.generation.utils as utils
    from specverify.mutants.engines import ENGINE_MUTANTS
    before = utils._speculative_sampling
    ENGINE_MUTANTS["q_dropped"].wrap(engine).generate(_case(engine, "one_draft"), (4, 4), 0)
    assert utils._speculative_sampling is before


def test_the_registry_tells_engines_from_backends():
    from specverify.registry import get_engine
    assert get_engine("cpu") is None
    assert get_engine("specverify.kernels.cpu:CpuBackend") is None
    assert get_engine(SPEC).cases


def test_cli_runs_the_engine_checks(tmp_path, capsys):
    from specverify.cli import main
    out = tmp_path / "report.json"
    code = main(["check", SPEC, "--profile", "smoke", "--cases", "one_draft,greedy", "-n", "1",
                 "--json", str(out), "--junit", str(tmp_path / "j.xml"), "--require", "greedy"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "engine_sequences[one_draft]" in text and "engine_greedy[greedy]" in text and "det99=" in text
    doc = json.loads(out.read_text())
    assert doc["passed"] and doc["engine"] and {r["check"] for r in doc["results"]} == {
        "engine_sequences", "engine_acceptance", "engine_greedy"}
    assert all(r["detectable_measure"] in ("tv", "acceptance") for r in doc["results"] if r["kind"] == "statistical")


def test_cli_fails_an_engine_mutant_and_leaves_a_reproducer(tmp_path, capsys):
    from specverify.cli import main
    code = main(["check", "specverify.mutants.engines:q_stale_engine", "--profile", "smoke", "--cases", "temperature",
                 "--checks", "engine_sequences", "-n", "1", "--failures-dir", str(tmp_path)])
    text = capsys.readouterr().out
    assert code == 1 and "FAIL  engine_sequences[temperature]" in text, text
    assert list(tmp_path.glob("*.txt")) and "replay: specverify check" in text
