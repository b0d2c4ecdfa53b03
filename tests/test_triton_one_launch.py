"""The one-launch cut of a batch of few rows (specverify/kernels/triton_filter.py, STAGE 3): every split finds
the row's bracket itself, reads its part, packs its tokens into the row's list and tallies them, and the last
split to finish writes the record. Its records must be those of the three launches, and its search from the
splits' tallies must find the cut of the search over the whole bracket.

Without CUDA the kernels run under the Triton interpreter; the parameter id says which device ran.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch

from filter_settings import (DEVICE, DEVICES, _records, _rows, order_keys, small_gather,  # noqa: F401
                             tally_keys_of, three_launches_from_nine_rows)
from reference import SpecBatch
from specverify.kernels import triton_filter, triton_sampler
from specverify.kernels.triton_cut import DROP, KMAX, KMIN
from specverify.kernels.triton_filter_plan import one_launch_splits
from specverify.kernels.triton_gather import LANES, NPART
from specverify.kernels.triton_sample import MASS_SPAN


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scan, row_tally", [pytest.param(0, 0, id="atomic-gather"),
                                             pytest.param(2, 0, id="lane-gather"),
                                             pytest.param(2, 1, id="lane-gather-row-tally"),
                                             pytest.param(0, 1, id="row-tally")])
def test_one_launch_cut_writes_the_records_of_three_launches(device, scan, row_tally, small_gather, monkeypatch):
    """A batch of few rows is cut in one launch, where each split finds the row's bracket itself, packs its
    tokens into the row's list, and the last split to finish writes the record: the records (cut value and
    index, Z', the way found) must be those of
    the three launches, on rows that reach the sample bracket and the slow path (the small capacity), rows
    gathered whole and searched (V = 40), and rows that are not filtered or not live (zero drafts beside
    three). The one launch's read hands out its gather's slots by an atomic add, or counts each lane's tokens
    and stores them in a second pass from the lane's place (ONE_LAUNCH_SCAN_GATHER 0 or 2): a
    slot handed twice, a count that leaves tokens out, or a second pass that finds other tokens changes the
    records, and
    one that overflows the split's region must still send the row down the slow path. With the row's bucket
    sums (ONE_LAUNCH_ROW_TALLY), the buckets too must be zero again after the call, as the tickets they follow.
    The one launch's bracket takes the three launches' two rounds here, so that each row's bracket, and so how its
    cut is found, is theirs (one round is ``test_one_round_bracket_leaves_the_records_of_two_rounds``)."""
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_SCAN_GATHER", scan)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROUND_NG", 0)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROW_TALLY", row_tally)
    for seed, V in ((11, 160), (4, 40)):
        rows = _rows(seed, 4, V, device)
        # request 0 proposes 3 drafts: its rows 1-3 are live, the rows past k_b of the others are not
        batch = dataclasses.replace(rows, num_draft_tokens=torch.tensor([3, 0, 0, 0], device=device),
                                    draft_token_ids=torch.zeros(3, dtype=torch.int64, device=device),
                                    target_logits=torch.cat([rows.target_logits[:1].expand(3, V), rows.target_logits]))
        # narrow tiles: several splits a row, so the last split is not the only one
        monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROWS", 0)
        three = _records(batch, block_v=32)
        monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROWS", 10 ** 6)
        # the three launches left their sums and tokens in the work space: a record written before every split
        # is done must not find them there
        for work, *_ in triton_filter._buffers.values():
            work.fill_(1 << 40)
        one = _records(batch, block_v=32)
        # the splits-done tickets, packed-token totals and pass-1 flags are zero again for the next call
        assert all(int(tickets.abs().sum()) == 0 for _, _, tickets, _ in triton_filter._buffers.values())
        live = torch.tensor([True] * 4 + [j == 0 for b in range(1, 4) for j in range(4)])
        assert torch.equal(one[:, live], three[:, live]), (one != three).nonzero().tolist()
        # unfiltered rows, the gathered bracket's search and the slow path (V = 160), rows gathered whole (V = 40)
        assert set(three[5, live].tolist()) == ({0.0, 1.0, 2.0} if V == 160 else {0.0, 1.0})


@pytest.mark.parametrize("device", DEVICES)
def test_min_p_alone_is_cut_by_the_every_filter_plan_with_its_own_plans_records(device, small_gather, monkeypatch):
    """With min-p's tensor alone, the one launch of its own plan runs its pass 1 at half speed on the GPU; so it
    takes the plan of every filter, with top-k and top-p read as off (ONE_LAUNCH_EVERY_FILTER). The records (cut
    value and index, Z', the way found) must be those of its own plan, on rows of every style where min-p is off,
    mild or strong; the plan must be the one of every filter exactly where the call is a one launch of min-p
    alone."""
    rows = _rows(5, 8, 160, device)
    batch = dataclasses.replace(rows, top_k=None, top_p=None,
                                min_p=torch.tensor([0.05, 0.5, 0.0, 0.2, 0.05, 0.5, 0.01, 0.3], device=device))

    def cut(every: int, one_launch_rows: int) -> tuple:
        monkeypatch.setattr(triton_filter, "ONE_LAUNCH_EVERY_FILTER", every)
        monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROWS", one_launch_rows)
        records = _records(batch, block_v=32)
        metas = [meta for plan in triton_filter._plans.values() for _, _, meta in plan[7]]
        return records, {(meta["HAS_K"], meta["HAS_P"], meta["HAS_M"]) for meta in metas}
    own, own_flags = cut(0, 10 ** 6)
    every, every_flags = cut(1, 10 ** 6)
    assert own_flags == {(False, False, True)} and every_flags == {(True, True, True)}
    assert torch.equal(every, own), (every != own).nonzero().tolist()
    # min-p alone needs no search: its floor is in the record, and its Z' (the mass it keeps, the max's 1) varies
    assert (own[2] > 0).sum() == 7 and len(set(own[3].tolist())) >= 4, own
    _, three_flags = cut(1, 0)
    assert three_flags == {(False, False, True)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("finish_n, scan, row_tally", [(16, 0, 0), (0, 0, 0),
                                                        pytest.param(16, 2, 0, id="16-lane-gather"),
                                                        pytest.param(16, 0, 64, id="16-row-tally"),
                                                        pytest.param(0, 0, 64, id="0-row-tally"),
                                                        pytest.param(16, 0, 512, id="16-row-tally-512")])
def test_search_from_the_splits_tallies_finds_the_cut_of_the_whole_bracket(device, finish_n, scan, row_tally,
                                                                           monkeypatch):
    """Each split tallies its gathered tokens at TALLY_N keys spread over the bracket, and the record's key
    searches (top-k's by count, top-p's by mass, top-p's after top-k's) start from the tallied interval that
    holds the crossing. With ranking off (on for at most 16 tokens where the ranked end is), every row whose bracket
    gathered more tokens is searched; the records
    (cut value and index, Z', the way found) must be those of the search over the whole bracket, with the
    search's ranked end on and off, on rows of every style, including ties at the crossing; and with the read's
    gather slots handed out by each lane's count and a second pass (ONE_LAUNCH_SCAN_GATHER=2), where a token lost or
    placed twice changes the tallies that the search starts
    from (narrow tiles there: several a split, so that the slots carry over from one tile to the next); and with
    the splits adding their tokens to the row's buckets of the keys (ONE_LAUNCH_ROW_TALLY, at 64 and 512 keys),
    where a token in the wrong bucket, or a bucket sum read the wrong way up, moves the interval the search
    starts from, and the search copies its interval out of the list in two passes, each lane counting its tokens
    and then storing them from its place, where a token the second pass misses or places twice changes the cut."""
    monkeypatch.setattr(triton_filter, "CAP", 2048)
    monkeypatch.setattr(triton_filter, "NS", 256)
    monkeypatch.setattr(triton_filter, "CH", 8)
    # the ranked end needs ranking on (its FINISH is at most RANK_N): rows of at most finish_n tokens are ranked
    monkeypatch.setattr(triton_filter, "RANK_N", finish_n)
    monkeypatch.setattr(triton_filter, "FINISH_N", finish_n)
    batch = _rows(21, 8, 3000, device)
    # every row filtered by a top-k or a top-p that the bracket gathers many tokens for, some with min-p
    batch = dataclasses.replace(batch, top_k=torch.tensor([50, 0, 300, 0, 50, 0, 120, 0], device=device),
                                top_p=torch.tensor([1.0, 0.9, 0.8, 0.5, 0.95, 0.9, 0.999, 0.7], device=device),
                                min_p=torch.tensor([0.0, 0.0, 0.0, 0.01, 0.0, 0.0, 0.0, 0.001], device=device),
                                temperature=torch.tensor([1.0, 1.0, 0.7, 1.0, 2.5, 1.0, 1.0, 0.7], device=device))
    plan = dict(block_v=32) if scan else {}
    monkeypatch.setattr(triton_filter, "TALLY_N", 0)
    whole = _records(batch, **plan)
    monkeypatch.setattr(triton_filter, "TALLY_N", row_tally or 64)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROW_TALLY", int(row_tally != 0))
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_SCAN_GATHER", scan)     # against the atomic gather's whole search
    tallied = _records(batch, **plan)
    assert torch.equal(tallied, whole), (tallied != whole).nonzero().tolist()
    # the tallied search ran: rows found from the gathered bracket
    assert (whole[5] == 1.0).sum() >= 6, whole[5].tolist()


def _cut_and_partials(batch: SpecBatch, poison: int, **plan) -> tuple:
    """(the cut's launches as (kernel, STAGE, PASS1, SHARED), records [6, B K1], pass 1's scratch words) of a cut of
    ``batch``, the scratch filled with ``poison`` before its first launch."""
    seen = []
    real_launch, real_cut_launches = triton_sampler.launch, triton_sampler.cut_launches

    def launch(kernel, grid, args, meta, *rest):
        seen.append((kernel.fn.__name__, meta.get("STAGE"), meta.get("PASS1"), meta.get("SHARED")))
        return real_launch(kernel, grid, args, meta, *rest)

    def cut_launches(pass1, *rest):
        pass1[2][4].fill_(poison)
        return real_cut_launches(pass1, *rest)

    triton_sampler.launch, triton_sampler.cut_launches = launch, cut_launches
    try:
        B = batch.num_requests
        token_ids = torch.empty((B, batch.max_draft + 1), dtype=torch.int64, device=batch.device)
        options = dict(seeds=torch.zeros(B, dtype=torch.int64, device=batch.device), **plan)
        _, pass1, record = triton_sampler._cut(batch, token_ids, torch.empty(B, dtype=torch.int64, device=batch.device),
                                               options)
    finally:
        triton_sampler.launch, triton_sampler.cut_launches = real_launch, real_cut_launches
    n_part, stats_at = pass1[2][8], pass1[2][10]
    return seen, record.view(6, -1).cpu().clone(), pass1[2][4][:stats_at + 2 * n_part].cpu().clone()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spin", [pytest.param(None, id="spin"),
                                  pytest.param(0, id="take-over", marks=pytest.mark.skipif(
                                      DEVICE == "cpu", reason="the interpreter takes splits over at any spin"))])
@pytest.mark.filterwarnings("ignore:All-NaN slice")
def test_one_launch_is_pass1_too_with_pass1s_own_partials(device, spin, small_gather, monkeypatch):
    """Where the one launch's splits are pass 1's, it is pass 1 too (``triton_handoff``): each split computes its
    pass-1 partials, publishes them and waits for its row's others, taking over any still unpublished. So a
    filtered call of few rows launches the cut alone before pass 2, as an unfiltered call launches pass 1, and
    it must leave pass 1's very partials (the row max, sum and argmax that pass 2 reads) and the records of
    pass 1 run on its own with the same splits. The scratch is poisoned (NaN partials) before each call, so
    that a split that reads its row's norms before every partial is stored reads NaN. On the interpreter, which
    runs programs one by one, each row's first split takes all the later ones over; on CUDA, spin 0 makes every
    split take over whatever is unpublished at its first look, so that several write one split at once. The
    small capacity sends rows to the sample bracket, where every split's sums count, and to the slow path."""
    if spin is not None:
        monkeypatch.setattr(triton_filter, "HANDOFF_SPIN", spin)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROWS", 20)
    V = 160
    rows = _rows(7, 4, V, device)
    # request 0 proposes 3 drafts; every filter weighs the row (top-p, min-p), so each split's sums count
    batch = dataclasses.replace(rows, num_draft_tokens=torch.tensor([3, 0, 0, 0], device=device),
                                draft_token_ids=torch.zeros(3, dtype=torch.int64, device=device),
                                target_logits=torch.cat([rows.target_logits[:1].expand(3, V), rows.target_logits]),
                                top_k=torch.tensor([0, 50, 3, 0], device=device),
                                top_p=torch.tensor([0.9, 1.0, 0.5, 1.0], device=device),
                                min_p=torch.tensor([0.0, 0.05, 0.0, 0.1], device=device),
                                temperature=torch.tensor([1.0, 0.7, 1.0, 2.5], device=device))
    sf = one_launch_splits(16, triton_filter.ONE_LAUNCH_PROGRAMS, triton_filter.ONE_LAUNCH_SPLITS,
                           triton_filter.one_launch_sms(torch.device(device)))
    plan = dict(block_v=32, splits=(sf, 2))
    poison = -1         # NaN partials: a norm read before its partial is stored is NaN
    fused_launches, fused, fused_partials = _cut_and_partials(batch, poison, **plan)
    assert fused_launches == [("_cut_kernel", 3, True, True)]
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_PASS1", 0)
    own_launches, own, own_partials = _cut_and_partials(batch, poison, **plan)
    assert own_launches == [("_row_stats_kernel", None, None, None), ("_cut_kernel", 3, False, True)]
    assert torch.equal(fused_partials, own_partials), (fused_partials != own_partials).nonzero().tolist()
    # a row past its request's drafts has no record: its words hold what the buffer held, NaN bits at times
    live = torch.tensor([True] * 4 + [j == 0 for b in range(1, 4) for j in range(4)])
    assert torch.equal(fused[:, live], own[:, live]), (fused != own).nonzero().tolist()
    # rows found from the gathered bracket (from every split's sums), the slow path and min-p alone
    assert set(own[5, [0, 4, 8, 12]].tolist()) == {0.0, 1.0, 2.0}, own[5].tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spin", [pytest.param(None, id="spin"),
                                  pytest.param(0, id="take-over", marks=pytest.mark.skipif(
                                      DEVICE == "cpu", reason="the interpreter takes splits over at any spin"))])
