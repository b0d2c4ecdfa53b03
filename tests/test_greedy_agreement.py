"""All-greedy batches on every noise path (SPEC 4.1, ``greedy_agreement``): what the cases hold, and what the check
does with a backend whose noise the reference cannot share. The mutants it catches are in tests/test_mutants_caught.py
(``greedy_highest_index_tie_own_stream`` by it alone); SGLang's greedy entry through its stand-in in
tests/test_sglang_adapter.py."""

import dataclasses

import torch

import reference
from reference import tree
from specverify.checks import FAIL, NOT_APPLICABLE, PASS, run_check
from specverify.checks.large_vocab import TILE
from specverify.checks.greedy import NEAR, chain_batch, greedy_batch, greedy_batches, tree_batch
from specverify.kernels.cpu import CpuBackend
from specverify.mutants.statistical_only import OwnStreamCpuBackend
from specverify.strategies import get_profile

CI = get_profile("ci")


def _batches(case):
    """The batches the check calls on ``case`` at the ci profile, with no caps."""
    return [batch for _, batch, _ in greedy_batches(case, CI)]


def _styles(logits: torch.Tensor) -> tuple[int, int, str]:
    """(argmax, rival, style) of a row: the rival is the runner-up; style "tie", "near" or "clear"."""
    top2 = torch.topk(logits.double(), 2)
    a, b = top2.indices.tolist()
    gap = float((top2.values[0] - top2.values[1]) / top2.values[0])
    if gap == 0:
        return min(a, b), max(a, b), "tie"
    return a, b, "near" if gap < 2 * NEAR else "clear"


def test_chains_draft_tied_and_near_tied_rivals_and_the_reference_both_accepts_and_rejects():
    """The chain case exists for the argmax's two hard spots: an exact tie, whose lower index wins though the higher
    one is drafted, and a gap of 2.5e-4 relative whose winner has the higher index. Every request is greedy, each
    style's rival is drafted somewhere, and the reference accepts and rejects drafts both."""
    seen, accepted, rejected = set(), 0, 0
    for batch in _batches("chain"):
        assert bool((batch.temperature == 0).all()) and batch.draft_probs is None
        rows, drafts = batch.logit_offsets().tolist(), batch.draft_offsets().tolist()
        out = reference.sample(batch, seed=0)
        for b in range(batch.num_requests):
            k, n = int(batch.num_draft_tokens[b]), int(out.num_accepted[b])
            accepted, rejected = accepted + n, rejected + (n < k)
            for j in range(k):
                top, rival, style = _styles(batch.target_logits[rows[b] + j])
                if style == "near":
                    assert top > rival, "the near style's winner is the higher index"
                if int(batch.draft_token_ids[drafts[b] + j]) == rival and style != "clear":
                    seen.add(style)
    assert seen == {"tie", "near"} and accepted >= 5 and rejected >= 5


def test_trees_place_the_argmax_after_other_siblings_and_the_rival_before_it():
    """The tree case exists for the descent: a node's argmax child anywhere among its siblings (not only first), and
    a tied or near-tied rival among them before it, so a descent into the first matching-or-close child fails."""
    argmax_later, rival_first, depth = 0, 0, 0
    for batch in _batches("tree"):
        assert bool((batch.temperature == 0).all()) and batch.tree_parents is not None
        depth = max(depth, tree.max_depth(batch.tree_parents, batch.num_draft_tokens))
        rows, drafts = batch.logit_offsets().tolist(), batch.draft_offsets().tolist()
        for b in range(batch.num_requests):
            n = int(batch.num_draft_tokens[b])
            tokens = batch.draft_token_ids[drafts[b]: drafts[b] + n].tolist()
            kids = tree.children(batch.tree_parents[drafts[b]: drafts[b] + n].tolist())
            for node, siblings in enumerate(kids):
                top, rival, style = _styles(batch.target_logits[rows[b] + node])
                order = [tokens[c] for c in siblings]
                if top in order[1:]:
                    argmax_later += 1
                if top in order and style != "clear" and rival in order[:order.index(top)]:
                    rival_first += 1
    assert argmax_later >= 3 and rival_first >= 1 and depth == 4


