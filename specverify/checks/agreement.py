"""Differential checks: a backend against the reference under shared noise, on Hypothesis batches.

differential_injected  the backend takes the reference's Noise as given
differential_seeded    the backend draws its own noise from per-request seeds; exact only when its
                       stream is the reference's Philox stream (capabilities.seeded_stream == "philox")

Token trees (SPEC 3.8) have two cases of each: "tree" (tree_examples against the reference) and
"tree_path_equals_chain", an exact check of the backend against itself as well as against the
reference: single-path trees under the same noise give the backend's own standard-rule tokens on the
chain, bit for bit (a divergence is excused only where the reference finds that decision ambiguous).
"""

from __future__ import annotations

import dataclasses

import torch
from hypothesis import strategies as st

from reference import Noise, SpecBatch, tree
from reference.sample import filtered_target
from specverify.checks.cases import FALLBACK_EXCESS, STAT_CASES
from specverify.checks.common import call_example, run_property
from specverify.checks.differential import compare_to_reference
from specverify.checks.runner import CheckFailure, Context, Needs, not_applicable_because
from specverify.checks.statistical import statistical_needs
from specverify.strategies import Example, Profile, spec_examples
from specverify.tree_strategies import tree_examples

SYNTHETIC_RATES = (0.0, 0.3, 0.75, 1.0)
DIFFERENTIAL_CASES = ("standard", "synthetic", "block", "bulk", "replicated", "large_vocab", "filters",
                      "placeholders", "boundary", "tree", "tree_path_equals_chain")
TREE_CASES = ("tree", "tree_path_equals_chain")
# drawn at the profile's large vocabularies alone, so planned only where it has some (the nightly)
LARGE_VOCABS_ONLY = frozenset({"large_vocab"})
# the cases whose examples reach the rules' fallback to p where the residual is zero everywhere (``_residual_fallbacks``)
FALLBACK_CASES = ("boundary", "tree_path_equals_chain", "block")
# Only injected noise can be placed at float32's boundaries: the seeded path has no "boundary" case.
SEEDED_CASES = tuple(c for c in DIFFERENTIAL_CASES if c != "boundary")
# Uniforms that round to 0 in float32 (2^-150 ties to even, 1e-60) and in bf16, float32's own 2^-24,
# and the largest float64 below 1 (1.0 in float32); exponentials far below float32's 2^-24 floor of
# -log(u) and far above any -log of a float32 uniform.
BOUNDARY_UNIFORMS = (2.0 ** -150, 1e-60, 2.0 ** -24, 1.0 - 2.0 ** -53)
BOUNDARY_EXPONENTIALS = (1e-30, 2.0 ** -40, 1e30)
# One fallback request of an example runs at LOW_TEMPERATURE with each fallback draft its row's top token at
# TOP_LOGIT. float32's 1 / 0.001 is 999.99994, and TOP_LOGIT times it rounds 4.7e-4 below the exact product: a
# kernel that rounds l / T in its row's max but fuses exp(l * (1 / T) - max) at the draft sees p(x) = e^4.7e-4, above
# u q(x) = 1 + 3.75e-4, and accepts the draft the reference rejects.
LOW_TEMPERATURE = 0.001
TOP_LOGIT = 8.25


