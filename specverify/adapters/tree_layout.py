"""Token trees (SPEC 3.8) in SGLang's linked-list form, and back.

SGLang's tree verifiers take, per request, a fixed number W = N + 1 of slots: slot 0 is the root (the
request's last verified token), slots 1..N hold draft nodes. Each tensor is [B, W] int64:

    candidates            the token at each slot (slot 0: the root's own token)
    retrive_index         the flattened position b * W + slot of each slot (rows of the [B * W, ...] inputs)
    retrive_next_token    the first child of each slot, -1 when it has none
    retrive_next_sibling  the next sibling of each slot, -1 after the last (-1 at the root)

Siblings are linked in increasing slot order, which is the order they are tried. In specverify's layout
request b's node i sits at slot i + 1, and its target row is row i + 1 of the request's N_b + 1 rows, so
with the slots' target rows laid out at retrive_index the two layouts read the same rows.

    to_linked_lists(num_draft_tokens [B], draft_token_ids [T], tree_parents [T] or None, ...) -> LinkedTrees
    from_linked_lists(candidates, retrive_next_token, retrive_next_sibling, retrive_index=None) -> FlatTrees

A ragged batch pads each request's unused slots (token -1, unlinked); ``from_linked_lists`` keeps the
nodes reachable from the root, in increasing slot order, so padding and unlinked slots drop out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference.batch import PLACEHOLDER


@dataclass(frozen=True)
class LinkedTrees:
    """SGLang's form, each tensor [B, W] int64 (module docstring)."""

    candidates: torch.Tensor
    retrive_index: torch.Tensor
    retrive_next_token: torch.Tensor
    retrive_next_sibling: torch.Tensor


@dataclass(frozen=True)
class FlatTrees:
    """specverify's form: num_draft_tokens [B], draft_token_ids [T], tree_parents [T]; root_tokens [B] (slot 0's
    candidate); slots [T] the slot each node came from; rows [T + B] the flattened row (retrive_index) of each
    of the batch's target rows, request-major, root first: ``target_logits = sglang_rows[rows]``."""

    num_draft_tokens: torch.Tensor
    draft_token_ids: torch.Tensor
    tree_parents: torch.Tensor
    root_tokens: torch.Tensor
    slots: torch.Tensor
    rows: torch.Tensor


def to_linked_lists(num_draft_tokens: torch.Tensor, draft_token_ids: torch.Tensor,
                    tree_parents: torch.Tensor | None = None, root_tokens: torch.Tensor | None = None,
                    width: int | None = None) -> LinkedTrees:
    """SGLang's form of a batch's trees (``tree_parents`` None: chains). ``root_tokens`` [B] fills slot 0
    (-1 when not given); ``width`` W is the slots per request, at least max N_b + 1 (the default)."""
    k, device = num_draft_tokens, num_draft_tokens.device
    B, T = k.shape[0], draft_token_ids.shape[0]
    need = int(k.max()) + 1 if B else 1
    W = need if width is None else width
    if W < need:
        raise ValueError(f"width must be at least max num_draft_tokens + 1 = {need}, got {W}")
    start = torch.cumsum(k, 0) - k
    request = torch.repeat_interleave(torch.arange(B, device=device), k)
    slot = torch.arange(T, device=device) - start[request] + 1                 # node i of its request: slot i + 1
    parents = slot - 2 if tree_parents is None else tree_parents.to(device)
    flat = request * W + slot
    parent_flat = request * W + parents + 1                                    # the root is slot 0

    candidates = torch.full((B * W,), PLACEHOLDER, dtype=torch.int64, device=device)
    if root_tokens is not None:
        candidates[torch.arange(B, device=device) * W] = root_tokens.to(device=device, dtype=torch.int64)
    candidates[flat] = draft_token_ids
    # a parent's first child is its child of the lowest slot
    next_token = torch.full((B * W,), B * W, dtype=torch.int64, device=device)
    next_token.scatter_reduce_(0, parent_flat, slot, "amin")
    next_token = torch.where(next_token == B * W, -1, next_token)
    # the children of one parent, in increasing slot order, are consecutive after a stable sort by parent
    order = torch.sort(parent_flat, stable=True).indices
    same = parent_flat[order[1:]] == parent_flat[order[:-1]]
    next_sibling = torch.full((B * W,), -1, dtype=torch.int64, device=device)
    next_sibling[flat[order[:-1][same]]] = slot[order[1:][same]]
    index = torch.arange(B * W, dtype=torch.int64, device=device)
    return LinkedTrees(*(t.view(B, W) for t in (candidates, index, next_token, next_sibling)))


