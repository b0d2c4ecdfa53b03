"""Structural checks (SPEC 4.3-4.4): properties that hold for every input, checked exactly.

output_structure      -1 after the emitted tokens, num_accepted consistent, ids in [0, V) and in the
                      support of the distribution they were drawn from
uninitialized_memory  outputs do not depend on memory the backend never wrote: one run with torch's
                      deterministic fill of uninitialised memory (NaN / max int), one with a different
                      poison (plausible values), both equal to each other
batch_invariance      a request's output does not change when others are added, removed, reordered
determinism           same seed (or noise) twice gives the same output
zero_draft_layouts    zero-draft requests first / middle / last, all-zero batch
empty_batch           no requests at all (its own check: every other check draws at least one request)
repeated_calls        a second call with new draft probabilities of the same shapes sees them (stale state)
input_integrity       the backend never writes into its inputs (batch tensors, noise, seeds)

Every call goes through the runner's guard, which also validates each output's structure.
"""

from __future__ import annotations

import math
from contextlib import contextmanager, nullcontext

import torch

import reference
from reference import Noise, SpecBatch, leviathan, select_requests, tree
from reference.batch import PLACEHOLDER
from reference.sample import filtered_target
from specverify.backends import HARNESS_AMBIGUITY_MARGIN
from specverify.checks.differential import residual_cancellation, block_law, draft_row, tolerance
from specverify.checks.rounding import Residual, cancellation, scaled_logit_error
from specverify.checks.common import call_example, paths, run_property
from specverify.checks.integrity import strided_inputs
from specverify.checks.runner import CheckFailure, Context, Needs
from specverify.strategies import Example, spec_examples
from specverify.tree_strategies import as_tree


def outputs_equal(a, b) -> bool:
    """Same emitted tokens and the same num_accepted (slots after the emitted tokens are checked by the
    guard's structure validation)."""
    return a.emitted() == b.emitted() and torch.equal(a.num_accepted.cpu(), b.num_accepted.cpu())



