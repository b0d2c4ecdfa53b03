"""Wiring a sampler with its own calling convention into specverify (run it with
``specverify check docs.adapter_example:make_backend`` from the repository root).

The "external" kernel below stands for a production sampler whose convention differs from
specverify's in the usual ways:
  - target probabilities for the draft positions only ([T, V], no bonus rows), already softmaxed;
  - bonus tokens sampled by the caller beforehand and passed in ([B] int32);
  - int32 offsets (cu_num_draft_tokens [B]) instead of per-request counts;
  - an output buffer it fills in place, with -1 as the placeholder.
The adapter converts a SpecBatch and Noise into that convention and back, declares what the kernel
supports (here: the standard rule with injected noise on the CPU) and leaves every check to the harness.
"""

from __future__ import annotations

import torch

from reference import Noise, SpecBatch, SpecOutput
from specverify import Backend, Capabilities

PLACEHOLDER = -1


def external_rejection_sample(out_token_ids: torch.Tensor, cu_num_draft_tokens: torch.Tensor,
                              draft_token_ids: torch.Tensor, target_probs: torch.Tensor,
                              draft_probs: torch.Tensor | None, bonus_token_ids: torch.Tensor,
                              uniform: torch.Tensor, exponential: torch.Tensor, is_greedy: torch.Tensor) -> None:
    """A stand-in for someone else's kernel. out [B, K+1] int32 filled in place; target_probs [T, V]."""
    out_token_ids.fill_(PLACEHOLDER)
    start = 0
    for b, end in enumerate(cu_num_draft_tokens.tolist()):
        for t in range(start, end):
            x = int(draft_token_ids[t])
            p = target_probs[t]
            if is_greedy[b]:
                top = int(torch.argmax(p))
                out_token_ids[b, t - start] = top
                if top != x:
                    break
                continue
            q = draft_probs[t] if draft_probs is not None else torch.nn.functional.one_hot(
                torch.tensor(x), p.shape[0]).to(p.dtype)
            if q[x] > 0 and uniform[t] * q[x] <= p[x]:
                out_token_ids[b, t - start] = x
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
                                devices=frozenset({"cpu"}))

    def _sample(self, batch: SpecBatch, *, method, noise: Noise, seed, synthetic_acceptance_rate,
                num_speculative_steps) -> SpecOutput:
        B, K = batch.num_requests, batch.max_draft
        logits = batch.target_logits.float()
        bonus_rows = batch.logit_offsets()[1:] - 1
        is_bonus = torch.zeros(logits.shape[0], dtype=torch.bool)
        is_bonus[bonus_rows] = True
        temperature = batch.temperature.float()
        row_temp = torch.repeat_interleave(temperature, batch.num_draft_tokens + 1)
        is_greedy_row = row_temp == 0
        # greedy rows keep their logits (argmax is all that matters), random rows become probabilities
        probs = torch.where(is_greedy_row[:, None], torch.softmax(logits, -1),
                            torch.softmax(logits / torch.where(is_greedy_row, 1.0, row_temp)[:, None], -1))
        # the caller samples the bonus token: argmax of logits (greedy) or the exponential race on p
        bonus_p = probs[bonus_rows]
        race = torch.where(bonus_p > 0, bonus_p / noise.exponential, torch.full_like(bonus_p, -1.0))
        bonus = torch.where(temperature == 0, logits[bonus_rows].argmax(-1), race.argmax(-1)).to(torch.int32)
        draft_rows_probs = probs[~is_bonus]
        # the kernel expects argmax over raw logits for greedy rows: pass logits there
        draft_rows_probs = torch.where(is_greedy_row[~is_bonus][:, None], logits[~is_bonus], draft_rows_probs)
        out = torch.empty(B, K + 1, dtype=torch.int32)
        external_rejection_sample(out, torch.cumsum(batch.num_draft_tokens, 0).to(torch.int32),
                                  batch.draft_token_ids.to(torch.int32), draft_rows_probs, batch.draft_probs,
                                  bonus, noise.uniform, noise.exponential, temperature == 0)
        token_ids = out.to(torch.int64)
        num_accepted = torch.zeros(B, dtype=torch.int64)
        # This kernel reports no count: a rejected draft x is never re-emitted (the residual is 0 at x
        # whenever x can be rejected), so the accepted prefix is where the output still equals the drafts.
        offsets = batch.draft_offsets().tolist()
        for b in range(B):
            k = int(batch.num_draft_tokens[b])
            drafts = batch.draft_token_ids[offsets[b]:offsets[b] + k]
            emitted = token_ids[b, :k]
            same = (emitted == drafts).tolist() + [False]
            num_accepted[b] = same.index(False)
        return SpecOutput(token_ids, num_accepted)


def make_backend() -> ExternalSamplerAdapter:
    return ExternalSamplerAdapter()
