"""Properties of the reference's inputs (issue 2): batches and calls it refuses, naming the field or setting;
request alignment across steps; the Philox port against Random123's known answers and its seeded noise.
The sampling properties are tests/test_reference.py's.
"""

from __future__ import annotations

import pytest
import torch

import reference
from reference import Noise, SpecBatch, philox
from reference.alignment import align_draft_probs


# ---- validation -----------------------------------------------------------------------------------------
def _fields(**overrides) -> dict:
    V = 4
    base = dict(num_draft_tokens=torch.tensor([2, 0, 1]), draft_token_ids=torch.tensor([1, 3, 0]),
                target_logits=torch.zeros(6, V), draft_probs=torch.full((3, V), 0.25), temperature=torch.ones(3))
    base.update(overrides)
    return base


def _bf16_probs():
    return torch.full((3, 4), 0.25, dtype=torch.bfloat16)


BAD_BATCHES = {
    "logit row count": (dict(target_logits=torch.zeros(5, 4)), "target_logits"),
    "draft id count": (dict(draft_token_ids=torch.tensor([1, 3])), "draft_token_ids"),
    "temperature shape": (dict(temperature=torch.ones(2)), "temperature"),
    "draft_probs shape": (dict(draft_probs=torch.full((3, 5), 0.2)), "draft_probs"),
    "negative draft count": (dict(num_draft_tokens=torch.tensor([2, -1, 2])), "num_draft_tokens"),
    "draft id below the placeholder": (dict(draft_token_ids=torch.tensor([1, -2, 0])), "draft_token_ids"),
    "draft id equal to V": (dict(draft_token_ids=torch.tensor([1, 4, 0])), "draft_token_ids"),
    "NaN logits": (dict(target_logits=torch.zeros(6, 4).index_fill_(1, torch.tensor([2]), float("nan"))),
                   "target_logits"),
    "NaN draft probs": (dict(draft_probs=torch.full((3, 4), 0.25).index_fill_(0, torch.tensor([1]), float("nan"))),
                        "draft_probs"),
    "negative temperature": (dict(temperature=torch.tensor([1.0, -0.5, 1.0])), "temperature"),
    "negative draft prob": (dict(draft_probs=torch.tensor([[0.5, 0.5, 0.5, -0.5]] * 3)), "draft_probs"),
    "draft probs not summing to 1": (dict(draft_probs=torch.full((3, 4), 0.3)), "draft_probs"),
    "bf16 draft probs": (dict(draft_probs=_bf16_probs()), "draft_probs"),
    "negative top_k": (dict(top_k=torch.tensor([1, -1, 0])), "top_k"),
    "top_k shape": (dict(top_k=torch.tensor([1, 1])), "top_k"),
    "top_p of 0": (dict(top_p=torch.tensor([0.5, 0.0, 1.0])), "top_p"),
    "top_p above 1": (dict(top_p=torch.tensor([0.5, 1.5, 1.0])), "top_p"),
    "NaN top_p": (dict(top_p=torch.tensor([0.5, float("nan"), 1.0])), "top_p"),
    "min_p of 1": (dict(min_p=torch.tensor([0.0, 1.0, 0.2])), "min_p"),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_bad_batch_raises_value_error_naming_the_field(case):
    """Every malformed field is a ValueError whose message names it; nothing is clipped."""
    overrides, field = BAD_BATCHES[case]
    with pytest.raises(ValueError, match=field):
        SpecBatch(**_fields(**overrides))


def test_valid_batch_fixture_is_accepted():
    """The base of the bad-input cases is itself valid, so each failure above comes from its one change."""
    out = reference.sample(SpecBatch(**_fields()), seed=0)
    assert out.token_ids.shape == (3, 3)


def _noise(uniform=None, exponential=None) -> Noise:
    return Noise(torch.full((3,), 0.5) if uniform is None else uniform,
                 torch.ones(3, 4) if exponential is None else exponential)


BAD_CALLS = {
    "uniform 0": (dict(noise=_noise(uniform=torch.tensor([0.5, 0.0, 0.5]))), "noise.uniform"),
    "uniform 1": (dict(noise=_noise(uniform=torch.tensor([0.5, 1.0, 0.5]))), "noise.uniform"),
    "uniform shape": (dict(noise=_noise(uniform=torch.full((2,), 0.5))), "noise.uniform"),
    "exponential 0": (dict(noise=_noise(exponential=torch.ones(3, 4).index_fill_(1, torch.tensor([0]), 0.0))),
                      "noise.exponential"),
    "exponential shape": (dict(noise=_noise(exponential=torch.ones(3, 5))), "noise.exponential"),
    "noise and seed": (dict(noise=_noise(), seed=1), "noise or seed"),
    "unknown method": (dict(method="typical", seed=1), "method"),
    "synthetic rate unset": (dict(method="synthetic", num_speculative_steps=2, seed=1), "synthetic_acceptance_rate"),
    "synthetic rate negative": (dict(method="synthetic", synthetic_acceptance_rate=-0.1, num_speculative_steps=2,
                                     seed=1), "synthetic_acceptance_rate"),
    "synthetic rate above 1": (dict(method="synthetic", synthetic_acceptance_rate=1.5, num_speculative_steps=2,
                                    seed=1), "synthetic_acceptance_rate"),
    "synthetic steps unset": (dict(method="synthetic", synthetic_acceptance_rate=0.5, seed=1),
                              "num_speculative_steps"),
    "synthetic steps below drafts": (dict(method="synthetic", synthetic_acceptance_rate=0.5, num_speculative_steps=1,
                                          seed=1), "num_speculative_steps"),
    "rate with standard method": (dict(synthetic_acceptance_rate=0.5, seed=1), "synthetic_acceptance_rate"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_call_raises_value_error_naming_the_setting(case):
    """Bad noise and bad settings are ValueErrors naming the setting; the synthetic rate never defaults."""
    kwargs, field = BAD_CALLS[case]
    with pytest.raises(ValueError, match=field):
        reference.sample(SpecBatch(**_fields()), **kwargs)


# ---- request alignment ----------------------------------------------------------------------------------
def _cache():
    return torch.arange(3 * 2 * 4, dtype=torch.float32).reshape(3, 2, 4)  # [R=3, K=2, V=4]: rows a, b, c


def test_alignment_skips_zero_draft_requests():
    """SPEC 4.8's example: cached [a, b, c], drafts [2, 0, 1] -> [a[:2], c[:1]]."""
    cache = _cache()
    got = align_draft_probs(cache, ["a", "b", "c"], ["a", "b", "c"], torch.tensor([2, 0, 1]))
    assert torch.equal(got, torch.cat([cache[0, :2], cache[2, :1]]))


def test_alignment_follows_the_current_batch_order():
    """The current batch may be in any order; rows follow it, not the cache's order."""
    cache = _cache()
    got = align_draft_probs(cache, ["a", "b", "c"], ["c", "a"], torch.tensor([1, 2]))
    assert torch.equal(got, torch.cat([cache[2, :1], cache[0, :2]]))


def test_alignment_missing_request_raises_value_error_naming_it():
    """A request with drafts but no cached row is an explicit error, never a silent shift."""
    with pytest.raises(ValueError, match="'d'"):
        align_draft_probs(_cache(), ["a", "b", "c"], ["a", "d"], torch.tensor([1, 1]))


def test_alignment_tolerates_a_missing_request_without_drafts():
    """A zero-draft request needs no cached row at all."""
    cache = _cache()
    got = align_draft_probs(cache, ["a", "b", "c"], ["zz", "b"], torch.tensor([0, 2]))
    assert torch.equal(got, cache[1, :2])


# ---- Philox ---------------------------------------------------------------------------------------------
# Random123 tests/kat_vectors, the three "philox4x32 10" lines: counter (4 words), key (2 words), output.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter, key, expected", KAT, ids=["zeros", "ones", "pi"])
def test_philox_port_matches_random123_known_answers(counter, key, expected):
    """The seeded stream is only reproducible if the port is Philox4x32-10 bit for bit."""
    t = [torch.tensor([w], dtype=torch.int64) for w in counter + key]
    got = tuple(int(w) for w in philox.philox4x32(*t))
    assert got == expected


def test_philox_uniform_stays_in_the_open_interval_at_the_extreme_bits():
    """bits 0 and 2**32 - 1 map to 2**-24 and 1 - 2**-24: never 0 (log(0)) and never 1."""
    u = philox.bits_to_uniform(torch.tensor([0, 0xFFFFFFFF], dtype=torch.int64))
    assert u.tolist() == [2.0 ** -24, 1 - 2.0 ** -24]


def test_seeded_noise_of_a_request_does_not_depend_on_the_batch():
    """A request's noise is keyed by its own seed and positions: the same in any batch around it."""
    both = Noise.from_seeds(torch.tensor([5, 9]), torch.tensor([2, 3]), 6)
    alone = Noise.from_seeds(torch.tensor([9]), torch.tensor([3]), 6)
    assert torch.equal(both.uniform[2:], alone.uniform) and torch.equal(both.exponential[1:], alone.exponential)
    assert not torch.equal(both.uniform[:2], alone.uniform[:2])
