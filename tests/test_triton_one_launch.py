"""The one-launch cut of a batch of few rows (specverify/kernels/triton_filter.py, STAGE 3): every split finds
the row's bracket itself, reads its part, packs its tokens into the row's list and tallies them, and the last
split to finish writes the record. Its records must be those of the three launches, and its search from the
splits' tallies must find the cut of the search over the whole bracket. How the splits find the bracket is in
test_triton_one_launch_brackets.py, how the record is found from the packed list in test_triton_one_launch_record.py.

Without CUDA the kernels run under the Triton interpreter; the parameter id says which device ran.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from filter_settings import (DEVICES, _records, _rows, order_keys, small_gather,  # noqa: F401
                             three_launches_from_nine_rows)
from one_launch_cuts import bracketed_rows, cut_and_partials, last_brackets, take_over, variant, work_space
from reference import SpecBatch
from specverify.kernels import triton_filter
from specverify.kernels.triton_filter_plan import one_launch_splits
from specverify.kernels.triton_gather import LANES, NPART


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scan, row_tally", [pytest.param(0, 0, id="atomic-gather"),
                                             variant(2, 0, id="lane-gather"),
                                             pytest.param(2, 1, id="lane-gather-row-tally"),
                                             variant(0, 1, id="row-tally")])
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
@pytest.mark.parametrize("finish_n, scan, row_tally", [(16, 0, 0), variant(0, 0, 0, id="0-0-0"),
                                                        pytest.param(16, 2, 0, id="16-lane-gather"),
                                                        pytest.param(16, 0, 64, id="16-row-tally"),
                                                        pytest.param(0, 0, 64, id="0-row-tally"),
                                                        variant(16, 0, 512, id="16-row-tally-512")])
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


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spin", [pytest.param(None, id="spin"), take_over()])
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
    fused_launches, fused, fused_partials = cut_and_partials(batch, poison, **plan)
    assert fused_launches == [("_cut_kernel", 3, True, True)]
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_PASS1", 0)
    own_launches, own, own_partials = cut_and_partials(batch, poison, **plan)
    assert own_launches == [("_row_stats_kernel", None, None, None), ("_cut_kernel", 3, False, True)]
    assert torch.equal(fused_partials, own_partials), (fused_partials != own_partials).nonzero().tolist()
    # a row past its request's drafts has no record: its words hold what the buffer held, NaN bits at times
    live = torch.tensor([True] * 4 + [j == 0 for b in range(1, 4) for j in range(4)])
    assert torch.equal(fused[:, live], own[:, live]), (fused != own).nonzero().tolist()
    # rows found from the gathered bracket (from every split's sums), the slow path and min-p alone
    assert set(own[5, [0, 4, 8, 12]].tolist()) == {0.0, 1.0, 2.0}, own[5].tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spin", [pytest.param(None, id="spin"), take_over()])
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
    fused_launches, fused, fused_partials = cut_and_partials(batch, -1, **plan)
    assert fused_launches == [("_cut_kernel", 3, True, True)]
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_PASS1", 0)
    own_launches, own, own_partials = cut_and_partials(batch, -1, **plan)
    assert own_launches == [("_row_stats_kernel", None, None, None), ("_cut_kernel", 3, False, True)]
    assert torch.equal(fused_partials, own_partials), (fused_partials != own_partials).nonzero().tolist()
    assert torch.equal(fused, own), (fused != own).nonzero().tolist()


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
    work, npart = work_space().cpu(), NPART.value
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
    batch = bracketed_rows(device, monkeypatch)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_PROGRAMS", 16)
    runs = []
    for slots in (0, keep):
        monkeypatch.setattr(triton_filter, "ONE_LAUNCH_LANE_SLOTS", slots)
        for work, *_ in triton_filter._buffers.values():     # a slot or region word left unwritten reads as NaN
            work.fill_(0x7FC00000)
        launches, records, _ = cut_and_partials(batch, 0, block_v=256)
        assert launches == [("_cut_kernel", 3, True, True)], launches
        runs.append((records, last_brackets(8), _split_regions(8)))
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
