"""The vectorized CPU backend agrees exactly with the float64 reference.

Inputs are continuous random logits and noise on the 23-bit grid, so a float32-vs-float64 ambiguous
decision (|u q - p| or a race margin within a few ulps) has probability ~1e-6 per decision: over the few
thousand decisions here, exact equality is the right assertion, not a loosened one.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import reference
from reference import Noise, SpecBatch
from specverify import UnsupportedError, get_backend
from specverify.generate import DRAFTERS, random_batch

CPU = get_backend("cpu")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def assert_same(batch: SpecBatch, **kwargs) -> None:
    want, got = reference.sample(batch, **kwargs), CPU(batch, **kwargs)
    assert got.token_ids.dtype == torch.int64 and got.num_accepted.dtype == torch.int64
    assert torch.equal(got.token_ids, want.token_ids), f"token_ids\nreference {want.token_ids}\ncpu {got.token_ids}"
    assert torch.equal(got.num_accepted, want.num_accepted)


def _batches(drafter: str, dtype: torch.dtype, seed: int):
    """Vocabularies from 1 (every draft forced) to a few hundred (not a multiple of any block)."""
    for V in (1, 2, 5, 37, 300):
        g = torch.Generator().manual_seed(seed * 1000 + V)
        yield random_batch(g, num_requests=10, vocab_size=V, max_draft=4, logit_dtype=dtype, drafter=drafter), g


@pytest.mark.parametrize("drafter, dtype", list(itertools.product(DRAFTERS, DTYPES)),
                         ids=lambda v: str(v).replace("torch.", ""))
def test_standard_rule_matches_reference_exactly_under_injected_noise_and_seeds(drafter, dtype):
    """Every drafter (dense q, one-hot None, q = p, q disjoint from p), every logit dtype, mixed greedy
    and random requests, zero-draft requests wherever random_batch puts them."""
    for batch, g in _batches(drafter, dtype, seed=1):
        for _ in range(2):
            assert_same(batch, noise=Noise.draw(batch, g))
        assert_same(batch, seed=int(torch.randint(0, 2 ** 40, (1,), generator=g)))


@pytest.mark.parametrize("rate, steps", [(0.0, 4), (0.3, 4), (0.8, 6), (1.0, 4)])
def test_synthetic_rule_matches_reference_exactly_under_injected_noise_and_seeds(rate, steps):
    """Synthetic acceptance compares u with the same float32 c_j; greedy requests stop at argmax."""
    for dtype in DTYPES:
        for batch, g in _batches("dense", dtype, seed=2):
            kwargs = dict(method="synthetic", synthetic_acceptance_rate=rate, num_speculative_steps=steps)
            assert_same(batch, noise=Noise.draw(batch, g), **kwargs)
            assert_same(batch, seed=7, **kwargs)


@pytest.mark.parametrize("counts", [[0, 3, 2], [3, 0, 2], [3, 2, 0], [0, 0, 0], [0]],
                         ids=["start", "middle", "end", "all-zero", "single-zero"])
def test_zero_draft_placements_match_reference(counts):
    """A zero-draft request must not shift its neighbours' rows, drafts or noise."""
    g = torch.Generator().manual_seed(3)
    k = torch.tensor(counts)
    T, B, V = int(k.sum()), len(counts), 11
    q = torch.softmax(torch.randn(T, V, generator=g) * 2, dim=-1)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1) if T else torch.zeros(0, dtype=torch.int64)
    for temperature in (torch.full((B,), 0.7), torch.zeros(B)):
        batch = SpecBatch(k, drafts, torch.randn(T + B, V, generator=g) * 2, q, temperature)
        assert_same(batch, noise=Noise.draw(batch, g))
        assert_same(batch, seed=5)


