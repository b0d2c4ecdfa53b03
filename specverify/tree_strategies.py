"""Hypothesis strategies and seeded builders for batches of token trees (SPEC 3.8).

``tree_examples`` draws a batch of trees with its noise: shapes (chains, stars, deep narrow trees,
EAGLE-style levels of top-k siblings, random trees, zero-node trees), proposals (dense q_i per node,
SpecInfer's i.i.d. siblings from one q, siblings drawn without replacement, one-hot q with EAGLE's
distinct top-k tokens, q equal to the parent's target), duplicate sibling tokens, V = 1, mixed greedy
requests (often with tied rows), filters and placeholders. As ``spec_examples`` does, Hypothesis draws the structure and an
integer seeding the torch.Generator the contents come from. ``as_tree`` gives a chain example a tree
shape, so the structural checks rotate "tree" with the other declared rules on the same examples.
"""

from __future__ import annotations

import dataclasses

import torch
from hypothesis import strategies as st

from reference import Noise, SpecBatch, tree
from specverify.strategies import LOGIT_STYLES, TEMPERATURES, Example, Profile, _filter_settings, _logits

TREE_SHAPES = ("chain", "star", "narrow", "eagle", "random", "empty")
TREE_DRAFTERS = ("dense", "iid", "without_replacement", "onehot_topk", "onehot", "equal")
ONE_HOT_DRAFTERS = ("onehot_topk", "onehot")    # draft_probs None: for backends that take no dense q


def tree_shape(g: torch.Generator, n: int, shape: str, max_depth: int | None = None) -> list[int]:
    """Parents [n] of one tree (local indices, topological), no deeper than ``max_depth``.

    "narrow": each node hangs under one of the two nodes before it (depth about 2n/3); "eagle": levels
    of one to three siblings, each level under one node of the level above; "random": any earlier node
    or the root; "empty": no node."""
    draw = torch.randint(0, 1 << 30, (max(n, 1) * 2,), generator=g).tolist()
    if shape in ("chain", "narrow"):
        back = [1 if shape == "chain" else 1 + d % 2 for d in draw[:n]]
        parents = [max(i - b, tree.ROOT) for i, b in enumerate(back)]
    elif shape == "star":
        parents = [tree.ROOT] * n
    elif shape == "eagle":
        parents, above, i = [], [tree.ROOT], 0
        while i < n:
            width = min(1 + draw[2 * i] % 3, n - i)
            parents += [above[draw[2 * i + 1] % len(above)]] * width
            above, i = list(range(i, i + width)), i + width
    elif shape == "random":
        parents = [d % (i + 1) - 1 for i, d in enumerate(draw[:n])]
    else:
        parents = []
    if max_depth is None:
        return parents
    depth: list[int] = []
    for i, parent in enumerate(parents):
        # climbing to an ancestor keeps the order topological and shortens the path
        while parent >= 0 and depth[parent] >= max_depth:
            parent = parents[parent]
        parents[i] = parent
        depth.append(1 if parent < 0 else depth[parent] + 1)
    return parents


def _proposals(g: torch.Generator, p_parent: torch.Tensor, parents: list[int], drafter: str,
               duplicates: bool) -> tuple[torch.Tensor, list[int]]:
    """(q [n, V] float64, tokens [n]) of one request's nodes given each node's parent target row
    p_parent [n, V] (float64): see the module docstring for the drafters."""
    n, V = p_parent.shape
    q = torch.zeros(n, V, dtype=torch.float64)
    tokens: list[int] = []
    base: dict[int, torch.Tensor] = {}          # the proposal each parent's children start from
    taken: dict[int, list[int]] = {}            # tokens already given to each parent's children
    for i, parent in enumerate(parents):
        used = taken.setdefault(parent, [])
        if drafter == "dense":
            q[i] = torch.softmax(torch.randn(V, generator=g, dtype=torch.float64) * 2, 0)
        elif drafter == "equal":
            q[i] = p_parent[i]
        elif drafter in ("iid", "without_replacement"):
            if parent not in base:
                base[parent] = torch.softmax(torch.randn(V, generator=g, dtype=torch.float64) * 2, 0)
            q[i] = base[parent]
            if drafter == "without_replacement" and len(set(used)) < V:
                q[i] = q[i].index_fill(0, torch.tensor(used, dtype=torch.int64), 0.0)
                q[i] = q[i] / q[i].sum()
        if drafter == "onehot_topk":
            # EAGLE: the most likely tokens of a noisy copy of the parent's row, no two siblings alike
            score = p_parent[i] + 0.05 * torch.rand(V, generator=g, dtype=torch.float64)
            if len(set(used)) < V:
                score[used] = -1.0
            x = int(score.argmax())
        else:
            source = p_parent[i] if drafter == "onehot" else q[i]
            x = int(torch.multinomial(source, 1, generator=g))
        if duplicates and used and float(torch.rand(1, generator=g)) < 0.5:
            x = used[-1]
        used.append(x)
        tokens.append(x)
    return q, tokens


