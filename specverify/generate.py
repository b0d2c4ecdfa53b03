"""Batch generators shared by the checks, the tests and the benchmarks (plain functions, seeded).

``random_batch``     a ragged batch with zero-draft requests, mixed greedy/random requests and a
                     choice of drafter (dense q, None, q equal to p, q disjoint from p).
``replicated_batch`` one request replicated many times with drafts drawn from q: one launch gives
                     many independent samples of the same output distribution (statistical checks).
"""

from __future__ import annotations

import torch

from reference import SpecBatch

DRAFTERS = ("dense", "none", "equal", "disjoint")


def draft_distribution(p: torch.Tensor, drafter: str, generator: torch.Generator,
                       scale: float) -> torch.Tensor | None:
    """The drafter's q [T, V] float64 for target rows p [T, V], or None (draft_probs None).

    "dense": softmax of independent logits times ``scale``; "equal": q = p (every draft accepted);
    "disjoint": uniform where p is 0 if p has zeros, else everywhere but p's mode (q and p overlap
    as little as they can); "none": None, a deterministic drafter.
    """
    if drafter not in DRAFTERS:
        raise ValueError(f"drafter must be one of {DRAFTERS}, got {drafter!r}")
    T, V = p.shape
    if drafter == "dense":
        return torch.softmax(torch.randn(T, V, generator=generator, dtype=torch.float64) * scale, dim=-1)
    if drafter == "equal":
        return p.clone()
    if drafter == "none":
        return None
    outside = (p == 0).double()
    if V >= 2 and T:
        mode_free = torch.ones(T, V, dtype=torch.float64)
        mode_free[torch.arange(T), p.argmax(dim=1)] = 0
        outside = torch.where(outside.sum(1, keepdim=True) > 0, outside, mode_free)
    else:
        outside = torch.ones(T, V, dtype=torch.float64)
    return outside / outside.sum(dim=1, keepdim=True)


def logits_for(p: torch.Tensor, temperature: float) -> torch.Tensor:
    """Logits whose softmax at ``temperature`` is ``p`` (-inf where p = 0)."""
    return torch.log(p.to(torch.float64)) * temperature


def random_batch(generator: torch.Generator, *, num_requests: int, vocab_size: int, max_draft: int = 4,
                 logit_dtype: torch.dtype = torch.float32, drafter: str = "dense",
                 greedy_fraction: float = 0.25, zero_draft_fraction: float = 0.25,
                 logit_scale: float = 3.0, device="cpu") -> SpecBatch:
    """A random ragged batch; drafts are sampled from the drafter's q (argmax of q when greedy).

    drafter: see ``draft_distribution``; with "none" the drafts are uniform.
    """
    B, V, g = num_requests, vocab_size, generator
    k = torch.randint(1, max_draft + 1, (B,), generator=g) if max_draft > 0 else torch.zeros(B, dtype=torch.int64)
    k[torch.rand(B, generator=g) < zero_draft_fraction] = 0
    T = int(k.sum())
    temperature = torch.exp(torch.empty(B).uniform_(-1.5, 1.0, generator=g)).float()
    temperature[torch.rand(B, generator=g) < greedy_fraction] = 0.0
    logits = (torch.randn(T + B, V, generator=g, dtype=torch.float64) * logit_scale).to(logit_dtype)
    req_of_row = torch.repeat_interleave(torch.arange(B), k + 1)
    is_draft_row = torch.ones(T + B, dtype=torch.bool)
    is_draft_row[torch.cumsum(k + 1, 0) - 1] = False
    row_temp = temperature[req_of_row][is_draft_row].double().clamp(min=1e-3)
    p = torch.softmax(logits[is_draft_row].double() / row_temp[:, None], dim=-1)
    q = draft_distribution(p, drafter, g, logit_scale)
    if q is None:
        drafts = torch.randint(0, V, (T,), generator=g)
    else:
        drafts = torch.multinomial(q, 1, generator=g).squeeze(1) if T else torch.zeros(0, dtype=torch.int64)
    return SpecBatch(k.to(device), drafts.to(device), logits.to(device),
                     None if q is None else q.float().to(device), temperature.to(device))


def replicated_batch(generator: torch.Generator, p: torch.Tensor, q: torch.Tensor | None, temperature: float,
                     copies: int, *, drafts: list[int] | None = None,
                     logit_dtype: torch.dtype = torch.float32, device="cpu") -> SpecBatch:
    """``copies`` requests with target rows p [k+1, V] and drafter q [k, V] (or None with fixed ``drafts``).

    With q given, each copy's drafts are drawn x_j ~ q_j independently, so the token emitted at
    position j is distributed as p_j (the theorem the statistical checks lean on). A generator on a
    device draws there and the batch is built there.
    """
    k = p.shape[0] - 1
    if q is None and drafts is None:
        raise ValueError("replicated_batch needs q or fixed drafts")
    on = generator.device if generator is not None else torch.device("cpu")
    if q is not None:
        # [k, copies] drawn at once where the generator lives, then copy-major like the batch
        x = torch.multinomial(q.double().to(on), copies, replacement=True, generator=generator).T.reshape(-1) \
            if k else torch.zeros(0, dtype=torch.int64, device=on)
        probs = q.float().to(on).repeat(copies, 1)
    else:
        x = torch.tensor(list(drafts), dtype=torch.int64, device=on).repeat(copies)
        probs = None
    logits = logits_for(p, temperature if temperature > 0 else 1.0).to(logit_dtype).to(on).repeat(copies, 1)
    return SpecBatch(torch.full((copies,), k, dtype=torch.int64, device=device), x.to(device), logits.to(device),
                     None if probs is None else probs.to(device),
                     torch.full((copies,), float(temperature), dtype=torch.float32, device=device))
