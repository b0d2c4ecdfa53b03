"""The count bracket's round from the whole sample (specverify/kernels/triton_sample.py, ``whole_counts``), called
from a test kernel: each sample entry's first grid point found from the grid's inverse and moved by the grid's own
compare, a histogram of those and its running sum must give, at each point of the drop grid, the count that the
shared tally's compare of every entry with every point gives (``triton_sample.sample_run``'s). The kernel runs on
the device the other filter tests run on (the interpreter without CUDA).
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from filter_settings import DEVICES
from specverify.kernels.triton_sample import drop_grid, whole_counts, whole_ends


@triton.jit
def _counts(x_ptr, got_ptr, want_ptr, cand_ptr, NS: tl.constexpr, NG: tl.constexpr):
    """got [NG]: ``whole_counts`` of the NS entries at x_ptr (their max at got[NG]); want [NG]: every entry compared
    with every point, as the tally compares them; cand [NG]: the points."""
    x = tl.load(x_ptr + tl.arange(0, NS))
    o, cnt = whole_counts(x, NG)
    tl.store(got_ptr + tl.arange(0, NG), cnt)
    tl.store(got_ptr + NG, o)
    cand = tl.max(x, axis=0) - drop_grid(NG)
    tl.store(cand_ptr + tl.arange(0, NG), cand)
    tl.store(want_ptr + tl.arange(0, NG), tl.sum((x[None, :] >= cand[:, None]).to(tl.float32), axis=1))


def _run(x, ng, device):
    """(got, want, the grid's points) of ``_counts`` on x, on the CPU."""
    got = torch.empty(ng + 1, device=device)
    want = torch.empty(ng, device=device)
    cand = torch.empty(ng, device=device)
    _counts[(1,)](x.to(device), got, want, cand, NS=x.numel(), NG=ng)
    return got.cpu(), want.cpu(), cand.cpu()


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
    got, want, _ = _run(x, ng, device)
    assert torch.equal(got[:ng], want), (got[:ng] - want).nonzero().tolist()
    assert float(got[ng]) == top
    assert float(want[0]) == int((x == top).sum()) >= 3 and float(want[-1]) == ns - 39


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ns, ng", [(512, 16), (2048, 64)])
def test_whole_sample_counts_hold_entries_on_and_beside_each_grid_point(device, ns, ng):
    """An entry found from the grid's inverse can round across a point: the entries here lie exactly on every point
    (as the kernel computes them), one float32 step above and one below, where the inverse's rounding errs; the
    counts must still be the compare's at every point."""
    gen = torch.Generator().manual_seed(ns)
    x = torch.randn(ns, generator=gen) * 3.0
    _, _, cand = _run(x, ng, device)
    points = cand[1:]       # the max's own point is the max
    beside = torch.cat([points, torch.nextafter(points, points + 1), torch.nextafter(points, points - 1)])
    x[1:1 + beside.numel()] = beside
    x[0] = cand[0]
    got, want, again = _run(x, ng, device)
    assert torch.equal(again, cand)
    assert torch.equal(got[:ng], want), (got[:ng] - want).nonzero().tolist()
    # each point counts the entries on it and the one above, not the one below
    steps = want[1:] - want[:-1]
    assert bool((steps >= 2).all()), steps.tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_whole_sample_counts_are_zero_where_the_sample_has_no_finite_max(device):
    """A row whose sample is -inf throughout (not a count row, or past its drafts) or holds +inf has no count
    bracket from it: its counts are zeros and its max says why, so that the bracket takes the shared round."""
    for top in (float("-inf"), float("inf")):
        x = torch.full((256,), float("-inf"))
        x[7] = top
        got, _, _ = _run(x, 16, device)
        assert float(got[16]) == top and not bool(got[:16].any()), got.tolist()


@triton.jit
def _ends(x_ptr, r_ptr, got_ptr, NS: tl.constexpr, NG: tl.constexpr, NR: tl.constexpr):
    """got [NR, 2]: ``whole_ends``' (j_lo, j_hi) of the NS entries at x_ptr for each pair of bounds (r_lo, r_hi) at
    r_ptr [NR, 2]."""
    x = tl.load(x_ptr + tl.arange(0, NS))
    for r in tl.static_range(NR):
        _, j_lo, j_hi = whole_ends(x, tl.load(r_ptr + 2 * r), tl.load(r_ptr + 2 * r + 1), NG)
        tl.store(got_ptr + 2 * r, j_lo)
        tl.store(got_ptr + 2 * r + 1, j_hi)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ns, ng", [(512, 16), (2048, 64), (512, 32), (256, 2)])
def test_whole_sample_ends_are_where_the_counts_cross_each_bound(device, ns, ng):
    """The search counts at 4 grid points a step, 2 bits of the answer a step; 32 and 2 points are not powers of 4,
    so that its first step reaches past the grid. Against the counts at every point (``whole_counts``): the first
    point whose count reaches r_lo and the last whose count is at most r_hi, for bounds below every count, equal to
    counts, between them, above every count, and r_hi below 1 (no end, -1). Entries as the counts' test has them,
    with some on grid points and beside them."""
    gen = torch.Generator().manual_seed(ns + ng)
    x = torch.randn(ns, generator=gen) * 3.0
    _, _, cand = _run(x, ng, device)
    x[0] = cand[0]
    x[1:ng] = cand[1:]
    x[ng:2 * ng - 1] = torch.nextafter(cand[1:], cand[1:] - 1)
    x[2 * ng] = float("nan")
    x[2 * ng + 1] = float("-inf")
    x[2 * ng + 2:2 * ng + 9] = float(cand[-1]) - 50.0
    got, want, _ = _run(x, ng, device)
    counts = got[:ng]
    assert torch.equal(counts, want)
    r_lo = torch.cat([torch.tensor([0.5, float(ns)]), counts, counts + 0.5]).unique()
    r_hi = torch.cat([torch.tensor([0.5, -3.0, float(ns)]), counts, counts - 0.5]).unique()
    n = max(r_lo.numel(), r_hi.numel())
    bounds = torch.stack([r_lo[torch.arange(n) % r_lo.numel()], r_hi[torch.arange(n) % r_hi.numel()]], dim=1)
    ends = torch.empty(n, 2, dtype=torch.int32, device=device)
    _ends[(1,)](x.to(device), bounds.to(device).contiguous(), ends, NS=ns, NG=ng, NR=n)
    g = torch.arange(ng)
    want_lo = [int(g[counts >= b].min()) if bool((counts >= b).any()) else ng for b in bounds[:, 0].tolist()]
    want_hi = [int(g[counts <= b].max()) if bool((counts <= b).any()) else -1 for b in bounds[:, 1].tolist()]
    assert ends[:, 0].cpu().tolist() == want_lo, (bounds, ends, want_lo)
    assert ends[:, 1].cpu().tolist() == want_hi, (bounds, ends, want_hi)
    assert ng in want_lo and -1 in want_hi and 0 in want_lo