def test_pass1_reading_ahead_leaves_pass1s_own_partials(device, spin, monkeypatch):
    """The one launch's pass 1 keeps three tiles' loads in flight ahead of its sums (ONE_LAUNCH_PASS1_AHEAD), in
    slots that rotate a tile: splits of six tiles, the last one ragged, pass every slot through the rotation
    twice, so that a slot loaded from the wrong tile, or a tile summed twice or never, changes a split's max, sum
    or argmax. Its partials and records must be those of pass 1 run as its own launch with the same splits, whose
    loop loads each tile as it sums it, bit for bit: each lane sums the same logits in the same order."""
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_PASS1_AHEAD", 1)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROWS", 20)
    if spin is not None:
        monkeypatch.setattr(triton_filter, "HANDOFF_SPIN", spin)
    rows = 10
    sf = one_launch_splits(rows, triton_filter.ONE_LAUNCH_PROGRAMS, triton_filter.ONE_LAUNCH_SPLITS,
                           triton_filter.one_launch_sms(torch.device(device)))
    V = sf * 6 * 32 - 19
    batch = _rows(13, rows, V, device)
    plan = dict(block_v=32, splits=(sf, 2))
    fused_launches, fused, fused_partials = _cut_and_partials(batch, -1, **plan)
    assert fused_launches == [("_cut_kernel", 3, True, True)]
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_PASS1", 0)
    own_launches, own, own_partials = _cut_and_partials(batch, -1, **plan)
    assert own_launches == [("_row_stats_kernel", None, None, None), ("_cut_kernel", 3, False, True)]
    assert torch.equal(fused_partials, own_partials), (fused_partials != own_partials).nonzero().tolist()
    assert torch.equal(fused, own), (fused != own).nonzero().tolist()


