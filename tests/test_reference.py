"""Properties of the reference (issue 2): Monte Carlo agrees with the exact module, the exact module agrees
with the theory, synthetic parameters, one-hot drafters, ragged layouts, the by-position path, filters and
placeholders. Its inputs (validation, alignment, Philox) are tests/test_reference_inputs.py's.

Statistical tests use fixed seeds (deterministic, never flaky) and state their alpha where they test.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
from scipy import optimize, stats

import reference
from reference import Noise, SpecBatch, exact, leviathan, synthetic
from reference.batch import select_requests
from reference.sample import sample_per_request, synthetic_rates_f32
from specverify.generate import random_batch, replicated_batch

ALPHA = 1e-4  # per statistical test; the fixed seeds make each outcome deterministic


# ---- helpers -----------------------------------------------------------------------------------------
def chi_square_pvalue(probabilities: dict, samples: list[tuple]) -> float:
    """Pearson chi-square of ``samples`` against exact ``probabilities``; bins with expected count < 5
    are merged into one tail bin (itself merged into the smallest bin if still < 5). A sample outside the
    support fails at once: no p-value can excuse an impossible output."""
    counts = Counter(samples)
    impossible = [s for s in counts if s not in probabilities]
    assert not impossible, f"samples in zero-probability bins: {impossible[:5]}"
    n = len(samples)
    keys = sorted(probabilities, key=lambda s: -probabilities[s])
    expected = np.array([probabilities[s] * n for s in keys])
    observed = np.array([counts.get(s, 0) for s in keys], dtype=np.float64)
    big = expected >= 5
    e, o = list(expected[big]), list(observed[big])
    if (~big).any():
        tail_e, tail_o = expected[~big].sum(), observed[~big].sum()
        if tail_e >= 5 or not e:
            e.append(tail_e), o.append(tail_o)
        else:
            e[-1] += tail_e
            o[-1] += tail_o
    assert len(e) >= 2, "too few samples for a chi-square test"
    e, o = np.array(e), np.array(o)
    statistic = float(((o - e) ** 2 / e).sum())
    return float(stats.chi2.sf(statistic, len(e) - 1))


def outputs(batch: SpecBatch, **kwargs) -> list[tuple]:
    return [tuple(seq) for seq in reference.sample(batch, **kwargs).emitted()]


def simplex(rows: int, V: int, seed: int, zeros: int = 1) -> torch.Tensor:
    """[rows, V] float64 distributions with ``zeros`` zero entries per row (at seeded places)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(rows, V, generator=g, dtype=torch.float64) + 0.05
    for r in range(rows):
        w[r, torch.randperm(V, generator=g)[:zeros]] = 0.0
    return w / w.sum(dim=1, keepdim=True)


def rows_of(p: torch.Tensor) -> torch.Tensor:
    """float32 rows that keep exact zeros where p has them (so logits_for's -inf stays -inf)."""
    return p.float().double() / p.float().double().sum(dim=1, keepdim=True)


# ---- Monte Carlo of reference.sample against the exact module ------------------------------------------
def test_standard_rule_monte_carlo_matches_exact_joint_distribution_when_drafts_come_from_q():
    """The core theorem's setting: drafts x_j ~ q_j, a tempered target with zeros in both p and q; the
    whole joint law of (num_accepted, emitted tokens) must match, not only its marginals."""
    p, q = simplex(3, 4, seed=1), simplex(2, 4, seed=2)
    batch = replicated_batch(torch.Generator().manual_seed(3), p, q, temperature=0.7, copies=10000)
    # The batch carries float32 rows; the exact law is computed from what the sampler actually sees.
    truth = exact.standard_sequences(reference.target_probs(batch.target_logits[:3].double(), 0.7),
                                     batch.draft_probs[:2].double())
    assert chi_square_pvalue(truth, outputs(batch, seed=11)) > ALPHA  # alpha = 1e-4


def test_one_hot_drafter_monte_carlo_matches_exact_distribution_given_drafts():
    """draft_probs None with fixed drafts: rejection must sample p without the draft token."""
    p = simplex(3, 5, seed=4)
    drafts = [int(p[0].argmin()) if p[0].min() > 0 else 1, int(p[1].argmax())]
    batch = replicated_batch(torch.Generator().manual_seed(5), p, None, temperature=1.0, copies=10000, drafts=drafts)
    truth = exact.standard_given_drafts(reference.target_probs(batch.target_logits[:3].double(), 1.0), None, drafts)
    noise = Noise.draw(batch, torch.Generator().manual_seed(6))
    assert chi_square_pvalue(truth, outputs(batch, noise=noise)) > ALPHA  # alpha = 1e-4


