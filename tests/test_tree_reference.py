"""Token trees (SPEC 3.8): the reference's tree rule, its exact law and the batch's tree validation.

The rule must be the standard rule on a single path (bit for bit, so every chain check carries over),
emit the target's law (exactly, by the recursion of reference.exact.tree_paths, and in samples), accept
at least as deep as the tree's first-child chain, and refuse malformed trees with errors that name
the field, the request and the node. The batches are tests/tree_cases.py's."""

import dataclasses
import itertools

import pytest
import torch

import reference
from reference import Noise, SpecBatch, exact, tree
from reference.batch import FIELDS, select_requests
from reference.sample import filtered_target
from specverify.checks.stats import chi_square_gof
# one_thread: the autouse fixture that runs these tests on one intra-op thread
from tree_cases import (SHAPES, float64_noise, one_thread, random_tree_batch, tree_shape,  # noqa: F401
                        zero_residual_case)


def as_chain(batch: SpecBatch) -> SpecBatch:
    return dataclasses.replace(batch, tree_parents=None)


# ---- the single path is the standard rule --------------------------------------------------------
CHAIN_VARIANTS = [dict(drafter=d, filters=f, placeholders=h) for d in ("dense", "none", "equal")
                  for f in (False, True) for h in (False, True)]
CHAIN_VARIANTS.append(dict(drafter="none", greedy_fraction=0.6, ties=True))


@pytest.mark.parametrize("variant", CHAIN_VARIANTS, ids=lambda v: "-".join(f"{k}={v[k]}" for k in v))
def test_single_path_tree_gives_the_standard_rule_bit_for_bit(variant):
    """A chain as a tree (parents [-1, 0, 1, ...]) must emit the standard rule's tokens under the same
    injected (float32 grid and float64) and seeded noise, greedy requests included: the tree rule's
    arithmetic is the standard rule's on a single path, so every chain check carries over to it."""
    g = torch.Generator().manual_seed(11)
    for trial in range(6):
        batch = random_tree_batch(g, B=8, V=7, shapes=("chain", "empty"), **variant)
        chain = as_chain(batch)
        for noise in (Noise.draw(batch, g), float64_noise(batch, g)):
            want = reference.sample(chain, noise=noise)
            for got in (reference.sample(batch, method="tree", noise=noise),
                        reference.sample(chain, method="tree", noise=noise)):
                assert torch.equal(got.token_ids, want.token_ids), trial
                assert torch.equal(got.num_accepted, want.num_accepted)
        want, got = reference.sample(chain, seed=trial), reference.sample(batch, method="tree", seed=trial)
        assert torch.equal(got.token_ids, want.token_ids) and torch.equal(got.num_accepted, want.num_accepted)
        steps = torch.arange(batch.max_draft)[None, :]
        expected_nodes = torch.where(steps < got.num_accepted[:, None], steps, -1)
        assert torch.equal(got.accepted_nodes, expected_nodes)


def test_chain_methods_return_no_accepted_nodes_and_trees_always_do():
    """accepted_nodes is the tree rule's output only; a chain call keeps the SpecOutput it always had."""
    batch = random_tree_batch(torch.Generator().manual_seed(2), B=3)
    assert reference.sample(as_chain(batch), seed=0).accepted_nodes is None
    out = reference.sample(batch, method="tree", seed=0)
    assert out.accepted_nodes.shape == (3, batch.max_draft) and out.accepted_nodes.dtype == torch.int64
    assert out.padded(batch.max_draft + 3).accepted_nodes.shape == (3, batch.max_draft + 2)


def test_empty_trees_emit_the_bonus_sample_from_the_root_row():
    """N_b = 0: one token, the race over p_root, as a zero-draft request of the standard rule."""
    g = torch.Generator().manual_seed(5)
    batch = random_tree_batch(g, B=10, shapes=("empty",), filters=True)
    noise = Noise.draw(batch, g)
    out, want = reference.sample(batch, method="tree", noise=noise), reference.sample(as_chain(batch), noise=noise)
    assert batch.num_drafts == 0 and out.token_ids.shape == (10, 1)
    assert torch.equal(out.token_ids, want.token_ids) and not bool(out.num_accepted.any())


