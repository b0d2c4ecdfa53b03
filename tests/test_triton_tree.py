"""The Triton tree kernel (SPEC 3.8, specverify/kernels/triton_tree.py) against reference.sample(method="tree").

Without CUDA the kernels run under the Triton interpreter on CPU tensors; with CUDA the same cases run
compiled (the parameter id says which). A forced 16-wide tile and forced vocabulary splits give several
tiles per program, a ragged last tile and the race's cross-program merge at a small V.

The kernel decides in float32 and the reference in float64: a request may differ only where the
reference's own decisions came within the tolerance of 4.1 (``_near_tie``, a replay of the rule in
float64 that records every decision's relative margin), and such excused requests are bounded. The
inputs are far from ties: none is excused on them today.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os

import pytest
import torch

_CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"
if not _CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

import reference  # noqa: E402
from reference import Noise, SpecBatch, SpecOutput, philox, select_requests, tree  # noqa: E402
from reference.sample import filtered_target  # noqa: E402
from specverify.kernels import (triton_block, triton_chain, triton_kernels, triton_math,  # noqa: E402
                                triton_sampler, triton_tree)
# one_thread: the autouse fixture that runs these tests on one intra-op thread, as xdist workers do
from tree_cases import float64_noise, one_thread, random_tree_batch  # noqa: E402, F401

if not _CUDA and not triton_kernels.interpreted():
    # Another module imported the kernels before the interpreter was switched on: decorate them again,
    # each module after the ones it imports from.
    for module in (triton_math, triton_block, triton_chain, triton_tree, triton_kernels, triton_sampler):
        importlib.reload(module)

DEVICE = "cuda" if _CUDA else "cpu"
DEVICES = [pytest.param(DEVICE, id="cuda" if _CUDA else "cpu-interpreter")]
TILED = dict(block_v=16, splits=(3, 2))
TOL = 1e-5      # SPEC 4.1 at V <= 4096


def _backend(**plan):
    return triton_sampler.TritonBackend(**(plan or TILED))


def _fields(out: SpecOutput) -> tuple:
    """(token_ids, num_accepted, accepted_nodes): the tensors themselves (dataclasses.astuple copies them)."""
    return out.token_ids, out.num_accepted, out.accepted_nodes


def _near_tie(batch: SpecBatch, noise: Noise, b: int) -> float:
    """The smallest relative margin of request b's decisions, replaying the reference's rule in float64:
    each sibling test |u q(x) - r(x) / m| / (r(x) / m), each residual entry's cancellation
    |r(v) - m q(v)| / r(v) at an update, the race's relative gap between its two best scores, and a greedy
    row's gap between its two largest logits. Request b may differ from the reference only below TOL."""
    cpu = batch.to("cpu")
    d0, d1 = cpu.draft_offsets().tolist()[b: b + 2]
    l0, l1 = cpu.logit_offsets().tolist()[b: b + 2]
    x, parents = cpu.draft_token_ids[d0:d1].tolist(), tree.parents_of(cpu)[d0:d1].tolist()
    logits, temperature = cpu.target_logits[l0:l1].double(), float(cpu.temperature[b])
    kids, margin = tree.children(parents), math.inf
    if temperature == 0.0:
        node = tree.ROOT
        while True:
            top2 = torch.topk(logits[node + 1], min(2, logits.shape[1])).values
            if top2.numel() == 2:
                margin = min(margin, float((top2[0] - top2[1]).abs() / top2[0].abs().clamp(min=1e-30)))
            match = [c for c in kids[node + 1] if x[c] == reference.greedy.argmax(logits[node + 1])]
            if not match:
                return margin
            node = match[0]
    p = filtered_target(cpu, torch.tensor([b]).repeat(d1 - d0 + 1), logits, temperature)
    V = p.shape[1]
    q = (torch.nn.functional.one_hot(torch.tensor(x).clamp(min=0), V).double() if cpu.draft_probs is None
         else cpu.draft_probs[d0:d1].double())
    u = noise.uniform[d0:d1].double().tolist()
    node, r, m, cancel = tree.ROOT, p[0], 1.0, torch.full((V,), math.inf, dtype=torch.float64)
    while True:
        for c in kids[node + 1]:
            if x[c] == reference.batch.PLACEHOLDER:
                continue
            ratio = float(r[x[c]]) / m
            if ratio > 0 and float(q[c, x[c]]) > 0:
                margin = min(margin, abs(u[c] * float(q[c, x[c]]) - ratio) / ratio, float(cancel[x[c]]))
            if tree.accepts(u[c], r[x[c]], m, q[c, x[c]]):
                node, r, m, cancel = c, p[c + 1], 1.0, torch.full((V,), math.inf, dtype=torch.float64)
                break
            near = ((r - m * q[c]).abs() / r).where(r > 0, torch.full_like(r, math.inf))
            cancel = torch.minimum(cancel, near)
            r, m = tree.after_rejection(r, m, q[c])
        else:
            score = torch.where(r > 0, r / noise.exponential[b].double(), torch.zeros_like(r))
            top2 = torch.topk(score, min(2, V)).values
            gap = float((top2[0] - top2[1]) / top2[0]) if V > 1 and top2[0] > 0 else math.inf
            return min(margin, gap, float(cancel.min()))


