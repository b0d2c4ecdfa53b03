"""The SGLang adapter (specverify.adapters.sglang) against a stand-in with sgl_kernel's exact signatures.

The stand-in is written here from the documented behaviour of SGLang's two tree entries (same argument
names, order, dtypes and in-place outputs): a target-only sampler that draws one coin per node and
accepts the first child, in sibling order, whose cumulative target probability reaches it, then samples
the target with the rejected siblings removed by inverse CDF; and a greedy verifier that follows the
argmax. On the CPU it lets CI hold the adapter's layout conversion, its output reading and its
declarations to the harness without a GPU; docs/kernels.md records the real kernel's verdicts."""

import dataclasses
import functools
import types

import pytest
import torch

import reference
from reference import SpecBatch, exact
from specverify import UnsupportedError
from specverify.adapters import sglang
from specverify.adapters.tree_layout import from_linked_lists, to_linked_lists
from specverify.checks import run_check
from specverify.checks.result import FAIL, KNOWN, NOT_APPLICABLE, PASS
from specverify.checks.runner import output_problems
from specverify.checks.stats import chi_square_gof
from specverify.strategies import get_profile


# ---- the stand-in: sgl_kernel's signatures, semantics in our own words --------------------------------
def tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                          retrive_next_token, retrive_next_sibling, uniform_samples,
                                          uniform_samples_for_final_sampling, target_probs, draft_probs,
                                          threshold_single=1.0, threshold_acc=1.0, deterministic=True,
                                          count_once=False, guarded=False):
    """``count_once``: a token tried again under the same parent adds nothing to the running sum (its residual is
    0 after its first rejection, SPEC 3.8), where the kernel adds its probability once per copy. ``guarded``: a
    child of probability 0 is never accepted, and where the rejections leave a residual of zero the last rejected
    token is put back (SPEC 3.8 keeps r as it was), where the kernel accepts at a coin of 0 and falls back to
    V - 1."""
    _require(predicts, torch.int32, 1, "predicts")
    _require(accept_index, torch.int32, 2, "accept_index")
    _require(accept_token_num, torch.int32, 1, "accept_token_num")
    for name, t in (("candidates", candidates), ("retrive_index", retrive_index),
                    ("retrive_next_token", retrive_next_token), ("retrive_next_sibling", retrive_next_sibling)):
        _require(t, torch.int64, 2, name)
    _require(uniform_samples, torch.float32, 2, "uniform_samples")
    _require(uniform_samples_for_final_sampling, torch.float32, 1, "uniform_samples_for_final_sampling")
    _require(target_probs, torch.float32, 3, "target_probs")
    _require(draft_probs, torch.float32, 3, "draft_probs")
    if not (0 <= threshold_single <= 1 and 0 <= threshold_acc <= 1):
        raise RuntimeError("thresholds must lie in [0, 1]")
    B, W = candidates.shape
    S = accept_index.shape[1]
    acc_scale = torch.tensor(max(threshold_acc, 1e-9), dtype=torch.float32)
    for b in range(B):
        slot, coin = 0, uniform_samples[b, 0]
        last = int(retrive_index[b, 0])
        accept_index[b, 0] = last
        taken = 0
        for _ in range(1, S):
            child, mass = int(retrive_next_token[b, slot]), torch.zeros((), dtype=torch.float32)
            tried, rejected = set(), None       # rejected: the last token that took mass out of this node's residual
            while child != -1:
                x = int(candidates[b, child])
                repeat = count_once and x in tried
                p_x = torch.zeros((), dtype=torch.float32) if repeat else target_probs[b, slot, x]
                mass = mass + p_x                                   # float32, as the kernel accumulates
                if (coin <= mass / acc_scale or p_x >= threshold_single) and not (guarded and p_x <= 0):
                    predicts[last] = x
                    taken += 1
                    last = int(retrive_index[b, child])
                    accept_index[b, taken] = last
                    slot, coin = child, uniform_samples[b, child]
                    break
                if x not in tried:
                    draft_probs[b, slot, x] = p_x                   # the rejected token leaves the residual
                    rejected = x if p_x > 0 else rejected
                tried.add(x)
                child = int(retrive_next_sibling[b, child])
            if child == -1:
                break
        accept_token_num[b] = taken
        residual = target_probs[b, slot]
        if taken != S - 1:
            emptied = torch.clamp(residual - draft_probs[b, slot], min=0)
            if guarded and not bool((emptied > 0).any()) and rejected is not None:
                emptied[rejected] = residual[rejected]
            residual = emptied
        predicts[last] = _inverse_cdf(residual, uniform_samples_for_final_sampling[b])