def _work_space() -> torch.Tensor:
    """The cut's work space of this thread (one, as the tests that read it set up)."""
    works = [work for (thread, _, _), (work, *_) in triton_filter._buffers.items() if thread == threading.get_ident()]
    assert len(works) == 1, len(works)
    return works[0]


def _brackets(rows: int) -> torch.Tensor:
    """[rows, 2] the bracket keys (lo, hi) that the last cut of this thread left in its work space."""
    return _work_space()[:2 * rows].view(rows, 2).cpu().clone()


def _bracketed_rows(device: str, monkeypatch) -> SpecBatch:
    """8 rows of 3,000 logits, each filtered by top-k or top-p (one with min-p too), behind a sample of 64 chunks
    of 8 and a capacity of 256 gathered tokens, which sends some rows down the slow path: the sample bracket's
    cases. The work spaces start empty, so that ``_brackets`` finds this test's alone (a test before it in the
    process may have planned a cut on another device or stream, which holds a work space of its own). The count
    bracket's round, and the mass bracket's two, are the splits' shared ones unless a test turns the whole sample
    on."""
    monkeypatch.setattr(triton_filter, "_buffers", {})
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_WHOLE_SAMPLE", 0)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_MASS_CELLS", 0)
    monkeypatch.setattr(triton_filter, "CAP", 256)
    monkeypatch.setattr(triton_filter, "NS", 512)
    monkeypatch.setattr(triton_filter, "CH", 8)
    return dataclasses.replace(_rows(5, 8, 3000, device),
                               top_k=torch.tensor([50, 0, 300, 0, 20, 0, 120, 0], device=device),
                               top_p=torch.tensor([1.0, 0.9, 0.8, 0.5, 0.95, 0.99, 1.0, 0.7], device=device),
                               min_p=torch.tensor([0.0, 0.0, 0.0, 0.01, 0.0, 0.0, 0.0, 0.0], device=device))