def at_boundaries(example: Example, fallbacks: bool = True) -> Example:
    """The example with half its uniforms (float64) and a tenth of its exponentials set to boundary
    values. Each draft whose uniform rounds to 0 in float32 gets p(x) = 0 (a -inf logit), or for
    about half of a random request's drafts a tiny p(x) near e^-64, normal in float32, where its row
    keeps another finite logit: at p(x) = 0 a float32 rounding of u accepts what the reference
    rejects; at the tiny p(x) a uniform clamped at float32's floor rejects what it accepts.
    1 - 2^-53 (1.0 in float32) goes only to drafts whose p(x) / q(x) is not within 1e-3 of 1: there
    the decision is a float32 coin flip, which the ambiguity bound excuses and the case would only
    spend. With ``fallbacks``, where the example has draft probabilities, the first random request and about a
    quarter of the others get the rule's own boundary at their first draft (``_residual_fallbacks``): p <= q
    everywhere, and a rejection. Deterministic in the example."""
    batch, noise = example.batch, example.noise
    B, T, V = batch.num_requests, batch.num_drafts, batch.vocab_size
    g = torch.Generator().manual_seed(int(example.seeds.sum()) % (2 ** 62) if B else 0)
    pick = torch.rand(T, generator=g) < 0.5
    choice = torch.tensor(BOUNDARY_UNIFORMS, dtype=torch.float64)[torch.randint(0, len(BOUNDARY_UNIFORMS), (T,),
                                                                                generator=g)]
    tails = torch.rand(B, V, generator=g) < 0.1
    e_choice = torch.tensor(BOUNDARY_EXPONENTIALS, dtype=torch.float64)[
        torch.randint(0, len(BOUNDARY_EXPONENTIALS), (B, V), generator=g)]
    tiny_target = torch.rand(T, generator=g) < 0.5
    e = torch.where(tails, e_choice, noise.exponential.double())
    request = torch.repeat_interleave(torch.arange(B), batch.num_draft_tokens)
    rows = torch.arange(T) + request                   # the target row of each draft slot
    pick &= (choice != BOUNDARY_UNIFORMS[-1]) | ~_ratio_near_one(batch, rows, request)
    u = torch.where(pick, choice, noise.uniform.double())
    logits = batch.target_logits.clone()
    for t in torch.nonzero(u.float() == 0).flatten().tolist():
        row, x, temperature = int(rows[t]), int(batch.draft_token_ids[t]), float(batch.temperature[request[t]])
        if x < 0 or int(torch.isfinite(logits[row].float()).sum()) < 2:
            continue
        tiny = _tiny_target(logits[row], x, temperature) if tiny_target[t] and temperature > 0 else None
        logits[row] = tiny if tiny is not None else logits[row].index_fill(0, torch.tensor(x), float("-inf"))
    placed = SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, logits, batch.draft_probs, batch.temperature,
                       batch.top_k, batch.top_p, batch.min_p)
    if fallbacks:
        placed, u = _residual_fallbacks(placed, u, g, taken=pick)
    return Example(placed, Noise(u, e), example.seeds, f"{example.description} at boundaries")


def with_residual_fallbacks(example: Example) -> Example:
    """The example with the rules' fallback to p reached at some requests (``_residual_fallbacks``, every draft of
    the request) and nothing else changed. Deterministic in the example."""
    batch, noise = example.batch, example.noise
    g = torch.Generator().manual_seed(int(example.seeds.sum()) % (2 ** 62) + 1 if batch.num_requests else 0)
    placed, u = _residual_fallbacks(batch, noise.uniform.double(), g, whole=True)
    return Example(placed, Noise(u, noise.exponential), example.seeds, example.description)