def test_synthetic_rule_monte_carlo_matches_exact_distribution_when_drafts_come_from_q():
    """Synthetic: acceptance independent of p and q at c_j, the target's own sample at the stop."""
    p, q = simplex(3, 4, seed=7), simplex(2, 4, seed=8)
    batch = replicated_batch(torch.Generator().manual_seed(9), p, q, temperature=1.3, copies=10000)
    rates = synthetic_rates_f32(0.6, 3)
    truth = exact.synthetic_sequences_from_q(reference.target_probs(batch.target_logits[:3].double(), 1.3),
                                             batch.draft_probs[:2].double(), rates)
    got = outputs(batch, seed=12, method="synthetic", synthetic_acceptance_rate=0.6, num_speculative_steps=3)
    assert chi_square_pvalue(truth, got) > ALPHA  # alpha = 1e-4


def test_chi_square_helper_rejects_a_wrong_distribution_and_an_impossible_sample():
    """The helper itself must be able to fail, or the three tests above prove nothing."""
    truth = {(0,): 0.5, (1,): 0.5}
    assert chi_square_pvalue(truth, [(0,)] * 700 + [(1,)] * 300) < ALPHA
    with pytest.raises(AssertionError, match="zero-probability"):
        chi_square_pvalue(truth, [(0,)] * 10 + [(2,)])


# ---- the exact module against the theory ----------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_emitted_token_at_each_position_is_distributed_as_p(seed):
    """Leviathan's theorem: with x_j ~ q_j, the token emitted at position j (given j is reached) ~ p_j."""
    k, V = 3, 4
    p, q = simplex(k + 1, V, seed=10 + seed), simplex(k, V, seed=20 + seed, zeros=2)
    seqs = exact.standard_sequences(p, q)
    assert math.isclose(sum(seqs.values()), 1.0, abs_tol=1e-12)
    for j in range(k + 1):
        torch.testing.assert_close(exact.position_token_distribution(seqs, j, V), p[j], rtol=0, atol=1e-12)


@pytest.mark.parametrize("excess", [0.0, 5e-4], ids=["q-sums-to-1", "drafter-is-the-target"])
def test_exact_token_after_a_rejection_follows_the_residual_or_p_where_it_is_empty(excess):
    """Given a stop at j < k, the token is a sample of max(p_j - q_j, 0) normalised; with q_j = p_j (1 + 5e-4)
    that residual is zero everywhere, and the token is a sample of p_j (SPEC 3's fallback). Computed here from
    the rule, independently of the exact module's enumeration."""
    k, V = 3, 4
    p = simplex(k + 1, V, seed=50)
    q = p[:k] * (1 + excess) if excess else simplex(k, V, seed=51, zeros=1)
    seqs = exact.standard_sequences(p, q)
    for j in range(k):
        residual = torch.clamp(p[j] - q[j], min=0)
        expected = p[j] if float(residual.sum()) == 0 else residual / residual.sum()
        torch.testing.assert_close(exact.stop_token_distribution(seqs, j, V), expected, rtol=0, atol=1e-12)


