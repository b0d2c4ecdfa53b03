"""Every registered mutant is really buggy: on a seeded input chosen for its bug class it behaves unlike the
correct CPU backend (issue 5). Whether the harness catches each one is tested with the harness itself.

Scenarios run with torch poisoning uninitialised memory (as the harness does), so memory bugs show up as
deterministically as the others.
"""

from __future__ import annotations

import pytest
import torch

import reference
from reference import Noise, SpecBatch, SpecOutput
from specverify.generate import random_batch
from specverify.kernels.cpu import CpuBackend
from specverify.mutants import CHECK_NAMES, MUTANTS
from specverify.mutants.statistical_only import OwnStreamCpuBackend


@pytest.fixture(autouse=True)
def poisoned_memory():
    was_det, was_fill = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(was_det)
    torch.utils.deterministic.fill_uninitialized_memory = was_fill


def _result(call):
    """What a backend did: its outputs, or the type of error it raised."""
    try:
        out = call()
    except Exception as exc:  # noqa: BLE001 - a raised error is a behaviour to compare
        return ("raised", type(exc).__name__)
    return ("returned", out.token_ids.tolist(), out.num_accepted.tolist())


def _dense():
    g = torch.Generator().manual_seed(101)
    batch = random_batch(g, num_requests=24, vocab_size=300, max_draft=4, greedy_fraction=0.25)
    return batch, Noise.draw(batch, g)


def _greedy(logits: torch.Tensor, k: int) -> SpecBatch:
    B = logits.shape[0] // (k + 1)
    drafts = logits.view(B, k + 1, -1)[:, :k].argmax(dim=2).flatten()
    return SpecBatch(torch.full((B,), k), drafts, logits, None, torch.zeros(B))


def scenario_dense(backend):
    batch, noise = _dense()
    return backend(batch, noise=noise)


def scenario_overlapping_drafter(backend):
    """q = 0.7 p + 0.3 (another distribution): most drafts accepted, many accept decisions close to p/q."""
    g = torch.Generator().manual_seed(108)
    B, k, V = 24, 3, 50
    logits = torch.randn(B * (k + 1), V, generator=g) * 2
    temperature = torch.full((B,), 0.8)
    rows = torch.ones(B * (k + 1), dtype=torch.bool)
    rows[k::k + 1] = False
    p = torch.softmax(logits[rows].double() / 0.8, dim=-1)
    q = 0.7 * p + 0.3 * torch.softmax(torch.randn(B * k, V, generator=g, dtype=torch.float64), dim=-1)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1)
    batch = SpecBatch(torch.full((B,), k), drafts, logits, q.float(), temperature)
    return backend(batch, noise=Noise.draw(batch, g))


def scenario_seeded(backend):
    batch, _ = _dense()
    return backend(batch, seed=5)


def scenario_synthetic(backend):
    batch, noise = _dense()
    return backend(batch, noise=noise, method="synthetic", synthetic_acceptance_rate=0.5, num_speculative_steps=4)


def scenario_synthetic_rate_unset(backend):
    batch, noise = _dense()
    return backend(batch, noise=noise, method="synthetic", num_speculative_steps=4)


def scenario_all_keywords(backend):
    """The full convention, with the synthetic keywords spelled out."""
    batch, noise = _dense()
    return backend(batch, method="standard", noise=noise, seed=None, synthetic_acceptance_rate=None,
                   num_speculative_steps=None)


def scenario_greedy_ties(backend):
    """Integer logits: most rows have tied maxima."""
    g = torch.Generator().manual_seed(102)
    return backend(_greedy(torch.randint(0, 2, (8 * 3, 6), generator=g).float(), 2), seed=0)


def scenario_greedy_ties_across_a_split(backend):
    """V = 4,099: ids 5 and 3,000 tie at the top of every row, on either side of a split at 2,048."""
    g = torch.Generator().manual_seed(104)
    logits = torch.randn(4 * 2, 4_099, generator=g)
    logits[:, [5, 3_000]] = 6.0
    return backend(SpecBatch(torch.ones(4, dtype=torch.int64), torch.full((4,), 3_000), logits, None,
                             torch.zeros(4)), seed=0)


