"""Wiring a sampler with its own calling convention into specverify (run it with
``specverify check docs.adapter_example:make_backend`` from the repository root).

The "external" kernel below stands for a production sampler whose convention differs from
specverify's in the usual ways:
  - target probabilities for the draft positions only ([T, V], no bonus rows), already softmaxed,
    one-hot at the argmax for greedy requests;
  - bonus tokens sampled by the caller beforehand and passed in ([B] int32);
  - int32 ids and cumulative offsets (cu_num_draft_tokens [B]) instead of per-request counts;
  - an output buffer it fills in place, padded with V, and a counter it adds accepted drafts into.
The adapter converts with ``specverify.adapters.conventions``, declares what the kernel supports
(the standard rule with injected noise on the CPU) and leaves every check to the harness.
"""

from __future__ import annotations

import torch

from reference import Noise, SpecBatch, SpecOutput
from specverify import Backend, Capabilities
from specverify.adapters import conventions


def external_rejection_sample(out_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
                              draft_token_ids: torch.Tensor, target_probs: torch.Tensor, draft_probs: torch.Tensor,
                              bonus_token_ids: torch.Tensor, uniform: torch.Tensor, exponential: torch.Tensor,
                              num_emitted_drafts: torch.Tensor) -> None:
    """A stand-in for someone else's kernel: out [B, K + 1] int32 filled in place and padded with V;
    target_probs and draft_probs [T, V]; cu_num_draft_tokens [B] inclusive int32 offsets; the accepted
    drafts of each request are added into num_emitted_drafts [B] int32."""
    out_token_ids.fill_(target_probs.shape[1])
    start = 0
    for b, end in enumerate(cu_num_draft_tokens.tolist()):
        for t in range(start, end):
            x, p, q = int(draft_token_ids[t]), target_probs[t], draft_probs[t]
            if q[x] > 0 and uniform[t] * q[x] <= p[x]:
                out_token_ids[b, t - start] = x
                num_emitted_drafts[b] += 1
                continue
            residual = torch.clamp(p - q, min=0)
            residual = residual if bool(residual.any()) else p
            score = torch.where(residual > 0, residual / exponential[b], torch.full_like(residual, -1.0))
            out_token_ids[b, t - start] = int(torch.argmax(score))
            break
        else:
            out_token_ids[b, end - start] = bonus_token_ids[b]
        start = end


class ExternalSamplerAdapter(Backend):
    """specverify's convention on the outside, the external kernel's on the inside."""

    name = "external-example"
    capabilities = Capabilities(methods=frozenset({"standard"}), noise=frozenset({"injected"}),
                                devices=frozenset({"cpu"}), bonus_sampled_by_caller=True)

    def _sample(self, batch: SpecBatch, *, method, noise: Noise, seed, synthetic_acceptance_rate,
                num_speculative_steps) -> SpecOutput:
        out = torch.empty(batch.num_requests, batch.max_draft + 1, dtype=torch.int32)
        external_rejection_sample(
            out, conventions.cumulative_offsets(batch.num_draft_tokens, with_zero=False),
            conventions.int32_ids(batch.draft_token_ids),
            conventions.target_probs(batch)[conventions.draft_logit_rows(batch)], conventions.draft_probs(batch),
            conventions.int32_ids(conventions.bonus_tokens(batch, noise)), noise.uniform, noise.exponential,
            accepted := conventions.zeroed_counter(batch.num_requests, batch.device))
        return SpecOutput(conventions.from_kernel_padding(out, batch.vocab_size), accepted.to(torch.int64))


def make_backend() -> ExternalSamplerAdapter:
    return ExternalSamplerAdapter()