def test_empty_batch_gives_empty_outputs():
    """B = 0: token_ids [0, 1] and num_accepted [0], no indexing error on empty tensors."""
    batch = SpecBatch(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), torch.zeros(0, 9),
                      None, torch.zeros(0))
    out = CPU(batch, seed=0)
    assert tuple(out.token_ids.shape) == (0, 1) and tuple(out.num_accepted.shape) == (0,)


def test_greedy_ties_resolve_to_the_lowest_index_like_the_reference():
    """Integer-valued logits tie often; the argmax must pick the first maximum, in draft and bonus rows."""
    g = torch.Generator().manual_seed(4)
    B, K, V = 12, 3, 6
    k = torch.full((B,), K)
    logits = torch.randint(0, 3, (B * (K + 1), V), generator=g).float()
    drafts = logits.view(B, K + 1, V)[:, :K].argmax(dim=2).flatten()  # accept where the tie is resolved low
    drafts[::4] = torch.randint(0, V, (drafts[::4].shape[0],), generator=g)
    batch = SpecBatch(k, drafts, logits, None, torch.zeros(B))
    assert_same(batch, seed=0)
    assert int(CPU(batch, seed=0).num_accepted.sum()) > 0  # the case exercises accepted ties


def test_tokens_outside_the_support_are_never_accepted_and_huge_logit_gaps_do_not_overflow():
    """-inf logits give p(x) = 0 (rejected whatever u), and a logit gap of 1e4 / t overflows exp to inf,
    which must read as p(x) = 0, not NaN."""
    g = torch.Generator().manual_seed(5)
    B, K, V = 8, 2, 9
    logits = torch.randn(B * (K + 1), V, generator=g)
    logits[:, :3] = float("-inf")
    logits[::3, 5] = 1e4
    drafts = torch.randint(0, V, (B * K,), generator=g)
    batch = SpecBatch(torch.full((B,), K), drafts, logits, None, torch.full((B,), 0.5))
    for _ in range(3):
        assert_same(batch, noise=Noise.draw(batch, g))
    out = CPU(batch, seed=1)
    assert not bool(((out.token_ids >= 0) & (out.token_ids < 3)).any())


def test_float64_draft_probs_and_temperature_are_accepted_and_agree():
    """The reference accepts float64 q and temperature; the backend computes in float32 and still agrees."""
    g = torch.Generator().manual_seed(6)
    b = random_batch(g, num_requests=10, vocab_size=23)
    batch = SpecBatch(b.num_draft_tokens, b.draft_token_ids, b.target_logits, b.draft_probs.double(),
                      b.temperature.double())
    assert_same(batch, noise=Noise.draw(batch, g))


def test_every_output_element_is_written_under_poisoned_allocations():
    """With torch filling uninitialised memory (NaN / max int), results still equal the reference:
    every output slot is written and nothing reads unwritten scratch."""
    was_det, was_fill = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        g = torch.Generator().manual_seed(7)
        for drafter in ("dense", "none"):
            batch = random_batch(g, num_requests=16, vocab_size=50, drafter=drafter)
            assert_same(batch, noise=Noise.draw(batch, g))
            assert_same(batch, method="synthetic", synthetic_acceptance_rate=0.5, num_speculative_steps=4, seed=3)
    finally:
        torch.use_deterministic_algorithms(was_det)
        torch.utils.deterministic.fill_uninitialized_memory = was_fill


def test_large_vocabulary_uses_several_row_tiles_and_still_agrees():
    """V = 70,000 makes the p(x) pass run over several row tiles; tile boundaries must not matter."""
    g = torch.Generator().manual_seed(8)
    batch = random_batch(g, num_requests=6, vocab_size=70_000, max_draft=4, zero_draft_fraction=0.0,
                         greedy_fraction=0.2)
    assert_same(batch, noise=Noise.draw(batch, g))


def test_registry_returns_the_cpu_backend_with_its_capabilities():
    """get_backend("cpu") is this backend: name, all three dtypes, both noise paths, philox stream."""
    assert CPU.name == "cpu"
    caps = CPU.capabilities
    assert set(caps.logit_dtypes) == set(DTYPES) and caps.seeded_stream == "philox"
    assert {"injected", "seeded"} <= set(caps.noise) and {"standard", "synthetic"} <= set(caps.methods)