# ---- the exact law ---------------------------------------------------------------------------------
def _law_case(g, n, V, shape, dense):
    parents = tree_shape(g, n, shape)
    p = torch.softmax(torch.randn(n + 1, V, generator=g, dtype=torch.float64) * 1.5, -1)
    q = torch.softmax(torch.randn(n, V, generator=g, dtype=torch.float64) * 1.5, -1) if dense else None
    return parents, p, q


def _first_token(law: dict, V: int) -> torch.Tensor:
    first = torch.zeros(V, dtype=torch.float64)
    for seq, prob in law.items():
        first[seq[0]] += prob
    return first


def _mean_depth(paths: dict) -> float:
    return sum(prob * len(path) for (path, _), prob in paths.items())


@pytest.mark.parametrize("shape", ("random", "star", "eagle", "narrow"))
def test_first_token_follows_p_root_for_any_one_hot_drafts(shape):
    """With one-hot q (deterministic drafts, target-only kernels) the first emitted token is distributed as
    p_root whatever the tokens are: duplicates and placeholders included, to 1e-12."""
    g = torch.Generator().manual_seed(7)
    for _ in range(25):
        V, n = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(0, 6, (1,), generator=g))
        parents, p, _ = _law_case(g, n, V, shape, dense=False)
        tokens = torch.randint(-1 if n > 2 else 0, V, (n,), generator=g).tolist()
        law = exact.tree_sequences(p, None, parents, tokens)
        assert abs(sum(law.values()) - 1) < 1e-12
        assert torch.allclose(_first_token(law, V), p[0], atol=1e-12, rtol=0)


def _drafted(p, q_rows, parents, V, without_replacement):
    """Every token assignment of a tree whose node i draws from q_rows[i] (i.i.d. siblings), or from
    q_rows[i] with the earlier siblings' tokens removed (sampling without replacement): yields
    (probability of the assignment, tokens, the q row each node was drawn from)."""
    n = len(parents)
    for tokens in itertools.product(range(V), repeat=n):
        weight, rows = 1.0, []
        for i in range(n):
            row = q_rows[i].clone()
            if without_replacement:
                for j in range(i):
                    if parents[j] == parents[i]:
                        row[tokens[j]] = 0.0
                row = row / row.sum() if row.sum() > 0 else row
            weight *= float(row[tokens[i]])
            rows.append(row)
        if weight > 0:
            yield weight, list(tokens), torch.stack(rows) if rows else torch.zeros(0, V, dtype=torch.float64)


@pytest.mark.parametrize("without_replacement", (False, True))
def test_first_token_follows_p_root_on_average_over_dense_drafts(without_replacement):
    """With dense q the law is the target's on average over drafts drawn from their q_i: SpecInfer's i.i.d.
    siblings (every sibling from its parent's one q) and sampling without replacement (q_i: q with the
    earlier siblings removed). Every assignment of tokens is enumerated (V = 3, up to 4 nodes)."""
    g = torch.Generator().manual_seed(13 + without_replacement)
    for shape in ("star", "random", "eagle", "chain"):
        for _ in range(3):
            # without replacement a parent has at most V children (each draws a token no earlier one drew)
            n, V = int(torch.randint(1, 4 if without_replacement else 5, (1,), generator=g)), 3
            parents, p, q = _law_case(g, n, V, shape, dense=True)
            # one proposal per parent: siblings share it
            q_rows = [q[[i for i in range(n) if parents[i] == parents[c]][0]] for c in range(n)]
            first = torch.zeros(V, dtype=torch.float64)
            for weight, tokens, rows in _drafted(p, q_rows, parents, V, without_replacement):
                first += weight * _first_token(exact.tree_sequences(p, rows, parents, tokens), V)
            assert torch.allclose(first, p[0], atol=1e-12, rtol=0), (shape, parents)