def _assert_agrees(batch: SpecBatch, got: SpecOutput, noise: Noise | None = None, seed=None,
                   excusable: int = 1) -> None:
    """got equals the reference's tree output (tokens, depths, paths), every element; a request may differ
    only where _near_tie says its decisions came within TOL, and at most ``excusable`` such requests."""
    kwargs = dict(noise=noise) if noise is not None else dict(seed=seed)
    want = reference.sample(batch, method="tree", **kwargs)
    assert got.token_ids.dtype == got.num_accepted.dtype == got.accepted_nodes.dtype == torch.int64
    got = SpecOutput(got.token_ids.cpu(), got.num_accepted.cpu(), got.accepted_nodes.cpu())
    want = SpecOutput(want.token_ids.cpu(), want.num_accepted.cpu(), want.accepted_nodes.cpu())   # the GPU's
    differ = [b for b in range(batch.num_requests)
              if not (torch.equal(got.token_ids[b], want.token_ids[b]) and got.num_accepted[b] == want.num_accepted[b]
                      and torch.equal(got.accepted_nodes[b], want.accepted_nodes[b]))]
    if differ and noise is None:
        noise = Noise.from_seeds(philox.request_seeds(seed, batch.num_requests), batch.num_draft_tokens.cpu(),
                                 batch.vocab_size)
    real = [b for b in differ if _near_tie(batch, noise.to("cpu"), b) > TOL]
    assert not real, f"requests {real}: want {want.token_ids[real].tolist()}, got {got.token_ids[real].tolist()}"
    assert len(differ) <= excusable, f"{len(differ)} near-tie divergences: {differ}"


