"""The one-launch cut of a batch of few rows (specverify/kernels/triton_filter.py, STAGE 3): every split finds
the row's bracket itself, reads its part, packs its tokens into the row's list and tallies them, and the last
split to finish writes the record. Its records must be those of the three launches, and its search from the
splits' tallies must find the cut of the search over the whole bracket.

Without CUDA the kernels run under the Triton interpreter; the parameter id says which device ran.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from filter_settings import DEVICES, _records, _rows, small_gather, three_launches_from_nine_rows  # noqa: F401
from specverify.kernels import triton_filter


@pytest.mark.parametrize("device", DEVICES)
def test_one_launch_cut_writes_the_records_of_three_launches(device, small_gather, monkeypatch):
    """A batch of few rows is cut in one launch, where each split finds the row's bracket itself, packs its
    tokens into the row's list, and the last split to finish writes the record: the records (cut value and
    index, Z', the way found) must be those of
    the three launches, on rows that reach the sample bracket and the slow path (the small capacity), rows
    gathered whole and searched (V = 40), and rows that are not filtered or not live (zero drafts beside
    three)."""
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
        # the splits-done tickets and packed-token totals are zero again for the next call
        assert all(int(tickets.abs().sum()) == 0 for _, _, tickets, _ in triton_filter._buffers.values())
        live = torch.tensor([True] * 4 + [j == 0 for b in range(1, 4) for j in range(4)])
        assert torch.equal(one[:, live], three[:, live]), (one != three).nonzero().tolist()
        # unfiltered rows, the gathered bracket's search and the slow path (V = 160), rows gathered whole (V = 40)
        assert set(three[5, live].tolist()) == ({0.0, 1.0, 2.0} if V == 160 else {0.0, 1.0})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("finish_n", [16, 0])
def test_search_from_the_splits_tallies_finds_the_cut_of_the_whole_bracket(device, finish_n, monkeypatch):
    """Each split tallies its gathered tokens at TALLY_N keys spread over the bracket, and the record's key
    searches (top-k's by count, top-p's by mass, top-p's after top-k's) start from the tallied interval that
    holds the crossing. With ranking off, every row whose bracket gathered tokens is searched; the records
    (cut value and index, Z', the way found) must be those of the search over the whole bracket, with the
    search's ranked end on and off, on rows of every style, including ties at the crossing."""
    monkeypatch.setattr(triton_filter, "CAP", 2048)
    monkeypatch.setattr(triton_filter, "NS", 256)
    monkeypatch.setattr(triton_filter, "CH", 8)
    monkeypatch.setattr(triton_filter, "RANK_N", 0)
    monkeypatch.setattr(triton_filter, "FINISH_N", finish_n)
    batch = _rows(21, 8, 3000, device)
    # every row filtered by a top-k or a top-p that the bracket gathers many tokens for, some with min-p
    batch = dataclasses.replace(batch, top_k=torch.tensor([50, 0, 300, 0, 50, 0, 120, 0], device=device),
                                top_p=torch.tensor([1.0, 0.9, 0.8, 0.5, 0.95, 0.9, 1.0, 0.7], device=device),
                                min_p=torch.tensor([0.0, 0.0, 0.0, 0.01, 0.0, 0.0, 0.0, 0.001], device=device),
                                temperature=torch.tensor([1.0, 1.0, 0.7, 1.0, 2.5, 1.0, 1.0, 0.7], device=device))
    monkeypatch.setattr(triton_filter, "TALLY_N", 0)
    whole = _records(batch)
    monkeypatch.setattr(triton_filter, "TALLY_N", 64)
    tallied = _records(batch)
    assert torch.equal(tallied, whole), (tallied != whole).nonzero().tolist()
    # the tallied search ran: rows found from the gathered bracket
    assert (whole[5] == 1.0).sum() >= 6, whole[5].tolist()
