"""The float32 filter cut of the Triton backend (specverify/kernels/triton_filter.py, SPEC 3.4 and 4.1).

Without CUDA the kernels run under the Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1
before anything imports Triton); the parameter id says which device ran. The cut has three ways to a
row's kept set (nothing to search, the gathered bracket, the slow narrowing path): the production sizes
send almost every row through the bracket, so these tests shrink the gather capacity and the sample
(``triton_filter.CAP``, ``NS``, ``CH``) to send rows down all three at small V.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import reference
from filter_settings import _CUDA, DEVICES, _records, _rows, small_gather, three_launches_from_nine_rows  # noqa: F401
from reference import Noise, SpecBatch
from reference.sample import filtered_target
from specverify.checks.differential import compare_to_reference
from specverify.kernels import triton_filter, triton_sampler
from specverify.strategies import _logits


@pytest.mark.parametrize("device", DEVICES)
def test_float32_cut_keeps_the_references_tokens_on_every_path(device, small_gather):
    """Kept sets of the float32 cut equal the float64 reference's (these rows have no token within float32
    rounding of a cut), and every way to a cut ran: min-p alone, the gathered bracket, the slow path."""
    seen = set()
    for seed, V in ((1, 300), (2, 97)):
        batch = _rows(seed, 12, V, device)
        records = _records(batch)
        seen |= set(records[5].tolist())
        t = batch.temperature.cpu().double()[:, None]
        want = filtered_target(batch.to("cpu"), torch.arange(12), batch.target_logits.cpu(), t) > 0
        got = torch.softmax(triton_sampler.filtered_logits(batch).cpu().double() / t, dim=1) > 0
        assert torch.equal(got, want), (seed, (got != want).nonzero().tolist())
    assert seen == {0.0, 1.0, 2.0}


@pytest.mark.parametrize("device", DEVICES)
def test_slow_path_sets_top_p_alone_against_the_whole_rows_mass(device, small_gather):
    """Top-p alone on flat rows of 300 tokens keeps more than the 64 a small gather holds, so the bracket
    overflows and the slow path finds the cut. Its target is top_p times the row's whole mass, which the
    slow path sums itself (a top-k row's read weighs nothing): a wrong whole mass moves the cut."""
    batch = _rows(7, 8, 300, device)
    flat = torch.cat([_logits(torch.Generator().manual_seed(b), 1, 300, "flat") for b in range(8)]).float()
    batch = dataclasses.replace(batch, target_logits=flat.to(device),
                                top_k=torch.zeros(8, dtype=torch.int64, device=device),
                                top_p=torch.tensor([0.3, 0.5, 0.7, 0.9] * 2, device=device),
                                min_p=torch.zeros(8, device=device), temperature=torch.ones(8, device=device))
    records = _records(batch)
    assert records[5].tolist() == [2.0] * 8
    want = filtered_target(batch.to("cpu"), torch.arange(8), flat, torch.ones(8, 1, dtype=torch.float64)) > 0
    got = torch.softmax(triton_sampler.filtered_logits(batch).cpu().double(), dim=1) > 0
    assert torch.equal(got, want), (got != want).nonzero().tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("one_launch_rows", [0, 10 ** 6])
@pytest.mark.parametrize("tile", [32, 512])
def test_slow_path_in_wide_tiles_writes_the_records_of_reduced_tiles(device, one_launch_rows, tile, small_gather,
                                                                     monkeypatch):
    """The slow path reads its row whole for every step, in one program: with SLOW_TILE it reads in wide tiles,
    the next in flight, each thread summing its own lanes until the read's end. Its sums are integers, so the
    records (cut value and index, Z', the way found) must be those of the tiles it reduces one by one, bit for bit,
    in the three launches and the one launch. A bracket of -3 standard deviations misses every crossing, so that
    rows of every style and filter mix narrow, gather and sum their Z' on the slow path; flat rows cut inside one
    tie group wider than the gather. A tile of 32 leaves a part tile at the end of each row (V = 300 and 97), one
    of 512 holds a row with the next tile's load wholly masked: a tile read twice or the last one left out changes
    the counts, the gathered tokens or Z'."""
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROWS", one_launch_rows)
    monkeypatch.setattr(triton_filter, "BRACKET_SIGMAS", -3.0)
    for seed, V in ((1, 300), (2, 97)):
        mixed = _rows(seed, 8, V, device)
        # a tie group of 0 over 20 tokens and one of -inf over the rest: top-k's crossing among the -inf
        tied = torch.where(torch.arange(V, device=device) < 20, 0.0, float("-inf")).expand(8, V).contiguous()
        flat = dataclasses.replace(mixed, target_logits=tied,
                                   top_k=torch.tensor([0, 0, 70, V - 1] * 2, device=device),
                                   top_p=torch.tensor([0.5, 0.9, 0.9, 1.0] * 2, device=device))
        for batch in (mixed, flat):
            monkeypatch.setattr(triton_filter, "SLOW_TILE", 0)
            reduced = _records(batch)
            monkeypatch.setattr(triton_filter, "SLOW_TILE", tile)
            wide = _records(batch)
            assert reduced[5].tolist().count(2.0) >= 2, reduced[5]
            assert torch.equal(wide, reduced), (seed, (wide != reduced).nonzero().tolist())


def _normal_rows(B: int, V: int, top_k: list, top_p: list, device: str) -> SpecBatch:
    """B requests of one row each, normal logits at temperature 1, the given top-k and top-p, min-p off."""
    g = torch.Generator().manual_seed(3)
    return dataclasses.replace(_rows(8, B, V, device),
                               target_logits=torch.cat([_logits(g, 1, V, "normal") for _ in range(B)]).float().to(device),
                               top_k=torch.tensor(top_k, device=device), top_p=torch.tensor(top_p, device=device),
                               min_p=torch.zeros(B, device=device), temperature=torch.ones(B, device=device))


def _bracket_his(B: int) -> list:
    """Each work space's bracket upper keys of rows 0..B-1 (stage 0's, the last three-launch call's)."""
    return [work[1:2 * B:2].cpu() for work, *_ in triton_filter._buffers.values()]


def _assert_reference_kept_set_and_mass(batch: SpecBatch, records: torch.Tensor) -> None:
    """The kept sets (read off the records' cut value and index: min-p off) and Z' of ``records`` are those of
    the float64 reference (temperature 1)."""
    B = batch.num_requests
    logits = batch.target_logits.cpu().double()
    want = filtered_target(batch.to("cpu"), torch.arange(B), logits.float(), torch.ones(B, 1, dtype=torch.float64)) > 0
    assert records[2].tolist() == [0.0] * B
    value, index = batch.target_logits.cpu().float(), torch.arange(batch.vocab_size)[None, :]
    got = (value > records[0][:, None]) | ((value == records[0][:, None]) & (index <= records[1][:, None]))
    assert torch.equal(got, want), (got != want).nonzero().tolist()
    _assert_reference_mass(records, want, logits)


def _assert_reference_mass(records: torch.Tensor, want: torch.Tensor, scaled: torch.Tensor) -> None:
    """Z' of ``records`` is the float64 mass of the kept tokens ``want`` [B, V], e = exp(l / T - max) of the
    float64 logits over temperature ``scaled`` [B, V]."""
    z = torch.where(want, torch.exp(scaled - scaled.max(dim=1, keepdim=True).values), 0.0).sum(dim=1)
    torch.testing.assert_close(records[3].double(), z, rtol=1e-5, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("one_launch_rows", [0, 10 ** 6])
def test_min_p_alone_keeps_the_references_tokens_and_mass(device, one_launch_rows, small_gather, monkeypatch):
    """A row filtered by min-p alone has its own read, which sums the min-p mass alone (the other sums are
    left 0): its kept set (the records' floor against e = exp(l / T - m), as pass 2 tests it) and Z' must be
    the float64 reference's, at floors and temperatures where its kept set is a few tokens or thousands, in
    the three launches and the one-launch plan. All three filter tensors are passed, with top-k and top-p
    off, as a server passes them; V = 3,000 is over the (shrunk) gather capacity, so that the rows are read
    in splits after a sample bracket, not gathered whole."""
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROWS", one_launch_rows)
    B, V = 9, 3_000
    g = torch.Generator().manual_seed(5)
    batch = dataclasses.replace(_rows(8, B, V, device),
                                target_logits=torch.cat([_logits(g, 1, V, "normal") for _ in range(B)]).float().to(device),
                                top_k=torch.tensor([0, V] * 4 + [0], device=device),
                                top_p=torch.ones(B, device=device),
                                min_p=torch.tensor([0.5, 0.1, 0.01, 1e-3, 1e-4] * 2, device=device)[:B],
                                temperature=torch.tensor([1.0, 2.5, 0.7] * 3, device=device))
    records = _records(batch)
    assert records[5].tolist() == [0.0] * B
    t = batch.temperature.cpu().double()[:, None]
    logits = batch.target_logits.cpu()
    want = filtered_target(batch.to("cpu"), torch.arange(B), logits, t) > 0
    e = torch.exp(logits * (1.0 / batch.temperature.cpu()[:, None]) - records[4][:, None])
    got = e >= records[2][:, None]
    assert torch.equal(got, want), (got != want).nonzero().tolist()
    assert want.sum(dim=1).min() < 10 and want.sum(dim=1).max() > 1_000
    _assert_reference_mass(records, want, logits.double() / t)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gather_in_pass1", [0, 1])
def test_top_k_rows_with_tokens_above_the_bracket_keep_their_mass(device, gather_in_pass1, monkeypatch):
    """Top-k 3,000 to 8,000 of 20,000 tokens (past CAP, so the sample brackets the crossing): tokens lie above
    the bracket, and the read must weigh them (a top-k row with none above is read without masses). Z' and
    top-p's target, a share of what top-k keeps, both contain that mass, so the kept sets and Z' must be the
    float64 reference's. Top-p is off or close to 1 where top-k keeps too many to gather whole, so that its
    crossing lies in the bracket too and the bracket, not the slow path, finds every cut. With the gather in
    pass 1, these rows are bracketed before pass 1 and still read by the cut."""
    monkeypatch.setattr(triton_filter, "GATHER_IN_PASS1", gather_in_pass1)
    batch = _normal_rows(9, 20_000, [5000, 8000, 3000] * 3, [0.999, 0.9995, 1.0] * 3, device)
    records = _records(batch)
    assert any(bool((hi < 2 ** 31).all()) for hi in _bracket_his(9))
    assert records[5].tolist() == [1.0] * 9
    _assert_reference_kept_set_and_mass(batch, records)


@pytest.mark.parametrize("device", DEVICES)
def test_top_k_past_two_to_the_fifteen_tokens_keeps_the_references_set(device):
    """The record adds the splits' counts in 32 bits (``triton_record._totals``): a top-k of 49,000 and 49,900 of
    50,000 tokens puts more than 2**15 of them above the bracket, so that a count narrowed further, or a sum that
    drops a high bit, moves the crossing. Two rows, the one-launch plan at production sizes, each cut found in its
    gathered bracket (at 40,000 the bracket holds more than the gather's capacity, and the slow path recounts)."""
    batch = _normal_rows(2, 50_000, [49_000, 49_900], [1.0, 1.0], device)
    records = _records(batch)
    assert records[5].tolist() == [1.0, 1.0], records[5]
    _assert_reference_kept_set_and_mass(batch, records)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gather_in_pass1", [0, 1])
def test_top_k_with_top_p_gathers_a_small_top_k_set_whole(device, gather_in_pass1, monkeypatch):
    """Top-p keeps a prefix of what top-k keeps, and its crossing often lies above top-k's (top-p 0.5 of the
    top 2,000 of 20,000 tokens), where a bracket around top-k's crossing sends the row down the slow path.
    A top-k set that fits half the gather is gathered whole (nothing above the bracket), and the bracket
    finds every cut: kept sets and Z' must be the float64 reference's, whether the cut or pass 1 gathers."""
    monkeypatch.setattr(triton_filter, "GATHER_IN_PASS1", gather_in_pass1)
    batch = _normal_rows(9, 20_000, [2000] * 9, [0.9, 0.5, 0.99] * 3, device)
    records = _records(batch)
    assert any(bool((hi == 2 ** 31).all()) for hi in _bracket_his(9))
    assert records[5].tolist() == [1.0] * 9
    _assert_reference_kept_set_and_mass(batch, records)


@pytest.mark.parametrize("device", DEVICES)
def test_cut_records_do_not_depend_on_the_launch_plan(device):
    """Masses are fixed point, so the cut (value, index) and its kept mass Z' are the same integers whether
    a row is read in one split or several, in wide or narrow tiles: outputs are deterministic and a request's
    output does not depend on the batch around it."""
    batch = _rows(4, 12, 257, device)
    default = _records(batch)
    tiled = _records(batch, block_v=16, splits=(5, 2))
    assert torch.equal(default[:4], tiled[:4])


@pytest.mark.parametrize("device", DEVICES)
def test_top_p_splits_a_tie_group_at_its_lowest_indices(device):
    """SPEC 3.4 sorts ties by index: ten equal logits under top-p 0.35 keep tokens 0-3 exactly (the fourth
    crosses), in the cut's record (value 0, last index 3) and in the tokens the call emits."""
    V = 10
    batch = SpecBatch(torch.tensor([0]), torch.zeros(0, dtype=torch.int64), torch.zeros(1, V), None,
                      torch.tensor([1.0]), None, torch.tensor([0.35]), None).to(device)
    record = _records(batch)
    assert record[0, 0].item() == 0.0 and record[1, 0].item() == 3.0
    g = torch.Generator().manual_seed(5)
    emitted = {triton_sampler.TritonBackend()(batch, noise=Noise.draw(batch, g)).token_ids[0, 0].item()
               for _ in range(40)}
    assert emitted == {0, 1, 2, 3}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ties, low", [(100, -5.0), (10, -3.0)])
def test_top_p_splits_a_gathered_tie_group_at_its_lowest_indices(device, ties, low, monkeypatch):
    """A tie group at the top-p crossing among 300 gathered tokens, below three larger ones, kept in part:
    wider than the search's final ranking (100 ties: the key search ends on the group, the index search ranks
    its last tokens), or within it (10 ties: the ranking finds the crossing key and the mass above the group,
    which sets how many of it are kept). The kept set must be the reference's (the three, then the group's
    lowest indices), ranking on and off."""
    V = 300
    g = torch.Generator().manual_seed(9)
    logits = torch.full((1, V), low)
    at = torch.randperm(V, generator=g)
    logits[0, at[:3]] = 1.0
    logits[0, at[3:3 + ties]] = 0.0
    batch = SpecBatch(torch.tensor([0]), torch.zeros(0, dtype=torch.int64), logits, None, torch.tensor([1.0]),
                      None, torch.tensor([0.35]), None).to(device)
    want = filtered_target(batch.to("cpu"), torch.arange(1), logits, torch.ones(1, 1, dtype=torch.float64)) > 0
    assert 3 < int(want.sum()) < 3 + ties
    for rank_n in (64, 0):
        monkeypatch.setattr(triton_filter, "RANK_N", rank_n)
        got = triton_sampler.filtered_logits(batch).cpu() > float("-inf")
        assert torch.equal(got, want), (rank_n, (got != want).nonzero().tolist())


def test_filter_cut_divergence_is_ambiguous_only_when_the_reference_makes_it():
    """SPEC 4.1: an output the reference emits once the top-p cut moves across a token whose preceding mass
    is within tol of top_p is an excused ambiguity; the same request emitting a token far from every cut is
    a real divergence (the rule must not excuse a wrong kept set)."""
    # p ~ (0.5, 0.3, 0.2): top_p a relative 1e-7 below the mass before the third token cuts it, within tol
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2, 1e-9]]))
    p = torch.softmax(logits.double(), dim=1)[0]
    top_p = torch.tensor([float(p[0] + p[1]) * (1 - 1e-7)], dtype=torch.float64)
    batch = SpecBatch(torch.tensor([0]), torch.zeros(0, dtype=torch.int64), logits, None, torch.tensor([1.0]),
                      None, top_p, None)
    # an exponential that makes the third token win the race once it is kept
    noise = Noise(torch.zeros(0), torch.tensor([[10.0, 10.0, 0.01, 10.0]], dtype=torch.float64))
    assert reference.sample(batch, noise=noise).token_ids.tolist() == [[0]]
    third = reference.SpecOutput(torch.tensor([[2]]), torch.tensor([0]))
    cmp = compare_to_reference(batch, third, noise)
    assert len(cmp.divergences) == 1 and cmp.divergences[0].ambiguous, cmp.divergences
    assert "filter cut" in cmp.divergences[0].decision
    fourth = reference.SpecOutput(torch.tensor([[3]]), torch.tensor([0]))
    assert [d.ambiguous for d in compare_to_reference(batch, fourth, noise).divergences] == [False]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("V, cap", [(10, None), (61, None), (300, 64), (300, None)])
