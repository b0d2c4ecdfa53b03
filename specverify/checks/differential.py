"""Exact agreement with the reference under shared noise (SPEC 4.1), with ambiguity classification.

The reference decides in float64, a backend in float32: they may disagree only where the decision
is numerically ambiguous. For the first point where a request's outputs diverge, ``classify``
measures that decision's relative margin in the reference's own numbers:

    acceptance (standard)  |u * q(x) - p(x)| / p(x)
    stop test (block)      |eta_i - h_i| / e_i, e_i the first-order float32 error of h_i (SPEC 3.7)
    sibling test (tree)    |u * q(x) - r(x) / m| / (r(x) / m) at the first flipped test along the shared
                           path, or a cancellation in x's entry of r (SPEC 3.8)
    greedy argmax          (top1 - top2) / |top1| of the logits (exact ties are defined: lowest index)
    exponential race       (top1 - top2) / top1 of w / E (exact ties are defined: lowest index)
    synthetic acceptance   never ambiguous: u and c_j are the same float32 numbers everywhere
    filter cut             a divergence the reference gives too once one row's kept set moves across tokens
                           near a top-k, top-p or min-p cut (``filter_cuts``): the largest relative distance

A divergence whose margin is below the backend's tolerance, plus what float32's rounding of the scaled logits
l / T moves that decision by (``rounding``), is "ambiguous" (counted and bounded); anything else is "real" and
fails. The tolerance grows as sqrt(V / 4096) above 4096 columns, since
float32 sums over V terms carry a relative error of about sqrt(V) ulps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

import reference
from reference import Noise, SpecBatch, SpecOutput, block, leviathan, tree
from reference.batch import PLACEHOLDER
from reference.sample import filtered_target, synthetic_rates_f32
from specverify.backends import HARNESS_AMBIGUITY_MARGIN
from specverify.checks.filter_cuts import explained_by_cut
from specverify.checks.rounding import Residual, cancellation, race_error, scaled_logit_error

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
    rounding: float = 0.0     # what l / T's float32 rounding adds to the tolerance for this decision (rounding.py)

    def __str__(self) -> str:
        kind = "ambiguous" if self.ambiguous else "REAL"
        extra = f", l / T's rounding allows {self.rounding:.3g} more" if self.rounding > 0 else ""
        return (f"request {self.request}, position {self.position}: expected {self.expected}, got {self.got} "
                f"({kind}: {self.decision} margin {self.margin:.3g}{extra})")


FALLBACK_RACE = "residual fallback to p (max(p - q, 0) is zero everywhere)"


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
             rates: torch.Tensor | None, tol: float, scale: float = 1.0) -> Divergence:
    """Why request b's outputs diverge, and whether that is within the backend's ambiguity tolerance; ``scale``
    multiplies l / T's rounding allowance (a backend's tighter margin over the harness's)."""
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
        return _classify_block(cpu, noise, b, expected, got, tol, scale)
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
        rounding = scale * float(scaled_logit_error(logits, temperature, p)[x])
        q = draft_row(cpu, d0 + j, x)
        u = float(noise.uniform.cpu()[d0 + j])
        margin = math.inf if q[x] == 0 or p[x] == 0 else float(abs(u * q[x] - p[x]) / p[x])
        return Divergence(b, j, expected, got, "acceptance u*q(x) <= p(x)", margin, margin < tol + rounding,
                          rounding)
    if temperature == 0:
        margin = _relative_gap(logits)
        return Divergence(b, j, expected, got, "greedy argmax", margin, margin < tol)
    p = filtered_target(cpu, torch.tensor([b]), logits[None], temperature)[0]
    e = scale * scaled_logit_error(logits, temperature, p)
    sides = {int(expected[j]), int(got[j])}
    if method == "standard" and j < k:
        x = int(cpu.draft_token_ids[d0 + j])
        q = draft_row(cpu, d0 + j, x)
        w = leviathan.residual(p, q)
        # A residual entry p(v) - q(v) within float32 rounding of p(v) is a cancellation: float32 may
        # see it as 0 or as positive, and a tiny exponential lets it win the race (SPEC 4.1).
        for v in sides:
            margin = cancellation(p, q, v, tol + e)
            if math.isfinite(margin):
                return Divergence(b, j, expected, got, "residual cancellation p(v) - q(v)", margin, True,
                                  float(e[v]))
        # the residual zero everywhere, where the rule races p itself (SPEC 3), is named apart: a kernel without
        # that fallback is told so (and an adapter can declare it)
        race = "exponential race" if bool((p > q).any()) else FALLBACK_RACE
    else:
        w, race = p, "exponential race"
    score = torch.where(w > 0, w / noise.exponential.cpu()[b].double(), torch.zeros_like(w))
    margin = _relative_gap(score)
    rounding = sum(race_error(e, p, w, v) for v in sides)
    return Divergence(b, j, expected, got, race, margin, margin < tol + rounding, rounding)


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


