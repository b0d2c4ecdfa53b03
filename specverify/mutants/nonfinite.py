"""Mutants of SPEC 3.6 (non-finite target rows): each correct on finite batches."""

from __future__ import annotations

import torch

from reference import SpecBatch
from specverify.kernels.cpu import CpuBackend


class NanRowEmitsIdPastV(CpuBackend):
    """A request with a non-finite row emits id V (a NaN race with no winner reported as 'one past the
    end'), as an all-NaN row emitting 8191 or an id >= V did in production."""

    name = "nan_row_emits_id_past_v"

    def _sample(self, batch, **kwargs):
        out = super()._sample(batch, **kwargs)
        if batch.allow_nonfinite:
            bad = torch.nonzero(batch.nonfinite_requests()).flatten()
            out.token_ids[bad, out.num_accepted[bad]] = batch.vocab_size
        return out


class NanLeaksAcrossRequests(CpuBackend):
    """Logits shifted by the batch-wide maximum before the softmax: harmless for finite batches (softmax
    is shift invariant), but one NaN anywhere makes every request's target NaN."""

    name = "nan_leaks_across_requests"

    def _sample(self, batch, **kwargs):
        shifted = batch.target_logits - batch.target_logits.float().max().to(batch.target_logits.dtype)
        batch = SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, shifted, batch.draft_probs, batch.temperature,
                          batch.top_k, batch.top_p, batch.min_p, allow_nonfinite=True)
        return super()._sample(batch, **kwargs)
