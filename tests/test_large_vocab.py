"""Large-vocabulary structural checks reach every backend, whatever its noise path (issue 15.4)."""

import pytest

from specverify.checks import PASS, run_check
from specverify.checks.large_vocab import LARGE_VOCAB_CASES, TILE, structural_vocabs
from specverify.mutants.statistical_only import OwnStreamCpuBackend
from specverify.strategies import get_profile


@pytest.mark.parametrize("case", LARGE_VOCAB_CASES)
def test_seeded_only_backend_gets_large_vocabulary_checks(case):
    """A backend with only its own seeded stream (no differential check applies) is still run at large V:
    the check passes with samples, it is not n/a."""
    result = run_check(OwnStreamCpuBackend(), "large_vocab_structure", case, get_profile("ci"))
    assert result.status == PASS and result.samples > 0, result.line()


def test_sizes_are_production_vocabularies_on_every_profile_and_a_partial_tile_on_the_cpu():
    """Every profile checks the advisory's V = 151,936 and 262,144 (a split-V path changes above some
    size, whatever the device); the CPU profiles also a V whose last 1024-wide tile is partial, where
    a padded-tile bug shows."""
    assert structural_vocabs(get_profile("nightly")) == (151_936, 262_144)
    for name in ("ci", "smoke", "dev"):
        small, *large = structural_vocabs(get_profile(name))
        assert small % TILE != 0 and large == [151_936, 262_144]


def test_seeded_only_backend_wrong_only_above_100k_fails_the_ci_profile_and_its_twin_passes():
    """The backend emits an id >= V only where V > 100,000: the ci profile on the CPU reaches that size
    through large_vocab_structure, whatever the noise path; the clean twin (the same stream) passes."""
    from specverify.mutants.statistical_only import SplitVocabOutOfRangeOwnStream
    for case in LARGE_VOCAB_CASES:
        bad = run_check(SplitVocabOutOfRangeOwnStream(), "large_vocab_structure", case, get_profile("ci"))
        assert bad.status == "fail" and "outside [0, 151936)" in bad.message, \
            bad.line()
        good = run_check(OwnStreamCpuBackend(), "large_vocab_structure", case, get_profile("ci"))
        assert good.status == PASS, good.line()


def test_tile_boundary_case_places_its_law_at_large_ids():
    """The embedded case's batch and exact law live in the V-wide vocabulary: its support is the ids it
    names (across tile boundaries and the last tile), and every other logit is -inf."""
    import torch

    from specverify.checks.cases import STAT_CASE_BY_NAME
    case = STAT_CASE_BY_NAME["tile_boundary"]
    V, ids = case.embed
    batch = case.batch(4, torch.Generator().manual_seed(0))
    assert batch.vocab_size == V == case.vocab_size
    finite = torch.isfinite(batch.target_logits).any(dim=0).nonzero().flatten().tolist()
    assert finite == list(ids)
    assert set(batch.draft_token_ids.tolist()) <= set(ids)
    assert {t for s in case.sequences for t in s} <= set(ids)
    assert abs(sum(case.sequences.values()) - 1) < 1e-12
    assert float(case.position_distributions[0][V - 1]) > 0


def test_production_vocabulary_statistics_run_where_the_measured_cost_fits():
    """token_distribution[large_vocab_tiles] (V = 151,936) is planned on every profile. Off the GPU it
    runs when its first launch, measured, projects the whole case under the profile's budget: the CPU
    backend's does; a backend too slow for it is n/a naming the measurement, never a pass."""
    import time as _time
    from dataclasses import replace

    from specverify.checks import NOT_APPLICABLE, plan
    from specverify.kernels.cpu import CpuBackend
    assert ("token_distribution", "large_vocab_tiles") in plan(get_profile("ci"))
    assert ("differential_injected", "large_vocab") not in plan(get_profile("ci"))
    # the CPU backend passing it with 2,000 samples: tests/test_builtin_backends_conform.py

    class Slow(CpuBackend):
        name = "slow"

        def _sample(self, batch, **kwargs):
            _time.sleep(0.05 * batch.num_requests)
            return super()._sample(batch, **kwargs)
    slow = run_check(Slow(), "token_distribution", "large_vocab_tiles",
                     replace(get_profile("ci"), large_case_budget=10.0))
    assert slow.status == NOT_APPLICABLE and "over the profile's budget of 10 s" in slow.message, slow.line()


def test_the_262144_distribution_case_runs_where_large_vocabularies_are_planned():
    """token_distribution[large_vocab_262k] (the largest vocabulary served, mass in its full last tile) is
    in the nightly's plan and not in the CPU profiles' (where the 151,936 case already takes most of
    `specverify check cpu`). Each profile's Bonferroni split counts the statistical checks it plans, and
    the report header says that count."""
    from specverify.checks import CHECKS, check_alpha, plan, statistical_test_count
    from specverify.report import header
    ci, nightly = get_profile("ci"), get_profile("nightly")
    assert ("token_distribution", "large_vocab_262k") in plan(nightly)
    assert ("token_distribution", "large_vocab_262k") not in plan(ci)
    planned = {p: sum(1 for check, _ in plan(p) if CHECKS[check].kind == "statistical") for p in (ci, nightly)}
    assert planned[nightly] == planned[ci] + 1
    for profile in (ci, nightly):
        assert statistical_test_count(profile) == planned[profile]
        assert check_alpha(profile) == profile.family_alpha / planned[profile]
        assert f"Bonferroni over {planned[profile]} statistical checks" in header("x", profile)


def test_a_case_waits_for_the_nightly_by_its_checks_declaration_never_by_its_name(monkeypatch):
    """plan() once left every case named ``large_vocab`` to profiles with large vocabularies, whatever its
    check: a new check's case given that name would silently run only at the nightly. The check declares
    such cases (``Check.large_vocabs_only``); a name alone changes nothing, and a declaration naming a case
    the check lacks is refused."""
    from specverify import checks
    from specverify.checks import Check, plan

    def fn(ctx, case):
        return None

    monkeypatch.setitem(checks.CHECKS, "named", Check("named", "structural", fn, ("large_vocab",), "a name"))
    monkeypatch.setitem(checks.CHECKS, "declared", Check("declared", "structural", fn, ("big", "small"), "declared",
                                                         large_vocabs_only=frozenset({"big"})))
    names = ["named", "declared"]
    assert plan(get_profile("ci"), names) == [("named", "large_vocab"), ("declared", "small")]
    assert plan(get_profile("nightly"), names) == [("named", "large_vocab"), ("declared", "big"), ("declared", "small")]
    # the differential checks' own large_vocab case stays the nightly's, by their declaration
    assert ("differential_seeded", "large_vocab") not in plan(get_profile("ci"))
    assert ("differential_seeded", "large_vocab") in plan(get_profile("nightly"))
    with pytest.raises(ValueError, match=r"large_vocabs_only names cases it does not have: \['bigger'\]"):
        Check("declared", "structural", fn, ("big",), "declared", large_vocabs_only=frozenset({"bigger"}))