def _classify_block(cpu: SpecBatch, noise: Noise, b: int, expected: list, got: list, tol: float,
                    scale: float = 1.0) -> Divergence:
    """A block request's divergence against SPEC 3.7's ambiguity rule: the flipped stop test
    eta_i <= h_i within tol * e_i (h_i's first-order float32 error), or an ambiguous residual race."""
    d0, l0 = int(cpu.draft_offsets()[b]), int(cpu.logit_offsets()[b])
    k, x, p, q, w = block_law(cpu, b)
    tau_ref, tau_got = len(expected) - 1, len(got) - 1
    if tau_got > k or got[:tau_got] != x[:tau_got].tolist():
        return Divergence(b, tau_got, expected, got, "block structure", math.inf, False)
    # l / T's rounding: e [k + 1, V] on p's entries, and the relative error of each running ratio w_i
    e = scale * scaled_logit_error(cpu.target_logits[l0: l0 + k + 1], float(cpu.temperature[b]), p)
    w_error = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(e[torch.arange(k), x], 0)])
    if tau_ref != tau_got:
        i = max(tau_ref, tau_got)
        eta, h = float(noise.uniform.cpu()[d0 + i - 1]), float(block.stop_probabilities(w, p, q)[i - 1])
        if i == k:
            error, moved = float(w[k]), float(w[k] * w_error[k])
        else:
            s, m = block.residual_mass(w[i], p[i], q[i]), torch.maximum(w[i] * p[i], q[i]).sum()
            error = float(((1 - w[i]) * m + s) / (s + 1 - w[i]) ** 2)
            # S_i moves by at most w_i (w's error + sum_v p_i(v) e_i(v)), w_i by w_i times its error
            d_s, d_w = w[i] * (w_error[i] + (p[i] * e[i]).sum()), w[i] * w_error[i]
            moved = float(((1 - w[i]) * d_s + s * d_w) / (s + 1 - w[i]) ** 2)
        margin = abs(eta - h) / error if error > 0 else math.inf
        rounding = moved / error if error > 0 else 0.0
        return Divergence(b, i, expected, got, "block stop eta_i <= h_i", margin, margin < tol + rounding, rounding)
    tau = tau_ref
    weights = block.extra_weights(tau, w, p, q)
    sides = {int(expected[tau]), int(got[tau])}
    if tau < k:
        wp, e_wp = w[tau] * p[tau], w_error[tau] + e[tau]
        for v in sides:
            margin = cancellation(wp, q[tau], v, tol + e_wp)
            if math.isfinite(margin):
                return Divergence(b, tau, expected, got, "residual cancellation w p(v) - q(v)", margin, True,
                                  float(e_wp[v]))
        rounding = sum(race_error(e_wp, wp, weights, v) for v in sides)
    else:
        rounding = sum(race_error(e[k], p[k], weights, v) for v in sides)
    score = torch.where(weights > 0, weights / noise.exponential.cpu()[b].double(), torch.zeros_like(weights))
    margin = _relative_gap(score)
    return Divergence(b, tau, expected, got, "exponential race (block)", margin, margin < tol + rounding, rounding)


def residual_cancellation(updates: list, v: int, tol: float) -> float:
    """The smallest relative size |r(v) - m q(v)| / r(v) of v's entry in a node's residual updates
    [(Residual, q)] that lies within tol plus l / T's rounding, inf where none does: a cancellation float32 may see
    as zero or as positive (SPEC 3.8)."""
    return min((res.cancellation(q, v, tol) for res, q in updates), default=math.inf)


