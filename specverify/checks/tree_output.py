"""The output guard's reading of a token-tree call (SPEC 3.8): the accepted tokens are those of the
path in ``accepted_nodes``, which must be a root-to-node path of ``num_accepted`` nodes.

``path_tokens`` gives, for a batch with tree_parents, the tokens the accepted slots must hold [B, W]
and the requests whose path is wrong, where the batch lives, and what is wrong with each on demand;
``runner.output_problems`` uses them in place of the chain's draft slots. Vectorised: one gather per
check, whatever the batch size.
"""

from __future__ import annotations

import torch

from reference import SpecBatch


def path_tokens(batch: SpecBatch, nodes, n: torch.Tensor, width: int) -> tuple:
    """(tokens [B, width] the accepted slots must hold, -2 elsewhere; flagged [B] bool, the requests whose
    path is wrong; describe() -> {request: problem}) for a batch of trees, given ``accepted_nodes`` and
    num_accepted n [B] (int64, each in [0, k_b]), computed on n's device: a valid call costs no host
    copy. tokens is None, with the problem under key -1, when accepted_nodes is missing or of the wrong
    type or shape."""
    B, K = batch.num_requests, batch.max_draft
    if not isinstance(nodes, torch.Tensor):
        return None, None, lambda: {-1: f"accepted_nodes is {type(nodes).__name__}: a tree call returns int64 "
                                        f"[B, >= K] = [{B}, >= {K}]"}
    if nodes.dtype != torch.int64 or nodes.dim() != 2 or nodes.shape[0] != B or nodes.shape[1] < K:
        return None, None, lambda: {-1: f"accepted_nodes has shape {tuple(nodes.shape)} and dtype {nodes.dtype}; "
                                        f"expected int64 [B, >= K] = [{B}, >= {K}]"}
    where = n.device
    nodes = nodes.to(where)
    wide = torch.full((B, width), -1, dtype=torch.int64, device=where)
    cut = min(width, nodes.shape[1])
    wide[:, :cut] = nodes[:, :cut]
    k, d_off = batch.num_draft_tokens.to(where), batch.draft_offsets().to(where)[:-1]
    pos = torch.arange(width, device=where)
    accepted = pos[None, :] < n[:, None]
    inside = (wide >= 0) & (wide < k[:, None])
    flat = (d_off[:, None] + wide.clamp(min=0)).clamp(max=max(batch.num_drafts - 1, 0))
    T = batch.num_drafts
    parents = batch.tree_parents.to(where)[flat] if T else torch.full_like(wide, -1)
    tokens = batch.draft_token_ids.to(where)[flat] if T else torch.full_like(wide, -2)
    previous = torch.cat([torch.full((B, 1), -1, dtype=torch.int64, device=where), wide[:, :-1]], dim=1)
    off_tree = accepted & ~inside
    unlinked = accepted & inside & (parents != previous)
    unpadded = (~accepted & (wide != -1)).any(1) | (nodes[:, cut:] != -1).any(1)
    flagged = off_tree.any(1) | unlinked.any(1) | unpadded

    def describe() -> dict:
        problems = {}
        for b in flagged.nonzero().flatten().tolist():
            a, path = int(n[b]), wide[b].tolist()
            if bool(off_tree[b].any()):
                problems[b] = f"accepted_nodes {path[:a]} holds a node outside [0, {int(k[b])})"
            elif bool(unlinked[b].any()):
                j = int(unlinked[b].nonzero()[0])
                want = "a child of the root" if j == 0 else f"a child of node {path[j - 1]}"
                problems[b] = (f"accepted_nodes {path[:a]} is not a root-to-node path: node {path[j]} at depth "
                               f"{j + 1} is not {want}")
            else:
                problems[b] = f"accepted_nodes after the {a} accepted nodes are {nodes[b, a:].tolist()}, expected -1"
        return problems

    return torch.where(accepted & inside, tokens, -2), flagged, describe


__all__ = ["path_tokens"]
