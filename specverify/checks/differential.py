"""Exact agreement with the reference under shared noise (SPEC 4.1), with ambiguity classification.

The reference decides in float64, a backend in float32: they may disagree only where the decision
is numerically ambiguous. For the first point where a request's outputs diverge, ``classify``
measures that decision's relative margin in the reference's own numbers:

    acceptance (standard)  |u * q(x) - p(x)| / p(x)
    stop test (block)      |eta_i - h_i| / e_i, e_i the first-order float32 error of h_i (SPEC 3.7)
    greedy argmax          (top1 - top2) / |top1| of the logits (exact ties are defined: lowest index)
    exponential race       (top1 - top2) / top1 of w / E (exact ties are defined: lowest index)
    synthetic acceptance   never ambiguous: u and c_j are the same float32 numbers everywhere

A divergence whose margin is below the backend's tolerance is "ambiguous" (counted and bounded);
anything else is "real" and fails. The tolerance grows as sqrt(V / 4096) above 4096 columns, since
float32 sums over V terms carry a relative error of about sqrt(V) ulps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

import reference
from reference import Noise, SpecBatch, SpecOutput, block, leviathan
from reference.batch import PLACEHOLDER
from reference.sample import filtered_target, synthetic_rates_f32

AMBIGUOUS_FRACTION_BOUND = 0.002     # ambiguous divergences allowed per decision, above a floor of 2


@dataclass
class Divergence:
    request: int
    position: int
    expected: list
    got: list
    decision: str
    margin: float
    ambiguous: bool

    def __str__(self) -> str:
        kind = "ambiguous" if self.ambiguous else "REAL"
        return (f"request {self.request}, position {self.position}: expected {self.expected}, got {self.got} "
                f"({kind}: {self.decision} margin {self.margin:.3g})")


def tolerance(base: float, vocab_size: int) -> float:
    return base * max(1.0, math.sqrt(vocab_size / 4096))


def _relative_gap(values: torch.Tensor) -> float:
    """Relative gap of the two largest entries; inf when they tie exactly (a defined tie-break)."""
    if values.numel() < 2:
        return math.inf
    top2 = torch.topk(values, 2).values
    if top2[0] == top2[1] or not torch.isfinite(top2[0]):
        return math.inf
    return float((top2[0] - top2[1]) / top2[0].abs().clamp(min=1e-300))


def draft_row(cpu: SpecBatch, t: int, x: int) -> torch.Tensor:
    """q [V] float64 of draft slot t with token x: one-hot for a deterministic drafter, zero for a
    placeholder (SPEC 3.5)."""
    if x == PLACEHOLDER:
        return torch.zeros(cpu.vocab_size, dtype=torch.float64)
    return leviathan.one_hot(x, cpu.vocab_size) if cpu.draft_probs is None else cpu.draft_probs[t].double()


def classify(batch: SpecBatch, noise: Noise, b: int, expected: list, got: list, method: str,
             rates: torch.Tensor | None, tol: float) -> Divergence:
    """Why request b's outputs diverge, and whether that is within the backend's ambiguity tolerance."""
    cpu = batch.to("cpu")
    d0 = int(cpu.draft_offsets()[b])
    l0 = int(cpu.logit_offsets()[b])
    k = int(cpu.num_draft_tokens[b])
    temperature = float(cpu.temperature[b])
    # The decision that differs is at j = the smaller acceptance count (accepted tokens are the drafts
    # on both sides): one side accepted draft j and the other rejected it, or both stopped at j with
    # different extra tokens. (The first differing list entry can lie later: the extra token emitted
    # at a rejection may equal the draft the other side accepted.)
    if not got or len(got) > k + 1:
        return Divergence(b, len(got), expected, got, "structure", 0.0, False)
    j = min(len(expected), len(got)) - 1
    if method == "block" and temperature > 0 and block.block_length(cpu.draft_token_ids[d0: d0 + k]) > 0:
        return _classify_block(cpu, noise, b, expected, got, tol)
    logits = cpu.target_logits[l0 + j].to(torch.float64)
    both_stopped = len(expected) == len(got)
    if not both_stopped:
        if method == "synthetic" or j >= k:
            return Divergence(b, j, expected, got, "acceptance", math.inf, False)
        x = int(cpu.draft_token_ids[d0 + j])
        if x == PLACEHOLDER:   # a placeholder is never accepted: nothing about it is ambiguous
            return Divergence(b, j, expected, got, "placeholder acceptance", math.inf, False)
        if temperature == 0:
            margin = _relative_gap(logits)
            return Divergence(b, j, expected, got, "greedy argmax", margin, margin < tol)
        p = filtered_target(cpu, torch.tensor([b]), logits[None], temperature)[0]
        q = draft_row(cpu, d0 + j, x)
        u = float(noise.uniform.cpu()[d0 + j])
        margin = math.inf if q[x] == 0 or p[x] == 0 else float(abs(u * q[x] - p[x]) / p[x])
        return Divergence(b, j, expected, got, "acceptance u*q(x) <= p(x)", margin, margin < tol)
    if temperature == 0:
        margin = _relative_gap(logits)
        return Divergence(b, j, expected, got, "greedy argmax", margin, margin < tol)
    p = filtered_target(cpu, torch.tensor([b]), logits[None], temperature)[0]
    if method == "standard" and j < k:
        x = int(cpu.draft_token_ids[d0 + j])
        q = draft_row(cpu, d0 + j, x)
        w = leviathan.residual(p, q)
        # A residual entry p(v) - q(v) within float32 rounding of p(v) is a cancellation: float32 may
        # see it as 0 or as positive, and a tiny exponential lets it win the race (SPEC 4.1).
        for v in {int(expected[j]), int(got[j])}:
            if 0 <= v < cpu.vocab_size and p[v] > 0 and abs(float(p[v] - q[v])) <= tol * float(p[v]):
                margin = abs(float(p[v] - q[v])) / float(p[v])
                return Divergence(b, j, expected, got, "residual cancellation p(v) - q(v)", margin, True)
    else:
        w = p
    score = torch.where(w > 0, w / noise.exponential.cpu()[b].double(), torch.zeros_like(w))
    margin = _relative_gap(score)
    return Divergence(b, j, expected, got, "exponential race", margin, margin < tol)


def block_law(cpu: SpecBatch, b: int) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(k, x [k], p [k + 1, V], q [k, V], w [k + 1]) of random request b under the block rule (SPEC 3.7),
    in float64: its block (the drafts before the first placeholder), targets p', drafter rows, running
    ratios."""
    d0, l0 = int(cpu.draft_offsets()[b]), int(cpu.logit_offsets()[b])
    k = block.block_length(cpu.draft_token_ids[d0: d0 + int(cpu.num_draft_tokens[b])])
    x = cpu.draft_token_ids[d0: d0 + k]
    p = filtered_target(cpu, torch.tensor([b]).repeat(k + 1), cpu.target_logits[l0: l0 + k + 1].double(),
                        float(cpu.temperature[b]))
    q = torch.stack([draft_row(cpu, d0 + i, int(x[i])) for i in range(k)]) if k else \
        torch.zeros(0, cpu.vocab_size, dtype=torch.float64)
    steps = torch.arange(k)
    return k, x, p, q, block.weights(p[steps, x], q[steps, x])


