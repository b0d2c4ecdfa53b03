"""The exponential race: argmax_v w(v) / E(v) with E(v) ~ Exp(1) i.i.d. samples exactly from w / sum(w).

One exponential vector per request is enough because a request emits exactly one non-draft token.
Ties (probability zero in exact arithmetic) go to the lowest index. Entries with w = 0 never win.
"""

from __future__ import annotations

import torch

from reference import greedy


def scores(w: torch.Tensor, exponential: torch.Tensor) -> torch.Tensor:
    """w / E where w > 0, and -1 where w = 0 (such an entry never wins); any shape [..., V]."""
    score = w / exponential.to(w.dtype)
    return torch.where(w > 0, score, torch.full_like(score, -1.0))


def sample(w: torch.Tensor, exponential: torch.Tensor) -> int:
    """One draw from the unnormalised weights ``w`` [V] (some entry > 0) given E [V] > 0."""
    return greedy.argmax(scores(w, exponential))


def winners(w: torch.Tensor, exponential: torch.Tensor) -> torch.Tensor:
    """``sample`` for each row of w and E [N, V]: [N] int64."""
    return greedy.first_argmax(scores(w, exponential))


def margin(w: torch.Tensor, exponential: torch.Tensor) -> float:
    """Relative gap between the best and second-best score: how close the race was to a tie."""
    score = torch.where(w > 0, w / exponential.to(w.dtype), torch.zeros_like(w))
    if score.numel() < 2:
        return float("inf")
    top2 = torch.topk(score, 2).values
    return float((top2[0] - top2[1]) / top2[0]) if top2[0] > 0 else float("inf")