def test_mean_depth_is_at_least_the_first_child_chains_for_fixed_drafts():
    """Draw by draw the tree accepts wherever its first-child chain does and may go on after the chain's
    rejection, so its exact mean accepted depth is at least the standard rule's on that chain, for the
    same fixed drafts (and equal on a single path)."""
    g = torch.Generator().manual_seed(17)
    strictly_more = 0
    for trial in range(150):
        n, V = int(torch.randint(1, 7, (1,), generator=g)), int(torch.randint(2, 6, (1,), generator=g))
        parents, p, q = _law_case(g, n, V, SHAPES[trial % 5], dense=trial % 2 == 0)
        tokens = torch.randint(0, V, (n,), generator=g).tolist()
        kids, chain, node = tree.children(parents), [], -1
        while kids[node + 1]:
            node = kids[node + 1][0]
            chain.append(node)
        rows = [0] + [c + 1 for c in chain]
        standard = exact.standard_given_drafts(p[rows], None if q is None else q[chain], [tokens[c] for c in chain])
        chain_mean = sum(prob * (len(seq) - 1) for seq, prob in standard.items())
        tree_mean = _mean_depth(exact.tree_paths(p, q, parents, tokens))
        assert tree_mean >= chain_mean - 1e-12
        if len(chain) == n:
            assert abs(tree_mean - chain_mean) < 1e-12
        strictly_more += tree_mean > chain_mean + 1e-9
    assert strictly_more > 20


def test_placeholder_subtrees_are_unreachable_and_leave_the_residual_unchanged():
    """A placeholder is skipped as q = 0: the law equals that of the tree without it and its subtree."""
    p = torch.softmax(torch.randn(5, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64), -1)
    # root -> 0 (placeholder) -> 1; root -> 2 -> 3
    with_hole = exact.tree_sequences(p, None, [-1, 0, -1, 2], [-1, 1, 2, 3])
    without = exact.tree_sequences(p[[0, 3, 4]], None, [-1, 0], [2, 3])
    assert with_hole.keys() == without.keys()
    assert all(abs(with_hole[s] - without[s]) < 1e-15 for s in without)


def test_a_rejected_one_hot_token_is_never_accepted_again_by_a_duplicate_sibling():
    """With one-hot q the residual after rejecting x has r(x) = 0: a later sibling with the same token
    adds nothing, in the exact law and in samples (node 1 is never on a path)."""
    p = torch.softmax(torch.tensor([[0.5, 1.0, -0.5], [0.0, 0.3, 0.1], [1.0, 0.0, 0.0]], dtype=torch.float64), -1)
    paths = exact.tree_paths(p, None, [-1, -1], [1, 1])
    assert all(1 not in path for path, _ in paths)
    batch = SpecBatch(torch.tensor([2] * 400), torch.tensor([1, 1] * 400), torch.log(p).float().repeat(400, 1), None,
                      torch.ones(400), tree_parents=torch.tensor([-1, -1] * 400))
    out = reference.sample(batch, method="tree", seed=3)
    assert not bool((out.accepted_nodes == 1).any()) and bool((out.accepted_nodes == 0).any())


def test_a_residual_that_rounds_to_zero_everywhere_keeps_r():
    """SPEC 3.8: where max(r - m q, 0) is zero everywhere r stays as it was (the standard rule falls back
    to p): the next sibling is then tested against p_root, here accepted (u * 1 <= p_root(3))."""
    batch, noise = zero_residual_case()
    out = reference.sample(batch, method="tree", noise=noise)
    assert out.accepted_nodes.tolist() == [[1, -1]] and out.token_ids[0, 0].item() == 3


def test_greedy_trees_descend_into_the_first_matching_sibling_and_break_ties_low():
    """Greedy: at each node the first child (sibling order) whose token is the argmax of the node's row;
    the argmax takes the lowest index among ties; where no child matches, the argmax is emitted."""
    V = 4
    logits = torch.full((6, V), -1.0)
    logits[0, 2] = logits[0, 3] = 5.0     # root: tie between 2 and 3 -> 2
    logits[2, 1] = 4.0                    # node 1's row: argmax 1
    logits[5, 0] = 3.0                    # node 4's row: argmax 0
    # root -> 0 (token 3), 1 (token 2), 2 (token 2); 1 -> 3 (token 0), 4 (token 1); 4 -> nothing
    batch = SpecBatch(torch.tensor([5]), torch.tensor([3, 2, 2, 0, 1]), logits, None, torch.zeros(1),
                      tree_parents=torch.tensor([-1, -1, -1, 1, 1]))
    out = reference.sample(batch, method="tree", seed=0)
    assert out.token_ids.tolist() == [[2, 1, 0, -1, -1, -1]]
    assert out.accepted_nodes.tolist() == [[1, 4, -1, -1, -1]] and out.num_accepted.tolist() == [2]