def _cut_before_and_after(batch: SpecBatch, name, before, after, monkeypatch) -> tuple:
    """((records [6, 8], brackets [8, 2]) with triton_filter's setting ``name`` at ``before``, the same at ``after``,
    the one launch's meta then) of one-launch cuts of ``batch``'s 8 rows (a tuple of names: each at its value of
    the tuples before and after). The work space is filled with NaN bits between the two cuts, so that a share or
    sum the second reads but did not write reads as NaN."""
    plan = dict(block_v=256)
    names = name if isinstance(name, tuple) else (name,)
    set_all = lambda values: [monkeypatch.setattr(triton_filter, n, v)  # noqa: E731
                              for n, v in zip(names, values if isinstance(name, tuple) else (values,))]
    set_all(before)
    first_launches, first, _ = _cut_and_partials(batch, 0, **plan)
    first_brackets = _brackets(8)
    set_all(after)
    for work, *_ in triton_filter._buffers.values():
        work.fill_(0x7FC00000)
    second_launches, second, _ = _cut_and_partials(batch, 0, **plan)
    second_brackets = _brackets(8)
    assert second_launches == first_launches == [("_cut_kernel", 3, True, True)]
    metas = [meta for plan_ in triton_filter._plans.values() for _, _, meta in plan_[7]]
    assert len(metas) == 1, metas
    return (first, first_brackets), (second, second_brackets), metas[0]


