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
