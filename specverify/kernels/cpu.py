"""A vectorized PyTorch sampler: the reference's three rules over the whole batch at once, in float32.

Shapes (B requests, T = sum k_b drafts, K = max k_b, V vocabulary):

    batch.target_logits [T + B, V]   read once for the draft rows (p(x) only), once for the B extra rows
    batch.draft_probs   [T, V]       gathered at the draft token, and at the B rejected rows
    noise.uniform       [T], noise.exponential [B, V]

The call is a pipeline of small methods (``temperatures``, ``layout``, ``draft_rows``, ``draft_probs_for``,
``exponential_for``, ``target_token_probs``, ``target_probs``, ``accept_mask``, ``greedy_argmax``,
``synthetic_rates``, ``synthetic_accept``, ``count_accepted``, ``residual``, ``race``, ``assemble_output``)
so that each mutant in ``specverify.mutants`` overrides one of them and breaks exactly one thing.

Why it is fast: acceptance needs only p_j(x) = 1 / sum_v exp((l_v - l_x) / t), one fused pass over a
draft row, never the whole softmax; the full distribution (softmax, residual, exponential race) is
built only for the one row per request that emits the extra token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference import Noise, SpecBatch, SpecOutput
from reference.sample import resolve_noise, synthetic_rates_f32
from specverify.backends import ALL_LOGIT_DTYPES, Backend, Capabilities

# Elements per row tile of the p(x) pass: large draft batches are processed in tiles of about 1 MiB
# of float32 so that the elementwise temporaries stay in cache instead of costing a fresh mmap (and its
# page faults) per operation; the loop is over fixed-size tiles, never over requests or positions.
TILE_ELEMENTS = 1 << 18


@dataclass(frozen=True)
class Layout:
    """Index bookkeeping of a ragged batch, all int64 on the batch's device.

    draft_offsets [B + 1]  request b's drafts are positions draft_offsets[b] : draft_offsets[b + 1]
    logit_offsets [B + 1]  request b's k_b + 1 logit rows start at logit_offsets[b]
    request       [T]      request of each draft position
    position      [T]      j, the position of each draft inside its request
    padded        [B, K]   flat draft index of (b, j), clamped to a valid index where j >= k_b
    valid         [B, K]   j < k_b
    """

    draft_offsets: torch.Tensor
    logit_offsets: torch.Tensor
    request: torch.Tensor
    position: torch.Tensor
    padded: torch.Tensor
    valid: torch.Tensor


class CpuBackend(Backend):
    """Vectorized PyTorch backend: same call and same results as ``reference.sample`` (float32 math)."""

    name = "cpu"
    capabilities = Capabilities(
        devices=frozenset({"cpu", "cuda"}), logit_dtypes=ALL_LOGIT_DTYPES,
        notes=("pure PyTorch, float32 math; seeded noise is the reference's Philox stream, drawn on the CPU",))

    # ---- the call -------------------------------------------------------------------------------
    def _sample(self, batch: SpecBatch, *, method: str, noise: Noise | None, seed,
                synthetic_acceptance_rate: float | None, num_speculative_steps: int | None) -> SpecOutput:
        device = batch.device
        if noise is None:  # seeded path: the reference's own Philox stream (injected noise is validated already)
            noise = resolve_noise(batch, None, seed)
        uniform = noise.uniform.to(device=device, dtype=torch.float32)
        exponential = self.exponential_for(noise).to(device=device, dtype=torch.float32)

        B, T, V = batch.num_requests, batch.num_drafts, batch.vocab_size
        lay = self.layout(batch)
        temperature = self.temperatures(batch)                     # [B] float32, 0 = greedy
        is_greedy = temperature == 0
        x = batch.draft_token_ids
        draft_greedy = is_greedy[lay.request]                      # [T]
        q = self.draft_probs_for(batch)                            # [T, V] float32 or None (one-hot)

        # ---- acceptance at every draft position --------------------------------------------------
        if method == "synthetic":
            rates = self.synthetic_rates(synthetic_acceptance_rate, num_speculative_steps).to(device)
            accept = self.synthetic_accept(uniform, rates[lay.position])
        else:
            rows = self.draft_rows(lay)
            accept = torch.zeros(T, dtype=torch.bool, device=device)
            rand_idx = torch.nonzero(~draft_greedy).squeeze(1)
            if rand_idx.numel():
                t_rand = temperature[lay.request[rand_idx]]
                p_x = self.target_token_probs(batch.target_logits, rows[rand_idx], x[rand_idx], t_rand)
                q_x = torch.ones_like(p_x) if q is None else q[rand_idx, x[rand_idx]]
                accept[rand_idx] = self.accept_mask(uniform[rand_idx], p_x, q_x)
            greedy_idx = torch.nonzero(draft_greedy).squeeze(1)
            if greedy_idx.numel():
                top = self.greedy_argmax(batch.target_logits.index_select(0, rows[greedy_idx]))
                accept[greedy_idx] = x[greedy_idx] == top

        accept_padded = accept[lay.padded] & lay.valid if T else torch.zeros((B, 0), dtype=torch.bool,
                                                                                device=device)
        num_accepted = self.count_accepted(accept_padded)          # [B]
        rejected = num_accepted < batch.num_draft_tokens          # [B]

        # ---- the one extra token per request: recovered at the first rejection, or the bonus ---------
        extra_row = lay.logit_offsets[:-1] + num_accepted          # [B] logit row that emits it
        extra = torch.empty(B, dtype=torch.int64, device=device)
        greedy_req = torch.nonzero(is_greedy).squeeze(1)
        if greedy_req.numel():
            extra[greedy_req] = self.greedy_argmax(batch.target_logits.index_select(0, extra_row[greedy_req]))
        rand_req = torch.nonzero(~is_greedy).squeeze(1)
        if rand_req.numel():
            w = self.target_probs(batch.target_logits.index_select(0, extra_row[rand_req]), temperature[rand_req])
            if method == "standard":
                # Only requests that rejected a draft sample the residual; the others keep the bonus p_k.
                rej = torch.nonzero(rejected[rand_req]).squeeze(1)
                if rej.numel():
                    b = rand_req[rej]
                    t_idx = lay.draft_offsets[b] + num_accepted[b]     # the rejected draft position
                    q_rej = self._one_hot(x[t_idx], V, w.dtype) if q is None else q.index_select(0, t_idx)
                    w[rej] = self.residual(w[rej], q_rej)
            extra[rand_req] = self.race(w, exponential.index_select(0, rand_req))

        draft_padded = x[lay.padded] if T else torch.zeros((B, 0), dtype=torch.int64, device=device)
        return self.assemble_output(draft_padded, num_accepted, extra, batch.max_draft)

    # ---- overridable pieces (each mutant replaces one) ---------------------------------------------
    def temperatures(self, batch: SpecBatch) -> torch.Tensor:
        """[B] float32 per-request temperature; 0 marks a greedy request."""
        return batch.temperature.to(torch.float32)

    def layout(self, batch: SpecBatch) -> Layout:
        k = batch.num_draft_tokens
        B, T, K, device = batch.num_requests, batch.num_drafts, batch.max_draft, k.device
        d_off = torch.zeros(B + 1, dtype=torch.int64, device=device)
        d_off[1:] = torch.cumsum(k, 0)
        l_off = d_off + torch.arange(B + 1, device=device)
        request = torch.repeat_interleave(torch.arange(B, device=device), k)
        position = torch.arange(T, device=device) - d_off[request]
        j = torch.arange(K, device=device)
        valid = j[None, :] < k[:, None]
        padded = (d_off[:-1, None] + j[None, :]).clamp(max=max(T - 1, 0))
        return Layout(d_off, l_off, request, position, padded, valid)

    def draft_rows(self, lay: Layout) -> torch.Tensor:
        """[T] logit row of each draft position: request b's row j is logit_offsets[b] + j."""
        return lay.logit_offsets[lay.request] + lay.position

    def draft_probs_for(self, batch: SpecBatch) -> torch.Tensor | None:
        """q [T, V] in float32, or None for a deterministic drafter (one-hot at the draft token)."""
        return None if batch.draft_probs is None else batch.draft_probs.to(torch.float32)

    def exponential_for(self, noise: Noise) -> torch.Tensor:
        """[B, V] the exponential vector of each request (one per request: it emits one extra token)."""
        return noise.exponential

    def target_token_probs(self, logits: torch.Tensor, rows: torch.Tensor, tokens: torch.Tensor,
                           temperature: torch.Tensor) -> torch.Tensor:
        """[R] float32 p(tokens) for the logit ``rows`` [R] at ``temperature`` [R] (> 0).

        p(x) = 1 / sum_v exp((l_v - l_x) / t): one pass, no max needed; overflow gives exp = inf and
        p(x) = 0, the right limit. l_x = -inf (x outside the support) gives p(x) = 0 exactly.
        """
        R, V = rows.shape[0], logits.shape[1]
        l_x = logits[rows, tokens].to(torch.float32)
        inv_t = 1.0 / temperature
        out = torch.empty(R, dtype=torch.float32, device=logits.device)
        step = max(1, TILE_ELEMENTS // max(V, 1))
        for start in range(0, R, step):
            s = slice(start, start + step)
            z = logits.index_select(0, rows[s]).to(torch.float32)
            z.sub_(l_x[s, None]).mul_(inv_t[s, None]).exp_()
            out[s] = z.sum(1).reciprocal_()
        return torch.where(torch.isneginf(l_x), torch.zeros_like(out), out)

    def target_probs(self, logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
        """[R, V] float32 p = softmax(logits / t) for logit rows [R, V] and temperatures [R] (> 0)."""
        return torch.softmax(logits.to(torch.float32) / temperature[:, None], dim=-1)

    def accept_mask(self, u: torch.Tensor, p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
        """Standard rule: accept iff q(x) > 0 and u * q(x) <= p(x), i.e. with probability min(1, p/q)."""
        return (q_x > 0) & (u * q_x <= p_x)

    def greedy_argmax(self, logits: torch.Tensor) -> torch.Tensor:
        """[R] argmax of logit rows [R, V], lowest index among ties (torch.max documents the first index;
        it is also faster than torch.argmax on the CPU)."""
        return logits.max(dim=1).indices

    def synthetic_rates(self, rate: float, num_speculative_steps: int) -> torch.Tensor:
        """[n] float32 conditional rates c_j = a0 * g**j, exactly the float32 values the reference uses."""
        return synthetic_rates_f32(rate, num_speculative_steps)

    def synthetic_accept(self, u: torch.Tensor, rates: torch.Tensor) -> torch.Tensor:
        """Accept iff u < c_j: probability c_j for u uniform on (0, 1)."""
        return u < rates

    def count_accepted(self, accept_padded: torch.Tensor) -> torch.Tensor:
        """[B] length of the accepted prefix of accept_padded [B, K] (False beyond k_b)."""
        return torch.cumprod(accept_padded.to(torch.int64), dim=1).sum(dim=1)

    def residual(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """max(p - q, 0) per row [R, V], unnormalised; a row that is all zero (p == q up to rounding,
        where rejection has probability 0) falls back to p, as the reference does."""
        r = (p - q).clamp_(min=0)
        empty = r.amax(dim=1) <= 0
        return torch.where(empty[:, None], p, r) if bool(empty.any()) else r

    def race(self, w: torch.Tensor, exponential: torch.Tensor) -> torch.Tensor:
        """[R] exponential race argmax_v w(v) / E(v): a sample of w / sum(w). Entries with w = 0 score 0
        and cannot beat a positive one; ties go to the lowest index, as in the reference."""
        return (w / exponential).max(dim=1).indices

    def assemble_output(self, draft_padded: torch.Tensor, num_accepted: torch.Tensor, extra: torch.Tensor,
                        K: int) -> SpecOutput:
        """token_ids [B, K + 1]: the accepted drafts, the extra token, then -1; every slot written."""
        B, device = num_accepted.shape[0], num_accepted.device
        slot = torch.arange(K + 1, device=device)[None, :]
        n = num_accepted[:, None]
        drafts = torch.cat([draft_padded, torch.full((B, 1), -1, dtype=torch.int64, device=device)], dim=1)
        tail = torch.where(slot == n, extra[:, None], torch.full_like(slot, -1))
        token_ids = torch.empty((B, K + 1), dtype=torch.int64, device=device)
        torch.where(slot < n, drafts, tail, out=token_ids)
        out_accepted = torch.empty(B, dtype=torch.int64, device=device)
        out_accepted.copy_(num_accepted)
        return SpecOutput(token_ids, out_accepted)

    @staticmethod
    def _one_hot(x: torch.Tensor, V: int, dtype) -> torch.Tensor:
        """[R, V] one-hot rows at x [R]: the q of a deterministic drafter (elementwise, no scatter)."""
        return (torch.arange(V, device=x.device)[None, :] == x[:, None]).to(dtype)