def scenario_greedy_near_ties(backend):
    """The runner-up at a lower index trails the maximum by 1e-3 in logit: bf16 probabilities tie them."""
    g = torch.Generator().manual_seed(103)
    logits = torch.randn(8 * 3, 50, generator=g)
    logits[:, 40] = 6.0
    logits[:, 7] = 6.0 - 1e-3
    return backend(SpecBatch(torch.full((8,), 2), torch.full((16,), 40), logits, None, torch.zeros(8)), seed=0)


def scenario_greedy_negative_logits(backend):
    """Every real logit negative; V = 200 is not a multiple of the 128-wide tile."""
    g = torch.Generator().manual_seed(104)
    return backend(_greedy(-1.0 - torch.rand(4 * 3, 200, generator=g), 2), seed=0)


def scenario_second_call(backend):
    """Two calls with equal shapes and different draft probabilities; the second call's output."""
    g = torch.Generator().manual_seed(105)
    first = random_batch(g, num_requests=16, vocab_size=40, greedy_fraction=0.0, zero_draft_fraction=0.0)
    backend(first, seed=1)
    second = SpecBatch(first.num_draft_tokens, first.draft_token_ids, first.target_logits,
                       first.draft_probs.flip(dims=(1,)).contiguous(), first.temperature)
    return backend(second, seed=1)


def scenario_bf16_sensitive(backend):
    """q(x) = 0.3 (bf16: 0.30078125), p(x) = 0.15, u = 0.4995: float32 accepts (u q = 0.14985 <= 0.15),
    bf16 q rejects (0.15024 > 0.15)."""
    B = 4
    p = torch.tensor([[0.15, 0.85], [0.5, 0.5]], dtype=torch.float64).repeat(B, 1)
    q = torch.tensor([[0.3, 0.7]]).repeat(B, 1)
    batch = SpecBatch(torch.ones(B, dtype=torch.int64), torch.zeros(B, dtype=torch.int64), torch.log(p).float(), q,
                      torch.ones(B))
    return backend(batch, noise=Noise(torch.full((B,), 0.4995), torch.ones(B, 2)))


def scenario_strided_inputs(backend):
    """Logits as the middle columns of a wider, poisoned buffer (a vocabulary-padded view) and temperatures
    every other element of one, under injected noise: a backend indexing them as if contiguous reads poison."""
    from specverify.checks.integrity import strided_copy
    g = torch.Generator().manual_seed(109)
    batch = random_batch(g, num_requests=6, vocab_size=30, greedy_fraction=0.0, zero_draft_fraction=0.0)
    strided = SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, strided_copy(batch.target_logits),
                        batch.draft_probs, strided_copy(batch.temperature))
    assert not strided.target_logits.is_contiguous() and not strided.temperature.is_contiguous()
    return backend(strided, noise=Noise.draw(batch, g))


def scenario_rows_past_a_narrow_offset(backend):
    """300 rows of V = 64 under injected noise, each request's logits -inf but at four ids of its own; a backend
    with an ``offset_bits`` width (the 32-bit offset mutants) gets 14 bits, so rows from the 128th on wrap as rows
    past 2^31 elements do at 32 (signed), and from the 256th as past 2^32 (unsigned); the correct backend has no
    such width and ignores it."""
    backend.offset_bits = 14
    g = torch.Generator().manual_seed(110)
    B, V = 60, 64
    k = torch.full((B,), 4, dtype=torch.int64)
    logits = torch.full((5 * B, V), float("-inf"))
    own = (torch.arange(B) % 16)[:, None] * 4 + torch.arange(4)
    logits.scatter_(1, own.repeat_interleave(5, 0), torch.randn(5 * B, 4, generator=g))
    batch = SpecBatch(k, own.gather(1, torch.randint(0, 4, (B, 4), generator=g)).flatten(), logits, None,
                      torch.ones(B))
    return backend(batch, noise=Noise.draw(batch, g))


def scenario_tiny_residual(backend):
    """q = (1 - 1e-5) p + 1e-5 onehot(x): rejected (u close to 1), the residual 1e-5 p ~ 3e-8 is below
    float16's smallest normal; a float32 race samples it properly."""
    g = torch.Generator().manual_seed(106)
    B, V = 8, 300
    logits = torch.randn(2 * B, V, generator=g)
    p = torch.softmax(logits.double()[0::2], dim=-1)
    x = torch.randint(0, V, (B,), generator=g)
    q = ((1 - 1e-5) * p + 1e-5 * torch.nn.functional.one_hot(x, V)).float()
    batch = SpecBatch(torch.ones(B, dtype=torch.int64), x, logits, q, torch.ones(B))
    return backend(batch, noise=Noise(torch.full((B,), 0.9999), -torch.log(torch.rand(B, V, generator=g))))


