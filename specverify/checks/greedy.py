"""Greedy batches on every noise path (SPEC 4.1): a batch whose every request is greedy uses no noise, so the
backend's tokens must be the reference's exactly, whichever noise path it is called on.

The differential checks compare greedy requests only where the reference can share the backend's noise, and
the statistics see a greedy path only mixed with random requests. Here each declared path is called (injected
noise; seeds, of the reference's Philox stream or of the backend's own), and every call is held to the
reference by the one comparison every exact check uses, the argmax margin its only ambiguity.

Cases, temperature 0 everywhere, two batches a path:

    chain        chains of 0-4 one-hot drafts under the standard rule, V = 64
    block        the same chains under the block rule (SPEC 3.7: greedy requests as in the standard rule)
    tree         one-hot trees of 0-7 nodes, at most 4 deep, whose siblings hold the row's argmax at any place
    split_vocab  four chains (0-3 drafts) at each production vocabulary (and V = 4,099 on the CPU, as
                 ``large_vocab_structure``; on every profile), one batch a size and path, every row's two top
                 tokens in different 1024-wide tiles and halves of the row: a kernel that splits the vocabulary
                 and merges its parts' argmaxes must still give a tie to the lower index

Each row is one of three styles, drawn per row (its two top tokens anywhere at V = 64):

    clear    one token above the rest
    tie      two tokens at exactly the top value: the lower index is the argmax, also where the draft (or an
             earlier sibling) is the higher one
    near     the top token is the higher index of two whose logits differ by 2.5e-4 relative, 25 times the
             harness's tolerance: probabilities rounded to bf16 often cannot tell them apart
"""

from __future__ import annotations

import torch

from reference import Noise, SpecBatch, tree
from specverify.checks.common import call_example, paths
from specverify.checks.large_vocab import TILE, structural_vocabs
from specverify.checks.runner import Context, Needs, NotApplicable
from specverify.checks.tree_cases import one_hot_trees
from specverify.strategies import Example

GREEDY_CASES = ("chain", "block", "tree", "split_vocab")
V = 64
BATCHES = 2                  # batches a path and case
NEAR = 2.5e-4                # the near style's relative gap of the two top logits
CHAIN_DRAFTS = (0, 1, 2, 3, 4, 4, 3, 2, 1, 4)
LARGE_DRAFTS = (2, 0, 3, 1)
# one request's tree a topology: each node's parent (-1: the root), parents before children
TREES = ((), (-1, -1, -1, 0, 0, 2), (-1, 0, 1, 2), (-1, -1, 0, 0, 1, 1, 3), (-1, -1, -1, -1), (-1, 0, 0, 1, 1, 2, 2))


def greedy_needs(case: str) -> Needs:
    return Needs(method=case if case in ("block", "tree") else "standard", noise="any")


