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


def _one_block_request(eta_scale: float):
    """One random request of 3 drafts, its stop test at i = 2 placed at eta_2 = h_2 * eta_scale, the other
    two tests failing by far: the reference stops at tau = 0 when eta_scale > 1."""
    from reference import Noise, SpecBatch
    from specverify.checks.differential import block_law

    g = torch.Generator().manual_seed(11)
    q = _rows(g, 3, 6, 1.0)
    logits = torch.randn(4, 6, generator=g, dtype=torch.float64)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1)
    assert drafts.tolist() == [4, 3, 4]
    batch = SpecBatch(torch.tensor([3]), drafts, logits.float(), q.float(), torch.tensor([1.0]))
    k, x, p, q64, w = block_law(batch, 0)
    h = block.stop_probabilities(w, p, q64)
    assert 0.05 < h[1] < 0.3 and h[0] < 0.9 and h[2] < 0.9 and w[2] < 1     # room above every h_i
    eta = torch.tensor([0.95, float(h[1]) * eta_scale, 0.97], dtype=torch.float64)
    return batch, Noise(eta, torch.ones(1, 6, dtype=torch.float64))


@pytest.mark.parametrize("eta_scale,ambiguous", [(1 + 1e-9, True), (1.01, False)])
def test_block_divergence_is_excused_only_within_the_stop_tests_float32_error(eta_scale, ambiguous):
    """SPEC 3.7's ambiguity rule: a backend stopping at tau = 2 where the reference stops at 0 flipped the
    test eta_2 <= h_2; with eta_2 one part in 1e9 above h_2 float32 may see it either way (excused), one
    percent above it is a real divergence."""
    from reference import SpecOutput
    from specverify.checks.differential import compare_to_reference

    batch, noise = _one_block_request(eta_scale)
    expected = reference.sample(batch, noise=noise, method="block")
    assert expected.num_accepted.tolist() == [0]
    got = SpecOutput(torch.tensor([[4, 3, 0, -1]]), torch.tensor([2]))
    comparison = compare_to_reference(batch, got, noise, method="block")
    (divergence,) = comparison.divergences
    assert divergence.decision == "block stop eta_i <= h_i" and divergence.position == 2
    assert divergence.ambiguous == ambiguous, str(divergence)


def test_block_output_outside_its_residual_support_is_a_structure_problem():
    """support_problems under the block rule: the extra token at tau < k must have w_tau p_tau(v) > q_tau(v);
    a token where the drafter's mass covers the scaled target is impossible, and a non-prefix is refused."""
    from reference import SpecOutput
    from specverify.checks.differential import block_law
    from specverify.checks.structural import support_problems

    batch, _ = _one_block_request(2.0)
    k, x, p, q, w = block_law(batch, 0)
    outside = int(torch.nonzero(w[0] * p[0] <= q[0]).flatten()[0])
    inside = int(torch.nonzero(w[0] * p[0] > q[0]).flatten()[0])
    assert support_problems(batch, SpecOutput(torch.tensor([[inside, -1, -1, -1]]), torch.tensor([0])), "block") == []
    assert "probability 0" in support_problems(
        batch, SpecOutput(torch.tensor([[outside, -1, -1, -1]]), torch.tensor([0])), "block")[0]
    assert "not a prefix" in support_problems(
        batch, SpecOutput(torch.tensor([[3, 0, -1, -1]]), torch.tensor([1])), "block")[0]