def test_unsupported_dtype_raises_the_documented_error():
    """float64 logits are reference-only: the backend says so by name instead of silently casting."""
    batch = SpecBatch(torch.tensor([1]), torch.tensor([0]), torch.zeros(2, 3, dtype=torch.float64), None,
                      torch.ones(1))
    with pytest.raises(UnsupportedError, match="cpu"):
        CPU(batch, seed=0)


def test_invalid_settings_raise_value_error_like_the_reference():
    """The backend goes through the shared validation: an unset synthetic rate never defaults to 0."""
    batch = random_batch(torch.Generator().manual_seed(9), num_requests=3, vocab_size=5)
    with pytest.raises(ValueError, match="synthetic_acceptance_rate"):
        CPU(batch, method="synthetic", num_speculative_steps=4, seed=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_tensors_match_reference():
    """Pure torch: the same pipeline runs on CUDA tensors and agrees with the reference."""
    g = torch.Generator().manual_seed(10)
    batch = random_batch(g, num_requests=16, vocab_size=1000)
    noise = Noise.draw(batch, g)
    want = reference.sample(batch, noise=noise)
    got = CPU(batch.to("cuda"), noise=Noise(noise.uniform.cuda(), noise.exponential.cuda()))
    assert torch.equal(got.token_ids.cpu(), want.token_ids)


@pytest.mark.parametrize("V", [513, 768, 1000, 4097, 32_000])
def test_chunked_argmax_picks_the_lowest_index_maximum_like_torch_max(V):
    """first_argmax (the CPU race's argmax: amax over 256-entry chunks, then one chunk) must agree with
    torch.max's first-index rule. Values come from a few levels, so most rows hold the maximum several
    times: in one chunk, in several chunks, on both sides of a chunk boundary and in the partial last
    chunk (V not a multiple of 256); rows of -inf with one finite entry, and a row that is all equal."""
    from specverify.kernels.cpu import first_argmax
    g = torch.Generator().manual_seed(V)
    scores = torch.randint(0, 6, (64, V), generator=g).float()
    scores[0] = 1.0
    scores[1] = float("-inf")
    scores[1, V - 1] = 0.0
    scores[2, :] = 0.0
    scores[2, [255, 256, V - 1]] = 7.0                      # ties across a chunk boundary and the tail
    scores[3, :] = float("-inf")
    scores[3, [V - 2, V - 1]] = -1.0                        # maximum only in the last (partial) chunk
    want = scores.max(dim=1).indices
    assert torch.equal(first_argmax(scores), want)
    assert torch.equal(first_argmax(scores[:, :V]), want)   # strided rows: a view of a wider tensor
    wide = torch.cat([scores, torch.zeros(64, 3)], dim=1)[:, :V]
    assert torch.equal(first_argmax(wide), want)


@pytest.mark.parametrize("name", ["reference", "cpu"])
@pytest.mark.parametrize("field, value, message", [
    ("draft_token_ids", 99, "draft_token_ids must lie in"),
    ("num_draft_tokens", -1, "num_draft_tokens must be >= 0"),
    ("temperature", float("nan"), "temperature contains NaN"),
])
def test_batch_changed_after_construction_gets_the_same_named_value_error(name, field, value, message):
    """A tensor changed in place after the batch was built is caught at call time, with the error the
    reference raises, not an IndexError from inside a kernel."""
    g = torch.Generator().manual_seed(0)
    batch = SpecBatch(torch.tensor([2, 1]), torch.tensor([1, 3, 0]), torch.randn(5, 7, generator=g), None,
                      torch.tensor([0.7, 1.0]))
    getattr(batch, field)[0] = value
    with pytest.raises(ValueError, match=message):
        get_backend(name)(batch, seed=torch.tensor([1, 2]))