def _classify_block(cpu: SpecBatch, noise: Noise, b: int, expected: list, got: list, tol: float) -> Divergence:
    """A block request's divergence against SPEC 3.7's ambiguity rule: the flipped stop test
    eta_i <= h_i within tol * e_i (h_i's first-order float32 error), or an ambiguous residual race."""
    d0 = int(cpu.draft_offsets()[b])
    k, x, p, q, w = block_law(cpu, b)
    tau_ref, tau_got = len(expected) - 1, len(got) - 1
    if tau_got > k or got[:tau_got] != x[:tau_got].tolist():
        return Divergence(b, tau_got, expected, got, "block structure", math.inf, False)
    if tau_ref != tau_got:
        i = max(tau_ref, tau_got)
        eta, h = float(noise.uniform.cpu()[d0 + i - 1]), float(block.stop_probabilities(w, p, q)[i - 1])
        if i == k:
            error = float(w[k])
        else:
            s, m = block.residual_mass(w[i], p[i], q[i]), torch.maximum(w[i] * p[i], q[i]).sum()
            error = float(((1 - w[i]) * m + s) / (s + 1 - w[i]) ** 2)
        margin = abs(eta - h) / error if error > 0 else math.inf
        return Divergence(b, i, expected, got, "block stop eta_i <= h_i", margin, margin < tol)
    tau = tau_ref
    weights = block.extra_weights(tau, w, p, q)
    if tau < k:
        wp = w[tau] * p[tau]
        for v in {int(expected[tau]), int(got[tau])}:
            if 0 <= v < cpu.vocab_size and wp[v] > 0 and abs(float(wp[v] - q[tau, v])) <= tol * float(wp[v]):
                margin = abs(float(wp[v] - q[tau, v])) / float(wp[v])
                return Divergence(b, tau, expected, got, "residual cancellation w p(v) - q(v)", margin, True)
    score = torch.where(weights > 0, weights / noise.exponential.cpu()[b].double(), torch.zeros_like(weights))
    margin = _relative_gap(score)
    return Divergence(b, tau, expected, got, "exponential race (block)", margin, margin < tol)


@dataclass
class Comparison:
    decisions: int
    divergences: list

    @property
    def real(self) -> list:
        return [d for d in self.divergences if not d.ambiguous]

    @property
    def ambiguous(self) -> list:
        return [d for d in self.divergences if d.ambiguous]


def compare_to_reference(batch: SpecBatch, got: SpecOutput, noise: Noise, *, method: str = "standard",
                         synthetic_acceptance_rate=None, num_speculative_steps=None, tol: float = 1e-5,
                         expected: SpecOutput | None = None) -> Comparison:
    """Run the reference under the same noise and list every divergence, classified."""
    kwargs = dict(method=method, synthetic_acceptance_rate=synthetic_acceptance_rate,
                  num_speculative_steps=num_speculative_steps)
    if expected is None:
        expected = reference.sample(batch, noise=noise, **kwargs)
    rates = synthetic_rates_f32(synthetic_acceptance_rate, num_speculative_steps) if method == "synthetic" else None
    tol = tolerance(tol, batch.vocab_size)
    exp_rows, got_rows = expected.emitted(), got.emitted()
    divergences = [classify(batch, noise, b, e, g, method, rates, tol)
                   for b, (e, g) in enumerate(zip(exp_rows, got_rows)) if e != g]
    decisions = int(batch.num_draft_tokens.sum()) + batch.num_requests
    return Comparison(decisions, divergences)


def ambiguous_bound(decisions: int) -> int:
    return max(2, int(AMBIGUOUS_FRACTION_BOUND * decisions))