def test_ranking_the_gathered_tokens_gives_the_searchs_cut(device, V, cap, monkeypatch):
    """A row with at most RANK_N gathered tokens is cut by ranking them against each other, and a search ends
    by ranking once its interval holds at most FINISH_N: both must give the records (cut value and index,
    Z', the way it was found) of a search that never ranks, on rows gathered whole (V = 10, 61: ranked;
    V = 300: searched, then ranked) and, with a small capacity, from a bracket (V = 300)."""
    if cap is not None:
        monkeypatch.setattr(triton_filter, "CAP", cap)
        monkeypatch.setattr(triton_filter, "NS", 32)
        monkeypatch.setattr(triton_filter, "CH", 4)
    batch = _rows(7 + V, 24, V, device)
    ranked = _records(batch)
    monkeypatch.setattr(triton_filter, "RANK_N", 0)
    searched = _records(batch)
    assert torch.equal(ranked, searched), (ranked != searched).nonzero().tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_search_over_the_scratch_gives_the_cut_of_searching_every_token(device, monkeypatch):
    """Once few gathered tokens lie in the search's interval, its later steps tally a copy of those alone
    and carry the count and mass above it as constants: the records (cut value and index, Z', the way
    found) must be those of tallying every gathered token at every step. Rows of 61 tokens are gathered
    whole, so each search starts on the widest interval of keys and reaches the scratch (16 tokens at a
    capacity of 64) after a step or two, in top-k's count search and top-p's mass search (dropping either
    carried constant fails this test); ranking is off so that every row is searched."""
    monkeypatch.setattr(triton_filter, "CAP", 64)
    monkeypatch.setattr(triton_filter, "RANK_N", 0)
    batch = _rows(12, 24, 61, device)
    scratch = _records(batch)
    monkeypatch.setattr(triton_filter, "SCRATCH_SHARE", 0)
    everything = _records(batch)
    assert torch.equal(scratch, everything), (scratch != everything).nonzero().tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_pass1_gathers_the_records_of_the_cuts_own_read(device, monkeypatch):
    """With top-k passed and more rows than the one-launch plan's, a count bracket launches before pass 1
    (its drops start at the sample's max: the row's is not known yet), and pass 1 gathers each unweighed
    top-k row's bracket as it reads the row, in its own splits. The records must be those of the cut reading
    every row itself, the kept sets and Z' the reference's, and every row cut from its gathered bracket (a
    token lost by pass 1's gather sends a row down the slow path): top-k 7, 50 and 2,000 with top-p, in ten
    splits a row (the interpreter's plan at V = 20,000). A row whose sample is all -inf has no origin for the
    drops: stage 4 leaves it to stage 0, after pass 1, whose bracket from that sample holds every token, so
    that the slow path cuts it, in both plans."""
    batch = _normal_rows(9, 20_000, [50, 2000, 7] * 3, [0.9, 0.5, 1.0] * 3, device)
    logits = batch.target_logits.clone()
    # tokens 40-139 lie between the sample's first two chunks of 32 (every 157 tokens at this V)
    logits[3] = float("-inf")
    logits[3, 40:140] = torch.linspace(-2.0, 3.0, 100)
    batch = dataclasses.replace(batch, target_logits=logits)
    plans = []
    real_cut_launches = triton_sampler.cut_launches

    def cut_launches(*args):
        steps, record = real_cut_launches(*args)
        plans.append([step[3].get("STAGE", "pass 1") for step in steps])
        return steps, record
    monkeypatch.setattr(triton_sampler, "cut_launches", cut_launches)
    monkeypatch.setattr(triton_filter, "GATHER_IN_PASS1", 1)
    gathered = _records(batch)
    assert plans[-1] == [4, "pass 1", 0, 1, 2]
    his = _bracket_his(9)
    assert any(bool((hi == 2 ** 31).all()) for hi in his)
    assert gathered[5].tolist() == [1.0] * 3 + [2.0] + [1.0] * 5
    _assert_reference_kept_set_and_mass(batch, gathered)
    monkeypatch.setattr(triton_filter, "GATHER_IN_PASS1", 0)
    own = _records(batch)
    assert plans[-1] == ["pass 1", 0, 1, 2]
    assert torch.equal(gathered, own), (gathered != own).nonzero().tolist()


