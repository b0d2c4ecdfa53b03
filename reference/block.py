"""Block verification (Sun et al. 2024, "Block Verification Accelerates Speculative Decoding",
arXiv 2403.10444, Algorithm 2), SPEC section 3.7: the draft block decided jointly.

One random request with k >= 1 drafts x_1..x_k (x_i drawn from q_{i-1}), target rows p_0..p_k (p_k the
bonus row) and drafter rows q_0..q_{k-1}, all [V] float64:

    w_0 = 1,   w_i = min(w_{i-1} p_{i-1}(x_i) / q_{i-1}(x_i), 1)        (0 where q_{i-1}(x_i) = 0)
    h_i = S_i / (S_i + 1 - w_i),  S_i = sum_v max(w_i p_i(v) - q_i(v), 0)   for i < k   (0 where S_i = 0)
    h_k = w_k
    tau = max{ i >= 1 : eta_i <= h_i }, or 0                             (searched from the end)
    emit x_1..x_tau, then Y ~ p_k if tau = k, else Y ~ max(w_tau p_tau - q_tau, 0) normalised
"""

from __future__ import annotations

import torch

from reference import leviathan
from reference.batch import PLACEHOLDER


def block_length(x: torch.Tensor) -> int:
    """k: the drafts of x [n] before its first placeholder (-1, SPEC 3.5), which ends the block."""
    holes = torch.nonzero(x == PLACEHOLDER).flatten()
    return int(holes[0]) if holes.numel() else x.shape[0]


def weights(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """[k + 1] the running ratios w_0..w_k from the drafts' own probabilities p_{i-1}(x_i), q_{i-1}(x_i) [k]."""
    w = [torch.ones((), dtype=p_x.dtype)]
    for i in range(p_x.shape[0]):
        ratio = p_x[i] / q_x[i] if q_x[i] > 0 else torch.zeros((), dtype=p_x.dtype)
        w.append(torch.clamp(w[-1] * ratio, max=1.0))
    return torch.stack(w)


def residual_mass(w_i: torch.Tensor, p_i: torch.Tensor, q_i: torch.Tensor) -> torch.Tensor:
    """S_i = sum_v max(w_i p_i(v) - q_i(v), 0)."""
    return torch.clamp(w_i * p_i - q_i, min=0).sum()


def stop_probabilities(w: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """[k] h_1..h_k from w [k + 1], p [k + 1, V] and q [k, V]."""
    k = q.shape[0]
    h = []
    for i in range(1, k):
        s = residual_mass(w[i], p[i], q[i])
        h.append(s / (s + 1 - w[i]) if s > 0 else torch.zeros((), dtype=w.dtype))
    h.append(w[k])
    return torch.stack(h)


def stopping_point(eta: torch.Tensor, h: torch.Tensor) -> int:
    """tau: the last position i (1-based) with eta_i <= h_i, or 0 when there is none."""
    for i in range(h.shape[0], 0, -1):
        if eta[i - 1] <= h[i - 1]:
            return i
    return 0


def extra_weights(tau: int, w: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """[V] the unnormalised law of the token after the accepted prefix: p_k at tau = k, else the residual
    max(w_tau p_tau - q_tau, 0) (p_tau itself where that is zero everywhere, as leviathan.residual)."""
    k = q.shape[0]
    return p[k] if tau == k else leviathan.residual(w[tau] * p[tau], q[tau])


def decide(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, eta: torch.Tensor) -> tuple[int, torch.Tensor]:
    """(tau, [V] weights of the extra token) of one request: p [k + 1, V], q [k, V], drafts x [k], eta [k]."""
    k = q.shape[0]
    steps = torch.arange(k)
    w = weights(p[steps, x], q[steps, x])
    tau = stopping_point(eta, stop_probabilities(w, p, q))
    return tau, extra_weights(tau, w, p, q)