def test_exact_acceptance_probability_is_sum_of_min_p_q():
    """alpha_j = sum_v min(p_j(v), q_j(v)), computed independently of the exact module."""
    k, V = 3, 5
    p, q = simplex(k + 1, V, seed=30), simplex(k, V, seed=31, zeros=2)
    alpha = exact.acceptance_by_position(exact.standard_sequences(p, q), k)
    expected = torch.tensor([sum(min(float(p[j, v]), float(q[j, v])) for v in range(V)) for j in range(k)],
                            dtype=torch.float64)
    torch.testing.assert_close(alpha, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("excess", [0.0, 5e-4], ids=["q-sums-to-1", "q-sums-over-1"])
def test_exact_given_drafts_averaged_over_q_equals_exact_from_q(excess):
    """The two exact formulas (fixed drafts; drafts ~ q) are written independently: averaging the first
    over drafts drawn from q must give the second. With rows of q summing to 1 + 5e-4 (the fallback case), the
    drafts are drawn from q / (1 + 5e-4), and the second row, q = p (1 + 5e-4), rejects only into p."""
    import itertools

    k, V = 2, 3
    p, q = simplex(k + 1, V, seed=40), simplex(k, V, seed=41)
    q = q * (1 + excess)
    if excess:
        q[1] = p[1] * (1 + excess)
    mixed: dict[tuple, float] = Counter()
    for drafts in itertools.product(range(V), repeat=k):
        weight = float(torch.prod(q[torch.arange(k), torch.tensor(drafts)] / (1 + excess)))
        for seq, prob in exact.standard_given_drafts(p, q, list(drafts)).items():
            mixed[seq] += weight * prob
    direct = exact.standard_sequences(p, q)
    assert set(k for k, v in mixed.items() if v > 1e-15) == set(direct)
    for seq, prob in direct.items():
        assert math.isclose(mixed[seq], prob, rel_tol=1e-9, abs_tol=1e-15), seq


def test_greedy_is_deterministic_and_breaks_ties_at_the_lowest_index():
    """Greedy requests use no noise, and among tied maxima the lowest index wins (also in the bonus row)."""
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, -1.0, 2.0], [0.5, 0.5, 0.5, 0.5]])
    assert exact.greedy_output(logits, [1, 0]) == (1, 0, 0)
    assert exact.greedy_output(logits, [2, 0]) == (1,)
    batch = SpecBatch(torch.tensor([2, 2]), torch.tensor([1, 0, 2, 0]), torch.cat([logits, logits]), None,
                      torch.zeros(2))
    runs = [reference.sample(batch, noise=Noise.draw(batch, torch.Generator().manual_seed(s))).emitted()
            for s in range(3)]
    assert runs == [[[1, 0, 0], [1]]] * 3


# ---- synthetic parameters ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("rate", [0.0, 0.1, 0.37, 0.5, 0.8, 0.925, 0.99, 1.0])
def test_synthetic_mean_joint_acceptance_equals_the_configured_rate(rate, n):
    """mean_{j<n} prod_{i<=j} c_i = r, computed from the conditional rates (not the module's own sum),
    with g the smallest decay in [0.85, 1] that reaches r."""
    a0, g = synthetic.synthetic_params(rate, n)
    assert 0.0 <= a0 <= 1.0 and synthetic.MIN_DECAY <= g <= 1.0
    c = synthetic.conditional_rates(rate, n)
    assert math.isclose(float(torch.cumprod(c, 0).mean()), rate, abs_tol=1e-9)
    if g > synthetic.MIN_DECAY + 1e-9:  # a larger decay is only taken when a0 = 1 cannot reach r with less
        assert math.isclose(a0, 1.0, abs_tol=1e-9)
        assert float(torch.cumprod(torch.full((n,), g - 1e-6, dtype=torch.float64) ** torch.arange(n), 0).mean()) < rate


@pytest.mark.parametrize("rate, n, expected", [
    (0.0, 1, (0.0, 0.85)), (0.0, 4, (0.0, 0.85)),
    (1.0, 2, (1.0, 1.0)), (1.0, 5, (1.0, 1.0)),
    (0.3, 1, (0.3, 0.85)), (0.77, 1, (0.77, 0.85)), (1.0, 1, (1.0, 0.85)),
    # n = 2: mean(a, g a^2) = r, so a = (sqrt(1 + 8 g r) - 1) / (2 g) while g = 0.85 suffices (r <= 0.925).
    (0.5, 2, ((math.sqrt(1 + 8 * 0.85 * 0.5) - 1) / (2 * 0.85), 0.85)),
    # r = 0.95 > 0.925: a = 1 and (1 + g) / 2 = 0.95.
    (0.95, 2, (1.0, 0.9)),
])
def test_synthetic_params_match_hand_computed_values(rate, n, expected):
    """Values derived by hand from SPEC section 3, independently of the module's bisection."""
    a0, g = synthetic.synthetic_params(rate, n)
    assert math.isclose(a0, expected[0], abs_tol=1e-9) and math.isclose(g, expected[1], abs_tol=1e-9)


def test_synthetic_params_decay_found_by_an_independent_root_finder():
    """n = 3, r = 0.9: (1 + g + g^3) / 3 = 0.9 has no closed form; scipy's brentq solves it."""
    g_true = optimize.brentq(lambda g: (1 + g + g ** 3) / 3 - 0.9, 0.85, 1.0, xtol=1e-14)
    a0, g = synthetic.synthetic_params(0.9, 3)
    assert math.isclose(g, g_true, abs_tol=1e-9) and math.isclose(a0, 1.0, abs_tol=1e-9)


