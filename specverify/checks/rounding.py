"""How far float32's rounding of the scaled logits l / T moves p (SPEC 4.1, "Scaled logits").

A float32 backend rounds each scaled logit s_v = l_v / T: a division, or a product with a rounded 1 / T (or
log2(e) / T), at most four roundings, so s_v carries an error a_v with |a_v| <= ROUNDING * |s_v|. The row's max
cancels from the softmax (a backend rounds it as it rounds the entry), so to first order

    log p^(v) - log p(v) = a_v - sum_w p(w) a_w,   |.| <= e(v) = ROUNDING ((1 - p(v)) |s_v| + sum_{w != v} p(w) |s_w|)

with p the target after its filters (SPEC 3.4). At temperature 1 e(v) is at most 2^-21 max |l| (5e-7 max |l|), inside
the harness's tolerance for logits up to 20; at temperature 0.001 it reaches 1e-3 for a token close to the top. A row
whose top token has p = 1 keeps e = 0 there, so a backend whose p(x) skips the rounding its max took (a fused
multiply-add, SPEC 2) stays caught.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from reference import tree

ROUNDING = 2.0 ** -22     # four roundings of s_v, each at most half an ulp (2^-24 relative)


def scaled_logit_error(logits: torch.Tensor, temperature: float, p: torch.Tensor) -> torch.Tensor:
    """e [..., V] float64: the bound above on the relative error of each p(v), 0 where p(v) = 0, for logit rows
    [..., V] at ``temperature`` > 0 and their filtered targets p [..., V]."""
    kept = p > 0
    s = torch.where(kept, logits.double() / temperature, torch.zeros((), dtype=torch.float64)).abs()
    ps = p.double() * s
    rest = ps.sum(dim=-1, keepdim=True) - ps
    return torch.where(kept, ROUNDING * ((1 - p.double()) * s + rest), torch.zeros((), dtype=torch.float64))


def cancellation(r: torch.Tensor, q: torch.Tensor, v: int, allowed: torch.Tensor) -> float:
    """|r(v) - q(v)| / r(v) of a residual entry where r(v) > 0 and that lies within ``allowed`` [V] at v (the
    tolerance plus its rounding): a cancellation float32 may see as zero or as positive; inf otherwise."""
    if not 0 <= v < r.shape[0] or r[v] <= 0:
        return math.inf
    size = abs(float(r[v] - q[v])) / float(r[v])
    return size if size <= float(allowed[v]) else math.inf


def race_error(e: torch.Tensor, p: torch.Tensor, w: torch.Tensor, v: int) -> float:
    """The relative error of w(v) in a race over w (p itself or a residual max(p - q, 0), q exact): e(v) p(v) /
    w(v), 0 where w(v) = 0 or v is out of range."""
    if not 0 <= v < w.shape[-1] or w[v] <= 0:
        return 0.0
    return float(e[v] * p[v] / w[v])


@dataclass(frozen=True)
class Residual:
    """A tree node's residual (SPEC 3.8) in the reference's float64 numbers: r [V] unnormalised, its mass m, and
    first-order bounds on the absolute errors l / T's rounding leaves in them (dr [V], dm)."""
    r: torch.Tensor
    m: float
    dr: torch.Tensor
    dm: float

    @classmethod
    def of(cls, p: torch.Tensor, e: torch.Tensor) -> Residual:
        """A node's first residual: its target row p [V] with m = 1, each p(v) off by e(v) p(v)."""
        return cls(p, 1.0, p * e, 0.0)

    def after_rejection(self, q: torch.Tensor) -> Residual:
        """r' = max(r - m q, 0) and its mass, after a sibling with drafter row q [V] (exact) is rejected."""
        r, m = tree.after_rejection(self.r, self.m, q)
        dr = torch.where(r > 0, self.dr + self.dm * q, torch.zeros((), dtype=torch.float64))
        return Residual(r, float(m), dr, float(dr.sum()))

    def ratio_error(self, x: int) -> float:
        """The relative error of r(x) / m, which the sibling test compares with u q(x)."""
        return float(self.dr[x] / self.r[x]) + self.dm / self.m if self.r[x] > 0 else 0.0

    def cancellation(self, q: torch.Tensor, v: int, tol: float) -> float:
        """``cancellation`` of r against m q, within tol plus r's rounding there ((dr + dm q) / r)."""
        rounding = torch.where(self.r > 0, (self.dr + self.dm * q) / self.r, 0.0)    # 0 / 0 where r = 0: unused
        return cancellation(self.r, self.m * q, v, tol + rounding)
