"""The synthetic rule: a forced acceptance rate, independent of p and q (SPEC section 3).

Position j (0-based) is accepted with conditional probability c_j = a0 * g**j. With n speculative
steps the joint probability of accepting through j is J_j = a0**(j+1) * g**(j*(j+1)/2), and
(a0, g) are chosen so that mean_{j<n} J_j equals the configured rate r.
"""

from __future__ import annotations

import torch

MIN_DECAY = 0.85
_BISECTION_STEPS = 200


def mean_joint_acceptance(base_rate: float, decay: float, num_speculative_steps: int) -> float:
    """mean over j < n of a0**(j+1) * g**(j*(j+1)/2)."""
    n = num_speculative_steps
    return sum(base_rate ** (j + 1) * decay ** (j * (j + 1) / 2) for j in range(n)) / n


def _bisect(f, lo: float, hi: float, target: float) -> float:
    """Smallest x in [lo, hi] with f(x) >= target, for f increasing."""
    if f(lo) >= target:
        return lo
    for _ in range(_BISECTION_STEPS):
        mid = (lo + hi) / 2
        if f(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def validate_rate(rate, num_speculative_steps) -> None:
    if rate is None:
        raise ValueError("synthetic_acceptance_rate is not set: the synthetic method needs a rate in [0, 1] "
                         "(it never defaults to 0, which would reject every draft)")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= float(rate) <= 1.0:
        raise ValueError(f"synthetic_acceptance_rate must be a number in [0, 1], got {rate!r}")
    if (num_speculative_steps is None or isinstance(num_speculative_steps, bool)
            or not isinstance(num_speculative_steps, int) or num_speculative_steps < 1):
        raise ValueError(f"num_speculative_steps must be an int >= 1 for the synthetic method, "
                         f"got {num_speculative_steps!r}")


def synthetic_params(rate: float, num_speculative_steps: int) -> tuple[float, float]:
    """(base_rate a0, decay g): g is the smallest decay in [0.85, 1] at which a0 <= 1 reaches r."""
    validate_rate(rate, num_speculative_steps)
    n, r = num_speculative_steps, float(rate)
    if mean_joint_acceptance(1.0, MIN_DECAY, n) >= r:
        decay = MIN_DECAY
    else:
        decay = _bisect(lambda g: mean_joint_acceptance(1.0, g, n), MIN_DECAY, 1.0, r)
    base_rate = _bisect(lambda a: mean_joint_acceptance(a, decay, n), 0.0, 1.0, r)
    return base_rate, decay


def conditional_rates(rate: float, num_speculative_steps: int) -> torch.Tensor:
    """[n] float64: c_j = a0 * g**j, the per-position conditional acceptance probability."""
    a0, g = synthetic_params(rate, num_speculative_steps)
    return a0 * g ** torch.arange(num_speculative_steps, dtype=torch.float64)


def conditional_from_unconditional(joint_rates: torch.Tensor) -> torch.Tensor:
    """Per-position unconditional rates R_j (accept through j) -> conditional c_0 = R_0, c_j = R_j / R_{j-1}."""
    R = joint_rates.to(torch.float64)
    if R.dim() != 1 or bool(((R < 0) | (R > 1)).any()) or bool((R[1:] > R[:-1]).any()):
        raise ValueError(f"unconditional rates must be a non-increasing [n] tensor in [0, 1], got {R.tolist()}")
    prev = torch.cat([torch.ones(1, dtype=R.dtype), R[:-1]])
    return torch.where(prev > 0, R / prev.clamp(min=1e-300), torch.zeros_like(R))


def accepts(u: float, conditional_rate: float) -> bool:
    """Accept iff u < c_j: probability exactly c_j for u uniform in (0, 1); c = 0 never, c = 1 always."""
    return u < conditional_rate
