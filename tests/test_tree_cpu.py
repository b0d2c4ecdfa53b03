"""Token trees (SPEC 3.8) on the CPU backend, and SGLang's linked-list form of a tree.

The CPU backend decides trees in float64 with the reference's arithmetic, so under injected noise it
must emit the reference's tokens and paths bit for bit on every kind of tree; seeded, it draws the same
Philox stream. The linked-list converters must round-trip and read the trees as SGLang's kernels do."""

import dataclasses

import pytest
import torch

import reference
from reference import Noise, SpecBatch, exact
from reference.sample import filtered_target
from specverify.adapters.tree_layout import LinkedTrees, from_linked_lists, to_linked_lists
from specverify.backends import UnsupportedError
from specverify.checks.stats import chi_square_gof
from specverify.kernels.cpu import CpuBackend
# one_thread: the autouse fixture that runs these tests on one intra-op thread
from tree_cases import float64_noise, one_thread, random_tree_batch, zero_residual_case  # noqa: F401

CPU = CpuBackend()


def assert_same(got, want, context=""):
    assert torch.equal(got.token_ids, want.token_ids), context
    assert torch.equal(got.num_accepted, want.num_accepted), context
    assert torch.equal(got.accepted_nodes, want.accepted_nodes), context


VARIANTS = {
    "stars-dense": dict(shapes=("star",), drafter="dense", max_nodes=8),
    "stars-one-hot-duplicates": dict(shapes=("star",), drafter="none", duplicates=True, max_nodes=8),
    "deep-narrow": dict(shapes=("narrow", "chain"), drafter="dense", max_nodes=14),
    "eagle-top-k-one-hot": dict(shapes=("eagle",), drafter="none", distinct=True, max_nodes=10),
    "random-equal-q": dict(drafter="equal", duplicates=True),
    "random-q-zero": dict(drafter="dense", q_zero=True, duplicates=True),
    "mixed-greedy": dict(greedy_fraction=0.5, duplicates=True),
    "all-greedy": dict(greedy_fraction=1.0, drafter="none"),
    "greedy-ties": dict(greedy_fraction=1.0, drafter="none", ties=True, V=4),
    "filters": dict(filters=True, drafter="dense"),
    "filters-one-hot": dict(filters=True, drafter="none", duplicates=True),
    "placeholders": dict(placeholders=True, duplicates=True),
    "placeholders-filters-greedy": dict(placeholders=True, filters=True, greedy_fraction=0.4, drafter="none"),
    "vocabulary-of-one": dict(V=1, drafter="none"),
    "vocabulary-of-one-dense": dict(V=1, drafter="dense", placeholders=True),
    "zero-node-trees": dict(shapes=("empty",), filters=True),
    "non-finite": dict(nonfinite=True, placeholders=True),
}


@pytest.mark.parametrize("name", VARIANTS)
def test_cpu_tree_equals_the_reference_bit_for_bit_under_injected_noise(name):
    """Every kind of tree, under float32-grid and float64 noise: tokens, depths and paths equal."""
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    for trial in range(8):
        batch = random_tree_batch(g, **{"B": 7, "V": 6, **VARIANTS[name]})
        for noise in (Noise.draw(batch, g), float64_noise(batch, g)):
            assert_same(CPU(batch, method="tree", noise=noise), reference.sample(batch, method="tree", noise=noise),
                        (name, trial))


def test_cpu_tree_equals_the_reference_with_seeded_noise():
    """Seeded, the CPU backend draws the reference's Philox stream: one uniform per node slot."""
    g = torch.Generator().manual_seed(41)
    for trial in range(6):
        batch = random_tree_batch(g, B=9, duplicates=True, placeholders=trial % 2 == 1, filters=trial % 3 == 0)
        seeds = torch.randint(0, 2 ** 40, (9,), generator=g)
        assert_same(CPU(batch, method="tree", seed=seeds), reference.sample(batch, method="tree", seed=seeds), trial)
        assert_same(CPU(batch, method="tree", seed=trial), reference.sample(batch, method="tree", seed=trial), trial)


def test_cpu_tree_without_tree_parents_is_the_chain_as_a_tree():
    """method="tree" with tree_parents None reads every request as a chain, on the CPU as in the reference."""
    g = torch.Generator().manual_seed(43)
    batch = dataclasses.replace(random_tree_batch(g, B=8, shapes=("chain", "empty")), tree_parents=None)
    noise = Noise.draw(batch, g)
    assert_same(CPU(batch, method="tree", noise=noise), reference.sample(batch, method="tree", noise=noise))


def test_cpu_keeps_r_where_the_residual_rounds_to_zero():
    """The rounding-only fallback of SPEC 3.8, decided as the reference decides it."""
    batch, noise = zero_residual_case(copies=3)
    out = CPU(batch, method="tree", noise=noise)
    assert_same(out, reference.sample(batch, method="tree", noise=noise))
    assert out.accepted_nodes[:, 0].tolist() == [1, 1, 1]