def _zero_probability_drafts() -> SpecBatch:
    """Eight one-draft requests whose draft's logit is -inf (p(x) = 0), V = 10."""
    g = torch.Generator().manual_seed(107)
    logits = torch.randn(16, 10, generator=g)
    logits[:, 3] = float("-inf")
    return SpecBatch(torch.ones(8, dtype=torch.int64), torch.full((8,), 3), logits, None, torch.ones(8))


def scenario_zero_probability_drafts(backend):
    """Drafts of probability 0 with u = 1e-3: never acceptable."""
    return backend(_zero_probability_drafts(), noise=Noise(torch.full((8,), 1e-3), torch.ones(8, 10)))


def scenario_zero_probability_drafts_at_coin_zero(backend):
    """The same drafts with every uniform at 0: fixed coins (coin=0) where the backend takes them, else injected
    uniforms of 2^-150, which float32 reads as 0. Never acceptable either way."""
    batch = _zero_probability_drafts()
    if "coins" in getattr(getattr(backend, "capabilities", None), "noise", ()):
        return backend(batch, seed=torch.arange(8), coin=0.0)
    return backend(batch, noise=Noise(torch.full((8,), 2.0 ** -150, dtype=torch.float64), torch.ones(8, 10)))


def scenario_bf16_sensitive_seeded(backend):
    """The bf16-sensitive request 4,000 times under seeds: bf16 q = 0.30078 rejects where float32 q = 0.3
    accepts for u in (0.4987, 0.5], about five requests; for a backend whose only noise is its own stream."""
    B = 4000
    p = torch.tensor([[0.15, 0.85], [0.5, 0.5]], dtype=torch.float64).repeat(B, 1)
    q = torch.tensor([[0.3, 0.7]]).repeat(B, 1)
    batch = SpecBatch(torch.ones(B, dtype=torch.int64), torch.zeros(B, dtype=torch.int64), torch.log(p).float(), q,
                      torch.ones(B))
    return backend(batch, seed=torch.arange(B, dtype=torch.int64))


def scenario_greedy_seeded(backend):
    """Greedy requests with a clear argmax (p(0) = 0.7) under seeds: the argmax always, never a sample."""
    B = 64
    logits = torch.log(torch.tensor([0.7, 0.1, 0.1, 0.1])).repeat(B, 1)
    batch = SpecBatch(torch.zeros(B, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), logits, None,
                      torch.zeros(B))
    return backend(batch, seed=torch.arange(B, dtype=torch.int64))


def scenario_partial_last_tile_seeded(backend):
    """V = 1030 (a last tile of 6 ids), every logit at -40 but the last tile's: a pad read as logit 0
    outweighs them all."""
    B, V = 8, 1030
    logits = torch.full((B, V), -40.0)
    logits[:, 1024:] = -38.0
    batch = SpecBatch(torch.zeros(B, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), logits, None,
                      torch.ones(B))
    return backend(batch, seed=torch.arange(B, dtype=torch.int64))


def scenario_production_vocab_seeded(backend):
    """V = 151,936 (above a split-V threshold of 100,000), two requests with drafts, seeded: every
    emitted id must lie in [0, V)."""
    from specverify.checks.large_vocab import large_vocab_batch  # noqa: PLC0415
    batch = large_vocab_batch("mass_at_end", 151_936, torch.Generator().manual_seed(3))
    return backend(batch, seed=torch.arange(batch.num_requests, dtype=torch.int64))


def scenario_nonfinite_rows(backend):
    """Finite requests beside NaN, -inf and +inf rows (SPEC 3.6), injected noise. A non-finite request's
    tokens are unconstrained but for their range: its row reads [1] if its extra token is in [0, V), else [0]."""
    from specverify.checks.nonfinite import nonfinite_batch  # noqa: PLC0415
    batch, _, bad = nonfinite_batch(0, 16, "dense")
    out = backend(batch, noise=Noise.draw(batch, torch.Generator().manual_seed(1)))
    ids, n = out.token_ids.clone(), out.num_accepted.clone()
    for b in torch.nonzero(bad).flatten().tolist():
        extra = int(ids[b, n[b]])
        ids[b] = -1
        ids[b, 0], n[b] = int(0 <= extra < batch.vocab_size), 0
    return SpecOutput(ids, n)