def test_pass1_split_target_is_one_the_cut_keeps_wherever_pass1_gathers():
    """Pass 1 gathers for the cut only where the cut's splits come out as pass 1's; pass1_splits picks pass 1's
    target so that they do, for every pass-1 target of its own (the GPU's depends on its SM count: a batch of
    9 rows asks for 59 splits on an H100, more than the cut's MAX_SPLITS) and every batch past the one-launch
    plan. A target the cut does not keep leaves the call on the plan without the gather, with nothing failing:
    only the plan says so."""
    from specverify.kernels.triton_kernels import plan  # noqa: PLC0415

    flags, dtypes = (True, True, False), (torch.int64, torch.float32)
    for V in (triton_filter.CAP + 1, 20_000, 151_936):
        for rows in (triton_filter.ONE_LAUNCH_ROWS + 1, 20, 33, 130, 640, 4096):
            for want1 in range(1, 160):
                want = triton_filter.pass1_splits(rows, V, want1, True)
                block_v, S1, chunk1, _, _, warps = plan(rows, 0, V, torch.device("cpu"), splits=(want, 1))
                meta1 = dict(BLOCK_V=block_v, BLOCK_B=128, num_warps=warps)
                stages = triton_filter.cut_recipe(rows, 1, V, S1, chunk1, meta1, flags, dtypes)[5]
                assert stages[0][0] == 4, (V, rows, want1, want, S1)


