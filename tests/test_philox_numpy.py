"""reference.philox's fast numpy path equals its torch definition bit for bit.

The seeded stream is computed by ``philox4x32_numpy`` (uint64 products); ``philox4x32`` (int64 with
16-bit halves) is the readable definition that the Random123 known answers pin. These tests hold the
two equal on many random counters and keys, and the stream equal to the definition's stream.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reference import Noise, philox

# Random123 tests/kat_vectors, "philox4x32 10": counter (4 words), key (2 words), output (as in test_reference).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def _as_numpy(t: torch.Tensor) -> np.ndarray:
    return t.numpy().astype(np.uint64)


@pytest.mark.parametrize("counter, key, expected", KAT, ids=["zeros", "ones", "pi"])
def test_numpy_philox_matches_random123_known_answers(counter, key, expected):
    got = philox.philox4x32_numpy(*(np.array([w], dtype=np.uint64) for w in counter + key))
    assert tuple(int(w[0]) for w in got) == expected


@pytest.mark.parametrize("rounds", [1, 2, 7, 10])
def test_numpy_philox_equals_the_torch_definition_on_random_counters_and_keys(rounds):
    """All four output words, 200,000 random (counter, key) pairs, uint32 extremes included."""
    g = torch.Generator().manual_seed(rounds)
    words = [torch.randint(0, 2**32, (200_000,), generator=g, dtype=torch.int64) for _ in range(6)]
    for w in words:
        w[:4] = torch.tensor([0, 1, 2**32 - 1, 2**31])
    want = philox.philox4x32(*words, rounds=rounds)
    got = philox.philox4x32_numpy(*(_as_numpy(w) for w in words), rounds=rounds)
    for a, b in zip(want, got):
        assert np.array_equal(a.numpy().astype(np.uint64), b)


def test_numpy_philox_broadcasts_a_key_per_row_over_a_counter_per_column():
    """The stream's layout: keys [R, 1], counter word 0 [1, N], constant words; same as elementwise."""
    g = torch.Generator().manual_seed(11)
    k0, k1 = (torch.randint(0, 2**32, (7, 1), generator=g, dtype=torch.int64) for _ in range(2))
    index = torch.arange(300, dtype=torch.int64)[None, :]
    got = philox.philox4x32_numpy(_as_numpy(index), 1, 0, 0, _as_numpy(k0), _as_numpy(k1))
    full = lambda t: t.expand(7, 300).contiguous()  # noqa: E731
    zero = torch.zeros(7, 300, dtype=torch.int64)
    want = philox.philox4x32(full(index), zero + 1, zero, zero, full(k0), full(k1))
    for a, b in zip(want, got):
        assert np.array_equal(a.numpy().astype(np.uint64), b)


def _definition_stream(seeds: torch.Tensor, index: torch.Tensor, stream: int) -> torch.Tensor:
    k0, k1 = seeds & philox.MASK32, (seeds >> 32) & philox.MASK32
    zero = torch.zeros_like(index)
    bits, _, _, _ = philox.philox4x32(index & philox.MASK32, zero + stream, zero, zero, k0, k1)
    return philox.bits_to_uniform(bits)


@pytest.mark.parametrize("V", [1, 37, 20_000])
def test_seeded_noise_equals_the_stream_of_the_definition(V, monkeypatch):
    """Uniform and exponential streams bit for bit, with seeds that use both key words, blocks that do
    not divide the vocabulary (a small block forces many of them), and zero-draft requests."""
    monkeypatch.setattr(philox, "STREAM_BLOCK", 4096 + 3)
    seeds = torch.tensor([0, 1, -1, 2**32 + 7, 2**62, -(2**40) - 3, 123456789], dtype=torch.int64)
    k = torch.tensor([3, 0, 5, 1, 2, 4, 0], dtype=torch.int64)
    got = Noise.from_seeds(seeds, k, V)
    req = torch.repeat_interleave(torch.arange(len(k)), k)
    pos = torch.cat([torch.arange(int(n)) for n in k])
    want_u = _definition_stream(seeds[req], pos, philox.STREAM_UNIFORM)
    vocab = torch.arange(V, dtype=torch.int64).expand(len(k), V)
    want_e = -torch.log(_definition_stream(seeds[:, None].expand(len(k), V), vocab, philox.STREAM_EXPONENTIAL))
    assert torch.equal(got.uniform.view(torch.int32), want_u.view(torch.int32))
    assert torch.equal(got.exponential.view(torch.int32), want_e.view(torch.int32))


def test_the_stream_is_plain_tensors_and_the_noise_wraps_them():
    """philox knows nothing of Noise; Noise.from_seeds wraps the pair."""
    seeds, k = torch.tensor([4, 2**33 + 1], dtype=torch.int64), torch.tensor([2, 0], dtype=torch.int64)
    uniform, exponential = philox.seeded_stream(seeds, k, 9)
    assert type(uniform) is torch.Tensor and type(exponential) is torch.Tensor
    noise = Noise.from_seeds(seeds, k, 9)
    assert isinstance(noise, Noise)
    assert torch.equal(noise.uniform, uniform) and torch.equal(noise.exponential, exponential)
