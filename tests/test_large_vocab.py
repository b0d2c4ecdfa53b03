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


def test_sizes_are_production_vocabularies_on_the_gpu_and_a_partial_tile_on_the_cpu():
    """The GPU profile checks the advisory's V = 151,936 and 262,144; the CPU profiles a V whose last
    1024-wide tile is partial, where a padded-tile bug shows."""
    assert structural_vocabs(get_profile("nightly")) == (151_936, 262_144)
    for name in ("ci", "smoke", "dev"):
        (V,) = structural_vocabs(get_profile(name))
        assert V % TILE != 0


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


def test_large_vocabulary_statistical_case_runs_only_on_the_gpu_profile():
    from specverify.checks import plan
    assert ("token_distribution", "large_vocab_tiles") in plan(get_profile("nightly"))
    assert ("token_distribution", "large_vocab_tiles") not in plan(get_profile("ci"))
    assert ("token_distribution", "tile_boundary") in plan(get_profile("ci"))
