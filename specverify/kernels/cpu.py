"""A vectorized PyTorch sampler: the reference's rules over the whole batch at once, in float32 (block
verification and token trees decide in float64: cpu_block, cpu_tree).

Shapes (B requests, T = sum k_b drafts, K = max k_b, V vocabulary):

    batch.target_logits [T + B, V]   read once for each draft row that decides, and for the bonus rows used
    batch.draft_probs   [T, V]       gathered at the draft token, and at the B rejected rows
    noise.uniform       [T], noise.exponential [B, V]

The call is a pipeline of small methods (``temperatures``, ``layout``, ``draft_rows``, ``draft_probs_for``,
``exponential_for``, ``target_weights``, ``filter_weights``, ``placeholders``, ``accept_mask``,
``greedy_argmax``, ``synthetic_rates``, ``synthetic_accept``, ``count_accepted``, ``residual``, ``race``,
``assemble_output``) so that a subclass can replace exactly one step; the module is one class, and a
little over 400 lines, for that reason. One class attribute goes with them:
``recover_while_deciding``, which a subclass sets False when its ``draft_rows`` are not each draft's own row.

Why it is fast:

- a decided draft row's softmax is computed once, in cache-sized tiles: p_j(x) for the acceptance test,
  and, at a request's first rejection, the residual and the exponential race right away, so that row is
  never read again;
- rows are never normalised: the race is invariant to a positive scale per row, so p is carried as
  weights w and their sum (p = w / sum w), and the residual as w - sum(w) q;
- the exponential is exp2 (cheaper than exp on the CPU), and the race's argmax is a vectorized
  amax over chunks (``first_argmax``) instead of torch.max with indices;
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
from reference import filters
from reference.batch import PLACEHOLDER
from reference.sample import resolve_noise, synthetic_rates_f32
from specverify.backends import ALL_LOGIT_DTYPES, Backend, Capabilities
from specverify.kernels.cpu_block import BlockSteps
from specverify.kernels.cpu_tree import TreeSteps

# Elements per row tile: rows are processed in tiles of 4 MiB of float32, so that a tile's temporaries
# stay in the last-level cache between the passes over it while each pass stays long enough to amortise
# its dispatch (ci/bench_cpu.py chose it; docs/benchmarks.md). Loops are over fixed-size tiles, never over
# requests or positions.
TILE_ELEMENTS = 1 << 20
# Draft rows decided per step of the position-major walk (each step costs a few small bookkeeping ops).
DECIDE_ELEMENTS = 1 << 21
# Entries per chunk of first_argmax (a chunk's maximum is taken with vectorized amax).
ARGMAX_CHUNK = 256
LOG2_E = 1.4426950408889634  # 1 / ln 2: exp(y) = 2 ** (y * LOG2_E)


def first_argmax(scores: torch.Tensor, chunk: int = ARGMAX_CHUNK) -> torch.Tensor:
    """[R] index of each row's maximum in scores [R, V], the lowest index among ties (as torch.max).

    torch.max with indices is not vectorized over a row on the CPU (amax is), so the
    row is cut into chunks: a vectorized amax per chunk, then torch.max only over the chunk maxima and
    over the one chunk holding the first maximum. The first chunk whose maximum equals the row's holds
    the row's first maximal entry, so ties still go to the lowest index. A trailing partial chunk is
    read through clamped indices: its repeats of index V - 1 come after the real entry and map to it."""
    R, V = scores.shape
    if V <= 2 * chunk:
        return scores.max(dim=1).indices
    full = V // chunk
    maxima = scores[:, :full * chunk].unflatten(1, (full, chunk)).amax(dim=2)      # [R, full]
    if V > full * chunk:
        maxima = torch.cat([maxima, scores[:, full * chunk:].amax(dim=1, keepdim=True)], dim=1)
    first = maxima.max(dim=1).indices                                       # [R] chunk of the maximum
    idx = (first[:, None] * chunk + torch.arange(chunk, device=scores.device)).clamp_(max=V - 1)
    return idx.gather(1, scores.gather(1, idx).max(dim=1).indices[:, None]).squeeze(1)


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


class CpuBackend(TreeSteps, BlockSteps, Backend):
    """Vectorized PyTorch backend: same call and same results as ``reference.sample`` (float32 math)."""

    name = "cpu"
    capabilities = Capabilities(
        methods=frozenset({"standard", "synthetic", "block", "tree"}),
        devices=frozenset({"cpu", "cuda"}), logit_dtypes=ALL_LOGIT_DTYPES, target_filters=True, placeholders=True,
        notes=("pure PyTorch, float32 math; seeded noise is the reference's Philox stream, drawn on the CPU",))
    # Subclass hook. True: a rejected draft's recovered token is drawn while deciding it, from the weights of
    # its ``draft_rows`` row, which is then the row that emits the token. A subclass whose ``draft_rows`` gives
    # other rows than each draft's own target row sets it False: the recovered token is then drawn afterwards
    # from the row at the first rejection, logit_offsets[b] + num_accepted[b].
    recover_while_deciding: bool = True

    # ---- the call -------------------------------------------------------------------------------
    def _sample(self, batch: SpecBatch, *, method: str, noise: Noise | None, seed,
                synthetic_acceptance_rate: float | None, num_speculative_steps: int | None) -> SpecOutput:
        device = batch.device
        if noise is None:  # seeded path: the reference's own Philox stream (injected noise is validated already)
            noise = resolve_noise(batch, None, seed)
        if method == "tree":    # SPEC 3.8, in cpu_tree (float64, every request at once)
            return self._tree_sample(batch, noise)
        if method == "block":   # SPEC 3.7, in cpu_block; greedy and zero-draft requests take the standard rule
            return self._block_sample(batch, noise, lambda sub, sub_noise: self._sample(
                sub, method="standard", noise=sub_noise, seed=None, synthetic_acceptance_rate=None,
                num_speculative_steps=None))
        uniform = noise.uniform.to(device=device, dtype=torch.float32)
        exponential = self.exponential_for(noise).to(device=device, dtype=torch.float32)

        B, T, V = batch.num_requests, batch.num_drafts, batch.vocab_size
        logits = batch.target_logits
        lay = self.layout(batch)
        temperature = self.temperatures(batch)                     # [B] float32, 0 = greedy
        is_greedy = temperature == 0
        x = batch.draft_token_ids
        q = self.draft_probs_for(batch)                            # [T, V] float32 or None (one-hot)
        filtered = batch.has_filters
        holes = None
        if batch.has_placeholders:
            x, q, holes = self.placeholders(x, q, V)

        def weights(rows: torch.Tensor, requests: torch.Tensor, use: str) -> tuple[torch.Tensor, torch.Tensor]:
            w, total = self.target_weights(rows, temperature[requests])
            return self.filter_weights(batch, requests, w, total, use) if filtered else (w, total)

        # ---- acceptance at every draft position that can matter -----------------------------------
        extra = torch.empty(B, dtype=torch.int64, device=device)
        # True when every random request's recovered token is drawn while deciding its first rejection.
        own_rows = False
        if method == "synthetic":
            rates = self.synthetic_rates(synthetic_acceptance_rate, num_speculative_steps).to(device)
            accept = self.synthetic_accept(uniform, rates[lay.position])
            if holes is not None:
                accept &= ~holes
        else:
            rows = self.draft_rows(lay)
            own_rows = self.recover_while_deciding

            def decide_random(idx: torch.Tensor) -> torch.Tensor:
                # Everything small is gathered once per window; a tile below takes views of it.
                n = idx.shape[0]
                b_all, r_all, x_all = lay.request[idx], rows[idx], x[idx]
                u_all = uniform[idx]
                q_x_all = None if q is None else q[idx, x_all]
                ok = torch.empty(n, dtype=torch.bool, device=device)
                drawn = torch.empty(n, dtype=torch.int64, device=device)   # recovered token of a rejected row
                for s in self._tiles(n, V):
                    x_t = x_all[s]
                    w, total = weights(self._rows(logits, r_all[s]), b_all[s], "accept")
                    p_x = w.gather(1, x_t[:, None]).squeeze(1).div_(total)
                    q_x = torch.ones_like(p_x) if q_x_all is None else q_x_all[s]
                    ok[s] = ok_t = self.accept_mask(u_all[s], p_x, q_x)
                    if not own_rows:
                        continue
                    # Each rejected row draws its recovered token now, from the distribution still in cache;
                    # only a request's first rejection keeps it (below). When most rows of the tile reject,
                    # all rows draw: cheaper than gathering the rejected ones.
                    rej = torch.nonzero(~ok_t).squeeze(1)
                    if 2 * rej.shape[0] >= w.shape[0]:
                        t_r, b_r, rej = idx[s], b_all[s], slice(None)
                    elif rej.shape[0]:
                        t_r, b_r, w, total = idx[s][rej], b_all[s][rej], w.index_select(0, rej), total[rej]
                    else:
                        continue
                    q_r = self._one_hot(x[t_r], V, w.dtype) if q is None else self._rows(q, t_r)
                    drawn[s][rej] = self.race(self.residual(w, total, q_r), self._rows(exponential, b_r))
                if own_rows:
                    # A request's first rejection is its lowest index among this window's rejections
                    # (position-major order); it was alive when the window began, so none came before.
                    rej = torch.nonzero(~ok).squeeze(1)
                    b_rej = b_all[rej]
                    first = torch.full((B,), n, dtype=torch.int64, device=device)
                    first.scatter_reduce_(0, b_rej, rej, "amin")
                    f = rej[first[b_rej] == rej]
                    extra[b_all[f]] = drawn[f]
                return ok

            def decide_greedy(idx: torch.Tensor) -> torch.Tensor:
                same = x[idx] == self.greedy_argmax(logits.index_select(0, rows[idx]))
                return same if holes is None else same & ~holes[idx]

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
        greedy_requests = torch.nonzero(is_greedy).squeeze(1)
        for s in self._tiles(greedy_requests.shape[0], V):
            b = greedy_requests[s]
            extra[b] = self.greedy_argmax(logits.index_select(0, extra_row[b]))
        # Random requests: those that rejected a draft (standard rule) sample the residual at that position
        # (unless it was drawn while deciding it: own_rows); the others sample p at their extra row (the
        # bonus p_k, or the synthetic rule's own sample).
        with_residual = ~is_greedy & rejected if method == "standard" else torch.zeros_like(is_greedy)
        for residual in (False, True):
            chosen = (with_residual & (not own_rows)) if residual else ~is_greedy & ~with_residual
            requests = torch.nonzero(chosen).squeeze(1)
            for s in self._tiles(requests.shape[0], V):
                b = requests[s]
                w, total = weights(self._rows(logits, extra_row[b]), b, "recovered" if residual else "bonus")
                if residual:
                    t_idx = lay.draft_offsets[b] + num_accepted[b]     # the rejected draft position
                    q_rej = self._one_hot(x[t_idx], V, w.dtype) if q is None else self._rows(q, t_idx)
                    w = self.residual(w, total, q_rej)
                extra[b] = self.race(w, self._rows(exponential, b))

        draft_padded = x[lay.padded] if T else torch.zeros((B, 0), dtype=torch.int64, device=device)
        return self.assemble_output(draft_padded, num_accepted, extra, batch.max_draft)

    @staticmethod
    def _rows(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """t[idx] for an index tensor [R], R >= 1: a view when idx is an arithmetic progression (consecutive
        rows, or the same position of requests with equal draft counts), else a gathered copy. Callers
        never write into the result."""
        n = idx.shape[0]
        ends = idx[::max(n - 1, 1)].tolist()                     # [first, last] (one entry when n == 1)
        first, last = ends[0], ends[-1]
        step = (last - first) // (n - 1) if n > 1 else 1
        if step > 0 and first + step * (n - 1) == last and (
                n <= 2 or torch.equal(idx, torch.arange(first, last + 1, step, device=idx.device))):
            return t[first:last + 1:step]
        return t.index_select(0, idx)

    @staticmethod
    def _tiles(n: int, V: int, elements: int = TILE_ELEMENTS) -> list[slice]:
        """range(n) cut into consecutive slices of about ``elements`` / V rows each (a row is V elements)."""
        step = max(1, elements // max(V, 1))
        return [slice(i, i + step) for i in range(0, n, step)]

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
        """[T] logit row of each draft position: request b's row j is logit_offsets[b] + j. An override that
        returns other rows sets ``recover_while_deciding = False``."""
        return lay.logit_offsets[lay.request] + lay.position

    def draft_probs_for(self, batch: SpecBatch) -> torch.Tensor | None:
        """q [T, V] in float32, or None for a deterministic drafter (one-hot at the draft token)."""
        return None if batch.draft_probs is None else batch.draft_probs.to(torch.float32)

    def exponential_for(self, noise: Noise) -> torch.Tensor:
        """[B, V] the exponential vector of each request (one per request: it emits one extra token)."""
        return noise.exponential

    def target_weights(self, logits: torch.Tensor, temperature: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(w [R, V], total [R]) float32 with p = softmax(logits / t) = w / total, for logit rows [R, V] and
        temperatures [R] (> 0). Left unnormalised: every consumer either reads one entry (p(x) = w(x) / total)
        or is invariant to a row's scale (the race), so a normalising pass would be wasted.

        w = 2 ** ((l - max l) * log2(e) / t): one new float32 tensor, everything else in place (each row has a
        finite logit: batch validation; the maximum of l / t is at the maximum of l since t > 0). exp2 is
        cheaper than exp on the CPU, and the scale folds into the 1 / t multiply."""
        if logits.dtype == torch.float32:
            w = logits - logits.amax(dim=1, keepdim=True)
        else:  # one conversion, then in place (reductions over bf16/fp16 are slow on the CPU)
            w = logits.to(torch.float32)
            w.sub_(w.amax(dim=1, keepdim=True))
        w.mul_((LOG2_E / temperature.to(torch.float32))[:, None]).exp2_()
        return w, w.sum(dim=1)

    def placeholders(self, x: torch.Tensor, q: torch.Tensor | None,
                     V: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(x, q, holes) for draft ids holding placeholders (SPEC 3.5): holes [T] marks them; x gets a
        valid index there (0) for the gathers, and q [T, V] a zero row, so the standard rule never accepts
        a placeholder and its residual is p' itself. The greedy and synthetic rules mask ``holes``."""
        holes = x == PLACEHOLDER
        x = x.clamp(min=0)
        if q is None:
            q = self._one_hot(x, V, torch.float32)
        q = q.masked_fill(holes[:, None], 0.0)
        return x, q, holes

    def filter_weights(self, batch: SpecBatch, requests: torch.Tensor, w: torch.Tensor, total: torch.Tensor,
                       use: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(w', total') of the filtered target p' (SPEC 3.4) of rows of ``requests`` [R], for ``use``
        "accept" (acceptance, and the recovered token drawn while deciding), "recovered" or "bonus"
        (the extra token; "bonus" also for the synthetic rule's). The filters decide in float64, as the
        reference does, so a float32 rounding cannot move a token across a cut."""
        p = filters.apply(w.double() / total.double()[:, None], *batch.filters_of(requests))
        w = p.to(torch.float32)
        return w, w.sum(dim=1)

    def accept_mask(self, u: torch.Tensor, p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
        """Standard rule: accept iff q(x) > 0 and u * q(x) <= p(x), i.e. with probability min(1, p/q).
        u > 0, so p(x) = 0 never accepts: tested explicitly, because a uniform below float32's range
        (injected in float64) rounds to 0 here, and 0 <= 0 would accept it (SPEC 2)."""
        return (q_x > 0) & (p_x > 0) & (u * q_x <= p_x)

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

    def residual(self, w: torch.Tensor, total: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """[R, V] total * (p - q) for p = w / total, the residual max(p - q, 0) up to its scale and the clamp.

        The clamp is left out: the race scores an entry <= 0 at <= 0, below any positive entry, so only the
        positive part is ever sampled. A row with no positive entry (p == q up to rounding, where rejection
        has probability 0) is raced with ``empty_residual`` of its weights instead."""
        r = torch.addcmul(w, q, total[:, None], value=-1)
        empty = r.amax(dim=1) <= 0
        if bool(empty.any()):
            r[empty] = self.empty_residual(w[empty])
        return r

    def empty_residual(self, w: torch.Tensor) -> torch.Tensor:
        """[E, V] the weights raced where the residual is zero everywhere: p's own (w), as the reference does."""
        return w

    def race(self, w: torch.Tensor, exponential: torch.Tensor) -> torch.Tensor:
        """[R] exponential race argmax_v w(v) / E(v): a sample of max(w, 0) / sum(max(w, 0)) for a row with a
        positive entry. Entries with w <= 0 score <= 0 and cannot beat a positive one; ties go to the lowest
        index, as in the reference. ``w`` is the caller's scratch tile and is overwritten with the scores."""
        return first_argmax(torch.div(w, exponential, out=w))

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