def _inverse_cdf(weights: torch.Tensor, coin: torch.Tensor) -> int:
    """The first index whose running sum of positive weights exceeds coin * total; the last positive index
    if rounding leaves none, V - 1 if none is positive."""
    total = weights.sum()
    cdf = torch.cumsum(weights, 0)
    hit = torch.nonzero((cdf > coin * total) & (weights > 0)).flatten()
    if hit.numel():
        return int(hit[0])
    positive = torch.nonzero(weights > 0).flatten()
    return int(positive[-1]) if positive.numel() else weights.shape[0] - 1


def verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                       retrive_next_sibling, target_predict):
    _require(predicts, torch.int32, 1, "predicts")
    _require(accept_index, torch.int32, 2, "accept_index")
    _require(accept_token_num, torch.int32, 1, "accept_token_num")
    _require(target_predict, torch.int64, 2, "target_predict")
    B, S = accept_index.shape
    flat_target = target_predict.flatten()
    for b in range(B):
        slot, last, taken = 0, int(retrive_index[b, 0]), 0
        accept_index[b, 0] = last
        for _ in range(1, S):
            child = int(retrive_next_token[b, slot])
            while child != -1 and int(candidates[b, child]) != int(flat_target[last]):
                child = int(retrive_next_sibling[b, child])
            if child == -1:
                break
            predicts[last] = flat_target[last]
            taken += 1
            last = int(retrive_index[b, child])
            accept_index[b, taken] = last
            slot = child
        accept_token_num[b] = taken
        predicts[last] = flat_target[last]


def _require(t, dtype, dim, name):
    if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.dim() != dim:
        raise RuntimeError(f"Expected '{name}' to be a {dim}-D {dtype} tensor")


STANDIN = types.SimpleNamespace(tree_speculative_sampling_target_only=tree_speculative_sampling_target_only,
                                verify_tree_greedy=verify_tree_greedy)
TARGET_ONLY = sglang.tree_target_only(STANDIN, devices=("cpu",))
GREEDY = sglang.tree_greedy(STANDIN, devices=("cpu",))


# ---- batches --------------------------------------------------------------------------------------
def tree_batch(parents_per_request, tokens_per_request, V, g, temperature=1.0):
    """A tree batch with one-hot drafter: per request its parents and tokens, random logits."""
    k = torch.tensor([len(p) for p in parents_per_request], dtype=torch.int64)
    B, T = k.shape[0], int(k.sum())
    parents = torch.tensor([x for p in parents_per_request for x in p], dtype=torch.int64)
    tokens = torch.tensor([x for t in tokens_per_request for x in t], dtype=torch.int64)
    logits = torch.randn(T + B, V, generator=g) * 1.5
    temps = torch.full((B,), float(temperature)) if not isinstance(temperature, list) else torch.tensor(temperature)
    return SpecBatch(k, tokens, logits, None, temps, tree_parents=parents)


EAGLE = ([-1, -1, 0, 0, 1, 2], [3, 5, 1, 2, 4, 0])        # two top-2 levels and a third, distinct siblings


# ---- layout ---------------------------------------------------------------------------------------
def test_linked_lists_round_trip_real_trees():
    g = torch.Generator().manual_seed(3)
    shapes = [([-1, -1, 0, 0, 1, 2], [3, 5, 1, 2, 4, 0]), ([], []), ([-1, 0, 1, 2], [1, 1, 1, 1]),
              ([-1, -1, -1, 2, 2, 0, 5], [0, 1, 2, 3, 4, 5, 6])]
    batch = tree_batch([s[0] for s in shapes], [s[1] for s in shapes], 8, g)
    linked = to_linked_lists(batch.num_draft_tokens, batch.draft_token_ids, batch.tree_parents, width=9)
    flat = from_linked_lists(linked.candidates, linked.retrive_next_token, linked.retrive_next_sibling,
                             linked.retrive_index)
    assert torch.equal(flat.num_draft_tokens, batch.num_draft_tokens)
    assert torch.equal(flat.draft_token_ids, batch.draft_token_ids)
    assert torch.equal(flat.tree_parents, batch.tree_parents)
    launch = sglang.launch_layout(batch)
    assert launch.W == 8 and launch.S == 5           # 7 nodes at most; the chain of 4 nodes, depth 4
    assert launch.slot_rows.tolist()[:7] == [0, 1, 2, 3, 4, 5, 6]       # request 0: root, nodes 0..5
    assert launch.slot_rows.tolist()[7] == 8                            # request 1: root only