def _records_unchanged(batch: SpecBatch, name, before, after, monkeypatch) -> tuple:
    """(records [6, 8], meta) of ``_cut_before_and_after``'s second cut, whose records and brackets must be the
    first's: a setting that changes only how the one launch finds the cut."""
    (first, first_brackets), (second, second_brackets), meta = _cut_before_and_after(batch, name, before, after,
                                                                                      monkeypatch)
    assert torch.equal(second, first), (second != first).nonzero().tolist()
    assert torch.equal(second_brackets, first_brackets)
    return second, meta


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spin, share_tile", [
    pytest.param(None, None, id="spin"), pytest.param(None, 8, id="spin-narrow-tiles"),
    pytest.param(0, None, id="take-over", marks=pytest.mark.skipif(
        DEVICE == "cpu", reason="the interpreter takes splits over at any spin"))])
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
    batch = _bracketed_rows(device, monkeypatch)
    plan = dict(block_v=256)
    shared_launches, shared, _ = _cut_and_partials(batch, 0, **plan)
    shared_brackets = _brackets(8)
    assert shared_launches == [("_cut_kernel", 3, True, True)]
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_SHARED", 0)
    alone_launches, alone, _ = _cut_and_partials(batch, 0, **plan)
    assert alone_launches == [("_cut_kernel", 3, True, False)]
    assert torch.equal(shared_brackets, _brackets(8)), (shared_brackets, _brackets(8))
    assert torch.equal(shared, alone), (shared != alone).nonzero().tolist()
    # rows found from the gathered bracket (top-k's by count, top-p's alone by mass) and by the slow path
    assert set(alone[5].tolist()) == {1.0, 2.0}, alone[5].tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spin, round_ng", [
    pytest.param(None, 128, id="spin-128"), pytest.param(None, 16, id="spin-16"),
    pytest.param(0, 128, id="take-over", marks=pytest.mark.skipif(
        DEVICE == "cpu", reason="the interpreter takes splits over at any spin"))])
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
    (two, two_brackets), (one, one_brackets), meta = _cut_before_and_after(
        _bracketed_rows(device, monkeypatch), "ONE_LAUNCH_ROUND_NG", 0, round_ng, monkeypatch)
    assert meta["ROUND_NG"] == round_ng
    assert torch.equal(one[:5], two[:5]), (one[:5] != two[:5]).nonzero().tolist()
    moved = [r for r in range(8) if not torch.equal(one_brackets[r], two_brackets[r])]
    assert set(moved) <= {0, 2, 4, 6} and len(moved) >= 3, (one_brackets, two_brackets)
    # rows found from the gathered bracket and by the slow path, which takes at most one more with one round
    assert set(two[5].tolist()) == set(one[5].tolist()) == {1.0, 2.0}, (one[5], two[5])
    assert int((one[5] != two[5]).sum()) <= 1 and bool((one[5] >= two[5]).all()), (one[5], two[5])


def _sample_at(V: int) -> torch.Tensor:
    """[NS] the row positions of the bracket's strided sample (``triton_sample._sample_at``) at the plan's NS and CH."""
    ns, ch = triton_filter.NS, triton_filter.CH
    i = torch.arange(ns)
    return (i // ch) * (V - ch) // (ns // ch - 1) + i % ch


def _sample_of(logits: torch.Tensor) -> torch.Tensor:
    """[rows, NS] the bracket's strided sample of each row."""
    return logits[:, _sample_at(logits.shape[1])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spin, form", [
    pytest.param(None, 1, id="counts"), pytest.param(None, 2, id="ends"),
    pytest.param(0, 1, id="take-over", marks=pytest.mark.skipif(
        DEVICE == "cpu", reason="the interpreter takes splits over at any spin"))])
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
    batch = _bracketed_rows(device, monkeypatch)
    (shared, shared_brackets), (whole, whole_brackets), meta = _cut_before_and_after(
        batch, "ONE_LAUNCH_WHOLE_SAMPLE", 0, form, monkeypatch)
    assert meta["WHOLE"] == form
    assert torch.equal(whole[:5], shared[:5]), (whole[:5] != shared[:5]).nonzero().tolist()
    # a count row whose largest logit is not in the sample has its drops from another origin: its bracket moves
    logits = _sample_of(batch.target_logits.cpu())
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
    x = _sample_of(batch.target_logits[r:r + 1].cpu().float())[0] * inv_t
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
    batch = dataclasses.replace(_bracketed_rows(device, monkeypatch),
                                top_k=torch.tensor([50, 0, 300, 0, 20, 0, 1000, 0], device=device))
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_WHOLE_SAMPLE", 2)
    _cut_and_partials(batch, 0, block_v=256)
    brackets = _brackets(8)
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
    x = (_sample_of(logits[None])[0] / t).float()
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