@pytest.mark.parametrize("sms", [132, 114, 108, 58, 16])
def test_one_launch_fits_its_programs_in_the_gpus_sms_and_stays_pass1(sms):
    """The one launch holds one program an SM and a split waits for its row's others: on a GPU with fewer SMs
    than ONE_LAUNCH_PROGRAMS (an H100 PCIe's 114, an A100's 108, an L4's 58), programs left for a second wave
    would stall their rows until the waiting ones took them over. For every batch of the plan and both vocabulary
    sizes, the programs must fit the SMs where the batch's rows do, and pass 1 planned by pass1_splits at the
    same SMs must still be the one launch's (PASS1), as cut_splits plans it."""
    from specverify.kernels.triton_kernels import plan  # noqa: PLC0415

    flags, dtypes = (True, True, False), (torch.int64, torch.float32)
    for V in (20_000, 151_936):
        for rows in range(1, triton_filter.ONE_LAUNCH_ROWS + 1):
            want = triton_filter.pass1_splits(rows, V, 4, True, sms)
            block_v, S1, chunk1, _, _, warps = plan(rows, 0, V, torch.device("cpu"), splits=(want, 1))
            meta1 = dict(BLOCK_V=block_v, BLOCK_B=128, num_warps=warps)
            (stage, grid, meta), = triton_filter.cut_recipe(rows, 1, V, S1, chunk1, meta1, flags, dtypes, None,
                                                             sms)[5]
            assert stage == 3 and meta["PASS1"], (V, rows, sms, grid, S1)
            assert grid[0] * grid[1] * grid[2] <= max(sms, rows), (V, rows, sms, grid)


