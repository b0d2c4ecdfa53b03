"""SPEC 4.1's allowance for float32's rounding of the scaled logits l / T: a bound that holds for the kernels' own
formulation, decisions it flips excused under every rule, and the same flips where l / T is small still real."""

import math

import pytest
import torch

import reference
from reference import Noise, SpecBatch, SpecOutput
from reference.sample import filtered_target
from specverify.checks.differential import compare_to_reference, tolerance
from specverify.checks.filter_cuts import near_cut
from specverify.checks.rounding import scaled_logit_error
from specverify.checks.structural import support_problems
from specverify.kernels.cpu import CpuBackend
from specverify.strategies import LOGIT_STYLES, _logits

TOL = tolerance(1e-5, 16)


class ScaledThenShifted(CpuBackend):
    """p as the Triton kernels compute it: each l * (1 / T) rounded to float32, then its row max taken off (the CPU
    backend takes the max off first, which keeps l / T's rounding out)."""

    def target_weights(self, logits, temperature):
        s = logits.to(torch.float32) * (1.0 / temperature.to(torch.float32))[:, None]
        w = torch.exp(s - s.amax(dim=1, keepdim=True))
        return w, w.sum(dim=1)


def _float32_p(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """[R, V] float64 of ScaledThenShifted's p for float32 logit rows [R, V]."""
    w, total = ScaledThenShifted().target_weights(logits, torch.full((logits.shape[0],), temperature))
    return (w / total[:, None]).double()


@pytest.mark.parametrize("temperature", [1e-3, 0.1, 0.7, 2.5])
def test_float32_scaled_logits_move_p_by_no_more_than_the_bound(temperature):
    """Every logit style of the strategies, 40 rows of V = 1000 each: float32's p (rounded l * (1 / T), max taken
    off) is within e(v) + 1e-5 of the float64 p relative, 1e-5 for float32's exp and sum. At T = 0.001 some
    tokens' p move by more than 1e-4, ten times the base tolerance: the allowance is needed there."""
    g = torch.Generator().manual_seed(7)
    worst = 0.0
    for style in LOGIT_STYLES:
        logits = _logits(g, 40, 1000, style).float()
        t32 = float(torch.tensor(temperature, dtype=torch.float32))
        p = torch.softmax(logits.double() / t32, dim=-1)
        e = scaled_logit_error(logits, t32, p)
        seen = p > 1e-30
        moved = ((_float32_p(logits, temperature) - p).abs() / p.clamp(min=1e-300))[seen]
        assert bool((moved <= e[seen] + 1e-5).all()), (style, float((moved - e[seen]).max()))
        worst = max(worst, float(moved.max()))
    assert (worst > 1e-4) == (temperature == 1e-3), worst


def _flip(method: str, scale: float, temperature: float) -> tuple[SpecBatch, Noise, Noise]:
    """One request, one draft x = 5 (one-hot drafter) at p(x) ~ 0.38 behind the top token 3: logits `scale` and
    `scale - 0.5 T`, so that l / T is scale / T and 0.5 below it. Returns the batch, a uniform 2e-4 of p(x) above
    p(x) that rejects x, and one as far below that accepts it."""
    V = 16
    logits = torch.full((2, V), -2.0, dtype=torch.float32)
    logits[:, 3] = scale
    logits[:, 5] = scale - 0.5 * temperature
    parents = torch.tensor([-1]) if method == "tree" else None
    batch = SpecBatch(torch.tensor([1]), torch.tensor([5]), logits, None,
                      torch.tensor([temperature], dtype=torch.float32), tree_parents=parents)
    p_x = float(filtered_target(batch, torch.tensor([0]), logits[:1].double(), float(batch.temperature[0]))[0, 5])
    exponential = torch.ones(1, V, dtype=torch.float64)
    rejects = Noise(torch.tensor([p_x * (1 + 2e-4)], dtype=torch.float64), exponential)
    accepts = Noise(torch.tensor([p_x * (1 - 2e-4)], dtype=torch.float64), exponential)
    return batch, rejects, accepts


@pytest.mark.parametrize("method", ["standard", "block", "tree"])
def test_a_decision_flipped_within_the_rounding_of_large_scaled_logits_is_ambiguous(method):
    """At T = 0.001 with logits near 8.25 (l / T ~ 8250, whose float32 ulp is 1e-3), p(x) moves by about 2.7e-4 in
    float32: a backend that accepts x where the reference rejects it by 2e-4 relative, twenty times the base
    tolerance, has decided within that rounding. Each rule's classification (acceptance, block stop test, tree
    sibling test) excuses it and names the allowance; the float32 kernel formulation itself flips it."""
    batch, rejects, accepts = _flip(method, 8.25, 1e-3)
    p32 = _float32_p(batch.target_logits[:1], 1e-3)[0, 5]
    p64 = float(filtered_target(batch, torch.tensor([0]), batch.target_logits[:1].double(), 1e-3)[0, 5])
    assert abs(p32 / p64 - 1) > 2e-4 * 1.2
    got = reference.sample(batch, noise=accepts, method=method)
    if method == "standard" and p32 > p64:
        assert ScaledThenShifted()(batch, noise=rejects).emitted() == got.emitted()
    cmp = compare_to_reference(batch, got, rejects, method=method)
    assert len(cmp.divergences) == 1, cmp.divergences
    d = cmp.divergences[0]
    assert d.ambiguous and TOL < d.margin < TOL + d.rounding, d
    assert "l / T's rounding allows" in str(d)


@pytest.mark.parametrize("method", ["standard", "block", "tree"])
def test_the_same_flip_where_scaled_logits_are_small_stays_real(method):
    """The same p(x), the same 2e-4 margin, at T = 1 with logits (0, -0.5): l / T's rounding is about 1e-7 there,
    so the flip is a real divergence. The allowance follows |l / T|, not p."""
    batch, rejects, accepts = _flip(method, 0.0, 1.0)
    got = reference.sample(batch, noise=accepts, method=method)
    d, = compare_to_reference(batch, got, rejects, method=method).divergences
    assert not d.ambiguous and d.rounding < 1e-6 and math.isclose(d.margin, 2e-4, rel_tol=1e-3), d


def test_the_top_token_at_p_one_gets_no_allowance():
    """A row whose top token has p = 1 in float64 (the others 1000 below it in l / T) keeps e = 0 there: a
    backend that rounds l / T for the max but not for p(x) (a fused multiply-add, SPEC 6) is not excused, however
    large l / T is. Its runners-up get allowances as large as l / T's rounding."""
    logits = torch.full((1, 16), 7.25, dtype=torch.float32)
    logits[0, 3] = 8.25
    p = torch.softmax(logits.double() / 1e-3, dim=-1)
    e = scaled_logit_error(logits, 1e-3, p)
    assert float(p[0, 3]) == 1.0 and float(e[0, 3]) == 0.0 and bool((e[0, torch.arange(16) != 3] == 0).all())
    logits[0, 5] = 8.2495
    p = torch.softmax(logits.double() / 1e-3, dim=-1)
    e = scaled_logit_error(logits, 1e-3, p)
    assert float(e[0, 5]) > 1e-3 and 0 < float(e[0, 3]) < float(e[0, 5])


@pytest.mark.parametrize("scale, temperature, near", [(8.25, 1e-3, True), (0.0, 1.0, False)])
@pytest.mark.parametrize("cut", ["top_k", "top_p", "min_p"])
def test_a_cut_within_the_rounding_of_large_scaled_logits_is_near(cut, scale, temperature, near):
    """Token 5 near its row's cut by relative 1e-3 (top-k 1: its p below the top's, one float32 ulp of logit
    apart at T = 0.001), 2e-4 (top-p: the mass before it above top_p) or 2e-4 (min-p: its p above the threshold).
    Within l / T's rounding at T = 0.001 and logits near 8.25, so a kept set that moves across it is admissible
    (SPEC 4.1, filter cuts); at T = 1 with logits near 0, many tolerances from the cut, as without the allowance."""
    batch, _, _ = _flip("standard", scale, temperature)
    row, t = batch.target_logits[0].clone(), float(batch.temperature[0])
    if cut == "top_k":
        row[5] = torch.nextafter(row[3], torch.tensor(-math.inf)) if near else row[3] - 1e-3
    p = torch.softmax(row.double() / t, dim=-1)
    setting = {"top_k": (1, None, None), "top_p": (None, float(p[3]) * (1 + 2e-4), None),
               "min_p": (None, None, float(p[5] / p[3]) * (1 - 2e-4))}[cut]
    _, kept, distance = near_cut(p, *setting, TOL, scaled_logit_error(row, t, p))
    assert kept == (1 if cut == "top_k" else 2) and math.isfinite(float(distance[5])) == near, distance[5]
    assert 2e-4 / 1.01 < float(near_cut(p, *setting, 1.0)[2][5]) < 2e-3
    assert math.isinf(float(near_cut(p, *setting, TOL)[2][5]))


@pytest.mark.parametrize("scale, temperature, ambiguous", [(8.25, 1e-3, True), (0.0, 1.0, False)])
def test_a_race_decided_within_the_rounding_of_large_scaled_logits_is_ambiguous(scale, temperature, ambiguous):
    """A zero-draft request's token is the race over p: tokens 3 and 5 with scores p / E 2e-4 apart. At T = 0.001
    and logits near 8.25 each p moves by about 2e-3 in float32, so a backend that emits 5 where the reference
    emits 3 has decided within that rounding; at T = 1 and logits near 0 the same gap is real."""
    V = 16
    logits = torch.full((1, V), -2.0, dtype=torch.float32)
    logits[0, 3], logits[0, 5] = scale, scale - 0.5 * temperature
    batch = SpecBatch(torch.tensor([0]), torch.zeros(0, dtype=torch.int64), logits, None,
                      torch.tensor([temperature], dtype=torch.float32))
    p = torch.softmax(logits.double() / float(batch.temperature[0]), dim=-1)[0]

    def race(gap):
        exponential = torch.full((1, V), 1e9, dtype=torch.float64)
        exponential[0, 3], exponential[0, 5] = 1.0, float(p[5] / p[3]) * (1 + gap)
        return Noise(torch.zeros(0, dtype=torch.float64), exponential)

    assert reference.sample(batch, noise=race(2e-4)).emitted() == [[3]]
    got = reference.sample(batch, noise=race(-2e-4))
    assert got.emitted() == [[5]]
    d, = compare_to_reference(batch, got, race(2e-4)).divergences
    assert d.ambiguous == ambiguous and d.margin > TOL and (d.rounding > 1e-3) == ambiguous, d


def test_a_tighter_declared_margin_scales_the_rounding_allowance_with_it():
    """A backend may only ask for a stricter tolerance: its margin scales l / T's allowance too, to none at 0 (a
    float64 backend, as the reference declares). The flip that 1e-5 excuses is real at 0, with half the
    allowance at 5e-6."""
    batch, rejects, accepts = _flip("standard", 8.25, 1e-3)
    got = reference.sample(batch, noise=accepts)
    (full,) = compare_to_reference(batch, got, rejects, tol=1e-5).divergences
    (half,) = compare_to_reference(batch, got, rejects, tol=5e-6).divergences
    (none,) = compare_to_reference(batch, got, rejects, tol=0.0).divergences
    assert full.ambiguous and half.rounding == pytest.approx(full.rounding / 2, rel=1e-12)
    assert not none.ambiguous and none.rounding == 0.0, none


@pytest.mark.parametrize("method", ["standard", "block"])
@pytest.mark.parametrize("scale, temperature, delta, excused", [(8.25, 1e-3, 2e-4, True), (0.0, 1.0, 2e-4, False),
                                                                (8.25, 1e-3, 0.1, False)])
def test_an_extra_token_whose_residual_is_zero_within_the_rounding_is_in_its_support(method, scale, temperature,
                                                                                      delta, excused):
    """The drafter's q is p with token 5's share raised by ``delta`` (relative) and token 3's lowered to match, and
    draft 3 is rejected: in float64 the residual max(p - q, 0) is zero at 5, but at T = 0.001 with logits near 8.25
    float32 moves p(5) by more than 2e-4, so a kernel may race 5 in. The support check (output_structure, under
    the standard and the block rule) excuses it there, as the differential checks excuse the cancellation; at T = 1
    with logits near 0, or with q 10% above p, emitting 5 stays a token of probability 0."""
    batch, _, _ = _flip(method, scale, temperature)
    p = torch.softmax(batch.target_logits[0].double() / float(batch.temperature[0]), dim=-1)
    q = p.clone()
    q[5], q[3] = p[5] * (1 + delta), p[3] - p[5] * delta
    rows = torch.stack([q, torch.zeros_like(q)])[:1].float()
    batch = SpecBatch(batch.num_draft_tokens, torch.tensor([3]), batch.target_logits, rows, batch.temperature)
    out = SpecOutput(torch.tensor([[5, -1]]), torch.tensor([0]))
    problems = support_problems(batch, out, method)
    assert (problems == []) == excused, problems
    assert support_problems(batch, SpecOutput(torch.tensor([[3, -1]]), torch.tensor([0])), method) == []