# ---- helpers ------------------------------------------------------------------------------------
def share_of_examples(profile, share: int) -> int:
    """Examples for a check whose every example makes several calls: 1/share of the profile's, at
    least 5, or half of them for a profile of fewer than 10 (a test profile of the Triton interpreter)."""
    return max(min(5, profile.examples // 2), profile.examples // share)


def method_for(example: Example, methods: list[dict], ctx: Context) -> tuple[Example, dict]:
    """(the example, one of the declared rules' call keywords), a function of the example: the rules take
    turns over the examples at the cost of one, and a shrinking Hypothesis replays an example with its
    own rule. Under "tree" the example's requests get tree shapes (``as_tree``)."""
    kwargs = methods[(example.batch.num_requests + example.batch.num_drafts) % len(methods)]
    return _shaped(example, kwargs, ctx), kwargs


def _shaped(example: Example, kwargs: dict, ctx: Context) -> Example:
    """The example as the rule of ``kwargs`` reads it: trees (within the declared depth) for "tree"."""
    if kwargs["method"] != "tree":
        return example
    return as_tree(example, getattr(ctx.backend.capabilities, "max_tree_depth", None))


def support_problems(batch: SpecBatch, out, method: str = "standard") -> list[str]:
    """Every emitted token lies in the support it came from: the extra token has positive probability
    under the distribution it was drawn from (the filtered target p', or its residual, where an entry zero
    only within float32 rounding counts as positive, SPEC 4.1), and under the standard rule an accepted draft
    has p'(x) > 0 (u > 0, so u * q(x) <= p'(x) needs p'(x) > 0)."""
    cpu = batch.to("cpu")
    ids, n = out.token_ids.cpu(), out.num_accepted.cpu()
    d_off, l_off = cpu.draft_offsets().tolist(), cpu.logit_offsets().tolist()
    tol = tolerance(HARNESS_AMBIGUITY_MARGIN, cpu.vocab_size)
    problems = []
    if method == "tree":
        return [f"request {b}: {why}" for b in range(cpu.num_requests)
                for why in _tree_support(cpu, b, out.accepted_nodes[b, : int(n[b])].tolist(), int(ids[b, n[b]]))]
    for b in range(cpu.num_requests):
        m, k = int(n[b]), int(cpu.num_draft_tokens[b])
        y = int(ids[b, m])
        logits = cpu.target_logits[l_off[b] + m].double()
        t = float(cpu.temperature[b])
        if t == 0:
            if y != reference.greedy.argmax(logits):
                problems.append(f"request {b}: greedy extra token {y} is not argmax {reference.greedy.argmax(logits)}")
            continue
        request = torch.tensor([b])
        if method == "standard":
            for j in range(m):
                x = int(cpu.draft_token_ids[d_off[b] + j])
                row = cpu.target_logits[l_off[b] + j].double()
                if x == PLACEHOLDER or filtered_target(cpu, request, row[None], t)[0, x] <= 0:
                    problems.append(f"request {b}: accepted draft {x} at position {j} is outside the target's support")
        w = filtered_target(cpu, request, logits[None], t)[0]
        cancels = None      # (r, q, allowed): where r - q is zero within its rounding, float32 may see it positive
        if method == "block":
            k_block, x, p, q, weights = block_law(cpu, b)
            if m > k_block or ids[b, :m].tolist() != x[:m].tolist():
                problems.append(f"request {b}: block rule accepted {m} tokens {ids[b, :m].tolist()}, "
                                f"not a prefix of its block {x.tolist()}")
                continue
            if m < k_block:
                e = scaled_logit_error(cpu.target_logits[l_off[b]: l_off[b] + k_block + 1], t, p)
                w_error = e[torch.arange(m), x[:m]].sum()
                cancels = (weights[m] * p[m], q[m], tol + w_error + e[m])
                w = leviathan.residual(weights[m] * p[m], q[m])
        if method == "standard" and m < k:
            x = int(cpu.draft_token_ids[d_off[b] + m])
            q = draft_row(cpu, d_off[b] + m, x)
            cancels = (w, q, tol + scaled_logit_error(logits, t, w))
            w = leviathan.residual(w, q)
        excused = cancels is not None and math.isfinite(cancellation(cancels[0], cancels[1], y, cancels[2]))
        if not 0 <= y < cpu.vocab_size or (w[y] <= 0 and not excused):
            problems.append(f"request {b}: extra token {y} at position {m} has probability 0")
    return problems



def _tree_support(cpu: SpecBatch, b: int, path: list[int], y: int) -> list[str]:
    """SPEC 3.8 for one request of a tree call with accepted ``path`` (local nodes) and final token y:
    a greedy request follows the argmax of each node's row; a random one accepts only tokens with
    r(x) > 0 and draws y from the residual left after every child of its final node was rejected,
    replayed in float64 (an entry within tolerance of a cancellation counts as positive)."""
    d0, l0, k = cpu.draft_offsets().tolist()[b], cpu.logit_offsets().tolist()[b], int(cpu.num_draft_tokens[b])
    x = cpu.draft_token_ids[d0: d0 + k].tolist()
    kids = tree.children(tree.parents_of(cpu)[d0: d0 + k].tolist())
    logits = cpu.target_logits[l0: l0 + k + 1].double()
    t = float(cpu.temperature[b])
    if cpu.allow_nonfinite and bool(cpu.nonfinite_requests()[b]):
        return []
    if t == 0:
        rows = [tree.ROOT] + path
        wrong = [x[c] for c, node in zip(path, rows) if x[c] != reference.greedy.argmax(logits[node + 1])]
        top = reference.greedy.argmax(logits[rows[-1] + 1])
        return ([f"greedy accepted {wrong} off the argmax of their parents' rows"] if wrong else []) + \
            ([f"greedy final token {y} is not argmax {top}"] if y != top else [])
    p = filtered_target(cpu, torch.tensor([b]).repeat(k + 1), logits, t)
    tol = tolerance(HARNESS_AMBIGUITY_MARGIN, cpu.vocab_size)
    e = scaled_logit_error(logits, t, p)
    node, problems = tree.ROOT, []
    for depth in range(len(path) + 1):
        res, updates = Residual.of(p[node + 1], e[node + 1]), []
        stop = path[depth] if depth < len(path) else None
        for c in kids[node + 1]:
            if c == stop:
                break
            if x[c] != PLACEHOLDER:
                q = draft_row(cpu, d0 + c, x[c])
                updates.append((res, q))
                res = res.after_rejection(q)
        v = y if stop is None else x[stop]
        if not 0 <= v < cpu.vocab_size or (res.r[v] <= 0 and math.isinf(residual_cancellation(updates, v, tol))):
            what = f"final token {y}" if stop is None else f"accepted node {stop}'s token {v}"
            problems.append(f"{what} at depth {depth} has probability 0 under the residual it came from")
        node = stop
    return problems


# ---- output structure ---------------------------------------------------------------------------
def check_output_structure(ctx: Context, case: str) -> None:
    methods = declared_methods(ctx)

    def body(example):
        example, kwargs = method_for(example, methods, ctx)
        out, _ = call_example(ctx, example, seeded=paths(ctx)[0] == "seeded", **kwargs)
        # a declared behaviour of one rule (vLLM's synthetic rejection) is excused for that rule's calls alone
        problems = ctx.undeclared(support_problems(example.batch, out, kwargs["method"]), kwargs["method"])
        if problems:
            raise CheckFailure("; ".join(problems[:3]))
        ctx.result.samples += example.batch.num_requests

    run_property(ctx, spec_examples(ctx.profile), body)


# ---- uninitialised memory -----------------------------------------------------------------------
@contextmanager
def deterministic_fill():
    """torch.empty & co. return NaN (floats) or the max integer while inside."""
    prev = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.utils.deterministic.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev[0], warn_only=prev[1])
        torch.utils.deterministic.fill_uninitialized_memory = prev[2]


@contextmanager
def plausible_poison(value: int = 3):
    """A second poison: fresh allocations hold a plausible value (a valid token id, a small float),
    so an unwritten slot looks like data; on CUDA, freed blocks are also pre-filled."""
    originals = (torch.empty, torch.empty_like, torch.Tensor.new_empty)

    def fill(t):
        return t.fill_(value) if t.numel() and t.dtype != torch.bool else t

    torch.empty = lambda *a, **k: fill(originals[0](*a, **k))
    torch.empty_like = lambda *a, **k: fill(originals[1](*a, **k))
    torch.Tensor.new_empty = lambda self, *a, **k: fill(originals[2](self, *a, **k))
    if torch.cuda.is_available():
        filled = [torch.full((1 << 20,), value, dtype=torch.int64, device="cuda") for _ in range(16)]
        filled.clear()  # back to the caching allocator, holding the pattern
    try:
        yield
    finally:
        torch.empty, torch.empty_like, torch.Tensor.new_empty = originals


def check_uninitialized_memory(ctx: Context, case: str) -> None:
    methods = declared_methods(ctx)

    def run(label, fill, example, kwargs):
        try:
            with fill():
                return call_example(ctx, example, seeded=paths(ctx)[0] == "seeded", **kwargs)[0]
        except CheckFailure as exc:
            raise CheckFailure(f"{label}: {exc}") from None

    def body(example):
        example, kwargs = method_for(example, methods, ctx)
        first = run("deterministic-fill run", deterministic_fill, example, kwargs)
        second = run("plausible-poison run", plausible_poison, example, kwargs)
        if not outputs_equal(first, second):
            ctx.backend.failed_pair = ("deterministic_fill", "plausible_poison")
            raise CheckFailure(f"outputs depend on uninitialised memory: {first.emitted()} vs {second.emitted()}")

    run_property(ctx, spec_examples(ctx.profile), body, examples=share_of_examples(ctx.profile, 2))


# The conditions a "pair" reproducer names, one per run of its call (specverify replay makes them again).
PAIR_CONDITIONS = {"plain": nullcontext, "deterministic_fill": deterministic_fill, "plausible_poison": plausible_poison,
                   "strided": strided_inputs}


# ---- batch invariance and determinism -----------------------------------------------------------
def _sub_batches(B: int, g: torch.Generator):
    if B == 0:
        return []
    perm = torch.randperm(B, generator=g)
    return [("reversed", torch.arange(B - 1, -1, -1)), ("shuffled", perm), ("every other", torch.arange(0, B, 2)),
            ("last alone", torch.tensor([B - 1])), ("duplicated", torch.cat([perm, perm[:2]]))]


def invariant_paths(ctx: Context) -> list[str]:
    """The noise paths on which a request's output must not depend on the rest of its batch: the seeded
    one only where the backend does not declare its stream dependent on batch position."""
    return [p for p in paths(ctx) if p != "seeded" or ctx.backend.capabilities.seeded_batch_invariant]


def check_batch_invariance(ctx: Context, case: str) -> None:
    methods = declared_methods(ctx, chains=False)

    def body(example):
        example, kwargs = method_for(example, methods, ctx)
        g = torch.Generator().manual_seed(example.batch.num_requests)
        subs = _sub_batches(example.batch.num_requests, g)
        for path in invariant_paths(ctx):
            seeded = path == "seeded"
            full = call_example(ctx, example, seeded=seeded, **kwargs)[0].emitted()
            for label, idx in subs:
                sub = Example(select_requests(example.batch, idx), example.noise.select(example.batch, idx),
                              example.seeds[idx], example.description)
                got = call_example(ctx, sub, seeded=seeded, **kwargs)[0].emitted()
                want = [full[i] for i in idx.tolist()]
                if got != want:
                    raise CheckFailure(f"{path} noise, sub-batch {label} {idx.tolist()}: outputs {got} "
                                       f"but the same requests in the full batch gave {want}")

    run_property(ctx, spec_examples(ctx.profile), body, examples=share_of_examples(ctx.profile, 2))


def check_determinism(ctx: Context, case: str) -> None:
    methods = declared_methods(ctx, chains=False)

    def body(example):
        example, kwargs = method_for(example, methods, ctx)
        for path in paths(ctx):
            a = call_example(ctx, example, seeded=path == "seeded", **kwargs)[0]
            b = call_example(ctx, example, seeded=path == "seeded", **kwargs)[0]
            if not outputs_equal(a, b):
                ctx.backend.failed_pair = ("plain", "plain")
                raise CheckFailure(f"same {'seed' if path == 'seeded' else 'noise'}, different outputs: "
                                   f"{a.emitted()} vs {b.emitted()}")

    run_property(ctx, spec_examples(ctx.profile), body, examples=share_of_examples(ctx.profile, 2))


# ---- zero-draft layouts and repeated calls ------------------------------------------------------
ZERO_DRAFT_LAYOUTS = {
    "zero first": [0, 3, 2], "zero middle": [2, 0, 3], "zero last": [3, 2, 0], "zeros between": [1, 0, 0, 2, 0],
    "all zero": [0, 0, 0], "single zero": [0],
}


def layout_batch(counts: list[int], V: int, g: torch.Generator, greedy: bool, dense: bool = True) -> SpecBatch:
    """Drafts drawn from a dense q; ``dense`` False passes them as one-hot (draft_probs None), for a
    backend that takes one-hot drafters only (``Profile.dense_drafts``)."""
    k = torch.tensor(counts, dtype=torch.int64)
    T, B = int(k.sum()), len(counts)
    q = torch.softmax(torch.randn(T, V, generator=g), dim=-1)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1) if T else torch.zeros(0, dtype=torch.int64)
    temps = torch.zeros(B) if greedy else torch.full((B,), 0.8)
    return SpecBatch(k, drafts, torch.randn(T + B, V, generator=g), q if dense else None, temps)


