"""The standard rule (Leviathan et al. 2023; Chen et al. 2023), SPEC section 3.

At a draft position with target ``p`` [V], drafter ``q`` [V] and draft token ``x``:
accept iff q(x) > 0 and u * q(x) <= p(x)   (accept with probability min(1, p(x) / q(x)));
at the first rejection emit a sample of residual = max(p - q, 0), normalised.
Every function also takes rows: p and q [..., V], with u, x, p(x) and q(x) of shape [...].
"""

from __future__ import annotations

import torch


def accepted(u, p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """The acceptance test on the draft's own probabilities p(x) and q(x): q(x) > 0 and u * q(x) <= p(x)."""
    return (q_x > 0) & (u * q_x <= p_x)


def accepts(u: float, p: torch.Tensor, q: torch.Tensor, x: int) -> bool:
    """The acceptance test at one position; ``u`` is the position's uniform in (0, 1)."""
    return bool(accepted(u, p[x], q[x]))


def alpha(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Acceptance probability when x ~ q: sum_v min(p(v), q(v))."""
    return torch.minimum(p, q).sum(dim=-1)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(p - q, 0), unnormalised (the exponential race does not need the normaliser).

    It is zero only where p <= q everywhere, i.e. p == q, where rejection has probability 0;
    rounding can still reject there, and then the residual falls back to p itself.
    """
    r = torch.clamp(p - q, min=0)
    return torch.where(r.any(dim=-1, keepdim=True), r, p)


def one_hot(x, vocab_size: int, dtype=torch.float64) -> torch.Tensor:
    """The drafter of a deterministic proposer (draft_probs None): q is one-hot at the draft.
    ``x`` an int gives [V]; a [N] int64 tensor gives [N, V]."""
    return torch.nn.functional.one_hot(torch.as_tensor(x, dtype=torch.int64), vocab_size).to(dtype)
