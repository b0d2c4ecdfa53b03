"""Token trees (EAGLE, Medusa, SpecInfer), SPEC 3.8: recursive rejection sampling over a tree of drafts.

One request with N nodes in topological order: parents [N] (local indices, -1 = a child of the root,
parents[i] < i), tokens x [N] (-1 = placeholder), target rows p [N + 1, V] float64 (row 0 the root's,
row i + 1 node i's: p' of SPEC 3.4), proposals q [N, V] (q_i: what node i's token was drawn from given the
siblings before it) and uniforms u [N]:

    node <- root, r <- p_root
    try the children c of node in sibling order (increasing index):
        accept c iff q_c(x_c) > 0 and u_c * q_c(x_c) <= r(x_c)     (probability min(1, r(x_c) / q_c(x_c)))
        accepted: descend, node <- c, r <- p_c
        rejected: r <- norm(max(r - q_c, 0)), try the next sibling
    no child accepted: emit Y ~ r (the exponential race) and stop

r is carried unnormalised with its mass m, r / m being the residual distribution: m = 1 at a node's own
row, so on a single path the test and the residual are reference.leviathan's operations exactly, and a
chain gives the standard rule's tokens bit for bit.
"""

from __future__ import annotations

import torch

from reference import greedy, leviathan
from reference.batch import PLACEHOLDER, SpecBatch

ROOT = -1   # the parent index of a child of the root


# ---- layout -------------------------------------------------------------------------------------
def chain_parents(num_draft_tokens: torch.Tensor) -> torch.Tensor:
    """[T] int64 parents of chains: [-1, 0, 1, ..., k_b - 2] for each request b (k_b = num_draft_tokens [B])."""
    k = num_draft_tokens
    start = torch.cumsum(k, 0) - k
    request = torch.repeat_interleave(torch.arange(k.shape[0], device=k.device), k)
    return torch.arange(request.shape[0], device=k.device) - start[request] - 1


def parents_of(batch: SpecBatch) -> torch.Tensor:
    """[T] the batch's tree_parents, or its chains' parents when it has none."""
    return chain_parents(batch.num_draft_tokens) if batch.tree_parents is None else batch.tree_parents


def depths(parents: torch.Tensor, num_draft_tokens: torch.Tensor) -> torch.Tensor:
    """[T] int64 depth of each node: the number of nodes on the path from the root to it (a child of the
    root has depth 1). ``parents`` [T] local to each request, topological; num_draft_tokens [B]."""
    k = num_draft_tokens
    start = torch.cumsum(k, 0) - k
    request = torch.repeat_interleave(torch.arange(k.shape[0], device=k.device), k)
    parent = torch.where(parents >= 0, parents + start[request], -1)     # flat index of the parent, or -1
    depth = torch.ones_like(parents)
    # One pass per level: after pass d every node of depth <= d + 1 is right (parents come first, so the
    # loop ends after at most max depth passes).
    while True:
        deeper = torch.where(parent >= 0, depth[parent.clamp(min=0)] + 1, 1)
        if torch.equal(deeper, depth):
            return depth
        depth = deeper


def max_depth(parents: torch.Tensor, num_draft_tokens: torch.Tensor) -> int:
    """The deepest node's depth over the batch; 0 when no request has a node."""
    return int(depths(parents, num_draft_tokens).max()) if parents.numel() else 0


def children(parents: list[int]) -> list[list[int]]:
    """children(parents)[node + 1]: the children of ``node`` (ROOT for the root) in sibling order."""
    kids: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, parent in enumerate(parents):
        kids[parent + 1].append(i)
    return kids


# ---- the rule -----------------------------------------------------------------------------------
def mass(r: torch.Tensor) -> torch.Tensor:
    """The sum of r [..., V] over the vocabulary, taken left to right (a running sum): the same bits for a
    row alone and for the row inside a batch, so a vectorised backend can reproduce it."""
    return torch.cumsum(r, dim=-1)[..., -1]


def accepts(u, r_x: torch.Tensor, m, q_x: torch.Tensor) -> bool:
    """The test of one sibling against the residual r / m: q(x) > 0 and u * q(x) <= r(x) / m."""
    return bool(leviathan.accepted(u, r_x / m, q_x))


def after_rejection(r: torch.Tensor, m, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(r', m'): r' = max(r - m q, 0), proportional to max(r / m - q, 0), and its mass. Where that is zero
    everywhere (rounding only) r is kept, as leviathan.residual keeps p."""
    r = leviathan.residual(r, m * q)
    return r, mass(r)


def decide(p: torch.Tensor, q: torch.Tensor, x: list[int], parents: list[int],
           u: list[float]) -> tuple[list[int], torch.Tensor]:
    """(accepted path as local node indices, [V] unnormalised law of the final token) of one random
    request: p [N + 1, V], q [N, V] (a placeholder's row is never read), tokens x, parents and u [N]."""
    kids = children(parents)
    path, node = [], ROOT
    r, m = p[0], 1.0
    while True:
        for c in kids[node + 1]:
            if x[c] == PLACEHOLDER:     # q = 0: never accepted, r unchanged
                continue
            if accepts(u[c], r[x[c]], m, q[c, x[c]]):
                path.append(c)
                node, r, m = c, p[c + 1], 1.0
                break
            r, m = after_rejection(r, m, q[c])
        else:                            # no child accepted, or none to try
            return path, r


def decide_greedy(logits: torch.Tensor, x: list[int], parents: list[int]) -> tuple[list[int], int]:
    """(accepted path, final token) of one greedy request, logits [N + 1, V] float64: descend into the
    first child whose token is the argmax of the current node's row, else emit that argmax."""
    kids = children(parents)
    path, node = [], ROOT
    while True:
        top = greedy.argmax(logits[node + 1])
        match = [c for c in kids[node + 1] if x[c] == top]   # top >= 0: a placeholder never matches
        if not match:
            return path, top
        path.append(match[0])
        node = match[0]