def _agree_on_batches(ctx: Context, cases, g: torch.Generator) -> None:
    """Calls the backend on each (label, batch, seeds) with noise it shares with the reference (injected
    if declared, else its seeded stream) and compares to the reference when that stream is shared."""
    seeded = "injected" not in ctx.backend.capabilities.noise
    for label, batch, seeds, *kwargs in cases:
        kwargs = kwargs[0] if kwargs else {}
        example = Example(batch, Noise.draw(batch, g), seeds, label)
        out, shared = call_example(ctx, example, seeded=seeded, **kwargs)
        if shared is not None:
            ctx.agree(batch, out, shared, where=label, **kwargs)
        ctx.result.samples += batch.num_requests


def check_zero_draft_layouts(ctx: Context, case: str) -> None:
    """Every layout, greedy and random, as chains and, when the backend declares "tree", as trees: zero-node
    trees anywhere in the batch (SPEC 3.8: the bonus sample from the root row)."""
    g = torch.Generator().manual_seed(7)
    methods = [dict(method="standard")] + ([dict(method="tree")] if "tree" in ctx.backend.capabilities.methods else [])

    def layouts():
        for label, counts in ZERO_DRAFT_LAYOUTS.items():
            for greedy in (False, True):
                seeds = torch.arange(len(counts), dtype=torch.int64) * 7919 + 1
                example = Example(layout_batch(counts, 37, g, greedy, ctx.profile.dense_drafts), None, seeds, label)
                for kwargs in methods:
                    shaped = _shaped(example, kwargs, ctx).batch
                    yield f"{label} {counts}, {kwargs['method']}", shaped, seeds, kwargs

    _agree_on_batches(ctx, layouts(), g)


