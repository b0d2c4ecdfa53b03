"""The one launch's brackets (specverify/kernels/triton_bracket.py): its splits tally the sample bracket's rounds
between them or each from the whole sample, by count (top-k) in one round or two, by mass (top-p) from the sample's
cells. Each form must leave the records of the shared rounds, and its brackets must end where their definitions put
them, computed here from the sample on the CPU.

Without CUDA the kernels run under the Triton interpreter; the parameter id says which device ran.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from filter_settings import DEVICES, three_launches_from_nine_rows  # noqa: F401
from one_launch_cuts import bracketed_rows, cut_and_partials, cut_before_and_after, last_brackets, sample_of, \
    take_over, top_p_rows, variant
from reference import SpecBatch
from specverify.kernels import triton_filter
from specverify.kernels.triton_cut import DROP, KMAX, KMIN
from specverify.kernels.triton_sample import MASS_SPAN


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spin, share_tile", [
    pytest.param(None, None, id="spin"), variant(None, 8, id="spin-narrow-tiles"),
    take_over(None)])
def test_splits_sharing_the_sample_tally_find_the_brackets_of_one_program(device, spin, share_tile, monkeypatch):
    """With ONE_LAUNCH_SHARED the one launch's splits tally the sample bracket's two rounds between them, each the
    sample's tiles split, split + SF, ..., and every split sums the row's shares after a handoff
    (``triton_bracket._tally``). The brackets must be those of every split tallying the whole sample alone, on rows
    bracketed by count (top-k) and by mass (top-p alone; on these rows no test of the mass bracket lies within
    rounding of its bound), and so must the records (cut value and index, Z', and how the cut was found: from the
    gathered bracket, or by the slow path where the bracket missed or overflowed). The sample is 16 tiles of 32 over
    the rows' 12 splits, so that every split's share counts, or 64 tiles of 8 (ONE_LAUNCH_SHARE_TILE), so that each
    split tallies five or six, its loads running ahead across the stride; the small capacity sends some rows down
    the slow path. On CUDA, spin 0 makes every split take over whatever share is unpublished at its first look."""
    if spin is not None:
        monkeypatch.setattr(triton_filter, "HANDOFF_SPIN", spin)
    if share_tile is not None:
        monkeypatch.setattr(triton_filter, "ONE_LAUNCH_SHARE_TILE", share_tile)
    batch = bracketed_rows(device, monkeypatch)
    plan = dict(block_v=256)
    shared_launches, shared, _ = cut_and_partials(batch, 0, **plan)
    shared_brackets = last_brackets(8)
    assert shared_launches == [("_cut_kernel", 3, True, True)]
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_SHARED", 0)
    alone_launches, alone, _ = cut_and_partials(batch, 0, **plan)
    assert alone_launches == [("_cut_kernel", 3, True, False)]
    assert torch.equal(shared_brackets, last_brackets(8)), (shared_brackets, last_brackets(8))
    assert torch.equal(shared, alone), (shared != alone).nonzero().tolist()
    # rows found from the gathered bracket (top-k's by count, top-p's alone by mass) and by the slow path
    assert set(alone[5].tolist()) == {1.0, 2.0}, alone[5].tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spin, round_ng", [
    pytest.param(None, 128, id="spin-128"), variant(None, 16, id="spin-16"),
    take_over(128)])
def test_one_round_bracket_leaves_the_records_of_two_rounds(device, spin, round_ng, monkeypatch):
    """With ONE_LAUNCH_ROUND_NG the one launch's splits tally a bracket by count (top-k's) in one round of that many
    points, whose end cells are the bracket, where two rounds refine the first's cells after a second rendezvous
    (``triton_bracket``'s ROUND_NG). The count brackets then differ from the two rounds', so that the one round is
    what found them, and the mass brackets (top-p alone) stay the two rounds'. The records (cut value and index,
    Z') must be the same either way, on rows bracketed by count and by mass and rows that the small capacity sends
    down the slow path, where a bracket wider than the two rounds' may send one more. 128 points need more room for
    their shares than two rounds of 32 and 16. On CUDA, spin 0 makes every split take over whatever share is
    unpublished at its first look."""
    if spin is not None:
        monkeypatch.setattr(triton_filter, "HANDOFF_SPIN", spin)
    # the two rounds' shares and sums left in the work space read as NaN: a share the one round did not publish
    # must not be summed
    (two, two_brackets), (one, one_brackets), meta = cut_before_and_after(
        bracketed_rows(device, monkeypatch), "ONE_LAUNCH_ROUND_NG", 0, round_ng, monkeypatch)
    assert meta["ROUND_NG"] == round_ng
    assert torch.equal(one[:5], two[:5]), (one[:5] != two[:5]).nonzero().tolist()
    moved = [r for r in range(8) if not torch.equal(one_brackets[r], two_brackets[r])]
    assert set(moved) <= {0, 2, 4, 6} and len(moved) >= 3, (one_brackets, two_brackets)
    # rows found from the gathered bracket and by the slow path, which takes at most one more with one round
    assert set(two[5].tolist()) == set(one[5].tolist()) == {1.0, 2.0}, (one[5], two[5])
    assert int((one[5] != two[5]).sum()) <= 1 and bool((one[5] >= two[5]).all()), (one[5], two[5])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spin, form", [
    variant(None, 1, id="counts"), pytest.param(None, 2, id="ends"),
    take_over(1)])
def test_count_bracket_from_the_whole_sample_leaves_the_records_of_the_shared_round(device, spin, form, monkeypatch):
    """With ONE_LAUNCH_WHOLE_SAMPLE each split loads the row's whole sample after its pass 1 and, once it has
    published its pass-1 partials, counts a count bracket's round (top-k's, alone or with top-p) from it alone, its
    drops from the sample's max rather than the row's (``triton_sample.whole_counts``, or with 2 the bracket's ends
    alone, ``whole_ends``): no share, no rendezvous. The count brackets then move (the drops' origin differs), the
    mass brackets (top-p alone) stay, and the records (cut value and index, Z', how the cut was found) must be the
    shared round's, on rows bracketed by count and by mass and rows that the small capacity sends down the slow path,
    where the other origin may send one more. The shared round's shares left in the work space read as NaN, so that a
    bracket summing shares nobody published fails. On CUDA, spin 0 makes every split take over whatever is
    unpublished at its first look."""
    if spin is not None:
        monkeypatch.setattr(triton_filter, "HANDOFF_SPIN", spin)
    batch = bracketed_rows(device, monkeypatch)
    (shared, shared_brackets), (whole, whole_brackets), meta = cut_before_and_after(
        batch, "ONE_LAUNCH_WHOLE_SAMPLE", 0, form, monkeypatch)
    assert meta["WHOLE"] == form
    assert torch.equal(whole[:5], shared[:5]), (whole[:5] != shared[:5]).nonzero().tolist()
    # a count row whose largest logit is not in the sample has its drops from another origin: its bracket moves
    logits = sample_of(batch.target_logits.cpu())
    elsewhere = {r for r in (0, 2, 4, 6) if bool(logits[r].max() < batch.target_logits[r].max().cpu())}
    moved = {r for r in range(8) if not torch.equal(whole_brackets[r], shared_brackets[r])}
    assert len(elsewhere) >= 2 and elsewhere <= moved <= {0, 2, 4, 6}, (elsewhere, whole_brackets, shared_brackets)
    # and their lower ends lie at a grid drop below the sample's max, not the row's
    grid = DROP.value * (torch.arange(triton_filter.ONE_LAUNCH_ROUND_NG) / (triton_filter.ONE_LAUNCH_ROUND_NG - 1)) ** 2
    for r in elsewhere:
        t = float(batch.temperature[r])
        lo = int(whole_brackets[r, 0])
        at = torch.tensor([lo if lo >= 0 else lo ^ 0x7FFFFFFF], dtype=torch.int32).view(torch.float32).item() / t
        o, m = float(logits[r].max()) / t, float(batch.target_logits[r].max()) / t
        assert float((grid - (o - at)).abs().min()) < 1e-3 < float((grid - (m - at)).abs().min()), (r, o, m, at)
    assert set(shared[5].tolist()) == set(whole[5].tolist()) == {1.0, 2.0}, (whole[5], shared[5])
    assert int((whole[5] != shared[5]).sum()) <= 1, (whole[5], shared[5])


def _count_bracket_by_definition(batch: SpecBatch, r: int, ng: int) -> tuple:
    """(j_lo, j_hi, o, T) of count row r's bracket from its whole sample (ONE_LAUNCH_WHOLE_SAMPLE 2, a round of ng
    points), in float32: x = l (1 / T) of the sample, o its max, count(g) the entries at or above o - drop g; j_lo the
    first point whose count reaches r_lo (None for KMIN if none), j_hi the last whose count is at most r_hi (None for
    KMAX if none, if r_hi < 1, or where top-p's row has its whole top-k set gathered), T taken back from 1 / T as the
    kernel takes it."""
    f32 = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    V, ns, sigmas = batch.target_logits.shape[1], triton_filter.NS, triton_filter.BRACKET_SIGMAS
    inv_t = f32(1.0) / f32(float(batch.temperature[r]))
    x = sample_of(batch.target_logits[r:r + 1].cpu().float())[0] * inv_t
    o = x.max()
    frac = torch.arange(ng, dtype=torch.float32) / (ng - 1)
    grid = f32(DROP.value) * frac * frac
    count = (x[None, :] >= (o - grid)[:, None]).sum(1).float()
    rho = f32(float(V)) / ns
    lam = f32(float(batch.top_k[r])) / rho
    r_lo, r_hi = lam + sigmas * lam.sqrt() + sigmas, lam - sigmas * lam.sqrt() - sigmas
    j_lo = int((count < r_lo).sum())
    j_hi = int((count <= r_hi).sum()) - 1 if r_hi >= 1.0 else -1
    whole_k = float(batch.top_p[r]) < 1.0 and float(rho * r_lo) < triton_filter.CAP / 2
    return (j_lo if j_lo < ng else None), (j_hi if j_hi >= 0 and not whole_k else None), float(o), float(1 / inv_t)


def _grid_point_of(key: int, o: float, temperature: float, ng: int) -> tuple:
    """(j, gap): the grid point nearest a bracket end's order key, the end read as (o - drop) T, and the gap between
    its drop and that point's, relative to o's scale. The GPU's grid differs from the CPU's in the last bits (its
    division is not correctly rounded, and o - drop may be fused), so an end is its point, not its bits."""
    value = torch.tensor([key if key >= 0 else key ^ 0x7FFFFFFF], dtype=torch.int32).view(torch.float32).item()
    drop = o - value / temperature
    grid = DROP.value * (torch.arange(ng, dtype=torch.float64) / (ng - 1)) ** 2
    j = int((grid - drop).abs().argmin())
    return j, abs(float(grid[j]) - drop) / max(1.0, abs(o))


@pytest.mark.parametrize("device", DEVICES)
def test_count_brackets_end_where_the_whole_samples_counts_cross_their_bounds(device, monkeypatch):
    """A count row's bracket in the one launch (top-k's, alone or with top-p: ONE_LAUNCH_WHOLE_SAMPLE 2, one round)
    ends at the grid points where the whole sample's counts from its max cross r_lo and r_hi, its ends computed from
    those points as the grid computes them. The records tests let an end one point off pass (the crossing still lies
    inside), so each row's two ends must lie at the definition's points, counted in float32; the GPU computes an end's
    value to within its last bits of the CPU's, so an end is matched to its point, not by its bits. Among the rows, a
    bracket with both ends and brackets with nothing above them (hi at KMAX): an r_hi below 1, and top-p's row whose
    top-k set is gathered whole."""
    # row 6's k of 1,000 puts r_hi well above 1, so that its bracket has a hi end
    batch = dataclasses.replace(bracketed_rows(device, monkeypatch),
                                top_k=torch.tensor([50, 0, 300, 0, 20, 0, 1000, 0], device=device))
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_WHOLE_SAMPLE", 2)
    cut_and_partials(batch, 0, block_v=256)
    brackets = last_brackets(8)
    ng = triton_filter.ONE_LAUNCH_ROUND_NG
    want = {r: _count_bracket_by_definition(batch, r, ng) for r in (0, 2, 4, 6)}
    for r, (j_lo, j_hi, o, t) in want.items():
        for j, key, none in ((j_lo, int(brackets[r, 0]), int(KMIN)), (j_hi, int(brackets[r, 1]), int(KMAX))):
            if j is None:
                assert key == none, (r, key, none)
                continue
            # the GPU's rounding of o - drop is some 1e-7 of o's scale; neighbouring points lie DROP (2 j + 1) /
            # (ng - 1)^2 apart, 0.026 or more
            point, gap = _grid_point_of(key, o, t, ng)
            assert point == j and gap < 1e-5, (r, key, j, point, gap)
    assert any(j_lo is not None and j_hi is not None for j_lo, j_hi, _, _ in want.values()), want
    assert any(j_hi is None for _, j_hi, _, _ in want.values()), want


def _mass_bracket_by_definition(logits: torch.Tensor, t: float, top_p: float, ng: int) -> tuple:
    """(j_lo, j_hi, margin, few) of a top-p row's one round from its whole sample's cells (``triton_bracket``'s
    MASS_NG), in float64 from the cells' bounds: the first grid point whose lo test holds (ng if none) and the last
    whose hi test does (-1 if none; -1 too where few tokens lie at or above it, so that the top is gathered), the
    smallest relative distance of any test from its bound, at which float32's rounding could move an end, and
    whether the few tokens took the hi end."""
    ns, V, sigmas = triton_filter.NS, logits.shape[0], triton_filter.BRACKET_SIGMAS
    x = (sample_of(logits[None])[0] / t).float()
    o = x.max()
    grid = (MASS_SPAN.value * (torch.arange(ng) / (ng - 1)) * (torch.arange(ng) / (ng - 1))).float()
    at = x[:, None] >= o - grid[None, :]
    first = torch.where(at.any(1), at.float().argmax(1), ng)
    cells = torch.bincount(first, minlength=ng + 1)[:ng].double()
    row = logits.double() / t
    m, g = row.max(), grid.double()
    z = torch.exp(row - m).sum()
    before = torch.cat([torch.zeros(1, dtype=torch.float64), g[:-1]])
    scale = torch.exp(o.double() - m)
    below = lambda w: torch.flip(torch.cumsum(torch.flip(cells * w, [0]), 0), [0]) - cells * w  # noqa: E731
    hi_mass, lo_mass = scale * below(torch.exp(-before)), scale * below(torch.exp(-g))
    sq = scale * scale * below(torch.exp(-2 * before))
    rho, tail = V / ns, (1 - top_p) * z
    spread = sigmas * rho * torch.sqrt(torch.clamp(sq - lo_mass * lo_mass / ns, min=0)) \
        + 2 * rho * scale * torch.exp(-g)
    lo_side, hi_side = rho * hi_mass + spread - tail, rho * lo_mass - spread - tail
    ok_lo, ok_hi = lo_side <= 0, hi_side > 0
    j_lo = int(ok_lo.float().argmax()) if bool(ok_lo.any()) else ng
    j_hi = int(ok_hi.nonzero().max()) if bool(ok_hi.any()) else -1
    few = j_hi >= 0 and rho * float(torch.cumsum(cells, 0)[j_hi]) < triton_filter.CAP / 8
    margin = float(torch.cat([lo_side.abs(), hi_side.abs()]).min() / tail)
    return j_lo, -1 if few else j_hi, margin, few


@pytest.mark.parametrize("device", DEVICES)
def test_top_p_bracket_from_the_samples_cells_is_the_bracket_of_the_cells_bounds(device, monkeypatch):
    """With ONE_LAUNCH_MASS_CELLS the row's splits each count their share of the sample into the cells of one round
    of that many grid points, its drops from the sample's max, and store it before they publish their pass 1
    (``triton_sample.store_cells``); after the norms every split takes a top-p row's bracket from the summed cells'
    bounds on the mass below each point (``triton_bracket._mass_from_cells``): no rendezvous of its own, no second
    round. Each row's bracket must be the one the cells' bounds give by the definition, in float64 (no test lies
    within 0.1% of its bound on these rows, far past float32's rounding of the sums), the few tokens at or above the
    hi end taking it on two rows, at grid drops from the sample's max, except row 7's, whose sample has no finite
    max and which takes the two shared rounds; every record (cut value and index, Z', how
    the cut was found: from the gathered bracket, and row 7's by the slow path) must be the two shared rounds'. The
    rounds' shares left in the work space read as NaN, so that a bracket that sums shares nobody published fails.
    With the cells loaded beside the norms (ONE_LAUNCH_CELLS_AHEAD: a split's share left out changes the cells, since
    some splits count two tiles), every bracket and record must be the same."""
    batch = top_p_rows(device, monkeypatch)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_CELLS_AHEAD", 0)     # the first two cuts load them after
    ng = 512
    (rounds, rounds_brackets), (cells, cells_brackets), meta = cut_before_and_after(
        batch, "ONE_LAUNCH_MASS_CELLS", 0, ng, monkeypatch)
    assert meta["MASS_NG"] == ng
    assert torch.equal(cells, rounds), (cells != rounds).nonzero().tolist()
    assert cells[5].tolist() == [1.0] * 7 + [2.0], cells[5]
    assert torch.equal(cells_brackets[7], rounds_brackets[7])
    # the cells loaded beside the norms change only when the loads are issued
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_CELLS_AHEAD", 1)
    for work, *_ in triton_filter._buffers.values():
        work.fill_(0x7FC00000)
    _, ahead, _ = cut_and_partials(batch, 0, block_v=256)
    assert torch.equal(ahead, cells), (ahead != cells).nonzero().tolist()
    assert torch.equal(last_brackets(8), cells_brackets)
    metas = [stage[2] for plan in triton_filter._plans.values() for stage in plan[7]]
    assert len(metas) == 1 and metas[0]["CELLS_AHEAD"], metas
    grid = MASS_SPAN.value * (torch.arange(ng) / (ng - 1)) ** 2
    logits = batch.target_logits.cpu()
    took = []
    for r in range(7):
        t = float(batch.temperature[r])
        j_lo, j_hi, margin, few = _mass_bracket_by_definition(logits[r], t, float(batch.top_p[r]), ng)
        took.append(few)
        assert margin > 1e-3, (r, margin)
        o = float(sample_of(logits[r:r + 1]).max()) / t
        ends = []
        for key, empty in zip(cells_brackets[r].tolist(), (-(1 << 31), 1 << 31)):
            if key == empty:
                ends.append(None)
                continue
            v = torch.tensor([key if key >= 0 else key ^ 0x7FFFFFFF], dtype=torch.int32).view(torch.float32).item()
            assert float((grid - (o - v / t)).abs().min()) < 1e-3, (r, o, v)
            ends.append(int((grid - (o - v / t)).abs().argmin()))
        assert ends == [j_lo if j_lo < ng else None, j_hi if j_hi >= 0 else None], (r, ends, j_lo, j_hi)
        assert not torch.equal(cells_brackets[r], rounds_brackets[r]), r
    # the rows' ends: two hi ends taken by the few tokens above them, three by the hi test, two by neither
    assert took == [False, False, True, True, False, False, False], took
