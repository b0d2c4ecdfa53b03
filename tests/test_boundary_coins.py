"""Fixed coins (SPEC 2) and the boundary_coins check (SPEC 4.3): the convention's coin= argument, the cases'
boundaries, and what the check reports. SGLang's kernel, the backend the check was written for, is tested
through its stand-in in tests/test_sglang_adapter.py; the zero-coin mutant in tests/test_mutants_caught.py."""

import dataclasses

import pytest
import torch

import reference
from reference import Noise
from specverify import UnsupportedError
from specverify.checks import CHECKS, FAIL, NOT_APPLICABLE, PASS, run_check
from specverify.checks.coins import COINS, COVER, V, coin_batch, covered_row
from specverify.kernels.cpu import CpuBackend
from specverify.mutants.statistical_only import OwnStreamCpuBackend
from specverify.strategies import get_profile


def _chain(g):
    return coin_batch("zero_mass_drafts", g)


def test_a_coin_outside_zero_to_one_or_beside_noise_is_refused_by_name():
    """coin is a uniform: a number in [0, 1). 1.0, a negative, NaN, a string, a two-element tensor and coin= with
    noise= are ValueErrors naming coin; coin= on a backend that does not declare the path is UnsupportedError."""
    g = torch.Generator().manual_seed(1)
    batch = _chain(g)
    own = OwnStreamCpuBackend()
    for bad in (1.0, -1e-30, float("nan"), "0.5", torch.tensor([0.1, 0.2]), True):
        with pytest.raises(ValueError, match="coin"):
            own(batch, seed=1, coin=bad)
    with pytest.raises(ValueError, match="coin"):
        own(batch, noise=Noise.draw(batch, g), coin=0.5)
    with pytest.raises(UnsupportedError, match="fixed coins"):
        CpuBackend()(batch, seed=1, coin=0.5)
    assert own(batch, seed=1, coin=torch.tensor(0.0)).token_ids.shape == (6, 5)


def test_a_fixed_coin_replaces_every_uniform_and_nothing_else():
    """The own-stream control at coin c emits what the CPU backend emits on its own stream's noise with every
    uniform set to c: the coins are the uniforms, the race keeps the stream's exponentials."""
    g = torch.Generator().manual_seed(2)
    batch = _chain(g)
    own = OwnStreamCpuBackend()
    for coin in COINS + (0.5,):
        drawn = own._own_noise(batch, 9)
        uniform = torch.full(drawn.uniform.shape, coin or 2.0 ** -150, dtype=torch.float64)   # float32 reads 0
        want = CpuBackend()(batch, noise=Noise(uniform, drawn.exponential))
        got = own(batch, seed=9, coin=coin)
        assert torch.equal(got.token_ids, want.token_ids), coin


def test_covered_rows_sum_below_the_top_coin_in_float32_and_hold_only_their_support():
    """A covered row's tokens carry all its mass, yet their float32 probabilities summed in the support's order
    stay at or below 1 - 2^-23 (the top coin, 1 - 2^-24, lies above), both when p is rounded from float64 and
    when softmax runs in float32; supports avoid ids 0 and V - 1."""
    g = torch.Generator().manual_seed(3)
    for _ in range(20):
        support = 1 + torch.randperm(V - 2, generator=g)[:COVER]
        row = covered_row(g, support)
        assert torch.isfinite(row).nonzero().flatten().sort().values.tolist() == support.sort().values.tolist()
        for p in (torch.softmax(row.double(), 0).float(), torch.softmax(row, 0)):
            mass = torch.zeros((), dtype=torch.float32)
            for x in support.tolist():
                mass = mass + p[x]
            assert float(mass) <= 1.0 - 2.0 ** -23 < COINS[-1]


def test_at_the_top_coin_the_reference_accepts_the_last_child_and_at_zero_the_first():
    """Why the covered-support case exists: at 1 - 2^-24 the rule rejects every child but the last, whose test reads
    r(x) / m = 1, and at 0 it accepts the first; each accepted child's own children cover its row too."""
    g = torch.Generator().manual_seed(4)
    batch = coin_batch("tree_covered_support", g)
    for coin, child, grandchild in ((COINS[-1], COVER - 1, 3 * COVER - 1), (COINS[0], 0, COVER)):
        noise = Noise(torch.full((batch.num_drafts,), coin or 2.0 ** -150, dtype=torch.float64),
                      Noise.draw(batch, g).exponential)
        out = reference.sample(batch, noise=noise, method="tree")
        assert out.num_accepted.tolist() == [2, 2, 2], coin
        assert out.accepted_nodes[:, :2].tolist() == [[child, grandchild]] * 3, coin


