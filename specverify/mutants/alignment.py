"""A mis-aligning variant of ``reference.align_draft_probs`` (seed 002), same signature."""

from __future__ import annotations

import torch


def align_draft_probs_skipping_nothing(cached_probs: torch.Tensor, cached_request_ids: list, request_ids: list,
                                       num_draft_tokens: torch.Tensor) -> torch.Tensor:
    """Draft probs mis-aligned when a zero-draft request precedes (seed 002): the j-th request *with drafts*
    is looked up as request_ids[j], as if zero-draft requests had no slot in the batch.

    cached_probs [R, K, V] -> [T, V]. Correct whenever no zero-draft request comes before a drafted one.
    """
    row_of = {rid: i for i, rid in enumerate(cached_request_ids)}
    drafted_counts = [k for k in num_draft_tokens.tolist() if k > 0]
    rows = [cached_probs[row_of[request_ids[j]], :k] for j, k in enumerate(drafted_counts)]
    if not rows:
        return cached_probs.new_zeros((0, cached_probs.shape[2]))
    return torch.cat(rows, dim=0).contiguous()