def test_chains_become_first_child_lists():
    k = torch.tensor([3, 0, 2])
    linked = to_linked_lists(k, torch.tensor([4, 5, 6, 7, 8]), None)
    assert linked.retrive_next_token.tolist() == [[1, 2, 3, -1], [-1] * 4, [1, 2, -1, -1]]
    assert (linked.retrive_next_sibling == -1).all()


# ---- the adapter against the stand-in -------------------------------------------------------------
def test_greedy_entry_equals_the_reference_on_greedy_trees():
    g = torch.Generator().manual_seed(11)
    for _ in range(20):
        parents, tokens = EAGLE
        batch = tree_batch([parents, [], [-1, 0, 0, 1]], [tokens, [], [2, 1, 3, 0]], 6, g, temperature=0.0)
        want = reference.sample(batch, method="tree", seed=0)
        for backend in (GREEDY, TARGET_ONLY):
            got = backend(batch, method="tree", seed=1)
            assert got.emitted() == want.emitted(), backend.name
            assert torch.equal(got.accepted_nodes, want.accepted_nodes), backend.name


def test_target_only_follows_the_exact_tree_law():
    """One EAGLE-style tree replicated: the emitted sequences' law is SPEC 3.8's (chi-square)."""
    g = torch.Generator().manual_seed(5)
    parents, tokens = EAGLE
    one = tree_batch([parents], [tokens], 6, g)
    copies = 1500
    batch = SpecBatch(one.num_draft_tokens.repeat(copies), one.draft_token_ids.repeat(copies),
                      one.target_logits.repeat(copies, 1), None, one.temperature.repeat(copies),
                      tree_parents=one.tree_parents.repeat(copies))
    out = TARGET_ONLY(batch, method="tree", seed=1234)
    assert not output_problems(batch, out)
    p = torch.softmax(one.target_logits.double(), dim=-1)
    law = exact.tree_sequences(p, None, parents, tokens)
    counts = {}
    for row in out.emitted():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    assert set(counts) <= {s for s, w in law.items() if w > 0}
    assert chi_square_gof(law, counts).p_value > 1e-4


def test_seeded_stream_is_per_request_and_reproducible():
    g = torch.Generator().manual_seed(8)
    parents, tokens = EAGLE
    batch = tree_batch([parents, [-1, 0]], [tokens, [1, 2]], 6, g)
    seeds = torch.tensor([77, 78])
    a = TARGET_ONLY(batch, method="tree", seed=seeds)
    assert torch.equal(a.token_ids, TARGET_ONLY(batch, method="tree", seed=seeds).token_ids)
    alone = reference.batch.select_requests(batch, torch.tensor([1]))
    b = TARGET_ONLY(alone, method="tree", seed=seeds[1:])
    assert b.emitted()[0] == a.emitted()[1]


def test_declarations_refuse_what_the_kernel_does_not_do():
    g = torch.Generator().manual_seed(9)
    batch = tree_batch([[-1, 0]], [[1, 2]], 5, g)
    dense = SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, batch.target_logits,
                      torch.softmax(torch.randn(2, 5, generator=g), -1), batch.temperature,
                      tree_parents=batch.tree_parents)
    with pytest.raises(UnsupportedError, match="draft_probs"):
        TARGET_ONLY(dense, method="tree", seed=1)
    noise = reference.Noise.draw(batch, g)
    with pytest.raises(UnsupportedError, match="injected"):
        TARGET_ONLY(batch, method="tree", noise=noise)
    with pytest.raises(UnsupportedError, match="cuda|cpu"):
        sglang.tree_target_only(STANDIN)(batch, method="tree", seed=1)     # declared for CUDA only
    caps = sglang.tree_target_only().capabilities
    assert caps.methods == {"tree"} and caps.seeded_stream == "own" and caps.devices == {"cuda"}


def test_empty_batch_and_zero_node_trees():
    g = torch.Generator().manual_seed(2)
    batch = tree_batch([[], [], [-1]], [[], [], [3]], 5, g)
    for backend in (TARGET_ONLY, GREEDY):
        out = backend(batch, method="tree", seed=3)
        assert not output_problems(batch, out)


def test_a_batch_of_no_requests():
    empty = SpecBatch(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), torch.zeros(0, 5), None,
                      torch.zeros(0), tree_parents=torch.zeros(0, dtype=torch.int64))
    for backend in (TARGET_ONLY, GREEDY):
        out = backend(empty, method="tree", seed=1)
        assert out.token_ids.shape == (0, 1) and out.num_accepted.shape == (0,)


@pytest.mark.parametrize("check", ["token_distribution", "sequence_distribution"])
def test_harness_tree_statistics_on_the_stand_in(check):
    """The harness's one-hot top-k tree case through the adapter: the stand-in's law is SPEC 3.8's."""
    result = run_check(TARGET_ONLY, check, "tree_onehot_topk", get_profile("ci"))
    assert result.status == PASS, result.message