def test_one_launch_planned_past_the_sms_only_with_the_fit_turned_off(monkeypatch):
    """ONE_LAUNCH_FIT_SMS = 0 is the plan from ONE_LAUNCH_PROGRAMS alone, for a probe to time against the cap: a
    CUDA device then gives no SM count to fit (and none is asked of the driver), and the interpreter never does."""
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_FIT_SMS", 0)
    assert triton_filter.one_launch_sms(torch.device("cuda", 0)) is None
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_FIT_SMS", 1)
    assert triton_filter.one_launch_sms(torch.device("cpu")) is None
    if _CUDA:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        assert triton_filter.one_launch_sms(torch.device("cuda", 0)) == sms


@pytest.mark.skipif(not _CUDA, reason="the interpreter's exp_normal is tl.exp itself; the GPU's is ex2 with "
                                      "subnormal results flushed")
def test_exp_normal_weighs_every_logit_as_tl_exp():
    """The read and the search weigh e through exp_normal, which drops tl.exp's handling of subnormal results:
    it must return tl.exp's very bits wherever those are at least 2**-126, 0 below, and so the same weight
    everywhere (weight() truncates all below 2**-44 to 0), or masses would depend on which loop summed them.
    The exponents span the subnormal boundary (x near -87.3), the deep tail and the row max."""
    import triton_probes  # noqa: PLC0415  (tests/triton_probes.py)

    g = torch.Generator().manual_seed(29)
    x = torch.cat([torch.linspace(-110.0, 0.0, 200_001), -87.3365 + 1e-3 * torch.randn(50_000, generator=g),
                   -40.0 * torch.rand(50_000, generator=g), torch.tensor([float("-inf"), -0.0, 0.0])]).float()
    fast, exact, w_fast, w_exact = (t.cpu() for t in triton_probes.weighed_exp(x.to("cuda")))
    normal = exact >= 2.0 ** -126
    assert normal.any() and (~normal).any()
    assert torch.equal(fast[normal].view(torch.int32), exact[normal].view(torch.int32)), \
        x[normal][fast[normal] != exact[normal]][:5].tolist()
    assert torch.equal(fast[~normal], torch.zeros_like(fast[~normal])), x[~normal][fast[~normal] != 0][:5].tolist()
    assert torch.equal(w_fast, w_exact), x[w_fast != w_exact][:5].tolist()


