"""The count bracket's round from the whole sample (specverify/kernels/triton_bracket.py, ``_whole_counts``), called
from a test kernel: each sample entry's first grid point found by a binary search, a histogram of those and its
running sum must give, at each point of the drop grid, the count that the shared tally's compare of every entry with
every point gives (``triton_sample.sample_run``'s). The kernel runs on the device the other filter tests run on (the
interpreter without CUDA).
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from filter_settings import DEVICES
from specverify.kernels.triton_bracket import _whole_counts
from specverify.kernels.triton_sample import drop_grid


@triton.jit
def _counts(x_ptr, got_ptr, want_ptr, NS: tl.constexpr, NG: tl.constexpr):
    """got [NG]: ``_whole_counts`` of the NS entries at x_ptr from their max; want [NG]: every entry compared with
    every point, as the tally compares them."""
    x = tl.load(x_ptr + tl.arange(0, NS))
    o = tl.max(x, axis=0)
    tl.store(got_ptr + tl.arange(0, NG), _whole_counts(x, o, NG))
    cand = o - drop_grid(NG)
    tl.store(want_ptr + tl.arange(0, NG), tl.sum((x[None, :] >= cand[:, None]).to(tl.float32), axis=1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ns, ng", [(512, 16), (2048, 64)])
def test_whole_sample_counts_are_the_tallys_at_every_grid_point(device, ns, ng):
    """Entries of N(0, 9), the max repeated (its first point is the grid's first, which a search that starts its
    steps at half the grid never reaches), entries deeper than the whole grid (no first point: counted nowhere), -inf
    and NaN (never at or above a point, as the tally's compare is false): the counts must be the tally's at every
    point, and cover the grid's whole range (the first point's count is the max's copies, the last below the
    entries)."""
    gen = torch.Generator().manual_seed(ng)
    x = torch.randn(ns, generator=gen) * 3.0
    top = float(x.max())
    x[:3] = top
    x[3:40] = top - 500.0
    x[40] = float("-inf")
    x[41] = float("nan")
    got = torch.empty(ng, device=device)
    want = torch.empty(ng, device=device)
    _counts[(1,)](x.to(device), got, want, NS=ns, NG=ng)
    assert torch.equal(got.cpu(), want.cpu()), (got.cpu() - want.cpu()).nonzero().tolist()
    assert float(want[0]) == int((x == top).sum()) >= 3 and float(want[-1]) == ns - 39