def _top_p_rows(device: str, monkeypatch) -> SpecBatch:
    """``_bracketed_rows``' plan with a sample of 2,048 (16 tiles of the cells' 128 over the rows' 12 splits, so
    that some splits count two) and room for 1,024 gathered tokens, and 8 rows of top-p alone (one with min-p too)
    whose brackets all fit it: N(0, s^2) logits at several widths, top-p 0.3 to 0.99, temperatures 0.5 to 2.5. Row
    0's largest logit is not in its sample, and row 7's sample is all -inf (its mass lies between the sample's
    chunks), so that its bracket has no finite origin there."""
    base = _bracketed_rows(device, monkeypatch)
    monkeypatch.setattr(triton_filter, "CAP", 1024)
    monkeypatch.setattr(triton_filter, "NS", 2048)
    widths = (1.0, 2.0, 3.0, 4.0, 2.0, 3.0, 1.5, 3.0)
    logits = torch.stack([torch.randn(3000, generator=torch.Generator().manual_seed(r)) * s
                          for r, s in enumerate(widths)])
    logits[7, _sample_at(logits.shape[1])] = float("-inf")
    # row 0's largest logit lies between the sample's first two chunks: its drops start below the row's max
    logits[0, triton_filter.CH + 1] = logits[0].max() + 2.0
    return dataclasses.replace(base, target_logits=logits.float().to(device),
                               top_k=torch.zeros(8, dtype=torch.int64, device=device),
                               top_p=torch.tensor([0.9, 0.9, 0.5, 0.99, 0.5, 0.4, 0.3, 0.9], device=device),
                               min_p=torch.tensor([0.0] * 6 + [0.01, 0.0], device=device),
                               temperature=torch.tensor([1.0, 0.5, 2.0, 1.0, 2.5, 2.5, 0.5, 1.0], device=device))


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
    batch = _top_p_rows(device, monkeypatch)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_CELLS_AHEAD", 0)     # the first two cuts load them after
    ng = 512
    (rounds, rounds_brackets), (cells, cells_brackets), meta = _cut_before_and_after(
        batch, "ONE_LAUNCH_MASS_CELLS", 0, ng, monkeypatch)
    assert meta["MASS_NG"] == ng
    assert torch.equal(cells, rounds), (cells != rounds).nonzero().tolist()
    assert cells[5].tolist() == [1.0] * 7 + [2.0], cells[5]
    assert torch.equal(cells_brackets[7], rounds_brackets[7])
    # the cells loaded beside the norms change only when the loads are issued
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_CELLS_AHEAD", 1)
    for work, *_ in triton_filter._buffers.values():
        work.fill_(0x7FC00000)
    _, ahead, _ = _cut_and_partials(batch, 0, block_v=256)
    assert torch.equal(ahead, cells) and torch.equal(_brackets(8), cells_brackets), (ahead != cells).nonzero().tolist()
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
        o = float(_sample_of(logits[r:r + 1]).max()) / t
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


@pytest.mark.parametrize("device", DEVICES)
def test_top_k_set_ranked_from_one_copy_leaves_the_records_of_the_searches(device, monkeypatch):
    """With ONE_LAUNCH_RANK_TOP a top-k row's record copies every gathered token at or above top-k's tallied
    interval out of the packed list, where the row's bucket sums put at most RANK_N there, and ranks the copy
    (``triton_search.top_set``): top-k's rows of 50 and 20 here, alone and under top-p, where the rows of 300 and
    120 keep more and still search. Every record (cut value and index, Z', how the cut was found, the slow path
    included) must be the searches', on a work space filled with NaN bits between the two cuts."""
    batch = _bracketed_rows(device, monkeypatch)
    _, meta = _records_unchanged(batch, "ONE_LAUNCH_RANK_TOP", 0, 1, monkeypatch)
    assert meta["RANK_TOP"] == 1 and meta["ROW_TALLY"]


@pytest.mark.parametrize("device", DEVICES)
def test_copies_in_narrow_tiles_leave_the_records_of_one_tile(device, monkeypatch):
    """ONE_LAUNCH_COPY_TILE sets the tile of the record's copies out of the packed list (``triton_search._keep_lanes``:
    each lane counts its tokens in the interval over every tile, then stores them from its place over every tile
    again). The interpreter's default tile holds a whole list of these rows at once; 64 tokens a tile takes the
    lists of up to 256 tokens in several, with a tile's load in flight while the last is counted or stored, and
    lanes that hold more than one of the copied tokens. The records must be the one tile's, through the copy of
    top-k's set and the key searches' copies."""
    batch = _bracketed_rows(device, monkeypatch)
    _, meta = _records_unchanged(batch, "ONE_LAUNCH_COPY_TILE", 0, 64, monkeypatch)
    assert meta["COPY_TILE"] == 64 and meta["RANK_TOP"]


@pytest.mark.parametrize("device", DEVICES)
def test_bucket_sums_loaded_once_leave_the_records_of_each_search_loading_them(device, monkeypatch):
    """With ONE_LAUNCH_SUMS_ONCE the record loads the row's bucket sums once and hands them to the copy of top-k's
    set and to the searches, where each loads them itself. On the bracket tests' rows, with a RANK_N of 8 so that the
    searches (``triton_search.resolve``) take the rows that would be ranked, and the rows that the slow path takes,
    every record must be as before, on a work space filled with NaN bits between the two cuts, so that sums the
    second cut reads but did not take from its own load show."""
    batch = _bracketed_rows(device, monkeypatch)
    monkeypatch.setattr(triton_filter, "RANK_N", 8)
    once, meta = _records_unchanged(batch, "ONE_LAUNCH_SUMS_ONCE", 0, 1, monkeypatch)
    assert meta["SUMS_ONCE"] and meta["ROW_TALLY"] and meta["RANK_TOP"]
    assert float(once[5, 4]) == 1.0, once[5]     # top-k's row of 20: its cut found by the searches, from the sums


def _bucketed(batch: SpecBatch, brackets: torch.Tensor, nt: int) -> list:
    """For each row, (its gathered tokens' words [n] int64, their buckets [n]): the row's logits with keys in its
    bracket [lo, min(hi, the key above its largest logit)), as the one launch's read gathers them (key << 32 | 2**32 - 1
    - index), and the bucket of each among ``tally_keys`` of those ends (the last key at or below its own), the keys
    computed by the kernels' own function on the device the cut ran on."""
    logits = batch.target_logits.cpu()
    keys = order_keys(logits)
    ends = brackets.clone()
    ends[:, 1] = torch.minimum(ends[:, 1], keys.max(1).values + 1)
    tallied = tally_keys_of(ends.to(batch.device), nt)
    rows = []
    for r in range(len(ends)):
        inside = ((keys[r] >= ends[r, 0]) & (keys[r] < ends[r, 1])).nonzero()[:, 0]
        words = (keys[r, inside] << 32) | (2 ** 32 - 1 - inside)
        rows.append((words, torch.searchsorted(tallied[r].cpu(), keys[r, inside], right=True) - 1))
    return rows


