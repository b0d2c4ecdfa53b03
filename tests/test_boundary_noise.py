"""The boundary case places noise where float32 precision bugs live (SPEC 2), and drafts at the rule's own
boundary (a residual zero everywhere, SPEC 3): the property each boundary mutant is caught by must really be in
its examples."""

import math
from dataclasses import replace

import torch

import reference
from reference import Noise, SpecBatch
from reference.sample import filtered_target
from specverify.checks import PASS, run_check
from specverify.checks.agreement import (BOUNDARY_EXPONENTIALS, FALLBACK_CASES, LOW_TEMPERATURE, TOP_LOGIT,
                                        _residual_fallbacks, at_boundaries, with_residual_fallbacks)
from specverify.checks.cases import FALLBACK_EXCESS
from specverify.generate import random_batch
from specverify.kernels.cpu import CpuBackend
from specverify.mutants.samplers import FusedScaledLogit, ResidualWithoutFallback
from specverify.strategies import Example, get_profile


def _example(seed: int) -> Example:
    g = torch.Generator().manual_seed(seed)
    batch = random_batch(g, num_requests=16, vocab_size=24, max_draft=4, drafter="dense")
    seeds = torch.arange(16, dtype=torch.int64) + seed
    return Example(batch, Noise.draw(batch, g), seeds, f"random batch {seed}")


def test_uniforms_that_round_to_zero_meet_drafts_the_target_gives_probability_zero():
    """Some drafts get a float64 uniform that is 0 in float32 and a -inf target logit at the draft,
    so a float32 rounding accepts where the reference rejects; every row keeps a finite logit."""
    placed = [at_boundaries(_example(s)) for s in range(4)]
    hits = 0
    for example in placed:
        b, u = example.batch, example.noise.uniform
        assert u.dtype == torch.float64 and bool(((u > 0) & (u < 1)).all())
        request = torch.repeat_interleave(torch.arange(b.num_requests), b.num_draft_tokens)
        rows = torch.arange(b.num_drafts) + request
        p_zero = torch.isneginf(b.target_logits[rows, b.draft_token_ids])
        hits += int(((u.float() == 0) & p_zero).sum())
        assert bool(torch.isfinite(b.target_logits.float()).any(dim=1).all())
    assert hits >= 4


def test_exponentials_reach_both_tails():
    """A tenth of the exponentials are below 2^-24 or far above -log of any float32 uniform."""
    e = torch.cat([at_boundaries(_example(s)).noise.exponential.flatten() for s in range(4)])
    assert bool((e < 2.0 ** -24).any()) and bool((e > 1e20).any())
    assert set(BOUNDARY_EXPONENTIALS) <= set(e.tolist())


def test_some_first_drafts_reach_the_residuals_fallback_to_p():
    """The rule's own boundary (SPEC 3): at some random requests' first draft q = p (1 + FALLBACK_EXCESS), so
    max(p - q, 0) is zero everywhere, and the uniform rejects the draft by a margin far above float32 rounding;
    the batch stays valid (its q rows sum within the tolerance)."""
    reached = 0
    for example in (at_boundaries(_example(s)) for s in range(4)):
        b, u = example.batch, example.noise.uniform
        b.validate()
        first = b.draft_offsets()[:-1][b.num_draft_tokens > 0]
        requests = torch.nonzero(b.num_draft_tokens > 0).flatten()
        for t, r in zip(first.tolist(), requests.tolist()):
            row = t + r
            p = filtered_target(b, torch.tensor([r]), b.target_logits[row][None],
                                b.temperature[r].double().reshape(1, 1))[0]
            q = b.draft_probs[t].double()
            if bool((p > q).any()) or b.temperature[r] == 0:
                continue
            x = int(b.draft_token_ids[t])
            assert float(u[t]) * float(q[x]) > float(p[x]) * (1 + 1e-4)
            reached += 1
    assert reached >= 4


def test_a_backend_that_reads_q_up_to_scale_is_given_none_and_told_so():
    """A q row that sums to 1.0005 cannot reach a kernel that takes log q (its softmax renormalises it): such a
    backend declares draft_probs_up_to_scale, gets no fallback examples, and its result says so."""
    class UpToScale(CpuBackend):
        name = "cpu-up-to-scale"
        capabilities = replace(CpuBackend.capabilities, draft_probs_up_to_scale=True)

    profile = replace(get_profile("ci"), shrink=False)
    for case in FALLBACK_CASES:
        result = run_check(UpToScale(), "differential_injected", case, profile, reproducer=False)
        assert result.status == PASS and "none at the residual's fallback to p" in result.message, result.line()
        plain = run_check(CpuBackend(), "differential_injected", case, profile, reproducer=False)
        assert plain.status == PASS and "fallback" not in plain.message, plain.line()
    # the examples are left out, not just the message added: the mutant without the fallback passes there
    class MutantUpToScale(ResidualWithoutFallback):
        capabilities = replace(CpuBackend.capabilities, draft_probs_up_to_scale=True)

    assert run_check(MutantUpToScale(), "differential_injected", "boundary", profile, reproducer=False).status == PASS


