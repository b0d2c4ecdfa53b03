"""The boundary case places noise where float32 precision bugs live (SPEC 2): the property the two
boundary mutants are caught by must really be in its examples."""

import torch

from reference import Noise
from specverify.checks.agreement import BOUNDARY_EXPONENTIALS, at_boundaries
from specverify.generate import random_batch
from specverify.strategies import Example


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