def _pair(g: torch.Generator, vocab: int) -> tuple[int, int]:
    """Two ids a < b: anywhere at V = 64; above it a in the row's first half and b in a later tile of its second."""
    if vocab == V:
        a, b = sorted(torch.randperm(V, generator=g)[:2].tolist())
        return a, b
    half = vocab // 2
    a = int(torch.randint(0, half, (1,), generator=g))
    return a, int(torch.randint(max(half, (a // TILE + 1) * TILE), vocab, (1,), generator=g))


def _row(g: torch.Generator, vocab: int = V) -> tuple[torch.Tensor, int, int | None]:
    """(logits [vocab] float32, the argmax, its rival or None): a row of a random style (module docstring)."""
    logits = torch.randn(vocab, generator=g) * 2
    top = float(logits.max()) + 3.0
    style = int(torch.randint(0, 3, (1,), generator=g))
    a, b = _pair(g, vocab)
    if style == 0:
        logits[a] = top
        return logits, a, None
    if style == 1:
        logits[a] = logits[b] = top
        return logits, a, b
    logits[b], logits[a] = top, top * (1 - NEAR)
    return logits, b, a


def _other(g: torch.Generator, avoid: set, vocab: int = V) -> int:
    """A token outside ``avoid``."""
    while True:
        x = int(torch.randint(0, vocab, (1,), generator=g))
        if x not in avoid:
            return x


def chain_batch(g: torch.Generator, max_draft: int | None = None, vocab: int = V,
                drafts_per_request: tuple = CHAIN_DRAFTS) -> SpecBatch:
    """All-greedy one-hot chains (``drafts_per_request``, at most ``max_draft``) at ``vocab``: each draft is its
    row's argmax half the time, the row's rival where it has one a quarter, another token otherwise."""
    k = [min(n, max_draft) if max_draft else n for n in drafts_per_request]
    drafts, rows = [], []
    for n in k:
        for j in range(n + 1):
            logits, top, rival = _row(g, vocab)
            rows.append(logits)
            if j == n:
                break
            pick = float(torch.rand(1, generator=g))
            drafts.append(top if pick < 0.5 else rival if rival is not None and pick < 0.75 else
                          _other(g, {top}, vocab))
    return SpecBatch(torch.tensor(k), torch.tensor(drafts, dtype=torch.int64), torch.stack(rows), None,
                     torch.zeros(len(k)))


def tree_batch(g: torch.Generator, max_depth: int | None = None) -> SpecBatch:
    """All-greedy one-hot trees (TREES no deeper than ``max_depth``): a node's children are distinct tokens,
    one of them its row's argmax in three nodes of four, at a random place, and its rival among them where it
    has one."""
    topologies = [t for t in TREES if not max_depth or (tree.max_depth(torch.tensor(t, dtype=torch.int64),
                                                                        torch.tensor([len(t)])) <= max_depth)]
    trees = []
    for topology in topologies:
        node_rows = [_row(g) for _ in range(len(topology) + 1)]
        kids = tree.children(list(topology))
        chosen = [0] * len(topology)
        for node, (_, top, rival) in enumerate(node_rows):
            siblings = kids[node]
            if not siblings:
                continue
            picks = [top] if float(torch.rand(1, generator=g)) < 0.75 else []
            picks += [rival] if rival is not None and rival not in picks else []
            while len(picks) < len(siblings):
                picks.append(_other(g, {top, *picks}))
            order = torch.randperm(len(siblings), generator=g).tolist()
            for place, c in enumerate(siblings):
                chosen[c] = picks[order[place]]
        trees.append((len(topology), topology, chosen, [r for r, _, _ in node_rows]))
    return one_hot_trees(trees, temperature=0.0)


def greedy_batch(case: str, g: torch.Generator, caps=None, vocab: int = V) -> SpecBatch:
    """The case's batch, within the drafts and tree depth ``caps`` declares (``vocab``: split_vocab's size)."""
    if case in ("chain", "block"):
        return chain_batch(g, getattr(caps, "max_draft", None))
    if case == "split_vocab":
        return chain_batch(g, getattr(caps, "max_draft", None), vocab, LARGE_DRAFTS)
    if case == "tree":
        return tree_batch(g, getattr(caps, "max_tree_depth", None))
    raise ValueError(f"unknown greedy case {case!r}")


def greedy_batches(case: str, profile, caps=None) -> list[tuple[str, SpecBatch, torch.Generator]]:
    """(label, batch, the generator that built it) of each batch the check calls on ``case``: BATCHES at V = 64, one
    at each of split_vocab's sizes; the generator goes on to draw the call's noise and seeds."""
    sizes = [(vocab, 0) for vocab in structural_vocabs(profile)] if case == "split_vocab" else \
        [(V, i) for i in range(BATCHES)]
    built = []
    for vocab, i in sizes:
        g = torch.Generator().manual_seed(9_000 + 100 * GREEDY_CASES.index(case) + i + vocab)
        built.append((f"all-greedy {case} batch {i} at V = {vocab:,}", greedy_batch(case, g, caps, vocab), g))
    return built


def check_greedy_agreement(ctx: Context, case: str) -> None:
    """Every declared noise path on every batch of ``greedy_batches``: the reference's tokens (and a tree's
    accepted path) exactly, through ``ctx.agree``."""
    method = greedy_needs(case).method
    declared = paths(ctx, prefer_seeded=False)
    if not declared:
        raise NotApplicable("backend declares neither injected noise nor seeds: its calls cannot be made")
    requests = 0
    for label, batch, g in greedy_batches(case, ctx.profile, ctx.backend.capabilities):
        noise = Noise.draw(batch, g)     # the reference's greedy rule reads none of it
        seeds = torch.randint(0, 2 ** 62, (batch.num_requests,), generator=g)
        for path in declared:
            example = Example(batch, noise, seeds, f"{label} ({path})")
            got, _ = call_example(ctx, example, seeded=path == "seeded", method=method)
            ctx.agree(batch, got, noise, where=example.description, method=method)
            requests += batch.num_requests
    ctx.result.message = f"{requests} greedy requests on {' and '.join(declared)} noise"
