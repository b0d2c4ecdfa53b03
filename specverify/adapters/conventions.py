"""Conversions between specverify's calling convention (SPEC sections 1-3) and the conventions of
samplers written elsewhere, tested once (tests/test_conventions.py) so that an adapter is mostly calls.

B requests, request b with k_b drafts, T = sum k_b, K = max k_b, V the vocabulary:

    split_by_draft_count(batch)        -> [Group]   one group per distinct k_b, for fixed-n kernels
    Group.drafts / .logit_rows / .draft_rows        [R, n] ids, [R, n + 1] and [R, n] row indices
    rows_of(tensor, rows)              -> tensor[rows], a view where the rows are consecutive
    assemble(B, K, [(group, tokens [R, n + 1], num_accepted [R])]) -> SpecOutput [B, K + 1], [B]
    draft_logit_rows(batch)            -> [T] the target rows of the draft positions (no bonus rows)
    target_probs(batch)                -> [T + B, V] float32 p' (SPEC 3.4), one-hot at the argmax on greedy rows
    draft_probs(batch)                 -> [T, V] float32 q, one-hot at the draft when draft_probs is None
                                          and on greedy requests, a zero row at a placeholder (-1)
    bonus_rows(batch)                  -> [B] the target rows of the bonus positions
    bonus_tokens(batch, noise[, logits]) -> [B] int64 bonus tokens sampled by the caller, by the reference's law
    int32_ids(ids) / cumulative_offsets(num_draft_tokens) / from_kernel_padding(token_ids, pad)
    zeroed_counter(B, device) / counter_delta(before, after)    in-place and accumulating counters
    num_accepted_from_emitted(token_ids, pad) -> [B] int64 from the emitted count, for kernels that report none
    num_accepted_from_tokens(batch, token_ids) -> [B] int64 from the prefix equal to the drafts (see its limits)
    unconditional_rates(rate, n)       -> [n] per-position rates R_j (accept through j) from a synthetic rate
    patch_points(owner, replacements, what)   named attributes replaced for one call, restored after
    request_seeds(seed, B) / batch_seed(seed)   per-request seeds, or one seed per batch
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from reference import Noise, SpecBatch, SpecOutput, greedy, philox, race
from reference.batch import PLACEHOLDER
from reference.sample import filtered_target, synthetic_rates_f32

INT32_MAX = 2 ** 31 - 1
FLOAT64_CHUNK_BYTES = 1 << 29     # the float64 rows of p' that target_probs works on at once


@dataclass(frozen=True)
class Group:
    """The requests of one draft count n: ``requests`` [R] int64, in batch order."""

    n: int
    requests: torch.Tensor
    logit_rows: torch.Tensor      # [R, n + 1] rows of target_logits (the last is the bonus row)
    draft_rows: torch.Tensor      # [R, n] rows of draft_token_ids and draft_probs

    def drafts(self, batch: SpecBatch) -> torch.Tensor:
        """[R, n] int64 draft ids of the group."""
        return batch.draft_token_ids[self.draft_rows]


def split_by_draft_count(batch: SpecBatch) -> list[Group]:
    """One Group per distinct k_b (zero included), in increasing n: a kernel that takes a fixed number
    of drafts is launched once per group, on ``rows[group.logit_rows]`` ([R, n + 1, V]) and so on."""
    dev = batch.num_draft_tokens.device
    d_off, l_off = batch.draft_offsets(), batch.logit_offsets()
    groups = []
    for n in sorted(set(batch.num_draft_tokens.tolist())):
        requests = torch.nonzero(batch.num_draft_tokens == n).flatten()
        steps = torch.arange(n + 1, device=dev)
        groups.append(Group(n, requests, l_off[requests, None] + steps, d_off[requests, None] + steps[:n]))
    return groups


def rows_of(t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``t[rows]`` ([*rows.shape, ...]), as a view of ``t`` where ``rows`` are consecutive (a group holding every
    request of a uniform batch): at 10,800 rows of 262,144 probabilities a copy is 11 GB."""
    flat = rows.flatten()
    if flat.numel():
        first = int(flat[0])
        if bool((flat == torch.arange(first, first + flat.numel(), device=flat.device)).all()):
            return t[first:first + flat.numel()].view(*rows.shape, *t.shape[1:])
    return t[rows]


def assemble(num_requests: int, max_draft: int, parts, device=None) -> SpecOutput:
    """SpecOutput [B, K + 1] (-1 padded) and [B] from per-group (group, tokens [R, n + 1] with -1 after
    the emitted ones, num_accepted [R]); requests no group names stay -1 and 0."""
    token_ids = torch.full((num_requests, max_draft + 1), -1, dtype=torch.int64, device=device)
    num_accepted = torch.zeros(num_requests, dtype=torch.int64, device=device)
    for group, tokens, accepted in parts:
        token_ids[group.requests.to(device), : group.n + 1] = tokens.to(device=device, dtype=torch.int64)
        num_accepted[group.requests.to(device)] = accepted.to(device=device, dtype=torch.int64)
    return SpecOutput(token_ids, num_accepted)