VARIANTS = {
    "stars-dense": dict(shapes=("star",), max_nodes=8),
    "stars-one-hot-duplicates": dict(shapes=("star",), drafter="none", duplicates=True, max_nodes=8),
    "deep-narrow-chains": dict(shapes=("narrow", "chain"), max_nodes=12),
    "eagle-top-k-one-hot": dict(shapes=("eagle",), drafter="none", distinct=True, max_nodes=10),
    "random-q-zero-greedy": dict(q_zero=True, duplicates=True, greedy_fraction=0.5),
    "greedy-ties": dict(greedy_fraction=1.0, drafter="none", ties=True, V=4),
    "filters-placeholders": dict(filters=True, placeholders=True, duplicates=True),
    "filters-one-hot-placeholders-greedy": dict(filters=True, drafter="none", placeholders=True, greedy_fraction=0.4),
    "vocabulary-of-one": dict(V=1, placeholders=True),
    "zero-node-trees": dict(shapes=("empty",), filters=True),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", VARIANTS)
def test_tree_kernel_equals_the_reference_under_injected_noise(device, name):
    """Every kind of tree (stars, chains, deep narrow trees, EAGLE top-k trees, duplicate sibling tokens,
    q(x) = 0, placeholders, filters, greedy requests mixed in and tied, V = 1, zero-node trees), one-hot and
    dense q, under float32-grid and float64 noise: tokens, depths and paths equal the reference's."""
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    batch = random_tree_batch(g, **{"B": 6, "V": 37, **VARIANTS[name]}).to(device)
    for noise in (Noise.draw(batch, g), float64_noise(batch, g)):
        _assert_agrees(batch, _backend()(batch, method="tree", noise=noise.to(device)), noise)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("drafter", ["dense", "none"])
def test_tree_kernel_seeded_path_equals_the_references(device, drafter):
    """Seeded, the walk draws node i's uniform at its slot and the race the request's exponentials from
    reference.philox's stream: the reference reproduces it, so the comparison is exact (int and [B] seeds)."""
    g = torch.Generator().manual_seed(17)
    batch = random_tree_batch(g, B=6, V=29, drafter=drafter, duplicates=True, placeholders=True).to(device)
    _assert_agrees(batch, _backend()(batch, method="tree", seed=5), seed=5)
    seeds = torch.randint(0, 2 ** 62, (6,), generator=g)
    _assert_agrees(batch, _backend()(batch, method="tree", seed=seeds.to(device)), seed=seeds)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("drafter", ["dense", "none"])
def test_single_path_tree_equals_the_kernels_own_chain_bit_for_bit(device, drafter):
    """A chain as a tree (parents -1, 0, 1, ..., and tree_parents None under method "tree") performs the
    chain kernel's operations exactly: its tokens equal the standard rule's output of the same backend,
    every element, under injected and seeded noise, with placeholders, filters and greedy requests."""
    g = torch.Generator().manual_seed(23 + len(drafter))
    batch = random_tree_batch(g, B=7, V=41, shapes=("chain", "empty"), drafter=drafter, placeholders=True,
                              filters=True, greedy_fraction=0.3).to(device)
    chain = dataclasses.replace(batch, tree_parents=None)
    backend = _backend()
    noise = Noise.draw(batch, g).to(device)
    # The walk takes its parents from the tensor or as i - 1 (HAS_PARENTS), and its uniforms from the noise or
    # from the seeds (SEEDED): two separate loads with the same code after them, so each way to give the chain
    # runs under one noise path, both ways and both paths once.
    for kwargs, tree_batch in ((dict(noise=noise), batch), (dict(seed=3), chain)):
        want = backend(chain, **kwargs)
        got = backend(tree_batch, method="tree", **kwargs)
        assert torch.equal(got.token_ids, want.token_ids) and torch.equal(got.num_accepted, want.num_accepted)
        steps = torch.arange(batch.max_draft, device=device)[None, :]
        assert torch.equal(got.accepted_nodes, torch.where(steps < got.num_accepted[:, None], steps, -1))


@pytest.mark.parametrize("device", DEVICES)
def test_seeded_trees_are_batch_invariant(device):
    """A request's seeded tree output depends only on its seed and its own tree: the same alone, reordered
    or beside other requests, and under another launch plan (other splits of pass 1 and of the race)."""
    g = torch.Generator().manual_seed(44)
    batch = random_tree_batch(g, B=6, V=33, duplicates=True, placeholders=True).to(device)
    seeds = torch.randint(0, 2 ** 62, (6,), generator=g)
    full = _backend()(batch, method="tree", seed=seeds.to(device))
    order = torch.tensor([4, 1, 5])
    sub = _backend(block_v=16, splits=(1, 1))(select_requests(batch, order.to(device)), method="tree",
                                              seed=seeds[order].to(device))
    width = sub.token_ids.shape[1]
    assert torch.equal(sub.token_ids, full.token_ids[order.to(device), :width])
    assert bool((full.token_ids[order.to(device), width:] == -1).all())
    assert torch.equal(sub.accepted_nodes, full.accepted_nodes[order.to(device), : width - 1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("drafter", ["dense", "none"])
def test_vocabulary_crossing_tile_boundaries(device, drafter):
    """V = 2,051 under the default plan (1024-wide tiles: two full tiles and a ragged one of three entries,
    the walk's mass passes and the race's splits over them), the last entries' tile at -inf in one row."""
    g = torch.Generator().manual_seed(2051)
    batch = random_tree_batch(g, B=3, V=2051, max_nodes=5, drafter=drafter, duplicates=True, greedy_fraction=0.2)
    logits = batch.target_logits.clone()
    logits[1, 2048:] = float("-inf")
    batch = dataclasses.replace(batch, target_logits=logits).to(device)
    noise = Noise.draw(batch, g)
    _assert_agrees(batch, _backend(block_v=None)(batch, method="tree", noise=noise.to(device)), noise)


@pytest.mark.skipif(not _CUDA, reason="production vocabulary sizes are too slow for the interpreter")
@pytest.mark.parametrize("drafter", ["dense", "none"])
def test_production_vocabulary_default_plan(drafter):
    """V = 151,936 under the default plan (2048-wide bf16 tiles, the GPU's splits), EAGLE-style trees, both
    noise paths; then the advisory's case: the whole last tile at -inf, no id >= V emitted."""
    V = 151_936
    g = torch.Generator().manual_seed(V)
    batch = random_tree_batch(g, B=4, V=V, shapes=("eagle", "star"), max_nodes=10, drafter=drafter,
                              distinct=drafter == "none", greedy_fraction=0.25)
    batch = dataclasses.replace(batch, target_logits=batch.target_logits.to(torch.bfloat16)).to("cuda")
    noise = Noise.draw(batch, g)
    _assert_agrees(batch, _backend(block_v=None)(batch, method="tree", noise=noise.to("cuda")), noise)
    _assert_agrees(batch, _backend(block_v=None)(batch, method="tree", seed=9), seed=9)
    logits = batch.target_logits.clone()
    logits[:, (V - 1) // 2048 * 2048:] = float("-inf")
    masked = dataclasses.replace(batch, target_logits=logits)
    out = _backend(block_v=None)(masked, method="tree", seed=3)
    assert int(out.token_ids.max()) < V
    _assert_agrees(masked, out, seed=3)


def _zero_residual_batch(device: str) -> SpecBatch:
    """p_root = [1, 0, 0, 0] exactly (one finite logit). Request 0: node 0 proposes token 1 from
    q_0 = [1, 0, 0, 0] (q_0(x) = 0: rejected for sure) and max(p - q_0, 0) is zero everywhere, so r stays
    p; node 1 (token 0, q_1 = q_0) is then accepted against p (its row decides the rest). Request 1:
    node 0 alone: the race falls back to p and emits 0."""
    inf = float("-inf")
    logits = torch.tensor([[0.0, inf, inf, inf], [0.3, 0.1, -0.2, 0.0], [0.5, 0.0, 0.0, 0.1],
                           [0.0, inf, inf, inf], [0.2, 0.1, 0.0, 0.0]])
    q = torch.tensor([[1.0, 0.0, 0.0, 0.0]] * 3)
    return SpecBatch(torch.tensor([2, 1]), torch.tensor([1, 0, 1]), logits, q, torch.ones(2),
                     tree_parents=torch.tensor([-1, -1, -1])).to(device)


@pytest.mark.parametrize("device", DEVICES)
def test_a_residual_of_zero_everywhere_keeps_r(device):
    """SPEC 3.8: where max(r - m q, 0) is zero everywhere, r stays as it was, both for the next sibling's
    test (the walk drops the step) and for the final race (the race's fallback key)."""
    batch = _zero_residual_batch(device)
    for seed in range(2):
        out = _backend()(batch, method="tree", seed=seed)
        assert out.token_ids[0, 0].item() == 0 and out.token_ids[1].cpu().tolist() == [0, -1, -1]
        assert out.accepted_nodes.cpu().tolist() == [[1, -1], [-1, -1]]
        _assert_agrees(batch, out, seed=seed, excusable=0)


@pytest.mark.parametrize("device", DEVICES)
def test_one_hot_masses_after_rejecting_most_of_the_mass(device):
    """One-hot stars whose first child's token holds most of p_root: 1 - 1e-6 (requests 0 and 1), 0.95
    (request 2, with a duplicate of it later) and 0.3 (request 3). After its rejection the next sibling
    is tested against r / m with m = 1e-6, 0.05 or 0.7: the mass must be right to far better than the
    1% by which requests 0 and 1 pass and fail (1 - p(x) in float32 is 5% off at 1e-6)."""
    V, tail = 8, 1e-6
    heavy, mid, light = math.log(7 * (1 - tail) / tail), math.log(0.95 * 7 / 0.05), math.log(0.3 * 7 / 0.7)
    trees = [([3, 5], heavy, [1 - 1e-7, (1 - 1e-2) / 7]), ([3, 5, 6], heavy, [1 - 1e-7, (1 + 1e-2) / 7, 0.1]),
             ([3, 5, 3, 6], mid, [0.99, 0.5, 0.5, 0.1]), ([3, 5], light, [0.9, 0.1])]
    g = torch.Generator().manual_seed(31)
    rows = []
    for tokens, top, _ in trees:
        root = torch.zeros(V)
        root[3] = top
        rows += [root[None], torch.randn(len(tokens), V, generator=g)]
    tokens = [t for tree_tokens, _, _ in trees for t in tree_tokens]
    batch = SpecBatch(torch.tensor([len(t) for t, _, _ in trees]), torch.tensor(tokens), torch.cat(rows), None,
                      torch.ones(len(trees)), tree_parents=torch.full((len(tokens),), -1)).to(device)
    noise = Noise(torch.tensor([u for _, _, us in trees for u in us], dtype=torch.float64),
                  -torch.log(torch.rand(len(trees), V, generator=g, dtype=torch.float64)))
    out = _backend()(batch, method="tree", noise=noise.to(device))
    assert out.accepted_nodes[:, 0].cpu().tolist() == [1, 2, 3, 1]
    _assert_agrees(batch, out, noise, excusable=0)


@pytest.mark.parametrize("device", DEVICES)
def test_every_output_element_is_written_and_empty_batches(device):
    """Outputs poisoned with two different garbages give the same result (every element written, -1
    padding and accepted_nodes included), through triton_sample_into directly; a batch of zero-node trees
    (K = 0: accepted_nodes [B, 0]) and an empty batch (no launch) work."""
    g = torch.Generator().manual_seed(8)
    batch = random_tree_batch(g, B=5, V=23, duplicates=True).to(device)
    seeds = philox.request_seeds(4, 5).to(device)
    outs = []
    for poison in (-7, 2 ** 40):
        out = SpecOutput(*(torch.full(shape, poison, dtype=torch.int64, device=device)
                           for shape in ((5, batch.max_draft + 1), (5,), (5, batch.max_draft))))
        triton_kernels.triton_sample_into(out.token_ids, out.num_accepted, batch.num_draft_tokens,
                                          batch.draft_token_ids, batch.target_logits, batch.draft_probs,
                                          batch.temperature, seeds=seeds, accepted_nodes=out.accepted_nodes,
                                          tree_parents=batch.tree_parents, block_v=16, splits=(2, 2))
        outs.append(out)
    for a, b in zip(_fields(outs[0]), _fields(outs[1])):
        assert torch.equal(a, b)
    _assert_agrees(batch, outs[0], seed=4)

    empty_trees = random_tree_batch(g, B=3, V=9, shapes=("empty",)).to(device)
    out = _backend()(empty_trees, method="tree", seed=1)
    assert tuple(out.accepted_nodes.shape) == (3, 0)
    _assert_agrees(empty_trees, out, seed=1)
    none = dataclasses.replace(empty_trees, num_draft_tokens=empty_trees.num_draft_tokens[:0],
                               target_logits=empty_trees.target_logits[:0], temperature=empty_trees.temperature[:0])
    out = _backend()(none, method="tree", seed=1)
    assert tuple(out.token_ids.shape) == (0, 1) and tuple(out.accepted_nodes.shape) == (0, 0)


@pytest.mark.parametrize("device", DEVICES)
def test_non_finite_rows_keep_the_structure_and_spare_finite_requests(device):
    """SPEC 3.6 as for chains: a request with a NaN, +inf or all -inf row gets a well-formed output (ids in
    [0, V), accepted tokens its path's, -1 after), and every finite request the reference's tokens."""
    g = torch.Generator().manual_seed(36)
    batch = random_tree_batch(g, B=8, V=19, nonfinite=True, placeholders=True).to(device)
    noise = Noise.draw(batch, g)
    got = _backend()(batch, method="tree", noise=noise.to(device))
    want = reference.sample(batch, method="tree", noise=noise)
    bad = batch.nonfinite_requests().cpu()
    assert bool(bad.any()) and not bool(bad.all())
    d_off = batch.draft_offsets().cpu()
    for b in range(batch.num_requests):
        n, ids, nodes = int(got.num_accepted[b]), got.token_ids[b].cpu(), got.accepted_nodes[b].cpu()
        assert 0 <= int(ids[n]) < batch.vocab_size and bool((ids[n + 1:] == -1).all())
        assert bool((nodes[n:] == -1).all())
        assert ids[:n].tolist() == batch.draft_token_ids.cpu()[d_off[b] + nodes[:n]].tolist()
        if not bad[b]:
            assert ids.tolist() == want.token_ids[b].tolist() and nodes.tolist() == want.accepted_nodes[b].tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_sample_into_tree_needs_accepted_nodes(device):
    batch = random_tree_batch(torch.Generator().manual_seed(1), B=2, V=8).to(device)
    out = SpecOutput(torch.empty(2, batch.max_draft + 1, dtype=torch.int64, device=device),
                     torch.empty(2, dtype=torch.int64, device=device))
    with pytest.raises(ValueError, match="accepted_nodes"):
        _backend().sample_into(out, batch, method="tree", seed_tensor=philox.request_seeds(0, 2).to(device))


@pytest.mark.skipif(not _CUDA, reason="CUDA graphs need a GPU (and compiled kernels)")
@pytest.mark.parametrize("path", ["injected", "seeded"])
def test_cuda_graph_replay_of_fresh_trees_equals_eager(path):
    """sample_into(method="tree") captured once, replayed on fresh trees of the same sizes (new parents,
    tokens, logits, q, temperatures, noise or seeds, rows of V = 1000): every output element equals the
    eager call's, and the reference's."""
    def fresh(seed):    # the same node counts every round (T and K fixed), all else new
        g = torch.Generator().manual_seed(seed)
        counts, V = [9, 0, 7, 9, 3, 5], 1000
        parents = torch.tensor([int(torch.randint(-1, i, (1,), generator=g)) for n in counts for i in range(n)])
        T, B = sum(counts), len(counts)
        q = torch.softmax(torch.randn(T, V, generator=g) * 2, dim=-1)
        temperature = torch.rand(B, generator=g) + 0.3
        temperature[seed % B] = 0.0
        batch = SpecBatch(torch.tensor(counts), torch.multinomial(q, 1, generator=g).squeeze(1),
                          torch.randn(T + B, V, generator=g) * 3, q, temperature, tree_parents=parents)
        return batch, Noise.draw(batch, g), torch.randint(0, 2 ** 62, (B,), generator=g)

    static_batch, static_noise, static_seeds = (t.to("cuda") for t in fresh(0))
    K, B = static_batch.max_draft, static_batch.num_requests
    out = SpecOutput(*(torch.empty(s, dtype=torch.int64, device="cuda") for s in ((B, K + 1), (B,), (B, K))))
    kw = dict(noise=static_noise) if path == "injected" else dict(seed_tensor=static_seeds)
    backend = triton_sampler.TritonBackend()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        backend.sample_into(out, static_batch, method="tree", **kw)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        backend.sample_into(out, static_batch, method="tree", **kw)
    for r in range(1, 4):
        batch, noise, seeds = fresh(r)
        for name in ("num_draft_tokens", "draft_token_ids", "target_logits", "draft_probs", "temperature",
                     "tree_parents"):
            getattr(static_batch, name).copy_(getattr(batch, name))
        static_noise.uniform.copy_(noise.uniform)
        static_noise.exponential.copy_(noise.exponential)
        static_seeds.copy_(seeds)
        for t in _fields(out):
            t.fill_(-7)
        graph.replay()
        call = dict(noise=noise.to("cuda")) if path == "injected" else dict(seed=seeds.cuda())
        eager = backend(batch.to("cuda"), method="tree", **call)
        for a, b in zip(_fields(out), _fields(eager)):
            assert torch.equal(a, b)
        _assert_agrees(batch, eager, **(dict(noise=noise) if path == "injected" else dict(seed=seeds)))