def test_cpu_tree_samples_follow_the_exact_law():
    """Chi-square (alpha 1e-6) of 60,000 CPU samples per tree against tree_sequences: an EAGLE-style tree
    with one-hot q and a duplicate token, and a SpecInfer-style star with dense q under top-p."""
    g = torch.Generator().manual_seed(47)
    copies, V = 60_000, 5
    for parents, tokens, dense, top_p in (([-1, -1, 0, 0, 1, 2], [3, 1, 3, 0, 0, 3], False, None),
                                          ([-1, -1, -1, -1, 2], [0, 0, 4, 2, 1], True, 0.8)):
        n = len(parents)
        logits = torch.randn(n + 1, V, generator=g, dtype=torch.float64) * 1.5
        q = torch.softmax(torch.randn(n, V, generator=g, dtype=torch.float64), -1) if dense else None
        batch = SpecBatch(torch.full((copies,), n), torch.tensor(tokens).repeat(copies),
                          logits.float().repeat(copies, 1), None if q is None else q.repeat(copies, 1),
                          torch.full((copies,), 0.9),
                          top_p=None if top_p is None else torch.full((copies,), top_p, dtype=torch.float64),
                          tree_parents=torch.tensor(parents).repeat(copies))
        p = filtered_target(batch, torch.zeros(n + 1, dtype=torch.int64), logits.float(), float(batch.temperature[0]))
        law = exact.tree_sequences(p, q, parents, tokens)
        counts: dict = {}
        for seq in CPU(batch, method="tree", seed=int(torch.randint(0, 2 ** 31, (1,), generator=g))).emitted():
            counts[tuple(seq)] = counts.get(tuple(seq), 0) + 1
        result = chi_square_gof(law, counts)
        assert not result.impossible and result.p_value > 1e-6, (parents, result)


# ---- declarations and errors ----------------------------------------------------------------------
def test_cpu_declares_the_tree_method_and_the_reference_backend_too():
    """`--require tree` and the checks find the rule through the declared methods."""
    assert "tree" in CPU.capabilities.methods and "tree" in reference.METHODS


def test_a_tree_deeper_than_max_tree_depth_is_unsupported_naming_the_depth():
    """A declared depth limit is enforced by the shared validation, as max_draft is."""
    class Shallow(CpuBackend):
        capabilities = dataclasses.replace(CpuBackend.capabilities, max_tree_depth=2)

    deep = SpecBatch(torch.tensor([3, 1]), torch.zeros(4, dtype=torch.int64), torch.zeros(6, 3), None, torch.ones(2),
                     tree_parents=torch.tensor([-1, 0, 1, -1]))
    with pytest.raises(UnsupportedError, match="a token tree of depth 3"):
        Shallow()(deep, method="tree", seed=0)
    wide = dataclasses.replace(deep, tree_parents=torch.tensor([-1, 0, 0, -1]))
    assert Shallow()(wide, method="tree", seed=0).token_ids.shape == (2, 4)


def test_the_cpu_backend_refuses_tree_parents_under_a_chain_method():
    """The same ValueError as the reference's, naming tree_parents."""
    batch = random_tree_batch(torch.Generator().manual_seed(3), B=3)
    with pytest.raises(ValueError, match="tree_parents is set but method is 'standard'"):
        CPU(batch, seed=0)