def test_reference_tree_samples_follow_the_exact_law():
    """Pearson chi-square (alpha 1e-6, bins under 5 expected merged) of the reference's emitted sequences
    against tree_sequences, for fixed drafts: a star with a duplicate token and dense q, an EAGLE-style
    tree with one-hot q, and a tree with a placeholder under filters."""
    g = torch.Generator().manual_seed(23)
    cases = [([-1, -1, -1, 0], [1, 1, 2, 0], True, None), ([-1, -1, 0, 0, 2], [0, 2, 1, 3, 3], False, None),
             ([-1, 0, -1, 2], [2, -1, 0, 1], True, 3)]
    copies = 4000
    for parents, tokens, dense, top_k in cases:
        n, V = len(parents), 4
        logits = torch.randn(n + 1, V, generator=g, dtype=torch.float64)
        q = torch.softmax(torch.randn(n, V, generator=g, dtype=torch.float64), -1) if dense else None
        batch = SpecBatch(torch.full((copies,), n), torch.tensor(tokens).repeat(copies), logits.repeat(copies, 1),
                          None if q is None else q.repeat(copies, 1), torch.ones(copies, dtype=torch.float64),
                          top_k=None if top_k is None else torch.full((copies,), top_k),
                          tree_parents=torch.tensor(parents).repeat(copies))
        p = filtered_target(batch, torch.zeros(n + 1, dtype=torch.int64), logits, 1.0)
        law = exact.tree_sequences(p, q, parents, tokens)
        out = reference.sample(batch, method="tree", seed=int(torch.randint(0, 2 ** 31, (1,), generator=g)))
        counts: dict = {}
        for seq in out.emitted():
            counts[tuple(seq)] = counts.get(tuple(seq), 0) + 1
        result = chi_square_gof(law, counts)
        assert not result.impossible and result.p_value > 1e-6, (parents, result)


# ---- layout helpers and validation ----------------------------------------------------------------
def test_depths_count_the_nodes_from_the_root():
    """depths() is shared by the batch validation, the backends' max_tree_depth and the checks."""
    parents = torch.tensor([-1, 0, 0, 1, -1, -1, 0, 1])
    k = torch.tensor([4, 0, 1, 3])
    assert tree.depths(parents, k).tolist() == [1, 2, 2, 3, 1, 1, 2, 3]
    assert tree.max_depth(parents, k) == 3 and tree.max_depth(torch.zeros(0, dtype=torch.int64), torch.zeros(2)) == 0
    assert tree.chain_parents(torch.tensor([3, 0, 2])).tolist() == [-1, 0, 1, -1, 0]


def _tree_batch(parents, k=(3,), **kw):
    k = torch.tensor(k)
    T, B = int(k.sum()), k.shape[0]
    return SpecBatch(k, torch.zeros(T, dtype=torch.int64), torch.zeros(T + B, 4), None, torch.ones(B),
                     tree_parents=parents, **kw)


@pytest.mark.parametrize("parents,message", [
    (torch.tensor([-1, 0, 1], dtype=torch.int32), "tree_parents must have dtype int64"),
    (torch.tensor([[-1, 0, 1]]), "tree_parents must have 1 dimension"),
    (torch.tensor([-1, 0]), r"tree_parents must have shape \[T\] = \[3\]"),
    (torch.tensor([-1, 1, 0]), "tree_parents: request 0, node 1 has parent 1"),
    (torch.tensor([-1, -2, 0]), "tree_parents: request 0, node 1 has parent -2"),
    (torch.tensor([0, 0, 1]), "tree_parents: request 0, node 0 has parent 0"),
])
def test_malformed_tree_parents_are_refused_naming_the_field_request_and_node(parents, message):
    """Shape, dtype and topological order are checked when the batch is built."""
    with pytest.raises(ValueError, match=message):
        _tree_batch(parents)