def test_a_token_drafted_twice_under_one_parent_fails_the_sequence_law_where_its_mass_counts_twice():
    """The kernel's running sum adds a sibling's target probability once per copy, so a token drafted as two
    siblings is accepted with up to twice its probability, where SPEC 3.8 never accepts the second copy. The
    harness's duplicate-siblings case puts the root's top token (p = 0.40) first twice: the stand-in emits it
    first at about 0.80. The adapter declares the defect, so the case is known; behind an adapter that declares
    nothing the same stand-in fails the sequence law; counting each token once, it passes."""
    result = run_check(TARGET_ONLY, "sequence_distribution", "tree_duplicate_siblings", get_profile("ci"))
    assert result.status == KNOWN and result.deviation == sglang.DUPLICATE_SIBLINGS, result.line()
    undeclared = sglang.tree_target_only(STANDIN, devices=("cpu",))
    undeclared.capabilities = dataclasses.replace(undeclared.capabilities, deviations=())
    result = run_check(undeclared, "sequence_distribution", "tree_duplicate_siblings", get_profile("ci"))
    assert result.status == FAIL and result.p_value < 1e-12, result.line()
    assert result.message.startswith("sequence(s) of probability 0 emitted"), result.line()
    once = types.SimpleNamespace(**vars(STANDIN))
    once.tree_speculative_sampling_target_only = functools.partial(tree_speculative_sampling_target_only,
                                                                    count_once=True)
    result = run_check(sglang.tree_target_only(once, devices=("cpu",)), "sequence_distribution",
                       "tree_duplicate_siblings", get_profile("ci"))
    assert result.status == PASS, result.line()


@pytest.mark.parametrize("case,coin,deviation", [("tree_zero_mass_siblings", "0", sglang.ZERO_COIN),
                                                  ("tree_covered_support", "1 - 2^-24", sglang.TOP_COIN)])
def test_boundary_coins_find_the_kernels_coin_defects_that_its_engine_draws_once_in_two_to_the_24(case, coin,
                                                                                                   deviation):
    """The kernel accepts a child when its coin is at most the running float32 sum of the siblings' probabilities:
    a coin of 0 accepts a first child of probability 0, and a coin of 1 - 2^-24 above a sum that covers the support
    rejects every child and emits V - 1. torch.rand draws either once in 2^24, so only fixed coins see them. The
    adapter declares both (known); behind an adapter that declares nothing each fails at its coin alone; a stand-in
    that never accepts probability 0 and keeps the residual it emptied passes."""
    result = run_check(TARGET_ONLY, "boundary_coins", case, get_profile("ci"))
    assert result.status == KNOWN and result.deviation == deviation, result.line()
    undeclared = sglang.tree_target_only(STANDIN, devices=("cpu",))
    undeclared.capabilities = dataclasses.replace(undeclared.capabilities, deviations=())
    result = run_check(undeclared, "boundary_coins", case, get_profile("ci"))
    assert result.status == FAIL, result.line()
    failures = result.message.split("; ")[1:]
    assert failures and all(f.startswith(f"every uniform at {coin} (coins): ") for f in failures), result.line()
    guarded = types.SimpleNamespace(**vars(STANDIN))
    guarded.tree_speculative_sampling_target_only = functools.partial(tree_speculative_sampling_target_only,
                                                                       guarded=True)
    fixed = sglang.tree_target_only(guarded, devices=("cpu",))
    fixed.capabilities = dataclasses.replace(fixed.capabilities, deviations=())
    result = run_check(fixed, "boundary_coins", case, get_profile("ci"))
    assert result.status == PASS and result.samples, result.line()


def test_fixed_coins_reach_every_node_coin_and_the_final_coin():
    """coin=c hands the kernel c at every slot and as every final coin, on the target-only entry and, for a batch
    with a random request, on the engine's choice of entries; a greedy batch takes the greedy entry, which draws
    none."""
    seen = []

    def spy(draft_probs, **kwargs):
        seen.append((kwargs["uniform_samples"].clone(), kwargs["uniform_samples_for_final_sampling"].clone()))
        tree_speculative_sampling_target_only(draft_probs=draft_probs, **kwargs)
    module = types.SimpleNamespace(tree_speculative_sampling_target_only=spy, verify_tree_greedy=verify_tree_greedy)
    g = torch.Generator().manual_seed(4)
    parents, tokens = EAGLE
    batch = tree_batch([parents, [-1, 0]], [tokens, [1, 2]], 6, g)
    for backend in (sglang.tree_target_only(module, devices=("cpu",)), sglang.tree_greedy(module, devices=("cpu",))):
        out = backend(batch, method="tree", coin=2.0 ** -24)
        assert not output_problems(batch, out)
    assert len(seen) == 2
    for coins, final in seen:
        assert coins.shape == (2, 7) and bool((coins == 2.0 ** -24).all()) and bool((final == 2.0 ** -24).all())
    greedy = tree_batch([parents], [tokens], 6, g, temperature=0.0)
    out = sglang.tree_greedy(module, devices=("cpu",))(greedy, method="tree", coin=0.0)
    assert len(seen) == 2 and out.emitted() == reference.sample(greedy, method="tree", seed=0).emitted()


