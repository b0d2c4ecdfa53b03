"""The one launch's record from the row's packed list (specverify/kernels/triton_record.py, triton_search.py):
top-k's set copied out and ranked, the copies' tiles, the bucket sums loaded once, each bucket's first tokens kept in
its slots and a crossing ranked from them. Each must leave the records of the searches it replaces.

Without CUDA the kernels run under the Triton interpreter; the parameter id says which device ran.
"""

from __future__ import annotations

import pytest
import torch

from filter_settings import DEVICES, order_keys, tally_keys_of, three_launches_from_nine_rows  # noqa: F401
from one_launch_cuts import bracketed_rows, cut_before_and_after, last_brackets, records_unchanged, top_p_rows, \
    work_space
from reference import SpecBatch
from specverify.kernels import triton_filter


@pytest.mark.parametrize("device", DEVICES)
def test_top_k_set_ranked_from_one_copy_leaves_the_records_of_the_searches(device, monkeypatch):
    """With ONE_LAUNCH_RANK_TOP a top-k row's record copies every gathered token at or above top-k's tallied
    interval out of the packed list, where the row's bucket sums put at most RANK_N there, and ranks the copy
    (``triton_search.top_set``): top-k's rows of 50 and 20 here, alone and under top-p, where the rows of 300 and
    120 keep more and still search. Every record (cut value and index, Z', how the cut was found, the slow path
    included) must be the searches', on a work space filled with NaN bits between the two cuts."""
    batch = bracketed_rows(device, monkeypatch)
    _, meta = records_unchanged(batch, "ONE_LAUNCH_RANK_TOP", 0, 1, monkeypatch)
    assert meta["RANK_TOP"] == 1 and meta["ROW_TALLY"]


@pytest.mark.parametrize("device", DEVICES)
def test_copies_in_narrow_tiles_leave_the_records_of_one_tile(device, monkeypatch):
    """ONE_LAUNCH_COPY_TILE sets the tile of the record's copies out of the packed list (``triton_search._keep_lanes``:
    each lane counts its tokens in the interval over every tile, then stores them from its place over every tile
    again). The interpreter's default tile holds a whole list of these rows at once; 64 tokens a tile takes the
    lists of up to 256 tokens in several, with a tile's load in flight while the last is counted or stored, and
    lanes that hold more than one of the copied tokens. The records must be the one tile's, through the copy of
    top-k's set and the key searches' copies."""
    batch = bracketed_rows(device, monkeypatch)
    _, meta = records_unchanged(batch, "ONE_LAUNCH_COPY_TILE", 0, 64, monkeypatch)
    assert meta["COPY_TILE"] == 64 and meta["RANK_TOP"]


@pytest.mark.parametrize("device", DEVICES)
def test_bucket_sums_loaded_once_leave_the_records_of_each_search_loading_them(device, monkeypatch):
    """With ONE_LAUNCH_SUMS_ONCE the record loads the row's bucket sums once and hands them to the copy of top-k's
    set and to the searches, where each loads them itself. On the bracket tests' rows, with a RANK_N of 8 so that the
    searches (``triton_search.resolve``) take the rows that would be ranked, and the rows that the slow path takes,
    every record must be as before, on a work space filled with NaN bits between the two cuts, so that sums the
    second cut reads but did not take from its own load show."""
    batch = bracketed_rows(device, monkeypatch)
    monkeypatch.setattr(triton_filter, "RANK_N", 8)
    once, meta = records_unchanged(batch, "ONE_LAUNCH_SUMS_ONCE", 0, 1, monkeypatch)
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
    _, (records, brackets), _ = cut_before_and_after(batch, "ONE_LAUNCH_BUCKET_SLOTS", slots, slots, monkeypatch)
    plans = [(plan[6], stage[1], stage[2]) for plan in triton_filter._plans.values() for stage in plan[7]]
    assert len(plans) == 1 and plans[0][2]["SLOTS"] == slots and not plans[0][2]["STAMPS"], plans
    words, grid, meta = plans[0]
    nt, rows = meta["TALLY_N"], grid[0] * grid[1]
    end = words - rows * grid[2] * meta["LANE_WORDS"]       # the splits' lanes' slots come after the buckets'
    work = work_space()
    return records, brackets, work[end - rows * nt * slots:end].view(rows, nt, slots).cpu().clone()


@pytest.mark.parametrize("device", DEVICES)
def test_bucket_slots_hold_the_first_tokens_of_each_bucket(device, monkeypatch):
    """With ONE_LAUNCH_BUCKET_SLOTS each split stores every token it packs at its slot in its bucket, the count that
    the bucket's atomic add returns (``triton_tally.bucket_pack``). At 32 buckets over brackets of up to 1,024
    tokens and 8 slots a bucket, most buckets hold more tokens than slots and some fewer: each bucket's slots must
    hold as many of its own tokens as fit, each once, from its first slot on, and nothing else (a slot nobody
    stored at reads as NaN); a bucket of at most 8 tokens holds all of them. The rows are the cells test's top-p
    rows, every one found from its gathered bracket except row 7's (the slow path)."""
    batch = top_p_rows(device, monkeypatch)
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
    batch = top_p_rows(device, monkeypatch)
    monkeypatch.setattr(triton_filter, "TALLY_N", 8)
    records, meta = records_unchanged(batch, "ONE_LAUNCH_BUCKET_SLOTS", 0, 32, monkeypatch)
    assert meta["SLOTS"] == 32 and meta["ROW_TALLY"] and triton_filter.FINISH_N == 16
    brackets = last_brackets(8)
    cut = order_keys(records[0])
    sizes = []
    for r, (words, buckets) in enumerate(_bucketed(batch, brackets, 8)[:7]):
        crossing = buckets[(words >> 32) == cut[r]]
        sizes.append(int((buckets == crossing[0]).sum()))
    assert sum(2 <= size <= 32 for size in sizes) >= 5 and any(16 < size <= 32 for size in sizes), sizes
    assert any(size > 32 for size in sizes), sizes