def test_a_parent_in_another_request_is_refused():
    """Parents are local: request 1's node 0 cannot point back into request 0."""
    with pytest.raises(ValueError, match="tree_parents: request 1, node 0 has parent 1"):
        _tree_batch(torch.tensor([-1, 0, 1, 0]), k=(2, 2))


@pytest.mark.parametrize("method", ("standard", "synthetic", "block"))
def test_tree_parents_with_a_chain_method_is_refused_naming_tree_parents(method):
    """The chain rules are not defined on trees: no silent reading of a tree as a chain."""
    batch = _tree_batch(torch.tensor([-1, -1, 0]))
    kwargs = dict(synthetic_acceptance_rate=0.5, num_speculative_steps=3) if method == "synthetic" else {}
    with pytest.raises(ValueError, match="tree_parents is set but method is"):
        reference.sample(batch, method=method, seed=0, **kwargs)


def test_a_proposal_row_that_is_not_a_distribution_names_the_request_and_node():
    """q_i rows are checked as draft_probs rows are; for trees the message says which node."""
    q = torch.full((5, 4), 0.25)
    q[3] = 0.5
    with pytest.raises(ValueError, match="draft_probs rows must sum to 1.*request 1, node 1"):
        SpecBatch(torch.tensor([2, 3]), torch.zeros(5, dtype=torch.int64), torch.zeros(7, 4), q, torch.ones(2),
                  tree_parents=torch.tensor([-1, -1, -1, 0, 0]))


def test_sub_batches_and_rebuilt_batches_carry_tree_parents():
    """select_requests, Noise.select and every FIELDS-driven rebuild keep the tree: a request decided
    inside a sub-batch emits what it emits in the whole batch."""
    g = torch.Generator().manual_seed(29)
    batch = random_tree_batch(g, B=7)
    noise = Noise.draw(batch, g)
    assert "tree_parents" in FIELDS
    rebuilt = SpecBatch(**{f: getattr(batch, f) for f in FIELDS}, allow_nonfinite=batch.allow_nonfinite)
    assert torch.equal(rebuilt.tree_parents, batch.tree_parents)
    whole = reference.sample(batch, method="tree", noise=noise)
    order = torch.tensor([5, 2, 2, 0])
    part = reference.sample(select_requests(batch, order), method="tree", noise=noise.select(batch, order))
    width = part.token_ids.shape[1]
    assert torch.equal(part.token_ids, whole.token_ids[order, :width])
    assert torch.equal(part.accepted_nodes, whole.accepted_nodes[order, : width - 1])


def test_non_finite_tree_requests_emit_the_root_rows_argmax_and_leave_the_others_alone():
    """SPEC 3.6 on trees: any non-finite row among a request's N_b + 1 rows, and it accepts nothing and
    emits the first argmax of its root row (NaN read as -inf); finite requests decide as on their own."""
    g = torch.Generator().manual_seed(31)
    for _ in range(5):
        batch = random_tree_batch(g, B=8, nonfinite=True)
        noise = Noise.draw(batch, g)
        out = reference.sample(batch, method="tree", noise=noise)
        bad = batch.nonfinite_requests()
        roots = batch.target_logits[batch.logit_offsets()[:-1]].double().nan_to_num(nan=float("-inf"))
        assert torch.equal(out.token_ids[bad, 0], roots[bad].argmax(1))
        assert not bool(out.num_accepted[bad].any()) and bool((out.accepted_nodes[bad] == -1).all())
        good = torch.nonzero(~bad).flatten()
        if good.numel():
            alone = reference.sample(select_requests(batch, good), method="tree", noise=noise.select(batch, good))
            assert torch.equal(out.token_ids[good, : alone.token_ids.shape[1]], alone.token_ids)