# ---- SGLang's linked lists --------------------------------------------------------------------------
def sglang_links(parents_per_request: list[list[int]], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The links as SGLang's tree builder makes them: nodes visited from the last slot to the first, each
    pushed in front of its parent's child list, so siblings end up linked in increasing slot order."""
    B = len(parents_per_request)
    first = torch.full((B, width), -1, dtype=torch.int64)
    sibling = torch.full((B, width), -1, dtype=torch.int64)
    for b, parents in enumerate(parents_per_request):
        for slot in range(len(parents), 0, -1):
            parent_slot = parents[slot - 1] + 1
            sibling[b, slot] = first[b, parent_slot]
            first[b, parent_slot] = slot
    return first, sibling


def test_linked_lists_are_sglangs_and_round_trip():
    """to_linked_lists gives SGLang's links for every tree (padding slots unlinked); from_linked_lists
    gives back the counts, tokens and parents, and the rows that lay SGLang's flattened target rows out as
    the batch's target_logits."""
    g = torch.Generator().manual_seed(53)
    for trial in range(20):
        batch = random_tree_batch(g, B=5, placeholders=trial % 2 == 0)
        k, d_off = batch.num_draft_tokens.tolist(), batch.draft_offsets().tolist()
        per_request = [batch.tree_parents[d_off[b]: d_off[b + 1]].tolist() for b in range(5)]
        width = batch.max_draft + 1 + trial % 3
        roots = torch.randint(0, batch.vocab_size, (5,), generator=g)
        linked = to_linked_lists(batch.num_draft_tokens, batch.draft_token_ids, batch.tree_parents, roots, width)
        first, sibling = sglang_links(per_request, width)
        assert torch.equal(linked.retrive_next_token, first) and torch.equal(linked.retrive_next_sibling, sibling)
        assert linked.candidates[:, 0].tolist() == roots.tolist()
        assert torch.equal(linked.retrive_index.flatten(), torch.arange(5 * width))
        flat = from_linked_lists(linked.candidates, linked.retrive_next_token, linked.retrive_next_sibling,
                                 linked.retrive_index)
        assert flat.num_draft_tokens.tolist() == k
        assert torch.equal(flat.draft_token_ids, batch.draft_token_ids)
        assert torch.equal(flat.tree_parents, batch.tree_parents)
        assert torch.equal(flat.root_tokens, roots)
        # SGLang's target rows, one per slot at retrive_index, gathered back into the batch's layout
        sglang_rows = torch.full((5 * width, batch.vocab_size), float("nan"))
        for b in range(5):
            rows = batch.target_logits[batch.logit_offsets()[b]: batch.logit_offsets()[b + 1]]
            sglang_rows[b * width: b * width + k[b] + 1] = rows
        assert torch.equal(sglang_rows[flat.rows], batch.target_logits)


def test_chains_convert_without_tree_parents():
    """tree_parents None is a chain: slot j's first child is slot j + 1."""
    linked = to_linked_lists(torch.tensor([3, 0]), torch.tensor([5, 6, 7]))
    assert linked.retrive_next_token.tolist() == [[1, 2, 3, -1], [-1, -1, -1, -1]]
    assert linked.retrive_next_sibling.tolist() == [[-1] * 4, [-1] * 4]
    assert linked.candidates.tolist() == [[-1, 5, 6, 7], [-1, -1, -1, -1]]


def test_unlinked_slots_drop_out_and_the_rest_are_renumbered_in_slot_order():
    """A slot SGLang's builder left unlinked (a node whose parent was not selected) is not a node."""
    first = torch.tensor([[1, 3, -1, -1]])
    sibling = torch.tensor([[-1, -1, -1, -1]])
    flat = from_linked_lists(torch.tensor([[9, 4, 5, 6]]), first, sibling)
    assert flat.num_draft_tokens.tolist() == [2] and flat.draft_token_ids.tolist() == [4, 6]
    assert flat.tree_parents.tolist() == [-1, 0] and flat.slots.tolist() == [1, 3] and flat.rows.tolist() == [0, 1, 3]


@pytest.mark.parametrize("first,sibling,message", [
    ([[1, -1, -1]], [[-1, 1, -1]], "request 0, slot 1 is reached twice"),
    ([[2, -1, -1]], [[-1, -1, 1]], "siblings are linked in increasing slot order"),
    ([[2, -1, 1]], [[-1, -1, -1]], "a child's slot must come after its parent's"),
    ([[3, -1, -1]], [[-1, -1, -1]], r"outside the node slots \[1, 3\)"),
    ([[1, -1, -1]], [[2, -1, -1]], "the root \\(slot 0\\) has a sibling"),
])
def test_malformed_linked_lists_are_refused_naming_the_request_and_slot(first, sibling, message):
    """Cycles, out-of-order siblings, children before their parents and links out of range."""
    with pytest.raises(ValueError, match=message):
        from_linked_lists(torch.zeros(1, 3, dtype=torch.int64), torch.tensor(first), torch.tensor(sibling))


def sglang_greedy_walk(linked: LinkedTrees, target_predict: torch.Tensor) -> list[list[int]]:
    """Greedy verification the way SGLang's kernel walks the lists: from the last accepted slot take the
    first child, then follow next-sibling links until a candidate equals the target's prediction at the
    accepted slot (target_predict [B, W]); the final token is the prediction there. Emits tokens."""
    out = []
    for b in range(linked.candidates.shape[0]):
        accepted, emitted = 0, []
        child = int(linked.retrive_next_token[b, 0])
        while child != -1:
            if int(linked.candidates[b, child]) == int(target_predict[b, accepted]):
                emitted.append(int(linked.candidates[b, child]))
                accepted, child = child, int(linked.retrive_next_token[b, child])
            else:
                child = int(linked.retrive_next_sibling[b, child])
        out.append(emitted + [int(target_predict[b, accepted])])
    return out


def test_greedy_trees_read_through_the_linked_lists_match_the_reference():
    """The linked-list form carries the greedy rule: the first sibling matching the argmax is taken, and
    the last sibling of a list is tried too."""
    g = torch.Generator().manual_seed(59)
    for _ in range(10):
        batch = random_tree_batch(g, B=6, V=4, greedy_fraction=1.0, drafter="none", duplicates=True, max_nodes=8)
        B, W = 6, batch.max_draft + 1
        linked = to_linked_lists(batch.num_draft_tokens, batch.draft_token_ids, batch.tree_parents)
        predict = torch.zeros(B, W, dtype=torch.int64)
        for b in range(B):
            rows = batch.target_logits[batch.logit_offsets()[b]: batch.logit_offsets()[b + 1]]
            predict[b, : rows.shape[0]] = rows.argmax(dim=1)
        assert sglang_greedy_walk(linked, predict) == reference.sample(batch, method="tree", seed=0).emitted()