def check_empty_batch(ctx: Context, case: str) -> None:
    """A batch of no requests, on every declared noise path and method, greedy and random: outputs of
    shape [0, >= 1] and [0]. Its own check, so the other checks' examples hold at least one request
    and a backend that cannot take B = 0 still has everything else found."""
    g = torch.Generator().manual_seed(5)
    batch = layout_batch([], 37, g, False, ctx.profile.dense_drafts)
    example = Example(batch, Noise.draw(batch, g), torch.zeros(0, dtype=torch.int64), "empty batch")
    for kwargs in declared_methods(ctx):
        shaped = _shaped(example, kwargs, ctx)
        for path in paths(ctx):
            out, shared = call_example(ctx, shaped, seeded=path == "seeded", **kwargs)
            if shared is not None:
                ctx.agree(shaped.batch, out, shared, where=f"empty batch, {path}", **kwargs)
            ctx.result.samples += 1


def declared_methods(ctx: Context, chains: bool = True) -> list[dict]:
    """Call keywords of the standard rule and, when declared, the synthetic, block and tree rules; without
    ``chains`` only the standard and tree rules (checks whose property does not depend on the chain rule)."""
    declared = ctx.backend.capabilities.methods
    methods = [dict(method="standard")]
    if chains and "synthetic" in declared:
        methods.append(dict(method="synthetic", synthetic_acceptance_rate=0.5,
                            num_speculative_steps=ctx.profile.max_draft))
    if chains and "block" in declared:
        methods.append(dict(method="block"))
    if "tree" in declared:
        methods.append(dict(method="tree"))
    return methods


