"""The standard rule (Leviathan et al. 2023; Chen et al. 2023), SPEC section 3.

At a draft position with target ``p`` [V], drafter ``q`` [V] and draft token ``x``:
accept iff q(x) > 0 and u * q(x) <= p(x)   (accept with probability min(1, p(x) / q(x)));
at the first rejection emit a sample of residual = max(p - q, 0), normalised.
"""

from __future__ import annotations

import torch


def accepts(u: float, p: torch.Tensor, q: torch.Tensor, x: int) -> bool:
    """The acceptance test at one position; ``u`` is the position's uniform in (0, 1)."""
    return bool(q[x] > 0) and bool(u * q[x] <= p[x])


def alpha(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Acceptance probability when x ~ q: sum_v min(p(v), q(v))."""
    return torch.minimum(p, q).sum()


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(p - q, 0), unnormalised (the exponential race does not need the normaliser).

    It is zero only where p <= q everywhere, i.e. p == q, where rejection has probability 0;
    rounding can still reject there, and then the residual falls back to p itself.
    """
    r = torch.clamp(p - q, min=0)
    return r if bool(r.any()) else p


def one_hot(x: int, vocab_size: int, dtype=torch.float64) -> torch.Tensor:
    """The drafter of a deterministic proposer (draft_probs None): q is one-hot at the draft."""
    q = torch.zeros(vocab_size, dtype=dtype)
    q[x] = 1
    return q