def _slots_after(batch: SpecBatch, slots: int, monkeypatch) -> tuple:
    """(records [6, 8], brackets [8, 2], slots [8, TALLY_N, slots] int64) of a one-launch cut of ``batch``'s 8 rows
    with ONE_LAUNCH_BUCKET_SLOTS = slots, on a work space filled with NaN bits before it (after a first cut that sizes
    it): a slot that no token was stored at reads as NaN."""
    _, (records, brackets), _ = _cut_before_and_after(batch, "ONE_LAUNCH_BUCKET_SLOTS", slots, slots, monkeypatch)
    plans = [(plan[6], stage[1], stage[2]) for plan in triton_filter._plans.values() for stage in plan[7]]
    assert len(plans) == 1 and plans[0][2]["SLOTS"] == slots and not plans[0][2]["STAMPS"], plans
    words, grid, meta = plans[0]
    nt, rows = meta["TALLY_N"], grid[0] * grid[1]
    end = words - rows * grid[2] * meta["LANE_WORDS"]       # the splits' lanes' slots come after the buckets'
    work = _work_space()
    return records, brackets, work[end - rows * nt * slots:end].view(rows, nt, slots).cpu().clone()


@pytest.mark.parametrize("device", DEVICES)
def test_bucket_slots_hold_the_first_tokens_of_each_bucket(device, monkeypatch):
    """With ONE_LAUNCH_BUCKET_SLOTS each split stores every token it packs at its slot in its bucket, the count that
    the bucket's atomic add returns (``triton_tally.bucket_pack``). At 32 buckets over brackets of up to 1,024
    tokens and 8 slots a bucket, most buckets hold more tokens than slots and some fewer: each bucket's slots must
    hold as many of its own tokens as fit, each once, from its first slot on, and nothing else (a slot nobody
    stored at reads as NaN); a bucket of at most 8 tokens holds all of them. The rows are the cells test's top-p
    rows, every one found from its gathered bracket except row 7's (the slow path)."""
    batch = _top_p_rows(device, monkeypatch)
    monkeypatch.setattr(triton_filter, "TALLY_N", 32)
    records, brackets, slots = _slots_after(batch, 8, monkeypatch)
    assert records[5].tolist() == [1.0] * 7 + [2.0], records[5]
    over = under = 0
    for r, (words, buckets) in enumerate(_bucketed(batch, brackets, 32)[:7]):
        for t in range(32):
            mine, held = words[buckets == t], slots[r, t]
            fit = min(len(mine), 8)
            assert bool((held[fit:] == 0x7FC00000).all()), (r, t, held, len(mine))
            stored = held[:fit]
            assert len(set(stored.tolist())) == fit and bool(torch.isin(stored, mine).all()), (r, t, held, mine)
            over, under = over + (len(mine) > 8), under + (0 < len(mine) <= 8)
    assert over >= 20 and under >= 20, (over, under)


@pytest.mark.parametrize("device", DEVICES)
def test_crossings_ranked_from_their_bucket_slots_leave_the_records_of_the_searches(device, monkeypatch):
    """With ONE_LAUNCH_BUCKET_SLOTS a key search whose tallied interval is one bucket of at most that many tokens
    ranks the bucket's slots at once (``triton_search._key_find``), where it copies the interval out of the packed
    list and steps until at most FINISH_N are left. On the cells test's top-p rows at 8 buckets, most crossings lie
    in a bucket of 2 to 32 tokens, some of more than FINISH_N's 16 (where the search steps), and one in a bucket of
    more than 32 (where it still searches): every record (cut value and index, Z', how the cut was found) must be
    the searches'."""
    batch = _top_p_rows(device, monkeypatch)
    monkeypatch.setattr(triton_filter, "TALLY_N", 8)
    records, meta = _records_unchanged(batch, "ONE_LAUNCH_BUCKET_SLOTS", 0, 32, monkeypatch)
    assert meta["SLOTS"] == 32 and meta["ROW_TALLY"] and triton_filter.FINISH_N == 16
    brackets = _brackets(8)
    cut = order_keys(records[0])
    sizes = []
    for r, (words, buckets) in enumerate(_bucketed(batch, brackets, 8)[:7]):
        crossing = buckets[(words >> 32) == cut[r]]
        sizes.append(int((buckets == crossing[0]).sum()))
    assert sum(2 <= size <= 32 for size in sizes) >= 5 and any(16 < size <= 32 for size in sizes), sizes
    assert any(size > 32 for size in sizes), sizes