def _residual_fallbacks(batch: SpecBatch, u: torch.Tensor, g: torch.Generator, taken: torch.Tensor | None = None,
                        whole: bool = False, top_request: bool = True) -> tuple[SpecBatch, torch.Tensor]:
    """(batch, u [T]) with the standard rule's fallback reached at the first draft of the first random request
    and of about a quarter of the others: q = p (1 + FALLBACK_EXCESS) at that draft's row (p the float64 filtered
    target, as the reference's) and u above p(x) / q(x), so the draft is rejected and max(p - q, 0) is zero
    everywhere, where the rule samples p itself (SPEC 3: p == q, reached only through rounding, as when a drafter
    is the target model). A kernel that races the empty residual emits a token of probability 0, or none. With
    ``top_request``, the last eligible request (where there are two or more; else the first, in half the batches)
    runs at LOW_TEMPERATURE with its drafts at their rows' top (``_top_at``), where p(x) = 1 and float32's l / T
    carries its largest rounding. Slots
    already given a boundary uniform (``taken``, [T] bool, none when None) and placeholders are left as they are.
    With ``whole``, every draft of the chosen requests gets the same, so that block
    verification (SPEC 3.7) stops at tau = 0 there too: each running ratio w_i falls below 1, each S_i is 0 (so
    h_i = 0 but for h_k = w_k), and eta_k is above w_k; its residual at tau = 0 is the first draft's, zero
    everywhere."""
    B = batch.num_requests
    if batch.draft_probs is None or not batch.num_drafts:
        return batch, u
    first = batch.draft_offsets()[:-1]
    has_draft = batch.num_draft_tokens > 0
    at = first.clamp(max=max(batch.num_drafts - 1, 0))
    eligible = has_draft & (batch.temperature > 0) & (batch.draft_token_ids[at] >= 0)
    if taken is not None:
        eligible &= ~taken[at]
    # the first eligible request always, so that a small profile's few examples reach the fallback too, and one
    # other at the top of its rows (the first itself in half the batches that have no other)
    count = torch.cumsum(eligible, 0)
    lead = eligible & (count == 1)
    n = int(count[-1]) if B else 0
    top = eligible & (count == n) & top_request & (n >= 2 or bool(torch.rand(1, generator=g) < 0.5))
    chosen = eligible & ((torch.rand(B, generator=g) < 0.25) | lead | top)
    q, u = batch.draft_probs.clone(), u.clone()
    logits, temperature = batch.target_logits.clone(), batch.temperature.clone()
    for b in torch.nonzero(chosen).flatten().tolist():
        t0 = int(first[b])
        if top[b]:
            temperature[b] = LOW_TEMPERATURE
        t_b = temperature[b].double().reshape(1, 1)
        for t in range(t0, t0 + (int(batch.num_draft_tokens[b]) if whole else 1)):
            # draft t of request b is decided at target row t + b (each request's rows add its bonus row)
            x = int(batch.draft_token_ids[t])
            if top[b] and x >= 0:
                logits[t + b] = _top_at(logits[t + b], x)
            p = filtered_target(batch, torch.tensor([b]), logits[t + b][None], t_b)[0]
            q[t] = _at_least(p * (1 + FALLBACK_EXCESS), q.dtype)
            u[t] = 1 - FALLBACK_EXCESS / 4
    return dataclasses.replace(batch, draft_probs=q, target_logits=logits, temperature=temperature), u


def _top_at(row: torch.Tensor, x: int) -> torch.Tensor:
    """``row`` [V] shifted so that its finite logits lie at or below TOP_LOGIT - 1, with x at TOP_LOGIT: at
    LOW_TEMPERATURE, p is one-hot at x in float32 as in float64."""
    finite = torch.isfinite(row.double())
    top = row.double()[finite].max() if bool(finite.any()) else 0.0
    shifted = torch.where(finite, row.double() - top + (TOP_LOGIT - 1), row.double())
    return shifted.index_fill(0, torch.tensor(x), TOP_LOGIT).to(row.dtype)


