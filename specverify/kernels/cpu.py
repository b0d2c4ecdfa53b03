"""A vectorized PyTorch sampler: the reference's three rules over the whole batch at once, in float32.

Shapes (B requests, T = sum k_b drafts, K = max k_b, V vocabulary):

    batch.target_logits [T + B, V]   read once for each draft row that decides, and for the bonus rows used
    batch.draft_probs   [T, V]       gathered at the draft token, and at the B rejected rows
    noise.uniform       [T], noise.exponential [B, V]

The call is a pipeline of small methods (``temperatures``, ``layout``, ``draft_rows``, ``draft_probs_for``,
``exponential_for``, ``target_probs``, ``accept_mask``, ``greedy_argmax``,
``synthetic_rates``, ``synthetic_accept``, ``count_accepted``, ``residual``, ``race``, ``assemble_output``)
so that each mutant in ``specverify.mutants`` overrides one of them and breaks exactly one thing.

Why it is fast:

- a decided draft row's softmax is computed once, in cache-sized tiles: p_j(x) for the acceptance test,
  and, at a request's first rejection, the residual and the exponential race right away, so that row is
  never read again;
- like the reference, which stops at a request's first rejection, only the draft rows that can matter
  are read: draft positions are taken in position-major order, a tile of rows at a time, skipping the
  positions of requests that already rejected an earlier draft (the loop is over tiles, never over
  requests or positions; at low acceptance most rows after position 0 are never touched);
- the remaining extra tokens (bonus rows, greedy requests, the synthetic rule) are drawn a tile of rows
  at a time too, so every temporary stays in the CPU's cache; evenly spaced rows are read as strided
  views, not gathered.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference import Noise, SpecBatch, SpecOutput
from reference.sample import resolve_noise, synthetic_rates_f32
from specverify.backends import ALL_LOGIT_DTYPES, Backend, Capabilities

# Elements per row tile: rows are processed in tiles of about 512 KiB of float32 so that the elementwise
# temporaries (two inputs and an output of a binary op) stay in the per-core cache instead of streaming
# through memory; loops are over fixed-size tiles, never over requests or positions.
TILE_ELEMENTS = 1 << 17
# Draft rows decided per step of the position-major walk (each step costs a few small bookkeeping ops).
DECIDE_ELEMENTS = 1 << 21


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
        logits = batch.target_logits
        lay = self.layout(batch)
        temperature = self.temperatures(batch)                     # [B] float32, 0 = greedy
        is_greedy = temperature == 0
        x = batch.draft_token_ids
        q = self.draft_probs_for(batch)                            # [T, V] float32 or None (one-hot)

        # ---- acceptance at every draft position that can matter -----------------------------------
        extra = torch.empty(B, dtype=torch.int64, device=device)
        # fused_at[b] = j when request b's extra token was already drawn while deciding its position j (the
        # first rejection, from the distribution just computed for the acceptance test); -1 otherwise.
        fused_at = torch.full((B,), -1, dtype=torch.int64, device=device)
        if method == "synthetic":
            rates = self.synthetic_rates(synthetic_acceptance_rate, num_speculative_steps).to(device)
            accept = self.synthetic_accept(uniform, rates[lay.position])
        else:
            rows = self.draft_rows(lay)
            first_in_tile = torch.empty(B, dtype=torch.int64, device=device)   # scratch, per tile

            def decide_random(idx: torch.Tensor) -> torch.Tensor:
                ok = torch.empty(idx.shape[0], dtype=torch.bool, device=device)
                for s in self._tiles(torch.arange(idx.shape[0], device=device), V):
                    t = idx[s]
                    b = lay.request[t]
                    p = self.target_probs(self._rows(logits, rows[t]), temperature[b])
                    p_x = p.gather(1, x[t][:, None]).squeeze(1)
                    q_x = torch.ones_like(p_x) if q is None else q[t, x[t]]
                    ok[s] = ok_t = self.accept_mask(uniform[t], p_x, q_x)
                    # A request's first rejection emits its recovered token from this very distribution,
                    # while it is in cache: rejected here, no extra token yet, no earlier rejected position
                    # of the same request in this tile, and p is its logit row (draft_rows not overridden).
                    rej = torch.nonzero(~ok_t).squeeze(1)
                    if rej.shape[0] == 0:
                        continue
                    # A tile lists a request's positions in increasing order, so its first rejection in
                    # the tile is the lowest tile index among its rejections (linear, whatever the tile).
                    b_rej = b[rej]
                    first_in_tile[b_rej] = t.shape[0]
                    first_in_tile.scatter_reduce_(0, b_rej, rej, "amin")
                    rej = rej[first_in_tile[b_rej] == rej]
                    b_rej, t_rej = b[rej], t[rej]
                    keep = (fused_at[b_rej] < 0) & (rows[t_rej] == lay.logit_offsets[b_rej] + lay.position[t_rej])
                    f = rej[keep]
                    if f.shape[0]:
                        t_f, b_f = t[f], b[f]
                        w = p if f.shape[0] == t.shape[0] else p.index_select(0, f)
                        q_rej = self._one_hot(x[t_f], V, w.dtype) if q is None else q.index_select(0, t_f)
                        extra[b_f] = self.race(self.residual(w, q_rej), self._rows(exponential, b_f))
                        fused_at[b_f] = lay.position[t_f]
                return ok

            def decide_greedy(idx: torch.Tensor) -> torch.Tensor:
                return x[idx] == self.greedy_argmax(logits.index_select(0, rows[idx]))

            accept = torch.zeros(T, dtype=torch.bool, device=device)
            draft_greedy = is_greedy[lay.request]                  # [T]
            self._decide_prefixes(accept, lay, ~draft_greedy, decide_random, B, V)
            self._decide_prefixes(accept, lay, draft_greedy, decide_greedy, B, V)

        accept_padded = accept[lay.padded] & lay.valid if T else torch.zeros((B, 0), dtype=torch.bool,
                                                                                device=device)
        num_accepted = self.count_accepted(accept_padded)          # [B]
        rejected = num_accepted < batch.num_draft_tokens          # [B]

        # ---- the one extra token per request: recovered at the first rejection, or the bonus ---------
        extra_row = lay.logit_offsets[:-1] + num_accepted          # [B] logit row that emits it
        for b in self._tiles(torch.nonzero(is_greedy).squeeze(1), V):
            extra[b] = self.greedy_argmax(logits.index_select(0, extra_row[b]))
        # Random requests: those that rejected a draft (standard rule) sample the residual at that position
        # (unless it was drawn while deciding it); the others sample p at their extra row (the bonus p_k,
        # or the synthetic rule's own sample).
        with_residual = ~is_greedy & rejected if method == "standard" else torch.zeros_like(is_greedy)
        for residual in (False, True):
            chosen = (with_residual & (fused_at != num_accepted)) if residual else ~is_greedy & ~with_residual
            for b in self._tiles(torch.nonzero(chosen).squeeze(1), V):
                w = self.target_probs(self._rows(logits, extra_row[b]), temperature[b])
                if residual:
                    t_idx = lay.draft_offsets[b] + num_accepted[b]     # the rejected draft position
                    q_rej = self._one_hot(x[t_idx], V, w.dtype) if q is None else q.index_select(0, t_idx)
                    w = self.residual(w, q_rej)
                extra[b] = self.race(w, self._rows(exponential, b))

        draft_padded = x[lay.padded] if T else torch.zeros((B, 0), dtype=torch.int64, device=device)
        return self.assemble_output(draft_padded, num_accepted, extra, batch.max_draft)

    @staticmethod
    def _rows(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """t[idx] for an index tensor [R], R >= 1: a view when idx is an arithmetic progression (consecutive
        rows, or the same position of requests with equal draft counts), else a gathered copy. Callers
        never write into the result."""
        first, n = int(idx[0]), idx.shape[0]
        if n == 1:
            return t[first:first + 1]
        step = int(idx[1]) - first
        if step > 0 and bool((idx[1:] - idx[:-1] == step).all()):
            return t[first:first + step * (n - 1) + 1:step]
        return t.index_select(0, idx)

    @staticmethod
    def _tiles(idx: torch.Tensor, V: int, elements: int = TILE_ELEMENTS) -> list[torch.Tensor]:
        """``idx`` split into consecutive pieces of about ``elements`` / V rows (a row is V elements)."""
        step = max(1, elements // max(V, 1))
        return [idx[i:i + step] for i in range(0, idx.shape[0], step)]

    @staticmethod
    def _decide_prefixes(accept: torch.Tensor, lay: Layout, member: torch.Tensor, decide, B: int, V: int) -> None:
        """Fill accept [T] at the draft positions ``member`` [T] with ``decide(idx) -> bool [len(idx)]``, as
        far as it can matter: count_accepted reads only each request's accepted prefix, so a position after
        a rejection of its request is skipped (left False), as the reference stops at the first rejection.

        Positions are walked in position-major order (all first drafts, then all second drafts, ...), a
        tile of up to DECIDE_ELEMENTS / V live positions at a time; a position is live while its request
        has no known rejection. A tile may hold two positions of one request: the later one is decided in
        vain but harmlessly. Every position before a live one was decided in an earlier tile or this one,
        so exactly the prefix up to each request's first rejection is decided, whatever the tiling.
        """
        by_position = torch.argsort(lay.position, stable=True)   # stable: request order within a position
        order = by_position[member[by_position]]
        n, step = order.shape[0], max(1, DECIDE_ELEMENTS // max(V, 1))
        alive = torch.ones(B, dtype=torch.bool, device=accept.device)
        start = 0
        while start < n:
            window = order[start:start + 4 * step]
            live = torch.nonzero(alive[lay.request[window]]).squeeze(1)
            if live.shape[0] > step:
                live = live[:step]
                start += int(live[-1]) + 1
            else:
                start += window.shape[0]
            if live.shape[0] == 0:
                continue
            idx = window[live]
            ok = decide(idx)
            accept[idx] = ok
            alive[lay.request[idx[~ok]]] = False

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

    def target_probs(self, logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
        """[R, V] float32 p = softmax(logits / t) for logit rows [R, V] and temperatures [R] (> 0).

        exp((l - max l) / t), normalised: one new float32 tensor, everything else in place (each row has
        a finite logit: batch validation). The maximum of l / t is at the maximum of l since t > 0."""
        if logits.dtype == torch.float32:
            z = logits - logits.amax(dim=1, keepdim=True)
        else:  # one conversion, then in place (reductions over bf16/fp16 are slow on the CPU)
            z = logits.to(torch.float32)
            z.sub_(z.amax(dim=1, keepdim=True))
        z.mul_((1.0 / temperature.to(torch.float32))[:, None]).exp_()
        return z.mul_(z.sum(dim=1, keepdim=True).reciprocal_())

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
        and cannot beat a positive one; ties go to the lowest index, as in the reference. ``w`` is the
        caller's scratch tile and is overwritten with the scores."""
        return torch.div(w, exponential, out=w).max(dim=1).indices

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
        """[R, V] one-hot rows at x [R]: the q of a deterministic drafter (zeros, then one write per row
        at distinct positions, so the indexed write is deterministic)."""
        one_hot = torch.zeros((x.shape[0], V), dtype=dtype, device=x.device)
        one_hot[torch.arange(x.shape[0], device=x.device), x] = 1
        return one_hot