def test_a_split_limit_set_after_a_call_plans_the_next_call_by_it(monkeypatch):
    """cut_launches keeps its plans until a setting is assigned (``triton_filter._Settings`` empties them), so that
    a probe (ci/filter_stages.py --set) or a test may change any of them between calls. MAX_SPLITS bounds the
    three launches' splits a row: lowered after a first call, the next call's launches must split by it, not by
    the plan the first call left."""
    from specverify.kernels.triton_kernels import launches  # noqa: PLC0415

    B, V = 12, 20_000        # past the one-launch limit, rows over CAP: the sample bracket's three launches
    batch = _rows(7, B, V, "cpu")
    batch = dataclasses.replace(batch, top_k=None, min_p=None, top_p=torch.full((B,), 0.9))
    token_ids, num_accepted = torch.empty((B, 1), dtype=torch.int64), torch.empty(B, dtype=torch.int64)

    def splits() -> set:
        steps = launches(token_ids, num_accepted, batch.num_draft_tokens, batch.draft_token_ids,
                         batch.target_logits, batch.draft_probs, batch.temperature,
                         seeds=torch.zeros(B, dtype=torch.int64))
        cut, _ = triton_filter.cut_launches(steps[0], batch.top_k, batch.top_p, batch.min_p)
        return {grid[2] for _, grid, *_ in cut[1:]}

    assert max(splits()) > 3
    monkeypatch.setattr(triton_filter, "MAX_SPLITS", 3)
    assert splits() == {1, 3}


def test_a_one_launch_limit_set_after_a_call_plans_pass1_by_it(monkeypatch):
    """cut_splits keeps its answers as cut_launches keeps its plans, until a setting is assigned: a filtered call
    of a few rows plans pass 1 at the one launch's splits, so a lower ONE_LAUNCH_PROGRAMS after a first call must
    give the next call fewer, and ONE_LAUNCH_ROWS below the rows must give pass 1 its own target back (None)."""
    token_ids, logits = torch.empty((1, 5), dtype=torch.int64), torch.empty((5, 151_936))
    first = triton_filter.cut_splits(None, token_ids, logits)
    assert first is not None and first == triton_filter.cut_splits(None, token_ids, logits)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_PROGRAMS", 64)
    fewer = triton_filter.cut_splits(None, token_ids, logits)
    assert fewer is not None and fewer[0] < first[0] and fewer[1] == first[1], (fewer, first)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROWS", 4)
    assert triton_filter.cut_splits(None, token_ids, logits) is None