def _at_least(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``w`` [V] float64 in ``dtype``, rounded up where rounding to nearest falls below it: an entry far below
    dtype's normals (a p(v) of 1e-214 in a row at temperature 0.001) would round to 0 or below p(v), and leave
    the reference a residual max(p - q, 0) that is positive there, where float32 sees none."""
    rounded = w.to(dtype)
    return torch.where(rounded.double() < w, torch.nextafter(rounded, torch.tensor(float("inf"), dtype=dtype)),
                       rounded)


def _tiny_target(row: torch.Tensor, x: int, temperature: float) -> torch.Tensor | None:
    """``row`` with logit x set so that p(x) is about e^-64 (1.6e-28); None where the logits' dtype
    cannot hold it within [1e-33, 1e-22], far above u * q(x) for a uniform that is 0 in float32 and
    far above float32's smallest normal."""
    others = row.double().index_fill(0, torch.tensor(x), float("-inf"))
    top = others.max()
    logit = top + temperature * (-64.0 + torch.logsumexp((others - top) / temperature, 0))
    placed = row.index_fill(0, torch.tensor(x), float(logit))
    p_x = float(torch.softmax(placed.double() / temperature, 0)[x])
    return placed if 1e-33 <= p_x <= 1e-22 else None


def _ratio_near_one(batch: SpecBatch, rows: torch.Tensor, request: torch.Tensor) -> torch.Tensor:
    """[T] bool: random requests' drafts whose p(x) (float64, as the reference) is within 1e-3 of q(x)."""
    x = batch.draft_token_ids.clamp(min=0)[:, None]
    t = batch.temperature[request].double()
    p = filtered_target(batch, request, batch.target_logits[rows], torch.where(t > 0, t, 1.0)[:, None])
    p_x = p.gather(1, x)[:, 0]
    q_x = torch.ones_like(p_x) if batch.draft_probs is None else batch.draft_probs.double().gather(1, x)[:, 0]
    return (t > 0) & ((p_x - q_x).abs() <= 1e-3 * p_x)


def _case_strategy(case: str, profile: Profile, caps):
    """(example, call kwargs) for a differential case; the tree cases draw filters and placeholders
    where ``caps`` declares them, and trees within its declared depth."""
    depth = getattr(caps, "max_tree_depth", None)
    fallbacks = not getattr(caps, "draft_probs_up_to_scale", False)
    if case == "tree":
        return st.tuples(tree_examples(profile, filters=caps.target_filters, placeholders=caps.placeholders,
                                       max_depth=depth), st.just(dict(method="tree")))
    if case == "tree_path_equals_chain":
        chains = profile if depth is None else dataclasses.replace(profile, max_draft=min(profile.max_draft, depth))
        # with the chain's fallback to p at some first drafts: the tree rule's own (r kept where r - m q_c is
        # zero everywhere) must give the same token
        examples = spec_examples(chains, filters=caps.target_filters, placeholders=caps.placeholders)
        return st.tuples(examples.map(with_residual_fallbacks) if fallbacks else examples, st.just(dict(method="tree")))
    if case == "large_vocab":
        examples = st.one_of(*(spec_examples(profile, max_vocab=v, max_requests=profile.large_requests)
                               for v in profile.large_vocabs))
    elif case == "bulk":
        examples = spec_examples(profile, max_vocab=64, min_requests=profile.bulk_requests // 2,
                                 max_requests=profile.bulk_requests)
    elif case == "filters":
        examples = spec_examples(profile, filters=True)
    elif case in ("placeholders", "block"):
        # block: filters and placeholders too, since both change the block (p' throughout, a shorter block), and
        # requests that stop at tau = 0 with the residual zero everywhere
        examples = spec_examples(profile, placeholders=True, filters=case == "block")
        if case == "block" and fallbacks:
            examples = examples.map(with_residual_fallbacks)
    elif case == "boundary":
        examples = spec_examples(profile).map(lambda example: at_boundaries(example, fallbacks))
    else:
        examples = spec_examples(profile)
    if case == "synthetic":
        kwargs = st.builds(lambda r: dict(method="synthetic", synthetic_acceptance_rate=r,
                                          num_speculative_steps=profile.max_draft), st.sampled_from(SYNTHETIC_RATES))
    else:
        kwargs = st.just(dict(method="block" if case == "block" else "standard"))
    return st.tuples(examples, kwargs)


def _replicated_examples(profile: Profile, backend):
    """Every statistical case replicated into one batch: thousands of decisions on inputs built to be
    sensitive (bf16-rounding-prone q, masked support), compared exactly instead of statistically."""
    for case in STAT_CASES:
        if case.embed or case.method in ("block", "tree") or not_applicable_because(statistical_needs(case.name),
                                                                          backend.capabilities, profile):
            # the large-vocabulary cases (their statistics and large_vocab_structure cover them) and the
            # block and tree cases (the reference decides them request by request: their differential
            # cases cover them)
            continue
        copies = max(1, profile.replicated_copies)
        g = torch.Generator().manual_seed(len(case.name) * 7919 + copies)
        batch = case.batch(copies, g)
        seeds = torch.randint(0, 2 ** 62, (copies,), generator=g, dtype=torch.int64)
        yield Example(batch, Noise.draw(batch, g), seeds, f"replicated statistical case {case.name!r} x {copies}"), \
            case.call_kwargs()


def check_differential(ctx: Context, case: str, *, seeded: bool) -> None:
    """Same tokens as the reference under shared noise: injected, or the per-request seeds of the
    reference's Philox stream (``seeded``). Every example's divergences go through ``ctx.agree``."""
    totals = {"examples": 0}

    def body(drawn):
        example, kwargs = drawn
        if case == "tree_path_equals_chain":
            _path_equals_chain(ctx, example, seeded)
        else:
            got, noise = call_example(ctx, example, seeded=seeded, **kwargs)
            ctx.agree(example.batch, got, noise, **kwargs)
        totals["examples"] += 1

    if case == "replicated":
        for drawn in _replicated_examples(ctx.profile, ctx.backend):
            try:
                body(drawn)
            except CheckFailure as exc:
                ctx.fail(str(exc), drawn[0].description)
                break
    else:
        examples = {"large_vocab": max(3, ctx.profile.examples // 5), "bulk": ctx.profile.bulk_examples}.get(case)
        run_property(ctx, _case_strategy(case, ctx.profile, ctx.backend.capabilities), body, examples=examples,
                     shrink=case not in ("bulk", "large_vocab"))
    if ctx.result.status != "fail":
        ctx.result.message = f"{totals['examples']} examples"
        if case in FALLBACK_CASES and getattr(ctx.backend.capabilities, "draft_probs_up_to_scale", False):
            ctx.result.message += " (none at the residual's fallback to p: the backend reads q up to scale)"


def _path_equals_chain(ctx: Context, example: Example, seeded: bool) -> None:
    """The example's chains as single-path trees (parents -1, 0, 1, ...): under the same noise the tree
    rule gives the backend's own standard-rule tokens (SPEC 3.8), and agrees with the reference."""
    chain_out, noise = call_example(ctx, example, seeded=seeded, method="standard")
    parents = tree.chain_parents(example.batch.num_draft_tokens)
    path = Example(dataclasses.replace(example.batch, tree_parents=parents), example.noise, example.seeds,
                   f"{example.description} as single-path trees")
    tree_out, _ = call_example(ctx, path, seeded=seeded, method="tree")
    ctx.agree(path.batch, tree_out, noise, where="single-path trees", method="tree")
    if chain_out.emitted() == tree_out.emitted():
        return
    # the standard rule's output stands in for the reference: a difference is excused only where the
    # reference's float64 decision there is ambiguous (SPEC 4.1)
    cmp = compare_to_reference(example.batch, tree_out, noise, tol=ctx.tolerance, expected=chain_out)
    if cmp.real:
        raise CheckFailure(f"single-path trees differ from the same backend's chains: {cmp.real[0]} "
                           "(expected: the backend's standard rule on the chain)")
    ctx.decisions += cmp.decisions
    ctx.ambiguous.extend(cmp.ambiguous)


def check_differential_injected(ctx: Context, case: str) -> None:
    """Same tokens as the reference given the same injected Noise (SPEC 4.1)."""
    check_differential(ctx, case, seeded=False)


def check_differential_seeded(ctx: Context, case: str) -> None:
    """Same tokens as the reference given the same per-request seeds (Philox stream)."""
    check_differential(ctx, case, seeded=True)


def differential_needs(path: str):
    """Needs of a differential case: its method, and the noise path the reference can share."""
    def needs(case: str) -> Needs:
        if case in TREE_CASES:
            return Needs(method="tree", noise=path)
        return Needs(method=case if case in ("synthetic", "block") else "standard", noise=path,
                     target_filters=case in ("filters", "block"), placeholders=case in ("placeholders", "block"))
    return needs


__all__ = ["BOUNDARY_EXPONENTIALS", "BOUNDARY_UNIFORMS", "DIFFERENTIAL_CASES", "SEEDED_CASES", "TREE_CASES", "at_boundaries", "check_differential_injected", "check_differential_seeded", "differential_needs"]