def test_every_case_holds_what_its_coins_must_reject():
    """Each chain request holds a draft of probability 0, each tree a child of probability 0 under the root and
    another under an accepted child, so that a coin of 0 has something to wrongly accept."""
    g = torch.Generator().manual_seed(5)
    chain = coin_batch("zero_mass_drafts", g)
    offsets = chain.draft_offsets().tolist()
    rows = chain.logit_offsets().tolist()
    for b in range(chain.num_requests):
        k = int(chain.num_draft_tokens[b])
        zero = [torch.isinf(chain.target_logits[rows[b] + j, int(chain.draft_token_ids[offsets[b] + j])]).item()
                for j in range(k)]
        assert any(zero), b
    trees = coin_batch("tree_zero_mass_siblings", g)
    for b in range(trees.num_requests):
        root, child = trees.target_logits[7 * b], trees.target_logits[7 * b + 2]
        tokens = trees.draft_token_ids[6 * b: 6 * b + 6]
        assert torch.isinf(root[tokens[[0, 2]]]).all() and torch.isfinite(root[tokens[1]])
        assert torch.isinf(child[tokens[[3, 5]]]).all() and torch.isfinite(child[tokens[4]])


def test_backends_whose_uniforms_cannot_be_placed_are_not_applicable_with_the_reason():
    """A backend with only its own seeded stream and no fixed coins: n/a, saying so; never a pass."""
    own = OwnStreamCpuBackend()
    own.capabilities = dataclasses.replace(own.capabilities, noise=frozenset({"seeded"}))
    result = run_check(own, "boundary_coins", "zero_mass_drafts", get_profile("ci"))
    assert result.status == NOT_APPLICABLE and "fixed coins" in result.message, result.line()


def test_a_declared_path_the_signature_lacks_fails_interface_parity():
    """Declaring the coins path obliges the signature to take coin (else every fixed-coin call is a TypeError)."""
    class NoCoin(OwnStreamCpuBackend):
        name = "no_coin"

        def __call__(self, batch, *, method="standard", noise=None, seed=None, synthetic_acceptance_rate=None,
                     num_speculative_steps=None):
            return super().__call__(batch, method=method, noise=noise, seed=seed,
                                    synthetic_acceptance_rate=synthetic_acceptance_rate,
                                    num_speculative_steps=num_speculative_steps)
    result = run_check(NoCoin(), "interface_parity", "convention", get_profile("ci"))
    assert result.status == FAIL and "lacks coin" in result.message, result.line()
    assert run_check(OwnStreamCpuBackend(), "interface_parity", "convention", get_profile("ci")).status == PASS


def test_a_backend_that_declares_fixed_coins_and_draws_its_own_fails_where_the_coin_decides():
    """Hostile: coins declared, coin= accepted, its own stream used instead. The support cases cannot see it (its
    rule is correct); on chains whose every draft has p(x) = 1/2, coins 0 and 2^-24 must accept every draft and
    1 - 2^-24 none, and its own uniforms do neither. The honest control passes the same case."""
    class IgnoresItsCoins(OwnStreamCpuBackend):
        name = "ignores_its_coins"

        def _sample_at_coin(self, batch, coin, *, seed, **kwargs):
            return self._sample(batch, seed=seed, noise=None, **kwargs)
    assert run_check(IgnoresItsCoins(), "boundary_coins", "zero_mass_drafts", get_profile("ci")).status == PASS
    result = run_check(IgnoresItsCoins(), "boundary_coins", "coins_decide", get_profile("ci"))
    assert result.status == FAIL and "drafts of p(x) = 1/2 accepted; the coin decides" in result.message, \
        result.line()
    assert run_check(OwnStreamCpuBackend(), "boundary_coins", "coins_decide", get_profile("ci")).status == PASS


def test_the_check_is_declared_structural_for_every_case():
    assert CHECKS["boundary_coins"].kind == "structural"
    assert CHECKS["boundary_coins"].cases == ("zero_mass_drafts", "tree_zero_mass_siblings", "tree_covered_support",
                                              "coins_decide", "tree_coins_decide")
