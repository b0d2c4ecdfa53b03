"""Filter cuts decided in float32 (SPEC 4.1): a divergence the reference itself produces once a row's kept
set moves across tokens near a cut.

    near_cut(p, k, mass, ratio, tol) -> (order [V], kept n, distance [V])
        p [V] float64, one row after temperature; k / mass / ratio that row's filters (None: off). The
        reference's sorted order (probability descending, lower index first), how many of it the filters
        keep, and each token's relative distance to a cut it is near (inf where it is near none)
    explained_by_cut(batch, noise, b, got, got_path, call, tol) -> (margin, row) or None
        whether request b's output ``got`` is the reference's for b under the same noise once one of its
        rows gets an admissible kept set; call: the reference's keyword arguments (method, synthetic rate)

The reference is re-run on request b alone with every row's logits set to -inf outside its kept set (its
own, or the admissible one for the row tried) and the filters off: softmax over the kept logits is p'.
"""

from __future__ import annotations

import math

import torch

import reference
from reference import Noise, SpecBatch, filters, select_requests
from reference.sample import target_probs
from specverify.checks.rounding import scaled_logit_error

# admissible kept sets tried per row, nearest to the reference's first (a row whose float32 masses are all
# within rounding of top_p could offer hundreds)
MAX_TRIES = 32


def near_cut(p: torch.Tensor, k, mass, ratio, tol: float,
             e: torch.Tensor | None = None) -> tuple[torch.Tensor, int, torch.Tensor]:
    """The sorted order, the reference's kept count and each token's relative distance to a cut (see module).
    e [V]: each p(v)'s relative error from l / T's rounding (rounding.py), which widens each test by what it
    moves the test's two sides by; none where None."""
    V = p.shape[0]
    e = torch.zeros(V, dtype=torch.float64) if e is None else e
    order = torch.sort(-p, stable=True).indices
    distance = torch.full((V,), math.inf, dtype=torch.float64)
    kept = p
    if k is not None and 0 < k < V:
        k_th = order[k - 1]
        gap = (p - p[k_th]).abs() / p[k_th]
        near = (p != p[k_th]) & (gap <= tol + e + e[k_th])
        distance = torch.where(near, torch.minimum(distance, gap), distance)
        kept = filters.top_k(p[None], torch.tensor([k]))[0]
    if mass is not None and mass < 1:
        sorted_p, sorted_pe = kept[order], (kept * e)[order]
        before = torch.zeros(V, dtype=torch.float64).scatter(0, order, torch.cumsum(sorted_p, 0) - sorted_p)
        moved = torch.zeros(V, dtype=torch.float64).scatter(0, order, torch.cumsum(sorted_pe, 0) - sorted_pe)
        gap = (before - mass).abs() / mass
        near = (kept > 0) & (gap <= tol + moved / mass)
        distance = torch.where(near, torch.minimum(distance, gap), distance)
        kept = filters.top_p(kept[None], torch.tensor([mass], dtype=torch.float64))[0]
    if ratio is not None and ratio > 0:
        gap = (kept - ratio * kept.max()).abs() / kept.clamp(min=1e-300)
        near = (kept > 0) & (gap <= tol + e + e[torch.argmax(kept)])
        distance = torch.where(near, torch.minimum(distance, gap), distance)
        kept = filters.min_p(kept[None], torch.tensor([ratio], dtype=torch.float64))[0]
    return order, int((kept > 0).sum()), distance


def _admissible(order: torch.Tensor, n: int, distance: torch.Tensor) -> list[tuple[int, float]]:
    """(kept count, margin) of each other prefix whose tokens between it and the reference's are all near a
    cut, nearest first."""
    near = torch.isfinite(distance[order]).tolist()
    gaps = distance[order].tolist()
    options = []
    for step in (-1, 1):
        end, worst = n, 0.0
        while len(options) < MAX_TRIES:
            moved = end - 1 if step < 0 else end      # the token that leaves (or joins) the kept prefix
            if not 0 <= moved < len(near) or not near[moved] or end + step < 1:
                break
            end, worst = end + step, max(worst, gaps[moved])
            options.append((end, worst))
    return sorted(options, key=lambda o: abs(o[0] - n))[:MAX_TRIES]


def explained_by_cut(batch: SpecBatch, noise: Noise, b: int, got: list, got_path: list | None, call: dict,
                     tol: float, cuts_seen: dict | None = None, scale: float = 1.0):
    """(margin, row) when an admissible kept set at one row of request b gives the backend's output, else None.
    ``cuts_seen``: a dict shared by the calls on one batch, so that rows repeated across its requests (a
    replicated batch's copies) have their cuts found once; ``scale`` multiplies l / T's rounding allowance."""
    cpu = batch.to("cpu")
    temperature = float(cpu.temperature[b])
    settings = [None if f is None else f[b].item() for f in (cpu.top_k, cpu.top_p, cpu.min_p)]
    if temperature == 0 or not cpu.has_filters or (cpu.allow_nonfinite and bool(cpu.nonfinite_requests()[b])):
        return None
    start, end = cpu.logit_offsets()[b:b + 2].tolist()
    logits = cpu.target_logits[start:end].double()
    cuts_seen = {} if cuts_seen is None else cuts_seen
    cuts = [_row_cut(logits[row], temperature, settings, tol, cuts_seen, scale) for row in range(logits.shape[0])]
    # no row has another admissible kept set: nothing to re-run (the common case of a real divergence)
    if not any(options for _, _, options in cuts):
        return None
    one = torch.tensor([b])
    sub, sub_noise = select_requests(cpu, one), noise.select(cpu, one)
    masked = torch.stack([_masked(logits[r], order, n) for r, (order, n, _) in enumerate(cuts)])
    for row, (order, _, options) in enumerate(cuts):
        for n_alt, margin in options:
            rows = masked.clone()
            rows[row] = _masked(logits[row], order, n_alt)
            # every logit dtype converts to float32 exactly: the kept logits are the batch's own
            trial = SpecBatch(sub.num_draft_tokens, sub.draft_token_ids, rows.float(), sub.draft_probs,
                              sub.temperature, tree_parents=sub.tree_parents)
            out = reference.sample(trial, noise=sub_noise, **call)
            path = None if out.accepted_nodes is None else out.accepted_nodes[0, :int(out.num_accepted[0])].tolist()
            if out.emitted()[0] == got and (got_path is None or path == got_path):
                return margin, row
    return None


def _row_cut(logits: torch.Tensor, temperature: float, settings: list, tol: float, cuts_seen: dict,
             scale: float = 1.0) -> tuple:
    """(order, kept n, admissible options) of one float64 row of logits, from ``cuts_seen`` when seen."""
    key = (logits.numpy().tobytes(), temperature, tuple(settings), tol, scale)
    if key not in cuts_seen:
        p = target_probs(logits, temperature)
        order, n, distance = near_cut(p, *settings, tol, scale * scaled_logit_error(logits, temperature, p))
        cuts_seen[key] = (order, n, _admissible(order, n, distance))
    return cuts_seen[key]


def _masked(logits: torch.Tensor, order: torch.Tensor, n: int) -> torch.Tensor:
    """The row's logits with -inf outside the first n tokens of ``order``."""
    keep = torch.zeros(logits.shape[0], dtype=torch.bool)
    keep[order[:n]] = True
    return logits.masked_fill(~keep, float("-inf"))