def row_requests(batch: SpecBatch) -> torch.Tensor:
    """[T + B] int64: the request of each target_logits row."""
    k = batch.num_draft_tokens
    return torch.repeat_interleave(torch.arange(batch.num_requests, device=k.device), k + 1)


def draft_logit_rows(batch: SpecBatch) -> torch.Tensor:
    """[T] int64: the target_logits rows of the draft positions (every row but each request's bonus row),
    for kernels that take targets for the draft positions only."""
    is_draft = torch.ones(batch.target_logits.shape[0], dtype=torch.bool, device=batch.device)
    is_draft[batch.logit_offsets()[1:] - 1] = False
    return torch.nonzero(is_draft).flatten()


def target_probs(batch: SpecBatch) -> torch.Tensor:
    """[T + B, V] float32: p' of every row (temperature, then the filters of SPEC 3.4, decided in float64
    as the reference does); a greedy request's rows are one-hot at the first argmax of its logits, which
    makes a probability-only kernel accept exactly the argmax and emit it at a mismatch."""
    request = row_requests(batch)
    temperature = batch.temperature[request]
    probs = torch.zeros(batch.target_logits.shape, dtype=torch.float32, device=batch.device)
    # float64 rows a chunk at a time: the whole batch's float64 temporaries (11 GB of float32 logits make some
    # 28 GB each) do not fit beside it on a GPU
    chunk = max(1, FLOAT64_CHUNK_BYTES // (8 * max(1, batch.vocab_size)))
    for rows in torch.nonzero(temperature > 0).flatten().split(chunk):
        probs[rows] = filtered_target(batch, request[rows], batch.target_logits[rows],
                                      temperature[rows, None].double()).float()
    for rows in torch.nonzero(temperature == 0).flatten().split(chunk):
        probs[rows, greedy.first_argmax(batch.target_logits[rows].double())] = 1.0
    return probs


def draft_probs(batch: SpecBatch) -> torch.Tensor:
    """[T, V] float32 q: the batch's draft_probs, or one-hot at each draft (a deterministic drafter).
    A greedy request's rows are one-hot at its drafts whatever its q: with the one-hot target of
    ``target_probs`` the standard rule then accepts exactly the argmax and emits it at a mismatch, the
    greedy rule. A placeholder's row is zero (SPEC 3.5: never accepted, its residual is p')."""
    x = batch.draft_token_ids
    one_hot = torch.zeros(batch.num_drafts, batch.vocab_size, dtype=torch.float32, device=batch.device)
    one_hot[torch.arange(batch.num_drafts, device=x.device), x.clamp(min=0)] = 1.0
    q = one_hot      # a tensor of our own, written in place below: at 9,000 rows of 262,144 each copy is 9 GB
    if batch.draft_probs is not None:
        greedy_draft = torch.repeat_interleave(batch.temperature == 0, batch.num_draft_tokens)
        q = torch.where(greedy_draft[:, None], one_hot, batch.draft_probs.float())
    return q.masked_fill_((x == PLACEHOLDER)[:, None], 0.0)


def bonus_rows(batch: SpecBatch) -> torch.Tensor:
    """[B] int64: the target_logits row of each request's bonus position (its last row)."""
    return batch.logit_offsets()[1:] - 1


def bonus_tokens(batch: SpecBatch, noise: Noise, logits: torch.Tensor | None = None) -> torch.Tensor:
    """[B] int64: the token a request emits when all its drafts are accepted, sampled by the caller for
    kernels that take it as an input: the first argmax for a greedy request, else the exponential race
    over p' at its bonus row with its exponential vector, in float64 as the reference draws it.
    ``logits`` [B, V]: the bonus rows as the kernel's caller handed them over (default: the batch's)."""
    logits = (batch.target_logits[bonus_rows(batch)] if logits is None else logits).double()
    tokens = greedy.first_argmax(logits)
    r = torch.nonzero(batch.temperature > 0).flatten()
    if r.numel():
        p = filtered_target(batch, r, logits[r], batch.temperature[r, None].double())
        tokens[r] = race.winners(p, noise.exponential[r.to(noise.exponential.device)].to(p))
    return tokens


def int32_ids(ids: torch.Tensor) -> torch.Tensor:
    """``ids`` as int32, for kernels that index with 32-bit ids; ValueError if one does not fit."""
    if ids.numel() and (int(ids.max()) > INT32_MAX or int(ids.min()) < -INT32_MAX - 1):
        raise ValueError(f"ids in [{int(ids.min())}, {int(ids.max())}] do not fit in int32")
    return ids.to(torch.int32)


def cumulative_offsets(num_draft_tokens: torch.Tensor, with_zero: bool = True) -> torch.Tensor:
    """int32 cumulative draft counts: [B + 1] starting at 0 (``with_zero``), or the [B] inclusive sums."""
    total = torch.cumsum(num_draft_tokens, 0)
    if with_zero:
        total = torch.cat([total.new_zeros(1), total])
    return int32_ids(total)


def from_kernel_padding(token_ids: torch.Tensor, pad: int) -> torch.Tensor:
    """int64 token ids with a kernel's padding value (``pad``: -1, V, 2**31 - 1, ...) turned into -1."""
    return token_ids.to(torch.int64).masked_fill(token_ids == pad, -1)


def zeroed_counter(num_requests: int, device, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    """[B] zeros for a kernel that adds into caller-owned counters: a fresh one per call, so the value
    read back is this call's count and nothing leaks between calls."""
    return torch.zeros(num_requests, dtype=dtype, device=device)


def counter_delta(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """[B] int64 this call's counts from a counter the kernel accumulates into across calls."""
    return after.to(torch.int64) - before.to(torch.int64)


def num_accepted_from_emitted(token_ids: torch.Tensor, pad: int = -1) -> torch.Tensor:
    """[B] int64 accepted drafts of a kernel that writes its emitted tokens left-aligned and pads the rest
    with ``pad`` (vLLM's V1 output): the emitted count less one, as vLLM's own model runner counts. Right
    whatever the tokens are, a recovered token equal to the rejected draft included."""
    return (token_ids != pad).sum(dim=1).to(torch.int64) - 1


def num_accepted_from_tokens(batch: SpecBatch, token_ids: torch.Tensor) -> torch.Tensor:
    """[B] int64 accepted drafts of kernels that report no count and do not pad: the length of the prefix
    where the output equals the drafts. It applies only where the token emitted at a rejection can never
    equal the rejected draft x, which holds for the rules of SPEC 3 computed exactly (x has p'(x) < q(x),
    so the residual is 0 at x; a greedy mismatch emits an argmax != x). It is WRONG where that fails:
    a kernel that falls back to p when its float32 residual rounds to zero everywhere, a NaN target row
    (SPEC 3.6: vLLM's race over NaN scores can return the rejected draft: 1 where 0 is right), or the
    synthetic rule (a forced rejection emits a sample of p, which may be x). Prefer a count the kernel
    reports, or ``num_accepted_from_emitted`` when it pads."""
    B, K = batch.num_requests, batch.max_draft
    padded = torch.full((B, K), -2, dtype=torch.int64, device=token_ids.device)
    for group in split_by_draft_count(batch):
        if group.n:
            padded[group.requests.to(token_ids.device), : group.n] = group.drafts(batch).to(token_ids.device)
    same = token_ids[:, :K].to(torch.int64) == padded
    return torch.cumprod(same.to(torch.int64), dim=1).sum(dim=1)


def unconditional_rates(rate: float, num_speculative_steps: int) -> list[float]:
    """Per-position unconditional rates R_j = c_0 * ... * c_j (the probability of accepting through j), in
    float64 from the float32 conditional rates c_j every backend compares against (SPEC 3): the form
    vLLM's ``synthetic_acceptance_rates`` takes, from which it divides back to c_j = R_j / R_{j-1}."""
    return torch.cumprod(synthetic_rates_f32(rate, num_speculative_steps).double(), 0).tolist()


@contextmanager
def patch_points(owner, replacements: dict, what: str):
    """Replace named attributes of ``owner`` (a module or class) for the duration of one call, then restore
    them: the way to feed the harness's noise into a kernel that draws its own (the ``torch.rand`` of
    vLLM's ``generate_uniform_probs``). ``what`` names the owner in the error when a point no longer
    exists."""
    missing = [name for name in replacements if not hasattr(owner, name)]
    if missing:
        raise ImportError(f"{what} has no {', '.join(missing)}: the patch point(s) changed; update the adapter")
    saved = {name: getattr(owner, name) for name in replacements}
    inherited = {name for name in replacements if isinstance(owner, type) and name not in vars(owner)}
    try:
        for name, value in replacements.items():
            setattr(owner, name, value)
        yield saved
    finally:
        for name, value in saved.items():
            if name in inherited:
                delattr(owner, name)     # a class's inherited method: drop the override, as it was
            else:
                setattr(owner, name, value)


def request_seeds(seed, num_requests: int) -> torch.Tensor:
    """[B] int64 per-request seeds from the convention's ``seed`` (an int or a [B] int64 tensor)."""
    return philox.request_seeds(seed, num_requests)


def batch_seed(seed) -> int:
    """One int64 seed for kernels that take a seed per batch (with an offset per call): the int itself,
    or a mix of a [B] tensor of request seeds. Such a kernel's stream depends on the whole batch, so
    its adapter declares ``seeded_batch_invariant=False``."""
    if not isinstance(seed, torch.Tensor):
        return int(philox.request_seeds(seed, 1)[0])
    mixed = 0
    for s in philox.request_seeds(seed, seed.shape[0]).tolist():
        mixed = (mixed * 6364136223846793005 + s + 1442695040888963407) % (2 ** 63)
    return mixed
