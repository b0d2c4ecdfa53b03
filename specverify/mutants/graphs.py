"""GPU-only mutant: the Triton sampler with stale draft state under CUDA-graph replay (seed 004).

Its eager call is the correct TritonBackend's; only its graph-capturable ``sample_into`` is wrong, so
only the ``cuda_graphs`` check (which captures and replays it) can catch it. Needs CUDA.
"""

from __future__ import annotations

import torch

from specverify.kernels.triton_kernels import triton_sample_into
from specverify.kernels.triton_sampler import TritonBackend


class StaleDraftProbsGraph(TritonBackend):
    """sample_into copies draft_probs into a private buffer only outside capture: replays read the warm-up's draft state (seed 004)."""

    name = "stale_draft_probs_graph"

    def __init__(self) -> None:
        super().__init__()
        self._q: torch.Tensor | None = None

    def sample_into(self, out, batch, *, method="standard", noise=None, seed_tensor=None, rates=None) -> None:
        q = batch.draft_probs
        if q is not None:
            if self._q is None or self._q.shape != q.shape or self._q.device != q.device:
                self._q = torch.empty_like(q)
            if not torch.cuda.is_current_stream_capturing():
                self._q.copy_(q)   # the bug: this copy is not part of the captured graph
            q = self._q
        noise_kw = (dict(uniform=noise.uniform, exponential=noise.exponential) if noise is not None
                    else dict(seeds=seed_tensor))
        triton_sample_into(out.token_ids, out.num_accepted, batch.num_draft_tokens, batch.draft_token_ids,
                           batch.target_logits, q, batch.temperature, rates=rates, **noise_kw)