def tree_batch(g: torch.Generator, shapes: list[str], V: int, *, drafter: str = "dense", sizes: list[int],
               temperatures: list[float], styles: list[str] | None = None, duplicates: bool = False,
               placeholders: bool = False, filters: tuple | None = None, max_depth: int | None = None,
               dtype: torch.dtype = torch.float32) -> SpecBatch:
    """A batch of one tree per request: request b has ``sizes[b]`` nodes in ``shapes[b]``, temperature
    ``temperatures[b]`` (0: greedy, whose drafts are often the parent row's argmax), logits in
    ``styles[b]`` (strategies' logit styles); ``filters`` = (top_k, top_p, min_p) tensors [B] or None."""
    B = len(sizes)
    styles = styles or ["normal"] * B
    all_parents, all_tokens, rows, qs = [], [], [], []
    for b in range(B):
        parents = tree_shape(g, sizes[b] if shapes[b] != "empty" else 0, shapes[b], max_depth)
        logits = _logits(g, len(parents) + 1, V, styles[b])
        t = temperatures[b]
        p = torch.softmax(logits / (t if t > 0 else 1.0), dim=1)
        q, tokens = _proposals(g, p[[parent + 1 for parent in parents]], parents, drafter, duplicates)
        if t == 0:
            top = logits.argmax(dim=1)
            follow = torch.rand(len(parents), generator=g) < 0.6
            tokens = [int(top[parent + 1]) if f else x for x, parent, f in zip(tokens, parents, follow.tolist())]
        all_parents += parents
        all_tokens += tokens
        rows.append(logits)
        qs.append(q)
    k = torch.tensor([len(r) - 1 for r in rows], dtype=torch.int64)
    x = torch.tensor(all_tokens, dtype=torch.int64)
    if placeholders and x.numel():
        x = torch.where(torch.rand(x.shape[0], generator=g) < 0.3, -1, x)
    q = torch.cat(qs).float() if qs else torch.zeros(0, V)
    q = q / q.sum(dim=1, keepdim=True).clamp(min=1e-30)
    one_hot = drafter in ("onehot", "onehot_topk")
    logits = torch.cat(rows) if rows else torch.zeros(0, V, dtype=torch.float64)
    return SpecBatch(k, x, logits.to(dtype), None if one_hot else q, torch.tensor(temperatures, dtype=torch.float32),
                     *(filters or (None, None, None)), tree_parents=torch.tensor(all_parents, dtype=torch.int64))


@st.composite
def tree_examples(draw, profile: Profile, *, filters: bool = False, placeholders: bool = False,
                  max_depth: int | None = None, max_nodes: int | None = None):
    """A batch of token trees with its noise and seeds (see the module docstring for what varies);
    ``filters`` and ``placeholders`` as in ``spec_examples``, trees no deeper than ``max_depth``."""
    max_nodes = max_nodes or max(6, 2 * profile.max_draft)
    B = draw(st.integers(1, max(1, profile.max_requests)))
    V = draw(st.one_of(st.just(1), st.integers(2, 12), st.integers(2, profile.max_vocab)))
    shapes = draw(st.lists(st.sampled_from(TREE_SHAPES), min_size=B, max_size=B))
    sizes = draw(st.lists(st.integers(0, max_nodes), min_size=B, max_size=B))
    temps = draw(st.lists(st.sampled_from((0.0,) + TEMPERATURES), min_size=B, max_size=B))
    styles = draw(st.lists(st.sampled_from(LOGIT_STYLES), min_size=B, max_size=B))
    if draw(st.booleans()):     # greedy ties: every greedy request's rows tied at their maximum
        styles = ["tied" if t == 0 else s for s, t in zip(styles, temps)]
    drafter = draw(st.sampled_from(TREE_DRAFTERS if profile.dense_drafts else ONE_HOT_DRAFTERS))
    duplicates = draw(st.booleans())
    holes = placeholders and draw(st.booleans())
    dtype = draw(st.sampled_from(profile.logit_dtypes))
    seed = draw(st.integers(0, 2 ** 31 - 1))
    settings = _filter_settings(draw, B, V) if filters and draw(st.booleans()) else None
    g = torch.Generator().manual_seed(seed)
    batch = tree_batch(g, shapes, V, drafter=drafter, sizes=sizes, temperatures=temps, styles=styles,
                       duplicates=duplicates, placeholders=holes, filters=settings, max_depth=max_depth, dtype=dtype)
    noise = Noise.draw(batch, g)
    seeds = torch.randint(0, 2 ** 62, (B,), generator=g, dtype=torch.int64)
    desc = (f"TreeExample(B={B}, V={V}, shapes={shapes}, nodes={batch.num_draft_tokens.tolist()}, "
            f"temperature={temps}, drafter={drafter}, duplicates={duplicates}, placeholders={holes}, "
            f"filters={settings is not None}, logits={styles}, dtype={str(dtype).replace('torch.', '')}, "
            f"contents_seed={seed})")
    return Example(batch, noise, seeds, desc)


def as_tree(example: Example, max_depth: int | None = None) -> Example:
    """The chain example with a tree shape per request (drawn from its seeds), the same tokens, rows,
    proposals and noise: node i's row and uniform are those of draft slot i."""
    batch = example.batch
    g = torch.Generator().manual_seed(int(example.seeds.sum()) % (2 ** 62) if batch.num_requests else 0)
    kinds = torch.randint(0, len(TREE_SHAPES) - 1, (batch.num_requests,), generator=g).tolist()
    parents = [p for k, kind in zip(batch.num_draft_tokens.tolist(), kinds)
               for p in tree_shape(g, k, TREE_SHAPES[kind], max_depth)]
    shaped = dataclasses.replace(batch, tree_parents=torch.tensor(parents, dtype=torch.int64, device=batch.device))
    return Example(shaped, example.noise, example.seeds, f"{example.description} as trees")


__all__ = ["TREE_DRAFTERS", "TREE_SHAPES", "as_tree", "tree_batch", "tree_examples", "tree_shape"]