def scenario_block(backend):
    """Block verification (SPEC 3.7) on 32 random requests of up to 4 drafts from a dense q, injected noise."""
    from specverify.generate import random_batch  # noqa: PLC0415
    batch = random_batch(torch.Generator().manual_seed(7), num_requests=32, vocab_size=5, greedy_fraction=0.0,
                         zero_draft_fraction=0.0, logit_scale=1.0)
    return backend(batch, noise=Noise.draw(batch, torch.Generator().manual_seed(8)), method="block")


def scenario_filtered(backend):
    """Tied logits rising with the index and a real q; requests with no draft and top-k 1 (two tied
    tokens kept, the bonus decides), one draft and top-p 0.5 (sorting decides), two drafts and min-p
    0.4: every filter decides, on acceptance, recovered and bonus tokens."""
    g = torch.Generator().manual_seed(113)
    B, V = 96, 6
    k = torch.tensor([0, 1, 2] * (B // 3))
    T = int(k.sum())
    logits = torch.tensor([0.0, 0.0, 1.0, 1.0, 2.0, 2.0]).repeat(T + B, 1)
    q = torch.softmax(torch.randn(T, V, generator=g), dim=-1)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1)
    top_k = torch.tensor([1, 0, 0] * (B // 3))
    top_p = torch.tensor([1.0, 0.5, 1.0] * (B // 3))
    min_p = torch.tensor([0.0, 0.0, 0.4] * (B // 3))
    batch = SpecBatch(k, drafts, logits, q, torch.ones(B), top_k, top_p, min_p)
    return backend(batch, noise=Noise.draw(batch, g))


def scenario_filter_cuts(backend):
    """The cut itself at temperature 0.5, with a real q: top-k 3 where the two largest logits tie (a count
    that doubles ties stops above the third), top-p 0.5 where the second sorted token crosses (one more
    token is kept one token late), min-p 0.3 whose floor at temperature 1 keeps one more logit."""
    g = torch.Generator().manual_seed(29)
    B, V = 96, 8
    k = torch.tensor([0, 1, 2] * (B // 3))
    T = int(k.sum())
    logits = torch.tensor([0.0, 0.5, 1.0, 1.0, 2.0, 2.5, 3.0, 3.0]).repeat(T + B, 1)
    q = torch.softmax(torch.randn(T, V, generator=g), dim=-1)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1)
    top_k = torch.tensor([3, 0, 0, 0] * (B // 4))
    top_p = torch.tensor([1.0, 0.5, 1.0, 1.0] * (B // 4))
    min_p = torch.tensor([0.0, 0.0, 0.3, 0.0] * (B // 4))
    batch = SpecBatch(k, drafts, logits, q, torch.full((B,), 0.5), top_k, top_p, min_p)
    return backend(batch, noise=Noise.draw(batch, g))


def scenario_placeholders(backend):
    """Placeholder drafts in every slot of random requests whose target favours tokens 0 and V - 1: a
    placeholder read as either token is often accepted; a correct backend never accepts one."""
    g = torch.Generator().manual_seed(127)
    B = 32
    logits = torch.tensor([3.0, 0.0, 0.0, 0.0, 0.0, 3.0]).repeat(3 * B, 1)
    batch = SpecBatch(torch.full((B,), 2), torch.full((2 * B,), -1), logits, None, torch.ones(B))
    return backend(batch, noise=Noise.draw(batch, g))


def scenario_float32_boundaries(backend):
    """Drafts of target probability 0 with a float64 uniform of 1e-60 (0 in float32), and at the
    rejection a tail token (p ~ 1e-13) whose exponential is 1e-30, below float32's 2^-24 floor of -log u."""
    B, V = 8, 10
    logits = torch.randn(2 * B, V, generator=torch.Generator().manual_seed(131))
    logits[0::2, 3] = float("-inf")
    logits[:, 7] = -30.0     # p(7) ~ 1e-13: it wins the race only with an exponential below 2^-24
    batch = SpecBatch(torch.ones(B, dtype=torch.int64), torch.full((B,), 3), logits, None, torch.ones(B))
    exponential = torch.ones(B, V, dtype=torch.float64)
    exponential[:, 7] = 1e-30
    return backend(batch, noise=Noise(torch.full((B,), 1e-60, dtype=torch.float64), exponential))


def scenario_drafter_is_the_target(backend, method="standard"):
    """q = p (1 + 5e-4) at every draft row (a drafter that is the target model, its probabilities rounded up)
    and a uniform above p(x) / q(x): each first draft is rejected where max(p - q, 0) is zero everywhere, and
    the rule samples p itself; token 0 has probability 0, so racing the empty residual shows."""
    g = torch.Generator().manual_seed(139)
    B, V = 8, 12
    logits = torch.randn(2 * B, V, generator=g)
    logits[:, 0] = float("-inf")
    p = torch.softmax(logits[0::2].double(), dim=-1)
    batch = SpecBatch(torch.ones(B, dtype=torch.int64), torch.full((B,), 5), logits, (p * (1 + 5e-4)).float(),
                      torch.ones(B))
    return backend(batch, noise=Noise(torch.full((B,), 1 - 1e-4, dtype=torch.float64),
                                      torch.empty(B, V, dtype=torch.float64).exponential_(generator=g)), method=method)


def scenario_top_token_at_low_temperature(backend):
    """Each draft its row's top token (logit 8.25, the rest at most 7.25) at temperature 0.001, q(x) = 1.0005,
    u = 1 - 1.25e-4: p(x) = 1 and the reference rejects; float32's 8.25 * (1 / 0.001) rounds 4.7e-4 below the
    exact product, so a p(x) computed from the unrounded product (a fused multiply-add) is above u q(x)."""
    g = torch.Generator().manual_seed(157)
    B, V = 8, 12
    logits = torch.rand(2 * B, V, generator=g) * 6 - 4
    logits[0::2, 5] = 8.25
    p = torch.softmax(logits[0::2].double() / 0.001, dim=-1)
    batch = SpecBatch(torch.ones(B, dtype=torch.int64), torch.full((B,), 5), logits, (p * (1 + 5e-4)).float(),
                      torch.full((B,), 0.001))
    return backend(batch, noise=Noise(torch.full((B,), 1 - 1.25e-4, dtype=torch.float64),
                                      torch.empty(B, V, dtype=torch.float64).exponential_(generator=g)))


def scenario_dense_q_seeded(backend):
    """The dense_q case's request, 2,000 copies under seeds: about 1,800 rejections, so a residual wrong only
    where some of them land shows in the tokens."""
    from specverify.checks.cases import STAT_CASE_BY_NAME  # noqa: PLC0415
    batch = STAT_CASE_BY_NAME["dense_q"].batch(2_000, torch.Generator().manual_seed(151))
    return backend(batch, seed=torch.arange(2_000, dtype=torch.int64))


def scenario_drafter_is_the_target_seeded(backend):
    """q = p (1 + 5e-4) under seeds, 20,000 requests of one draft: about 10 are rejected, each where max(p - q, 0)
    is zero everywhere; ids 0 and V - 1 have probability 0, so a fallback to the first or the last id shows."""
    g = torch.Generator().manual_seed(149)
    B, V = 20_000, 12
    logits = torch.randn(V, generator=g)
    logits[[0, V - 1]] = float("-inf")
    p = torch.softmax(logits.double(), dim=-1)
    x = torch.multinomial(p, B, replacement=True, generator=g)
    batch = SpecBatch(torch.ones(B, dtype=torch.int64), x, logits.repeat(2 * B, 1),
                      (p * (1 + 5e-4)).float().repeat(B, 1), torch.ones(B))
    return backend(batch, seed=torch.arange(B, dtype=torch.int64))


def scenario_drafter_is_the_target_block(backend):
    """The same under block verification (SPEC 3.7), one draft a request: w_1 = 1 / (1 + 5e-4) is below the
    uniform, so the block stops at tau = 0, where the residual max(p_0 - q_0, 0) is zero everywhere."""
    return scenario_drafter_is_the_target(backend, method="block")


def scenario_drafter_is_the_target_tree(backend):
    """The same under the tree rule (chains as single-path trees): the residual r - m q_c empties, and r is kept
    as it was (SPEC 3.8)."""
    return scenario_drafter_is_the_target(backend, method="tree")


def scenario_trees(backend):
    """Token trees (SPEC 3.8) of every shape with several siblings per node, drawn without replacement (each
    sibling's q_i differs), a third of the requests greedy on tied rows, injected noise."""
    from specverify.tree_strategies import tree_batch  # noqa: PLC0415
    g = torch.Generator().manual_seed(137)
    B = 24
    temperatures = [1.0, 0.7, 0.0] * (B // 3)
    batch = tree_batch(g, ["eagle", "random", "star", "narrow"] * (B // 4), 6, drafter="without_replacement",
                       sizes=[6] * B, temperatures=temperatures,
                       styles=["tied" if t == 0 else "normal" for t in temperatures])
    return backend(batch, noise=Noise.draw(batch, g), method="tree")


SCENARIOS = {f.__name__.removeprefix("scenario_"): f for f in (
    scenario_trees, scenario_drafter_is_the_target, scenario_drafter_is_the_target_tree,
    scenario_top_token_at_low_temperature,
    scenario_drafter_is_the_target_seeded, scenario_dense_q_seeded,
    scenario_drafter_is_the_target_block,
    scenario_filtered, scenario_filter_cuts, scenario_float32_boundaries, scenario_placeholders,
    scenario_bf16_sensitive_seeded, scenario_greedy_seeded, scenario_partial_last_tile_seeded, scenario_production_vocab_seeded,
    scenario_nonfinite_rows, scenario_block,
    scenario_dense, scenario_overlapping_drafter, scenario_seeded, scenario_synthetic, scenario_synthetic_rate_unset, scenario_all_keywords,
    scenario_greedy_ties, scenario_greedy_ties_across_a_split, scenario_greedy_near_ties,
    scenario_greedy_negative_logits, scenario_second_call,
    scenario_bf16_sensitive, scenario_strided_inputs, scenario_rows_past_a_narrow_offset,
    scenario_tiny_residual, scenario_zero_probability_drafts,
    scenario_zero_probability_drafts_at_coin_zero)}

# The input on which each sampler mutant must differ from the correct backend.
WITNESS = {
    "draft_probs_dropped": "dense",
    "draft_probs_bf16": "bf16_sensitive",
    "stale_draft_probs": "second_call",
    "unwritten_output_slots": "dense",
    "uninitialized_scratch": "dense",
    "greedy_highest_index_tie": "greedy_ties",
    "greedy_low_precision_argmax": "greedy_near_ties",
    "greedy_split_tie_to_later_part": "greedy_ties_across_a_split",
    "synthetic_rate_defaults_to_zero": "synthetic_rate_unset",
    "synthetic_decay_ignored": "synthetic",
    "signature_lag": "all_keywords",
    "padded_vocab_argmax": "greedy_negative_logits",
    "race_low_precision": "tiny_residual",
    "off_by_one_logits_row": "overlapping_drafter",
    "residual_unclamped": "dense",
    "residual_from_p": "dense",
    "accept_with_zero_uniform": "zero_probability_drafts",
    "zero_coin_accepts_own_stream": "zero_probability_drafts_at_coin_zero",
    "bonus_after_rejection": "dense",
    "num_accepted_off_by_one": "dense",
    "temperature_ignored": "dense",
    "shared_noise_vector": "dense",
    "inputs_indexed_as_contiguous": "strided_inputs",
    "row_offsets_in_int32": "rows_past_a_narrow_offset",
    "row_offsets_in_uint32": "rows_past_a_narrow_offset",
    "accept_against_p": "overlapping_drafter",
    "draft_probs_bf16_own_stream": "bf16_sensitive_seeded",
    "greedy_sampled_own_stream": "greedy_seeded",
    "greedy_highest_index_tie_own_stream": "greedy_ties",
    "padded_tile_own_stream": "partial_last_tile_seeded",
    "split_vocab_out_of_range_own_stream": "production_vocab_seeded",
    "nan_row_emits_id_past_v": "nonfinite_rows",
    "tokenwise_as_block": "block",
    "block_ratio_unclamped": "block",
    "block_stop_from_start": "block",
    "block_residual_wrong_position": "block",
    "nan_leaks_across_requests": "nonfinite_rows",
    "filter_missing_from_recovered": "filtered",
    "filter_missing_from_bonus": "filtered",
    "top_k_without_ties": "filtered",
    "top_p_unsorted": "filtered",
    "filters_applied_to_q": "filtered",
    "top_p_one_token_late": "filter_cuts",
    "top_k_ties_counted_twice": "filter_cuts",
    "min_p_unscaled_max": "filter_cuts",
    "cut_applied_to_q": "filter_cuts",
    "residual_without_fallback": "drafter_is_the_target",
    "fused_scaled_logit": "top_token_at_low_temperature",
    "tree_empty_residual_not_kept": "drafter_is_the_target_tree",
    "block_residual_without_fallback": "drafter_is_the_target_block",
    "residual_without_fallback_own_stream": "drafter_is_the_target_seeded",
    "residual_fallback_to_last_id_own_stream": "drafter_is_the_target_seeded",
    "residual_fallback_to_argmax_own_stream": "drafter_is_the_target_seeded",
    "residual_against_scaled_q_own_stream": "dense_q_seeded",
    "uniform_rounded_to_float32": "float32_boundaries",
    "exponential_floor": "float32_boundaries",
    "placeholder_read_as_zero": "placeholders",
    "placeholder_read_as_last": "placeholders",
    "placeholder_accepted": "placeholders",
    **{name: "trees" for name in ("tree_residual_not_updated", "tree_parent_proposal", "tree_siblings_reversed",
                                  "tree_wrong_child", "tree_final_from_wrong_residual", "tree_last_sibling_skipped",
                                  "tree_greedy_highest_index_tie")},
}

SAMPLERS = sorted(name for name, m in MUTANTS.items() if m.kind == "sampler")


@pytest.mark.parametrize("name", SAMPLERS)
def test_sampler_mutant_differs_from_the_correct_backend_on_its_witness_input(name):
    """The mutant is really buggy: its witness input separates it from CpuBackend."""
    scenario = SCENARIOS[WITNESS[name]]
    own_stream = MUTANTS[name].build().capabilities.seeded_stream == "own"
    correct = _result(lambda: scenario(OwnStreamCpuBackend() if own_stream else CpuBackend()))
    mutant = _result(lambda: scenario(MUTANTS[name].build()))
    assert mutant != correct, f"{name} behaves like the correct backend on scenario {WITNESS[name]!r}"


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_correct_backend_matches_the_reference_on_every_witness_input(scenario):
    """A witness only proves a bug if the correct backend is right there: it must equal the reference
    (or raise the same error)."""
    class Reference:
        def __call__(self, batch, **kwargs):
            return reference.sample(batch, **kwargs)

    assert _result(lambda: SCENARIOS[scenario](CpuBackend())) == _result(lambda: SCENARIOS[scenario](Reference()))


def test_every_registered_mutant_has_a_witness_and_a_well_formed_entry():
    """No mutant enters the zoo without an input that shows its bug, a seed and known check names."""
    assert set(SAMPLERS) == set(WITNESS)
    for name, m in MUTANTS.items():
        assert m.name == name and m.seed in {"000", "001", "002", "003", "004", "public", "classic"}
        assert m.expected_checks and set(m.expected_checks) <= CHECK_NAMES
        if m.kind == "sampler":
            backend = m.build()
            assert backend.name == name and backend.__doc__ and "\n\n" not in backend.__doc__.strip()


def test_alignment_mutant_misaligns_when_a_zero_draft_request_precedes_and_only_then():
    """SPEC 4.8's example separates it from reference.align_draft_probs; without a preceding zero-draft
    request it agrees, which is what made the real bug hard to see."""
    mutant = MUTANTS["alignment_skipping_nothing"]
    assert mutant.kind == "alignment"
    align = mutant.build()
    cache = torch.arange(3 * 2 * 4, dtype=torch.float32).reshape(3, 2, 4)
    ids = ["a", "b", "c"]
    bad = torch.tensor([2, 0, 1])
    assert not torch.equal(align(cache, ids, ids, bad), reference.align_draft_probs(cache, ids, ids, bad))
    fine = torch.tensor([2, 1, 0])
    assert torch.equal(align(cache, ids, ids, fine), reference.align_draft_probs(cache, ids, ids, fine))


def test_stale_draft_probs_mutant_is_right_on_its_first_call():
    """The stale-state bug is invisible to a single call; only repeated calls expose it."""
    batch, noise = _dense()
    assert _result(lambda: MUTANTS["stale_draft_probs"].build()(batch, noise=noise)) == \
        _result(lambda: CpuBackend()(batch, noise=noise))
