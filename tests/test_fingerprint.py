"""The fingerprint the guard checks its large private copies with on a GPU (specverify/kernels/
fingerprint.py): one read of the copy in place of a comparison with the original. It must see every
write a backend can make into an input: one changed word always, a swap or a zeroed row with chance
about 2**-64 of a miss. Without CUDA the kernel runs under the Triton interpreter."""

import os

import pytest
import torch

from specverify.kernels import fingerprint as fp_module
from specverify.kernels.fingerprint import fingerprint


DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1" else "cpu"


def _rows(seed: int = 0) -> torch.Tensor:
    return torch.randn(4, 3_001, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def test_a_change_of_any_one_word_changes_the_fingerprint():
    """Each changed word moves the sum by (its change) x (an odd number), never 0 mod 2**64: the smallest
    change of a float (one ulp), a sign flip and a NaN written in place, at the first, a middle and the
    last word."""
    x = _rows()
    made = fingerprint(x)
    assert torch.equal(fingerprint(x.clone()), made)
    for flat in (0, 6_001, x.numel() - 1):
        for write in (lambda v: torch.nextafter(v, torch.tensor(float("inf"))), lambda v: -v,
                      lambda v: torch.tensor(float("nan"))):
            y = x.clone().reshape(-1)
            y[flat] = write(y[flat].cpu()).to(DEVICE)
            assert not torch.equal(fingerprint(y), made), flat


def test_rows_swapped_or_zeroed_change_the_fingerprint():
    """The weights depend on the word's position, so moving values around is seen, not only changing
    them: two rows swapped, one row zeroed, the whole tensor negated."""
    x = _rows(1)
    made = fingerprint(x)
    swapped, zeroed = x.clone(), x.clone()
    swapped[[0, 3]] = swapped[[3, 0]]
    zeroed[2] = 0.0
    for y in (swapped, zeroed, -x):
        assert not torch.equal(fingerprint(y), made)


def test_the_fingerprint_does_not_depend_on_the_launch_plan(monkeypatch):
    """Integer sums wrap, so any tile and program plan gives the same value (the copy and the check
    after the call are one value whatever the kernel's tiles)."""
    x = _rows(2)
    made = fingerprint(x)
    monkeypatch.setattr(fp_module, "BLOCK", 64)
    monkeypatch.setattr(fp_module, "TILES", 3)
    assert torch.equal(fingerprint(x), made)


def test_a_tensor_without_whole_words_has_no_fingerprint():
    """Half-precision tensors with an odd count of entries, and strided views, are not one block of
    32-bit words: None, and the guard compares them with the original instead."""
    assert fingerprint(torch.zeros(5, 7, dtype=torch.bfloat16, device=DEVICE)) is None
    assert fingerprint(torch.zeros(6, 8, device=DEVICE)[:, ::2]) is None
    assert fingerprint(torch.zeros(4, 6, dtype=torch.float16, device=DEVICE)) is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_equal_bits_give_equal_fingerprints(dtype):
    x = _rows(3).to(dtype)
    assert torch.equal(fingerprint(x), fingerprint(x.clone()))