def test_large_vocabularies_put_each_rows_top_two_in_different_tiles_and_halves():
    """The split_vocab case exists for kernels that split the vocabulary: at every size the ci profile plans (V = 4,099
    on the CPU, and the production ones), each tied or near-tied row's two top tokens lie in different 1024-wide tiles
    and on either side of the row's middle, and an exact tie is drafted at its higher index."""
    sizes, tied_drafts, split = set(), 0, {"tie": 0, "near": 0}
    for batch in _batches("split_vocab"):
        V = batch.vocab_size
        sizes.add(V)
        rows, drafts = batch.logit_offsets().tolist(), batch.draft_offsets().tolist()
        for b in range(batch.num_requests):
            for j in range(int(batch.num_draft_tokens[b]) + 1):
                top, rival, style = _styles(batch.target_logits[rows[b] + j])
                if style == "clear":
                    continue
                low, high = sorted((top, rival))
                assert low < V // 2 <= high and low // TILE != high // TILE, (V, low, high)
                split[style] += 1
                if style == "tie" and j < int(batch.num_draft_tokens[b]):
                    tied_drafts += int(batch.draft_token_ids[drafts[b] + j]) == high
    assert sizes == {4_099, 151_936, 262_144} and tied_drafts >= 1 and min(split.values()) >= 3, split


def test_declared_draft_and_depth_limits_bound_the_batches():
    """A backend that declares at most 2 drafts, or trees at most 2 deep, gets batches within that."""
    caps = dataclasses.replace(CpuBackend.capabilities, max_draft=2, max_tree_depth=2)
    g = torch.Generator().manual_seed(1)
    assert int(greedy_batch("chain", g, caps).num_draft_tokens.max()) == 2
    trees = greedy_batch("tree", g, caps)
    assert tree.max_depth(trees.tree_parents, trees.num_draft_tokens) == 2
    assert int(chain_batch(g).num_draft_tokens.max()) == 4 and tree.max_depth(
        tree_batch(g).tree_parents, tree_batch(g).num_draft_tokens) == 4


def test_an_own_stream_backend_is_held_to_the_reference_on_its_seeded_path():
    """No noise is shared with a backend of its own stream, yet its greedy requests must be the reference's: the
    control passes every case it declares a method for, on the seeded path it has."""
    own = OwnStreamCpuBackend()
    result = run_check(own, "greedy_agreement", "chain", CI)
    assert result.status == PASS and "on seeded noise" in result.message, result.line()
    assert run_check(own, "greedy_agreement", "tree", CI).status == NOT_APPLICABLE


def test_every_declared_path_is_called_and_each_held_to_the_reference():
    """A backend declaring both paths whose greedy requests draw on the noise on one of them only (sampled at
    temperature 1 when seeded, or when given noise) fails, naming that path: each path is checked, not the first
    alone."""
    class SampledGreedyOn(CpuBackend):
        def __init__(self, path):
            self.name, self.path = f"greedy_sampled_when_{path}", path

        def _sample(self, batch, *, seed, noise, **kwargs):
            if (self.path == "seeded") == (seed is not None):
                batch = dataclasses.replace(batch, temperature=torch.ones_like(batch.temperature))
            return super()._sample(batch, seed=seed, noise=noise, **kwargs)

    for path in ("injected", "seeded"):
        result = run_check(SampledGreedyOn(path), "greedy_agreement", "chain", CI)
        assert result.status == FAIL and f"({path})" in result.message, result.line()


def test_a_backend_with_fixed_coins_alone_is_not_applicable_with_the_reason():
    """Fixed coins are the only path: no call the check makes fits it, so n/a saying so, never a pass."""
    own = OwnStreamCpuBackend()
    own.capabilities = dataclasses.replace(own.capabilities, noise=frozenset({"coins"}))
    result = run_check(own, "greedy_agreement", "chain", CI)
    assert result.status == NOT_APPLICABLE and "neither injected noise nor seeds" in result.message, result.line()