def from_linked_lists(candidates: torch.Tensor, retrive_next_token: torch.Tensor, retrive_next_sibling: torch.Tensor,
                      retrive_index: torch.Tensor | None = None) -> FlatTrees:
    """specverify's form of SGLang's trees (each tensor [B, W] int64). Every node reachable from the root
    becomes a node, numbered in increasing slot order. A ValueError names the request and slot where a
    link leaves [1, W), a slot is reached twice (a cycle or two parents), a child's slot is not after its
    parent's (not topological), or siblings are linked out of increasing slot order (they would be tried
    in another order than the one specverify's layout gives them)."""
    tensors = {"candidates": candidates, "retrive_next_token": retrive_next_token,
               "retrive_next_sibling": retrive_next_sibling}
    if retrive_index is not None:
        tensors["retrive_index"] = retrive_index
    shape = tuple(candidates.shape)
    for name, t in tensors.items():
        if t.dim() != 2 or tuple(t.shape) != shape or t.dtype != torch.int64:
            raise ValueError(f"{name} must be [B, W] int64 like candidates {shape}, got {t.dtype} {tuple(t.shape)}")
    B, W = shape
    if W < 1:
        raise ValueError(f"candidates must have at least the root slot, got shape {shape}")
    first, sibling = retrive_next_token.tolist(), retrive_next_sibling.tolist()
    counts, slots, parents = [], [], []
    for b in range(B):
        parent_of = _walk(b, first[b], sibling[b], W)
        order = sorted(parent_of)                               # reachable slots, increasing
        local = {s: i for i, s in enumerate(order)}
        counts.append(len(order))
        slots += order
        parents += [-1 if parent_of[s] == 0 else local[parent_of[s]] for s in order]
    device = candidates.device
    counts_t = torch.tensor(counts, dtype=torch.int64, device=device)
    slots_t = torch.tensor(slots, dtype=torch.int64, device=device)
    request = torch.repeat_interleave(torch.arange(B, device=device), counts_t)
    index = (torch.arange(B * W, dtype=torch.int64, device=device).view(B, W) if retrive_index is None
             else retrive_index)
    # target rows: per request the root's slot, then its nodes' slots
    row_request = torch.repeat_interleave(torch.arange(B, device=device), counts_t + 1)
    row_slot = torch.zeros(B + slots_t.shape[0], dtype=torch.int64, device=device)
    is_node = torch.ones_like(row_slot, dtype=torch.bool)
    is_node[torch.cumsum(counts_t + 1, 0) - (counts_t + 1)] = False
    row_slot[is_node] = slots_t
    return FlatTrees(counts_t, candidates[request, slots_t], torch.tensor(parents, dtype=torch.int64, device=device),
                     candidates[:, 0].clone(), slots_t, index[row_request, row_slot])


def _walk(b: int, first: list[int], sibling: list[int], W: int) -> dict[int, int]:
    """{slot: parent slot} of the slots reachable from request b's root (slot 0), checking every link."""
    if sibling[0] != -1:
        raise ValueError(f"retrive_next_sibling: request {b}, the root (slot 0) has a sibling {sibling[0]}")
    parent_of: dict[int, int] = {}
    stack = [0]
    while stack:
        parent = stack.pop()
        child, previous, link = first[parent], parent, "retrive_next_token"
        while child != -1:
            if not 1 <= child < W:
                raise ValueError(f"{link}: request {b}, slot {previous} links to {child}, outside the node "
                                 f"slots [1, {W})")
            if child in parent_of:
                raise ValueError(f"{link}: request {b}, slot {child} is reached twice (a cycle, or two parents)")
            if child <= previous:
                why = ("a child's slot must come after its parent's (topological order)" if previous == parent
                       else "siblings are linked in increasing slot order")
                raise ValueError(f"{link}: request {b}, slot {previous} links to slot {child}: {why}")
            parent_of[child] = parent
            stack.append(child)
            child, previous, link = sibling[child], child, "retrive_next_sibling"
    return parent_of
