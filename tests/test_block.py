"""Block verification (SPEC 3.7): the reference's law, checked exactly, and its edge cases.

With drafts drawn from q and target rows fixed per position, the token emitted at position j given that
the request reached j must follow p_j exactly (the law the statistical checks lean on), and the expected
number of accepted drafts must be at least the standard rule's (Sun et al. 2024, Theorem 2)."""

import itertools

import pytest
import torch

import reference
from reference import block, exact
from specverify.generate import random_batch


def _rows(g, rows, V, scale=1.5):
    return torch.softmax(torch.randn(rows, V, generator=g, dtype=torch.float64) * scale, -1)


CASES = [(V, k, seed) for V, k in itertools.product((2, 3, 4), (1, 2, 3)) for seed in (0, 1)]


@pytest.mark.parametrize("V,k,seed", CASES)
def test_block_law_emits_p_at_every_position_and_accepts_at_least_the_standard_rule(V, k, seed):
    g = torch.Generator().manual_seed(100 * V + 10 * k + seed)
    p, q = _rows(g, k + 1, V), _rows(g, k, V)
    if seed:
        q[0] = p[0]                  # a position where the drafter is exact: S = 0 edge
    law = exact.block_sequences(p, q)
    assert abs(sum(law.values()) - 1) < 1e-12
    for j in range(k + 1):
        assert torch.allclose(exact.position_token_distribution(law, j, V), p[j], atol=1e-12, rtol=0)
    mean = lambda seqs: sum(w * (len(s) - 1) for s, w in seqs.items())  # noqa: E731
    assert mean(law) >= mean(exact.standard_sequences(p, q)) - 1e-12


def test_stopping_point_is_searched_from_the_end():
    h = torch.tensor([0.9, 0.1, 0.8], dtype=torch.float64)
    assert block.stopping_point(torch.tensor([0.5, 0.5, 0.5], dtype=torch.float64), h) == 3
    assert block.stopping_point(torch.tensor([0.5, 0.05, 0.9], dtype=torch.float64), h) == 2
    assert block.stopping_point(torch.tensor([0.95, 0.5, 0.9], dtype=torch.float64), h) == 0


def test_running_ratio_is_clamped_at_one_and_zero_where_the_drafter_could_not_draft():
    w = block.weights(torch.tensor([0.5, 0.4, 0.3], dtype=torch.float64),
                      torch.tensor([0.25, 0.8, 0.0], dtype=torch.float64))
    assert w.tolist() == [1.0, 1.0, 0.5, 0.0]


def test_reference_block_equals_standard_for_greedy_and_zero_draft_requests():
    """Greedy and zero-draft requests behave as in the standard rule (same noise)."""
    batch = random_batch(torch.Generator().manual_seed(3), num_requests=12, vocab_size=9, greedy_fraction=0.4)
    seeds = torch.arange(12, dtype=torch.int64)
    a, b = reference.sample(batch, seed=seeds, method="block"), reference.sample(batch, seed=seeds)
    plain = (batch.temperature == 0) | (batch.num_draft_tokens == 0)
    assert torch.equal(a.token_ids[plain], b.token_ids[plain])