def test_the_statistical_fallback_case_is_not_applicable_where_q_is_read_up_to_scale():
    """``residual_fallback``'s q rows sum to 1 + 5e-4 by design; a backend that renormalises them (log q in,
    draft_probs_up_to_scale) would never reject there, so the case is n/a for it, saying why, and runs for
    every other backend. Undeclared, the renormalising backend fails it: with 200,000 copies, about 100
    rejections at each position are due, and none come."""
    class UpToScale(CpuBackend):
        name = "cpu-up-to-scale"
        capabilities = replace(CpuBackend.capabilities, draft_probs_up_to_scale=True)

        def _sample(self, batch, **kwargs):
            q = None if batch.draft_probs is None else batch.draft_probs / batch.draft_probs.sum(1, keepdim=True)
            return super()._sample(replace(batch, draft_probs=q), **kwargs)

    profile = replace(get_profile("ci"), shrink=False, stat_copies=200_000)
    result = run_check(UpToScale(), "acceptance_rate", "residual_fallback", profile, reproducer=False)
    assert result.status == "n/a" and "draft_probs_up_to_scale" in result.message, result.line()
    undeclared = type("Undeclared", (UpToScale,), {"capabilities": CpuBackend.capabilities})
    assert run_check(undeclared(), "acceptance_rate", "residual_fallback", profile, reproducer=False).status == "fail"
    assert run_check(CpuBackend(), "acceptance_rate", "residual_fallback", profile, reproducer=False).status == PASS


def test_fallback_rows_keep_q_at_or_above_p_where_p_is_below_float32():
    """At temperature 0.001 a row's second token has p near 1e-214: q = p (1 + 5e-4) in float32 rounds that entry
    to 0, which left the reference a residual max(p - q, 0) positive there (it emitted the second token) where
    float32 sees none (the backend fell back to p: the argmax). q is rounded up instead, so the example reaches
    the fallback in float64 too, and the CPU backend agrees with the reference."""
    logits = torch.full((2, 12), -4.0)
    logits[:, 9], logits[:, 10] = 6.779, 6.2867      # p(10) / p(9) = exp(-492) at temperature 0.001
    p = torch.softmax(logits[0].double() / 0.001, dim=-1)
    assert 0 < p[10] < 1e-200
    batch = SpecBatch(torch.tensor([1]), torch.tensor([3]), logits, torch.full((1, 12), 1 / 12),
                      torch.tensor([0.001]))
    placed, u = _residual_fallbacks(batch, torch.tensor([0.5], dtype=torch.float64), torch.Generator().manual_seed(0),
                                    top_request=False)
    assert bool((placed.draft_probs[0].double() >= p).all())
    noise = Noise(u, torch.ones(1, 12, dtype=torch.float64))
    noise.exponential[0, 10] = 1e-30                 # the tiny entry's best chance in a race
    want = reference.sample(placed, noise=noise, method="standard")
    got = CpuBackend()(placed, noise=noise, method="standard")
    assert got.token_ids.tolist() == want.token_ids.tolist() == [[9, -1]]


def test_a_fallback_request_meets_the_largest_rounding_of_l_over_t():
    """A GPU kernel rounds l * (1 / T) for its row's max and sum but fuses exp(l * (1 / T) - max) at the draft (an
    FMA): at T = 0.001 the top token's p(x) exceeds 1 by up to 5e-4, and a fallback draft (q(x) = p(x) (1 + 5e-4),
    u = 1 - 1.25e-4) is accepted. One fallback request of a batch is put where that shows (the last eligible one, or
    the only one in half the batches): its drafts at their rows' top, logit TOP_LOGIT, at LOW_TEMPERATURE. The
    fused value there is above u q(x), and the mutant that computes it is caught on every such batch, where the
    correct CPU backend agrees with the reference. The first eligible request keeps its own rows."""
    inv_t = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(LOW_TEMPERATURE, dtype=torch.float32)
    rounded = torch.tensor(TOP_LOGIT, dtype=torch.float32) * inv_t
    fused = math.exp(TOP_LOGIT * float(inv_t) - float(rounded))
    assert fused > (1 - FALLBACK_EXCESS / 4) * (1 + FALLBACK_EXCESS)
    for s in range(4):
        for example in (at_boundaries(_example(s)), with_residual_fallbacks(_example(s))):
            b, u = example.batch, example.noise.uniform
            at_top = torch.nonzero(b.target_logits.float().amax(1) == TOP_LOGIT).flatten()
            assert at_top.numel(), example.description      # 16 requests: two or more are eligible
            lead = int(torch.repeat_interleave(torch.arange(b.num_requests), b.num_draft_tokens + 1)[at_top[0]])
            assert float(b.temperature[lead]) == torch.tensor(LOW_TEMPERATURE, dtype=torch.float32).item()
            first = int(torch.nonzero((b.num_draft_tokens > 0) & (b.temperature > 0)).flatten()[0])
            assert lead != first and float(b.target_logits[int(b.draft_offsets()[first]) + first].amax()) != TOP_LOGIT
            t = int(b.draft_offsets()[lead])
            x = int(b.draft_token_ids[t])
            assert float(b.target_logits[t + lead, x]) == TOP_LOGIT
            assert float(b.target_logits[t + lead].float().topk(2).values[1]) <= TOP_LOGIT - 1
            assert float(u[t]) * float(b.draft_probs[t, x]) > 1 > float(u[t]) * float(b.draft_probs[t, x]) / fused
            want = reference.sample(b, noise=example.noise, method="standard")
            assert CpuBackend()(b, noise=example.noise, method="standard").emitted() == want.emitted()
            got = FusedScaledLogit()(b, noise=example.noise, method="standard")
            assert got.emitted()[lead] != want.emitted()[lead] and int(want.num_accepted[lead]) == 0