def test_all_greedy_trees_reach_the_greedy_entry_and_a_descent_on_the_wrong_slot_fails_there():
    """The greedy entry runs only on a batch whose every request is greedy, which no sampled case holds:
    ``greedy_agreement[tree]`` is what reaches it, on the adapter's own seeded path, and compares it exactly. Its
    two calls take ``verify_tree_greedy`` and never the sampling kernel; the entry given each slot's neighbour's
    argmax (an off-by-one slot) fails."""
    calls = {"greedy": 0, "sampling": 0}

    def counted(name, fn):
        def call(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return call

    def neighbours_argmax(target_predict, **kwargs):
        verify_tree_greedy(target_predict=target_predict.roll(1, dims=1), **kwargs)

    module = types.SimpleNamespace(verify_tree_greedy=counted("greedy", verify_tree_greedy),
                                   tree_speculative_sampling_target_only=counted(
                                       "sampling", tree_speculative_sampling_target_only))
    result = run_check(sglang.tree_greedy(module, devices=("cpu",)), "greedy_agreement", "tree", get_profile("ci"))
    assert result.status == PASS and "on seeded noise" in result.message, result.line()
    assert calls == {"greedy": 2, "sampling": 0}
    wrong = types.SimpleNamespace(verify_tree_greedy=neighbours_argmax,
                                  tree_speculative_sampling_target_only=tree_speculative_sampling_target_only)
    result = run_check(sglang.tree_greedy(wrong, devices=("cpu",)), "greedy_agreement", "tree", get_profile("ci"))
    assert result.status == FAIL and "greedy argmax (tree)" in result.message, result.line()
    assert run_check(TARGET_ONLY, "greedy_agreement", "tree", get_profile("ci")).status == PASS


@pytest.mark.parametrize("check,case", [("token_distribution", "tree_dense_q"), ("interface_parity", "convention")])
def test_dense_drafters_are_not_applicable_and_never_reach_the_kernel(check, case):
    """The target-only kernel has no dense-drafter rule: the adapter declares dense_draft_probs=False, so
    the dense-drafter case is n/a with that reason (never a pass) and interface parity passes on one-hot
    drafts; a dense batch handed to it anyway is UnsupportedError."""
    result = run_check(TARGET_ONLY, check, case, get_profile("ci"))
    if case == "tree_dense_q":
        assert result.status == NOT_APPLICABLE and "one-hot drafters only" in result.message, result.line()
    else:
        assert result.status == PASS, result.line()
    g = torch.Generator().manual_seed(3)
    parents, tokens = EAGLE
    batch = tree_batch([parents], [tokens], 6, g)
    dense = SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, batch.target_logits,
                      torch.full((len(tokens), 6), 1 / 6), batch.temperature, tree_parents=batch.tree_parents)
    with pytest.raises(UnsupportedError, match="dense draft_probs"):
        TARGET_ONLY(dense, method="tree", seed=torch.tensor([1]))


def test_entries_without_the_draft_probs_scratch():
    """Later sgl-kernel releases take no draft_probs: the adapter passes it only to an entry that has it."""
    def without_scratch(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                        retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
                        threshold_single=1.0, threshold_acc=1.0, deterministic=True):
        tree_speculative_sampling_target_only(
            predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
            retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
            torch.zeros_like(target_probs), threshold_single, threshold_acc, deterministic)
    module = types.SimpleNamespace(tree_speculative_sampling_target_only=without_scratch,
                                   verify_tree_greedy=verify_tree_greedy)
    g = torch.Generator().manual_seed(13)
    parents, tokens = EAGLE
    batch = tree_batch([parents, [-1]], [tokens, [2]], 6, g)
    seeds = torch.tensor([5, 6])
    got = sglang.tree_target_only(module, devices=("cpu",))(batch, method="tree", seed=seeds)
    assert got.emitted() == TARGET_ONLY(batch, method="tree", seed=seeds).emitted()