@pytest.mark.parametrize("name, value", [("ONE_LAUNCH_ROUND_NG", 48), ("ONE_LAUNCH_ROUND_NG", 1),
                                         ("ONE_LAUNCH_SCAN_GATHER", 1), ("ONE_LAUNCH_WHOLE_SAMPLE", 3),
                                         ("ONE_LAUNCH_RANK_TOP", 2), ("ONE_LAUNCH_COPY_TILE", 96),
                                         ("ONE_LAUNCH_SUMS_ONCE", 2), ("ONE_LAUNCH_BUCKET_SLOTS", 48),
                                         ("ONE_LAUNCH_BUCKET_SLOTS", 256),
                                         ("ONE_LAUNCH_CELLS_AHEAD", -1), ("ONE_LAUNCH_LANE_SLOTS", 3),
                                         ("ONE_LAUNCH_LANE_SLOTS", 32)])
def test_one_launch_settings_out_of_range_are_refused_by_name(name, value, monkeypatch):
    """A probe sets the one launch's settings by name (``ci/filter_stages.py --set``): a round of points that is not
    a power of 2 has no grid, the scan gather (1) is gone, the whole sample has two forms, the rank of top-k's set
    and the one load of the bucket sums are on or off, the copies' tile is a power of 2, and a lane's slots are a
    power of 2 up to 16; the plan refuses each, naming the setting and the value, rather than compiling a kernel that
    misreads it."""
    monkeypatch.setattr(triton_filter, name, value)
    with pytest.raises(ValueError, match=f"{name} takes .*not {value}"):
        _records(_rows(3, 2, 3000, "cpu"))


def _split_regions(rows: int) -> dict:
    """{(row, split): the tokens its read gathered, as its region holds them} that the last one-launch cut of this
    thread left in its work space: each split's count (its partial sums' word 7) of its region's slots."""
    (plan,) = triton_filter._plans.values()
    sf, region, meta = plan[3], plan[5], plan[7][0][2]
    work, npart = _work_space().cpu(), NPART.value
    out = {}
    for r in range(rows):
        for s in range(sf):
            n = int(work[3 * rows + (r * sf + s) * npart + 7])
            at = rows * (3 + sf * npart) + r * meta["CAP"] + s * region
            out[(r, s)] = work[at:at + min(n, region)].tolist()
    return out


def _lane_counts(batch: SpecBatch, brackets: torch.Tensor, r: int, meta: dict, sf: int, chunk: int) -> list:
    """Row r's splits' most bracket tokens in one lane of the lanes' gather: a lane is an entry's place in the read's
    tiles of BLOCK_READ (each split's share of chunk entries read from its start), and a token is in the bracket where
    its key lies in [lo, hi)."""
    logits = batch.target_logits[r].cpu().float()
    V, tile = logits.shape[0], meta["BLOCK_READ"]
    keys = order_keys(logits)
    inside = (keys >= int(brackets[r, 0])) & (keys < int(brackets[r, 1]))
    most = []
    for s in range(sf):
        lanes = torch.zeros(tile, dtype=torch.int64)
        at = torch.arange(s * chunk, min(V, (s + 1) * chunk))
        lanes.index_add_(0, (at - s * chunk) % tile, inside[at].long())
        most.append(int(lanes.max()))
    return most


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("keep", [1, 4])
def test_lanes_keeping_their_tokens_leave_the_regions_and_records_of_the_second_pass(device, keep, monkeypatch):
    """With ONE_LAUNCH_LANE_SLOTS each lane of the lanes' gather stores its first tokens at slots of its own as it
    counts them (``keep_slot``), and a split where no lane counted more fills its region from them (``gather_slots``)
    rather than reading its share of the row again (``gather_lanes``). Either way each split's region must hold the
    same tokens in the same slots and the records be the same. Rows of 3,000 in tiles of 256, two splits a row (16
    programs for 8 rows) so that a split reads six tiles, with brackets wide and narrow: among their splits some have
    a lane past its slots (the second pass, the fallback) and some none (the slots alone), which the test counts
    itself, each split's busiest lane, to say that both ran."""
    batch = _bracketed_rows(device, monkeypatch)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_PROGRAMS", 16)
    runs = []
    for slots in (0, keep):
        monkeypatch.setattr(triton_filter, "ONE_LAUNCH_LANE_SLOTS", slots)
        for work, *_ in triton_filter._buffers.values():     # a slot or region word left unwritten reads as NaN
            work.fill_(0x7FC00000)
        launches, records, _ = _cut_and_partials(batch, 0, block_v=256)
        assert launches == [("_cut_kernel", 3, True, True)], launches
        runs.append((records, _brackets(8), _split_regions(8)))
    (before, brackets, regions), (after, after_brackets, kept_regions) = runs
    (plan,) = triton_filter._plans.values()
    meta = plan[7][0][2]
    assert meta["LANE_SLOTS"] == keep and meta["NW_READ"] == meta["NW_COUNT"] == LANES.value, meta
    assert kept_regions == regions
    assert torch.equal(after, before) and torch.equal(after_brackets, brackets), (after, before)
    most = [m for r in range(8) if bool(brackets[r, 0] < brackets[r, 1])
            for m in _lane_counts(batch, brackets, r, meta, plan[3], plan[4])]
    assert plan[4] >= 3 * meta["BLOCK_READ"], (plan[4], meta["BLOCK_READ"])
    assert any(m > keep for m in most) and any(0 < m <= keep for m in most), most