# ---- one-hot drafters -----------------------------------------------------------------------------------
def test_none_draft_probs_behaves_as_explicit_one_hot_q():
    """A deterministic drafter (None) must give exactly what an explicit one-hot q gives, noise for noise."""
    g = torch.Generator().manual_seed(50)
    batch = random_batch(g, num_requests=16, vocab_size=6, drafter="none")
    one_hot = torch.nn.functional.one_hot(batch.draft_token_ids, 6).float()
    explicit = SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, batch.target_logits, one_hot, batch.temperature)
    for s in range(4):
        noise = Noise.draw(batch, g)
        a, b = reference.sample(batch, noise=noise), reference.sample(explicit, noise=noise)
        assert torch.equal(a.token_ids, b.token_ids) and torch.equal(a.num_accepted, b.num_accepted)


def test_none_draft_probs_residual_is_p_without_the_draft_token():
    """k = 1, q one-hot at x: rejection (probability 1 - p(x)) must emit y != x with probability p(y)."""
    p = simplex(2, 5, seed=51, zeros=0)
    x = 2
    law = exact.standard_given_drafts(p, None, [x])
    for y in range(5):
        if y != x:
            assert math.isclose(law[(y,)], float(p[0, y]), rel_tol=1e-12)
    assert (x,) not in law
    assert math.isclose(float(leviathan.residual(p[0], leviathan.one_hot(x, 5))[x]), 0.0)


# ---- ragged layouts -------------------------------------------------------------------------------------
def _ragged_batch(counts: list[int], V: int = 7, seed: int = 60) -> SpecBatch:
    g = torch.Generator().manual_seed(seed)
    k = torch.tensor(counts, dtype=torch.int64)
    T, B = int(k.sum()), len(counts)
    q = torch.softmax(torch.randn(T, V, generator=g), dim=-1)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1) if T else torch.zeros(0, dtype=torch.int64)
    return SpecBatch(k, drafts, torch.randn(T + B, V, generator=g) * 2, q,
                     torch.tensor([0.9, 0.0, 1.2, 0.6][:B] + [1.0] * max(0, B - 4)))


@pytest.mark.parametrize("counts", [[0, 2, 1], [2, 0, 1], [2, 1, 0], [0, 3, 0, 1], [0, 0, 0]],
                         ids=["start", "middle", "end", "several", "all-zero"])
def test_zero_draft_requests_anywhere_emit_one_token_and_leave_others_unchanged(counts):
    """A zero-draft request emits one token with num_accepted 0, and every request's output equals the
    output it gets alone (a zero-draft neighbour must not shift anyone's rows or noise)."""
    batch = _ragged_batch(counts)
    noise = Noise.draw(batch, torch.Generator().manual_seed(61))
    out = reference.sample(batch, noise=noise)
    assert tuple(out.token_ids.shape) == (len(counts), max(counts) + 1)
    for b, k in enumerate(counts):
        row, n = out.token_ids[b].tolist(), int(out.num_accepted[b])
        assert 0 <= n <= k and all(t == -1 for t in row[n + 1:]) and 0 <= row[n] < batch.vocab_size
        if k == 0:
            assert n == 0
        alone_idx = torch.tensor([b])
        alone = reference.sample(select_requests(batch, alone_idx), noise=noise.select(batch, alone_idx))
        assert alone.emitted() == [out.emitted()[b]]


def test_empty_batch_gives_empty_outputs():
    """B = 0 is legal: token_ids [0, 1], num_accepted [0]."""
    batch = SpecBatch(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), torch.zeros(0, 5),
                      None, torch.zeros(0))
    out = reference.sample(batch, seed=0)
    assert tuple(out.token_ids.shape) == (0, 1) and tuple(out.num_accepted.shape) == (0,)