def _classify_tree(cpu: SpecBatch, noise: Noise, b: int, expected: list, got: list, got_path: list,
                   tol: float, scale: float = 1.0) -> Divergence:
    """A tree request's divergence against SPEC 3.8's ambiguity rule: the rule replayed in the reference's
    float64 numbers along the path both sides share, up to the first decision they took differently."""
    d0, l0, n = int(cpu.draft_offsets()[b]), int(cpu.logit_offsets()[b]), int(cpu.num_draft_tokens[b])
    if cpu.allow_nonfinite and bool(cpu.nonfinite_requests()[b]):
        return Divergence(b, 0, expected, got, "non-finite request", math.inf, False)
    x = cpu.draft_token_ids[d0: d0 + n].tolist()
    kids = tree.children(tree.parents_of(cpu)[d0: d0 + n].tolist())
    logits = cpu.target_logits[l0: l0 + n + 1].double()
    temperature = float(cpu.temperature[b])
    p = None if temperature == 0 else filtered_target(cpu, torch.tensor([b]).repeat(n + 1), logits, temperature)
    e = None if p is None else scale * scaled_logit_error(logits, temperature, p)
    u = noise.uniform.cpu()[d0: d0 + n].double()
    node, res, depth, updates = tree.ROOT, None if p is None else Residual.of(p[0], e[0]), 0, []
    while True:
        step = got_path[depth] if depth < len(got_path) else None
        for c in kids[node + 1]:
            if x[c] == PLACEHOLDER:
                if step == c:
                    return Divergence(b, depth, expected, got, "placeholder accepted", math.inf, False)
                continue
            if p is None:
                ours = x[c] == reference.greedy.argmax(logits[node + 1])
            else:
                q = draft_row(cpu, d0 + c, x[c])
                ours = tree.accepts(u[c], res.r[x[c]], res.m, q[x[c]])
            if ours != (step == c):
                if p is None:
                    margin = _relative_gap(logits[node + 1])
                    return Divergence(b, depth, expected, got, "greedy argmax (tree)", margin, margin < tol)
                r_x = float(res.r[x[c]] / res.m)
                margin = math.inf if q[x[c]] == 0 or r_x == 0 else abs(float(u[c] * q[x[c]]) - r_x) / r_x
                rounding = res.ratio_error(x[c])
                cancellation = residual_cancellation(updates, x[c], tol)
                ambiguous = margin < tol + rounding or math.isfinite(cancellation)
                return Divergence(b, depth, expected, got, f"tree test u*q(x) <= r(x) at node {c}",
                                  min(margin, cancellation), ambiguous, rounding)
            if ours:
                node, depth, updates = c, depth + 1, []
                res = None if p is None else Residual.of(p[c + 1], e[c + 1])
                break
            if p is not None:
                updates.append((res, q))
                res = res.after_rejection(q)
        else:
            break
    if step is not None:      # the backend went on to a node that is not a child of where the rule stopped
        return Divergence(b, depth, expected, got, "tree structure", math.inf, False)
    if p is None:
        margin = _relative_gap(logits[node + 1])
        return Divergence(b, depth, expected, got, "greedy argmax (tree)", margin, margin < tol)
    for v in {int(expected[-1]), int(got[-1])}:
        margin = residual_cancellation(updates, v, tol)
        if math.isfinite(margin):
            return Divergence(b, depth, expected, got, "residual cancellation r(v) - m q(v) (tree)", margin, True)
    r = res.r
    score = torch.where(r > 0, r / noise.exponential.cpu()[b].double(), torch.zeros_like(r))
    margin = _relative_gap(score)
    rounding = sum(float(res.dr[v] / r[v]) for v in {int(expected[-1]), int(got[-1])}
                   if 0 <= v < r.shape[0] and r[v] > 0)
    return Divergence(b, depth, expected, got, "exponential race (tree)", margin, margin < tol + rounding, rounding)


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
    # a backend's tighter margin scales l / T's rounding allowance with it (none for a float64 backend's 0)
    scale = min(1.0, tol / HARNESS_AMBIGUITY_MARGIN)
    tol = tolerance(tol, batch.vocab_size)
    exp_rows, got_rows = expected.emitted(), got.emitted()
    if method == "tree":
        cpu, exp_paths, got_paths = batch.to("cpu"), _paths(expected), _paths(got)
        divergences = [_classify_tree(cpu, noise, b, e, g, gp, tol, scale) if gp is not None else
                       Divergence(b, 0, e, g, "tree structure (no accepted_nodes)", math.inf, False)
                       for b, (e, g, ep, gp) in enumerate(zip(exp_rows, got_rows, exp_paths, got_paths))
                       if e != g or ep != gp]
    else:
        divergences = [classify(batch, noise, b, e, g, method, rates, tol, scale)
                       for b, (e, g) in enumerate(zip(exp_rows, got_rows)) if e != g]
    if divergences and batch.has_filters:
        paths = _paths(got) if method == "tree" else [None] * batch.num_requests
        cuts_seen: dict = {}
        divergences = [d if d.ambiguous else _cut_excuse(batch, noise, d, paths[d.request], kwargs, tol, cuts_seen,
                                                          scale)
                       for d in divergences]
    decisions = int(batch.num_draft_tokens.sum()) + batch.num_requests
    return Comparison(decisions, divergences)


def _cut_excuse(batch: SpecBatch, noise: Noise, d: Divergence, path, call: dict, tol: float,
                cuts_seen: dict, scale: float = 1.0) -> Divergence:
    """``d`` excused as a filter-cut ambiguity (SPEC 4.1) when the reference, given an admissible kept set at
    one row of the request, emits the backend's tokens; ``d`` itself otherwise (``cuts_seen`` as
    ``explained_by_cut`` takes it)."""
    found = explained_by_cut(batch, noise, d.request, d.got, path, call, tol, cuts_seen, scale)
    if found is None:
        return d
    margin, row = found
    return Divergence(d.request, d.position, d.expected, d.got, f"filter cut at row {row}", margin, True)


def _paths(out: SpecOutput) -> list:
    """Per request, the accepted path's nodes of a tree output (None per request when it has none)."""
    if out.accepted_nodes is None:
        return [None] * out.num_accepted.shape[0]
    return [row[:a] for row, a in zip(out.accepted_nodes.cpu().tolist(), out.num_accepted.cpu().tolist())]


def ambiguous_bound(decisions: int) -> int:
    return max(2, int(AMBIGUOUS_FRACTION_BOUND * decisions))
