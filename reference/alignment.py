"""Request alignment (SPEC 4.8): cached per-request draft probabilities in the current batch order.

A drafter caches q per request (in the order of the step that proposed them); the verifier needs
them as [T, V] in the current batch order, skipping zero-draft requests:
cached [a, b, c] with drafts [2, 0, 1] gives [a[:2], c[:1]].
"""

from __future__ import annotations

import torch


def align_draft_probs(cached_probs: torch.Tensor, cached_request_ids: list, request_ids: list,
                      num_draft_tokens: torch.Tensor) -> torch.Tensor:
    """cached_probs [R, K, V] for ``cached_request_ids``; returns [T, V] for ``request_ids``.

    A request with drafts but no cached row is an error naming it, never a silent mis-alignment.
    """
    if cached_probs.dim() != 3 or cached_probs.shape[0] != len(cached_request_ids):
        raise ValueError(f"cached_probs must have shape [R, K, V] with R = {len(cached_request_ids)} cached "
                         f"requests, got {tuple(cached_probs.shape)}")
    counts = num_draft_tokens.tolist()
    if len(counts) != len(request_ids):
        raise ValueError(f"num_draft_tokens has {len(counts)} entries for {len(request_ids)} request ids")
    if len(set(cached_request_ids)) != len(cached_request_ids):
        raise ValueError("cached_request_ids contains duplicates")
    row_of = {rid: i for i, rid in enumerate(cached_request_ids)}
    rows = []
    for rid, k in zip(request_ids, counts):
        if k == 0:
            continue
        if rid not in row_of:
            raise ValueError(f"no cached draft probabilities for request {rid!r}, which has {k} drafts")
        if k > cached_probs.shape[1]:
            raise ValueError(f"request {rid!r} has {k} drafts but only {cached_probs.shape[1]} cached positions")
        rows.append(cached_probs[row_of[rid], :k])
    if not rows:
        return cached_probs.new_zeros((0, cached_probs.shape[2]))
    return torch.cat(rows, dim=0).contiguous()