# ---- the by-position path against the per-request definition --------------------------------------------
def _equality_batch(seed: int) -> SpecBatch:
    """A random ragged batch cycling through logit dtypes, drafters and layouts: zero-draft requests,
    greedy rows, -inf-masked logits (every row keeps its maximum), replicated statistical requests,
    and constant rows where every argmax and race is a tie."""
    g = torch.Generator().manual_seed(1000 + seed)
    dtype = (torch.float32, torch.bfloat16, torch.float16, torch.float64)[seed % 4]
    drafter = ("dense", "none", "equal", "disjoint")[(seed // 4) % 4]
    if seed % 11 == 10:
        p = simplex(4, 6, seed=seed, zeros=2)
        return replicated_batch(g, p, rows_of(simplex(3, 6, seed=seed + 1, zeros=1)), 0.8, copies=300,
                                logit_dtype=dtype)
    batch = random_batch(g, num_requests=int(torch.randint(0, 48, (1,), generator=g)),
                         vocab_size=int(torch.randint(1, 400, (1,), generator=g)),
                         max_draft=int(torch.randint(0, 7, (1,), generator=g)), logit_dtype=dtype, drafter=drafter,
                         greedy_fraction=0.3, zero_draft_fraction=0.3, logit_scale=(0.05, 3.0)[seed % 2])
    logits = batch.target_logits.clone()
    if seed % 3 == 0 and logits.numel():
        masked = torch.rand(logits.shape, generator=g) < 0.4
        masked[torch.arange(logits.shape[0]), logits.float().argmax(dim=1)] = False
        logits[masked] = float("-inf")
    if seed % 7 == 0 and logits.numel():
        logits[::3] = 0.5
    filters = (None, None, None)
    if seed % 5 == 3:  # target filters, each off for some requests; k = 1 and top_p near 0 included
        B = batch.num_requests
        filters = (torch.randint(0, 4, (B,), generator=g), torch.rand(B, generator=g).clamp(1e-3, 1.0),
                   torch.rand(B, generator=g) * 0.6 * (torch.rand(B, generator=g) < 0.5))
    drafts = batch.draft_token_ids
    if seed % 6 == 4 and batch.num_drafts:  # placeholders anywhere, first slots and trailing padding included
        drafts = torch.where(torch.rand(batch.num_drafts, generator=g) < 0.3, -1, drafts)
    return SpecBatch(batch.num_draft_tokens, drafts, logits, batch.draft_probs, batch.temperature, *filters)


def _call_settings(batch: SpecBatch, seed: int):
    """(kwargs, label): injected noise (float32, and float64 for some seeds) and seeded noise, both
    rules, and compute in float32 as well as float64 for some seeds."""
    g = torch.Generator().manual_seed(2000 + seed)
    noise = Noise.draw(batch, g)
    if seed % 4 == 1:
        noise = Noise(noise.uniform.double(), noise.exponential.double())
    if seed % 5 == 2:
        noise = Noise(noise.uniform, torch.ones_like(noise.exponential))  # every race a tie
    steps = max(batch.max_draft, 1)
    rules = [dict(), dict(method="synthetic", synthetic_acceptance_rate=(0.0, 0.45, 0.9, 1.0)[seed % 4],
                          num_speculative_steps=steps)]
    dtypes = (torch.float64, torch.float32) if seed % 3 == 1 else (torch.float64,)
    for rule in rules:
        for compute_dtype in dtypes:
            for given in (dict(noise=noise), dict(seed=seed)):
                yield dict(compute_dtype=compute_dtype, **rule, **given), f"{rule} {compute_dtype} {list(given)}"


@pytest.mark.parametrize("seed", range(44))
def test_sample_equals_the_per_request_definition_bit_for_bit(seed):
    """``sample`` decides all requests at once, position by position; it must emit exactly what the
    per-request loop of ``sample_per_request`` emits, on every kind of batch and call."""
    batch = _equality_batch(seed)
    for kwargs, label in _call_settings(batch, seed):
        fast, definition = reference.sample(batch, **kwargs), sample_per_request(batch, **kwargs)
        assert torch.equal(fast.token_ids, definition.token_ids), label
        assert torch.equal(fast.num_accepted, definition.num_accepted), label


def test_equality_batches_cover_what_the_by_position_path_must_get_right():
    """The batches above hold every feature the equality test claims: zero-draft requests, greedy and
    random requests, masked logits, each logit dtype, one-hot and dense drafters, exact ties."""
    batches = [_equality_batch(s) for s in range(44)]
    assert any(bool((b.num_draft_tokens == 0).any()) and b.num_drafts > 0 for b in batches)
    assert any(b.has_filters and bool((b.top_k == 1).any()) and bool((b.min_p > 0).any()) for b in batches)
    assert any(b.has_placeholders and bool((b.draft_token_ids[b.draft_offsets()[:-1][b.num_draft_tokens > 0]] == -1).any())
               for b in batches)
    assert any(bool((b.temperature == 0).any()) and bool((b.temperature > 0).any()) for b in batches)
    assert any(bool(torch.isneginf(b.target_logits).any()) for b in batches)
    assert {b.target_logits.dtype for b in batches} == {torch.float32, torch.bfloat16, torch.float16, torch.float64}
    assert any(b.draft_probs is None for b in batches) and any(b.draft_probs is not None for b in batches)
    assert sum(b.num_requests for b in batches) > 1000
    outs = [reference.sample(b, seed=0) for b in batches]
    assert any(bool((o.num_accepted == b.num_draft_tokens).any()) for o, b in zip(outs, batches))  # bonus tokens
    assert any(bool((o.num_accepted < b.num_draft_tokens).any()) for o, b in zip(outs, batches))   # rejections


# ---- target filters (SPEC 3.4) ---------------------------------------------------------------------------
P = torch.tensor([[0.3, 0.3, 0.2, 0.1, 0.1]], dtype=torch.float64)


@pytest.mark.parametrize("name,setting,expected", [
    ("top_k", 1, [0.5, 0.5, 0, 0, 0]),                  # ties at the k-th value are kept
    ("top_k", 3, [0.375, 0.375, 0.25, 0, 0]),
    ("top_k", 0, [0.3, 0.3, 0.2, 0.1, 0.1]),            # off
    ("top_p", 0.5, [0.5, 0.5, 0, 0, 0]),                # the crossing token (second 0.3) kept
    ("top_p", 0.61, [0.375, 0.375, 0.25, 0, 0]),
    ("top_p", 1e-3, [1.0, 0, 0, 0, 0]),                 # lower index first among equal probabilities
    ("min_p", 0.5, [0.375, 0.375, 0.25, 0, 0]),         # keep p >= 0.15
])
def test_each_filter_matches_its_definition(name, setting, expected):
    """Hand-computed filtered targets at the boundaries SPEC 3.4 defines: ties, crossing token, order."""
    value = torch.tensor([setting], dtype=torch.int64 if name == "top_k" else torch.float64)
    got = getattr(reference.filters, name)(P, value)
    assert torch.allclose(got, torch.tensor([expected], dtype=torch.float64), atol=1e-12, rtol=0)


def test_filters_apply_in_order_and_greedy_requests_ignore_them():
    """top-k, then top-p on the renormalised result, then min-p; a greedy request emits the argmax
    whatever its filters, and a random request only tokens of p'."""
    # top-k 3 gives [.375 .375 .25]; top-p 0.7 then keeps the two .375 (before = .375 < .7 for the second)
    got = reference.filters.apply(P, torch.tensor([3]), torch.tensor([0.7], dtype=torch.float64), None)
    assert torch.allclose(got, torch.tensor([[0.5, 0.5, 0, 0, 0]], dtype=torch.float64))
    logits = torch.log(P.float()).repeat(4, 1)
    batch = SpecBatch(torch.tensor([0, 0]), torch.zeros(0, dtype=torch.int64), logits[:2], None,
                      torch.tensor([0.0, 1.0]), torch.tensor([1, 1]), None, torch.tensor([0.0, 0.9]))
    for seed in range(50):
        out = reference.sample(batch, seed=seed)
        assert int(out.token_ids[0, 0]) == 0 and int(out.token_ids[1, 0]) in (0, 1)


# ---- placeholders (SPEC 3.5) ------------------------------------------------------------------------------
def test_placeholder_is_never_accepted_and_its_token_comes_from_p():
    """A placeholder ends its request at its slot under every rule; the token there is drawn from p'
    (the residual with q = 0) with the request's exponential race, the argmax for a greedy request."""
    V = 5
    logits = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.25, 0.15])).repeat(6, 1)
    q = torch.full((4, V), 0.2)
    batch = SpecBatch(torch.tensor([2, 2]), torch.tensor([2, -1, -1, 3]), logits, q, torch.tensor([1.0, 0.0]))
    noise = Noise(torch.full((4,), 1e-6), torch.tensor([[1.0, 1.0, 1.0, 0.01, 1.0]] * 2))
    for kwargs in (dict(), dict(method="synthetic", synthetic_acceptance_rate=1.0, num_speculative_steps=2)):
        out = reference.sample(batch, noise=noise, **kwargs)
        assert out.num_accepted.tolist() == [1, 0], kwargs          # u tiny, rate 1: only a placeholder stops
        assert out.token_ids[0, :2].tolist() == [2, 3]               # the race over p picks the tiny exponential
        assert int(out.token_ids[1, 0]) == 2                         # greedy: argmax of p