def check_repeated_calls(ctx: Context, case: str) -> None:
    """Consecutive calls with the same shapes but new logits and draft probabilities must each see
    their own inputs: a backend that keeps the previous call's draft state (the CUDA-graph replay bug
    class) emits tokens of the wrong distribution."""
    g = torch.Generator().manual_seed(11)
    counts = [3, 0, 2, 4, 1, 3]
    cases = ((f"call {call + 1} of 4 with fresh inputs of the same shapes", layout_batch(counts, 23, g, False),
              torch.randint(0, 2 ** 40, (len(counts),), generator=g, dtype=torch.int64))
             for call in range(4))
    _agree_on_batches(ctx, cases, g)


# ---- input integrity ----------------------------------------------------------------------------
def check_input_integrity(ctx: Context, case: str) -> None:
    """Every declared noise path and method, on generated batches: the runner's guard hands the backend a
    private copy of every input and fails, naming the tensor, when the backend wrote into it (a backend
    that rewrites its inputs changes what it would be judged against)."""
    def body(example):
        for path in paths(ctx):
            for kwargs in declared_methods(ctx):
                call_example(ctx, _shaped(example, kwargs, ctx), seeded=path == "seeded", **kwargs)
                ctx.result.samples += 1

    run_property(ctx, spec_examples(ctx.profile), body, examples=share_of_examples(ctx.profile, 4))


SHARED_NOISE = Needs(noise="shared")
EMPTY_BATCH = Needs(empty_batch=True)

__all__ = ["EMPTY_BATCH", "SHARED_NOISE", "ZERO_DRAFT_LAYOUTS", "check_batch_invariance", "check_determinism", "check_empty_batch",
           "check_input_integrity", "check_output_structure", "check_repeated_calls", "check_uninitialized_memory",
           "check_zero_draft_layouts", "deterministic_fill", "layout_batch", "outputs_equal", "plausible_poison", "support_problems"]
