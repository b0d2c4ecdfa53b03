"""Target filters (SPEC 3.4): top-k, then top-p, then min-p, each renormalising what it keeps.

    p           [N, V] float64 rows of the target after temperature
    top_k       [N] int64, 0 = off: keep every token whose probability is at least the k-th largest
                (ties with it are kept)
    top_p       [N] float64 in (0, 1], 1 = off: sort by probability descending (lower index first on
                ties) and keep the shortest prefix whose mass reaches top_p, the crossing token included
    min_p       [N] float64 in [0, 1), 0 = off: keep every token with p >= min_p * max p

The filtered target p' replaces p everywhere in the standard and synthetic rules: acceptance, the
residual and the bonus token. Greedy requests ignore the filters.
"""

from __future__ import annotations

import torch


def top_k(p: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    V = p.shape[1]
    on = (k > 0) & (k < V)
    if not bool(on.any()):
        return p
    most = int(k[on].max())
    largest = torch.topk(p, most, dim=1).values     # each row's `most` largest, descending
    kth = largest.gather(1, (k.clamp(1, most) - 1)[:, None])
    return _renormalised(torch.where(on[:, None] & (p < kth), torch.zeros_like(p), p))


def top_p(p: torch.Tensor, mass: torch.Tensor) -> torch.Tensor:
    on = mass < 1
    if not bool(on.any()):
        return p
    # stable sort of -p: descending probability, the lower index first among equal ones
    order = torch.sort(-p, dim=1, stable=True).indices
    sorted_p = p.gather(1, order)
    before = torch.cumsum(sorted_p, dim=1) - sorted_p      # mass strictly before each sorted token
    keep_sorted = before < mass[:, None].to(p.dtype)
    keep = torch.zeros_like(keep_sorted).scatter(1, order, keep_sorted)
    return _renormalised(torch.where(on[:, None] & ~keep, torch.zeros_like(p), p))


def min_p(p: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    on = ratio > 0
    if not bool(on.any()):
        return p
    floor = ratio[:, None].to(p.dtype) * p.amax(dim=1, keepdim=True)
    return _renormalised(torch.where(on[:, None] & (p < floor), torch.zeros_like(p), p))


def apply(p: torch.Tensor, k: torch.Tensor | None, mass: torch.Tensor | None, ratio: torch.Tensor | None) -> torch.Tensor:
    """p' of rows p [N, V] under per-row settings [N] (None: that filter is off for every row)."""
    if k is not None:
        p = top_k(p, k)
    if mass is not None:
        p = top_p(p, mass)
    if ratio is not None:
        p = min_p(p, ratio)
    return p


def _renormalised(p: torch.Tensor) -> torch.Tensor:
    return p / p.sum(dim=1, keepdim=True)
