"""ci/filter_stages.py's latency A/B (``latency_rows``), the one-process comparison of triton_filter's settings that
each session's B = 1 measurements rest on, run on the CPU through the Triton interpreter as bench_gpu.py's dry run
runs: the ratios are the interpreter's and mean nothing; what must hold is that every variant's outputs and
records are compared with the first's, that the settings are back as they were after, and that a setting the
module does not have is refused by name. And its ``--stamps`` (``phase_stamps``): on the interpreter, that every
phase is stamped where the reader looks; on the GPU, that the clock's stamps follow the phases. And
ci/filter_misses.py's count of the rows a bracket sends to the slow path (``miss_rows``).
"""

from __future__ import annotations

import math
import os
import sys

import pytest
import torch

from filter_settings import _CUDA
from specverify.kernels import triton_filter
from specverify.kernels.triton_cut import SM_SLOT, STAMPS_N

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ci"))
import bench_gpu  # noqa: E402
import filter_misses  # noqa: E402
import filter_stages  # noqa: E402

CPU_ONLY = pytest.mark.skipif(_CUDA, reason="the dry run of the plumbing is the CPU's; the GPU runs the probe itself")


@CPU_ONLY
def test_latency_rows_compare_every_variants_outputs_and_restore_the_settings(monkeypatch):
    """Three plans of one B = 1 call of every filter (the one launch sharing the sample bracket, tallying it alone,
    and with pass 1 launched on its own): a row each, in order, with their outputs and records the same, and the
    settings as they stood after. The small capacity sends the rows through the sample bracket, where the plans
    differ."""
    sets, filters = _b1_through_the_bracket(monkeypatch)
    before = triton_filter._settings()
    rows = filter_stages.latency_rows(sets, filters, ["default", "ONE_LAUNCH_SHARED=0",
                                                      "ONE_LAUNCH_PASS1=0,ONE_LAUNCH_SHARED=0"], rounds=1)
    assert [r["variant"] for r in rows] == ["default", "ONE_LAUNCH_SHARED=0", "ONE_LAUNCH_PASS1=0,ONE_LAUNCH_SHARED=0"]
    assert all(r["same"] for r in rows), rows
    assert all(r["ratio"] > 0 and len(r["ratios"]) == 1 for r in rows), rows
    assert triton_filter._settings() == before


@CPU_ONLY
def test_latency_rows_refuse_a_setting_the_module_lacks(monkeypatch):
    """A misspelt setting would otherwise time the defaults twice and report them as a difference of none."""
    monkeypatch.setattr(bench_gpu, "DEVICE", "cpu")
    with pytest.raises(ValueError, match="ONE_LAUNCH_SHAERD"):
        filter_stages.latency_rows([], (None, None, None), ["default", "ONE_LAUNCH_SHAERD=0"], rounds=1)


@CPU_ONLY
def test_miss_rows_count_the_rows_a_bracket_sends_to_the_slow_path(monkeypatch):
    """ci/filter_misses.py's count, which decides how narrow the bracket may be (a median latency hides the slow
    path): a bracket of -3 standard deviations holds no crossing, so every row cut takes the slow path, where the
    defaults' take it for few; every call's rows are counted, fresh logits are drawn for each call and the set's
    own are back after, and so are the settings."""
    sets, filters = _b1_through_the_bracket(monkeypatch)
    before, logits = triton_filter._settings(), sets[0].logits.clone()
    rows = filter_misses.miss_rows(sets[:1], filters, ["default", "BRACKET_SIGMAS=-3"], calls=4, rounds=1)
    assert [(r["variant"], r["calls"], r["rows"]) for r in rows] == [("default", 4, 20), ("BRACKET_SIGMAS=-3", 4, 20)]
    assert rows[1]["slow"] == 20 and rows[0]["slow"] < 10, rows
    assert rows[1]["slow_calls"] == 4 and rows[0]["slow_calls"] <= rows[0]["slow"], rows
    assert all(0 < r["median_us"] <= r["p99_us"] for r in rows), rows
    assert triton_filter._settings() == before and torch.equal(sets[0].logits, logits)


@CPU_ONLY
def test_filter_misses_refuses_by_name_what_it_cannot_run(monkeypatch, capsys):
    """ci/filter_misses.py on a machine without a GPU, and with a misspelt setting: a message that names the
    problem and a non-zero exit, before any kernel runs (nothing printed), where a traceback or a run of the
    defaults twice would have come. In this process: its ``main`` exits through ``sys.exit(message)``."""
    runs = {"no GPU": ([], "CUDA GPU"),
            "misspelt": (["--dry-run", "BRACKET_SIGMA=3"], "triton_filter has no BRACKET_SIGMA"),
            "no calls": (["--dry-run", "--calls", "0"], "--calls and --rounds take at least 1")}
    monkeypatch.setattr(bench_gpu, "DEVICE", bench_gpu.DEVICE)     # --dry-run points it at the CPU
    for name, (argv, message) in runs.items():
        monkeypatch.setattr(sys, "argv", ["filter_misses.py", *argv, "default"])
        with pytest.raises(SystemExit) as exit_:
            filter_misses.main()
        assert isinstance(exit_.value.code, str) and message in exit_.value.code, (name, exit_.value.code)
        assert capsys.readouterr().out == "", name


# the interpreter's phase ends (a stamp is its phase + 1, us from the first): the phases, the launch's end, the
# record's, its last search's, the waits', then one program an SM
_ENDS = ([p / 1000 for p in range(1, 8)] + [7 / 1000] + [p / 1000 for p in range(8, 15)]
         + [0.021, math.nan, 0.022, 0.023]
         + [p / 1000 for p in range(15, 20)] + [1])


@CPU_ONLY
def test_every_split_of_a_filtered_row_stamps_every_phase_of_the_one_launch(monkeypatch):
    """``--stamps`` reads the one launch's phase stamps from the end of its work space. In the interpreter a stamp
    is its phase + 1, so row 0's phase ends come out as 1 to 7 thousandths of a us exactly when every split of
    the row reaches every phase and stores it where the reader looks, its record's as 8 to 14 when the one split
    that writes the record stamps each of its phases there, and the waits' as 15 to 19 when every split stamps
    its own pass-1 partials and both rounds of the shared bracket, its last key search's steps as 22 to 24; each
    split stores its place, which the
    interpreter makes its own SM (so one program an SM); and stamping must leave the call's outputs
    and records as they were (the stamps lie past every other word of the work space). Top-k and top-p with a
    small capacity, so that the rows take the sample bracket, the read, the pack and the tallied search that the
    phases time; then top-p alone, whose record has no top-k crossing for the reader to make up."""
    sets, filters = _b1_through_the_bracket(monkeypatch)
    call = filter_stages._caller(sets, filters)
    call(sets[0])
    plain = (sets[0].token_ids.clone(), sets[0].num_accepted.clone(), bench_gpu.last_records(5).clone())
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_STAMPS", 1)
    call(sets[0])
    # the work space is not zeroed between calls: the stamps a split does not reach must read 0 from this call
    filter_stages._stamps_region()[0].zero_()
    call(sets[0])
    stamps = filter_stages.last_stamps()
    assert torch.equal(stamps[:, :, :8], torch.arange(1, 9).expand_as(stamps[:, :, :8])), stamps
    record = stamps[:, :, 8:]
    writers = (record[:, :, 0] > 0).sum(dim=1)
    assert writers.tolist() == [1] * 5, record
    written = record[torch.arange(5), record[:, :, 0].argmax(dim=1)]
    assert torch.equal(written[:, :7], torch.tensor([9, 10, 11, 12, 13, 14, 15]).expand_as(written[:, :7])), written
    # and its last key search's steps (top-p's), which the others leave empty
    # (its interval starts at most FINISH tokens wide, so no first copy precedes its rank: slot 24 stays 0)
    assert torch.equal(written[:, 13:], torch.tensor([22, 23, 24, 0]).expand_as(written[:, 13:])), written
    assert int((record[:, :, 13:] > 0).sum()) == 5 * 3, record
    waits = stamps[:, :, 15:20]
    assert torch.equal(waits, torch.tensor([16, 17, 18, 19, 20]).expand_as(waits)), waits
    # each split's place, here its number in the launch
    assert torch.equal(stamps[:, :, 20].flatten(), torch.arange(1, stamps.shape[0] * stamps.shape[1] + 1)), stamps
    stamped = (sets[0].token_ids, sets[0].num_accepted, bench_gpu.last_records(5))
    assert all(torch.equal(a, b) for a, b in zip(plain, stamped))
    # the count bracket in one round (ONE_LAUNCH_ROUND_NG): the second round's own share and wait stay unstamped
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROUND_NG", 64)
    call(sets[0])
    filter_stages._stamps_region()[0].zero_()
    call(sets[0])
    waits = filter_stages.last_stamps()[:, :, 15:20]
    assert torch.equal(waits, torch.tensor([16, 17, 18, 0, 0]).expand_as(waits)), waits
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROUND_NG", 0)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_STAMPS", 0)
    ends = filter_stages.phase_stamps(sets[:1], filters, calls=2, warm=0)
    assert ends == pytest.approx(_ENDS, nan_ok=True), ends
    assert triton_filter.ONE_LAUNCH_STAMPS == 0
    top_p_alone = (torch.zeros_like(filters[0]),) + filters[1:]
    ends = filter_stages.phase_stamps(sets[:1], top_p_alone, calls=1, warm=0)
    assert math.isnan(ends[10]) and ends[8:10] + ends[11:15] == pytest.approx([0.008, 0.009, 0.011, 0.012, 0.013,
                                                                               0.014]), ends


@CPU_ONLY
@pytest.mark.parametrize("k, p, floor", [pytest.param(50, 0.9, 0.0, id="top-k-top-p"),
                                         pytest.param(40, 0.8, 0.001, id="top-k-top-p-min-p")])
def test_top_k_set_ranked_from_one_copy_leaves_the_records_of_the_two_searches(k, p, floor, monkeypatch):
    """With ONE_LAUNCH_RANK_TOP the record copies every gathered token at or above top-k's tallied interval out of
    the packed list, where the bucket sums put at most RANK_N there, and ranks the copy at once
    (``triton_search.top_set``), where top-k's search and then top-p's each copy their interval from the list and
    step through it. The bracket here gathers hundreds of tokens and top-k keeps tens, so each row's record must
    take the copy (stamped at 22, its searches' crossings and steps not stamped) and leave the outputs and records
    of the two searches (cut value and index, Z', how), with top-p after top-k, and with min-p's mass too (top-k
    alone is the one-launch records test's); so must the copy in tiles of 16 tokens (``ONE_LAUNCH_COPY_TILE``), where
    a lane holds several of the set's tokens. Each variant calls twice, so that a packed count left unzeroed by the
    first call shows in the second."""
    sets, filters = _b1_through_the_bracket(monkeypatch)
    filters = (torch.full_like(filters[0], k), torch.full_like(filters[1], p), torch.full_like(filters[2], floor))
    call = filter_stages._caller(sets, filters)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_STAMPS", 1)
    runs = {}
    variants = ((0, 0), (1, 0), (1, 16))
    for rank_top, tile in variants:
        monkeypatch.setattr(triton_filter, "ONE_LAUNCH_RANK_TOP", rank_top)
        monkeypatch.setattr(triton_filter, "ONE_LAUNCH_COPY_TILE", tile)
        call(sets[0])
        filter_stages._stamps_region()[0].zero_()
        call(sets[0])
        record = filter_stages.last_stamps()[:, :, 8:]
        written = record[torch.arange(5), record[:, :, 0].argmax(dim=1)]
        runs[rank_top, tile] = ((sets[0].token_ids.clone(), sets[0].num_accepted.clone(),
                                        bench_gpu.last_records(5).clone()), written)
    searched, by_search = runs[variants[0]]
    for variant in variants[1:]:
        ranked, by_rank = runs[variant]
        assert all(torch.equal(a, b) for a, b in zip(searched, ranked)), (variant, searched[2], ranked[2])
        assert set(ranked[2][5].tolist()) == {1.0}, ranked[2]        # every cut from the gathered tokens
        # phases 9, 13, 14 and the copy's 22 stamped (as phase + 1); top-k's crossing (10) and the steps (21, 23) not
        assert (by_rank[:, [1, 5, 6, 14]] > 0).all() and (by_rank[:, [2, 3, 4, 13, 15]] == 0).all(), by_rank
    assert (by_search[:, 2] == 11).all() and (by_search[:, 14] == 23).all(), by_search


def test_phase_ends_count_the_most_programs_that_ran_on_one_sm():
    """The last column says whether the launch's programs shared an SM, which its plan of one program an SM rules
    out and a plan of few registers lets the GPU do: the largest number of splits, over every row, whose place
    stamp is one SM, where splits that stored none (0) are not counted."""
    stamps = torch.zeros(2, 3, STAMPS_N.value, dtype=torch.int64)
    stamps[:, :, :8] = torch.arange(1, 9) * 1000
    stamps[:, :, SM_SLOT.value] = torch.tensor([[5, 9, 0], [9, 0, 7]])
    assert filter_stages._phase_ends(stamps)[-1] == 2
    stamps[1, 2, SM_SLOT.value] = 9
    assert filter_stages._phase_ends(stamps)[-1] == 3


@CPU_ONLY
def test_a_search_that_moves_its_interval_before_its_first_step_stamps_the_move(monkeypatch):
    """A key search whose tallied interval holds more than FINISH tokens copies them out of the list before its
    first step (``triton_search._find``), and stamps that copy at slot 24, so that ``--stamps`` splits the last
    search's time between the copy and the steps; the next search's entry clears it, so that the slot says whether
    the last search itself copied. With 8 tallied keys the intervals start wide: top-k alone's search copies first
    on every row, and under top-p too, top-p's search after it does on rows 0, 1, 3 and 4, where row 2's, at most
    FINISH tokens wide, goes straight to its rank and must read 0. The default tallies (256 keys) leave every
    interval narrow, which the stamps test above checks. The buckets' slots are off: a search that ranks its bucket
    from them copies nothing (``triton_search._key_find``)."""
    sets, filters = _b1_through_the_bracket(monkeypatch)
    monkeypatch.setattr(triton_filter, "TALLY_N", 8)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_BUCKET_SLOTS", 0)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_STAMPS", 1)
    first_copies = []
    for f in ((filters[0], torch.ones_like(filters[1]), filters[2]), filters):
        call = filter_stages._caller(sets, f)
        call(sets[0])
        filter_stages._stamps_region()[0].zero_()
        call(sets[0])
        record = filter_stages.last_stamps()[:, :, 8:]
        first_copies.append(record[torch.arange(5), record[:, :, 0].argmax(dim=1)][:, 16].tolist())
    assert first_copies == [[25] * 5, [25, 25, 0, 25, 25]], first_copies


@CPU_ONLY
def test_stamp_rows_stamp_each_variant_in_turn_and_restore_the_settings(monkeypatch):
    """``--stamps V1 V2``: the phases under each variant of the settings in one process, a row each in order, each
    stamped with its variant's settings in force (the phases, which the row tally and the scan gather reach by
    their own code, the same), the settings as they stood after, and a setting the module lacks refused by
    name."""
    sets, filters = _b1_through_the_bracket(monkeypatch)
    before = triton_filter._settings()
    in_force, real = [], filter_stages.phase_stamps

    def spy(*args, **kwargs):
        in_force.append((triton_filter.ONE_LAUNCH_ROW_TALLY, triton_filter.ONE_LAUNCH_SCAN_GATHER))
        return real(*args, **kwargs)
    monkeypatch.setattr(filter_stages, "phase_stamps", spy)
    defaults = (triton_filter.ONE_LAUNCH_ROW_TALLY, triton_filter.ONE_LAUNCH_SCAN_GATHER)
    other = (1 - defaults[0], 0 if defaults[1] else 2)     # the atomic gather against the lanes', or the lanes'
    flipped = f"ONE_LAUNCH_ROW_TALLY={other[0]},ONE_LAUNCH_SCAN_GATHER={other[1]}"
    rows = filter_stages.stamp_rows(sets[:1], filters, ["default", flipped], calls=1, warm=0)
    first = next(rows)      # each row as it is measured, the settings back to the defaults between rows
    assert triton_filter._settings() == before
    rows = [first, *rows]
    assert [v for v, _ in rows] == ["default", flipped]
    assert all(ends == pytest.approx(_ENDS, nan_ok=True) for _, ends in rows), rows
    assert in_force == [defaults, other]
    assert triton_filter._settings() == before
    with pytest.raises(ValueError, match="ONE_LAUNCH_ROW_TALY"):
        filter_stages.stamp_rows(sets[:1], filters, ["ONE_LAUNCH_ROW_TALY=1"], calls=1, warm=0)


@pytest.mark.skipif(not _CUDA, reason="the GPU's clock: the interpreter's stamps are the test above's")
def test_one_launch_stamps_follow_its_phases_on_the_gpu(monkeypatch):
    """On the GPU a stamp is %globaltimer once its phase is done (``triton_cut.stamp``'s inline asm, which the
    interpreter does not run): every split stamps all eight phases, and its stamps never go back in time; one
    split a row writes the record, and stamps its phases between its ticket and its end, in order, and top-p's
    key search's steps between top-k's crossing and top-p's; every split stamps its own pass-1 partials before it
    has the row's, and the bracket's rounds in order between the norms and the bracket. Stamping must
    leave the outputs and the records as they were. The same small capacity as on the CPU, so that the rows take
    the bracket and the tallied search."""
    sets, filters = _b1_through_the_bracket(monkeypatch, bench_gpu.DEVICE)
    call = filter_stages._caller(sets, filters)
    call(sets[0])
    plain = (sets[0].token_ids.cpu().clone(), sets[0].num_accepted.cpu().clone(), bench_gpu.last_records(5).clone())
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_STAMPS", 1)
    call(sets[0])
    filter_stages._stamps_region()[0].zero_()     # one writer a row: among this call's stamps alone
    call(sets[0])
    torch.cuda.synchronize()
    stamps = filter_stages.last_stamps()
    splits = stamps[:, :, :8]
    assert bool((splits > 0).all()), stamps
    assert bool((splits[:, :, 1:] >= splits[:, :, :-1]).all()), stamps
    assert ((stamps[:, :, 8] > 0).sum(dim=1) == 1).all(), stamps
    writer = stamps[torch.arange(5), stamps[:, :, 8].argmax(dim=1)]
    timeline = torch.cat([writer[:, 6:7], writer[:, 8:15], writer[:, 7:8]], dim=1)
    assert bool((timeline > 0).all()) and bool((timeline[:, 1:] >= timeline[:, :-1]).all()), writer
    # top-p's key search within its crossing: entered, its first copy (where it makes one), copied (not where it
    # ends on one key), ranked
    search = torch.cat([writer[:, 10:11], writer[:, 21:22], writer[:, 24:25], writer[:, 22:24], writer[:, 11:12]],
                       dim=1)
    search = torch.where(search > 0, search, writer[:, 21:22])
    assert bool((writer[:, 21] > 0).all()) and bool((search[:, 1:] >= search[:, :-1]).all()), writer
    waits = torch.cat([stamps[:, :, 0:1], stamps[:, :, 15:16], stamps[:, :, 1:3], stamps[:, :, 16:20],
                       stamps[:, :, 3:4]], dim=2)
    assert bool((waits > 0).all()) and bool((waits[:, :, 1:] >= waits[:, :, :-1]).all()), stamps
    sms = torch.cuda.get_device_properties(bench_gpu.DEVICE).multi_processor_count
    assert bool(((stamps[:, :, SM_SLOT.value] >= 1) & (stamps[:, :, SM_SLOT.value] <= sms)).all()), stamps
    stamped = (sets[0].token_ids.cpu(), sets[0].num_accepted.cpu(), bench_gpu.last_records(5))
    assert all(torch.equal(a, b) for a, b in zip(plain, stamped))


def _b1_through_the_bracket(monkeypatch, device: str = "cpu") -> tuple:
    """(input sets, (top_k, top_p, min_p)) of a B = 1 call of top-k and top-p on ``device``, with a capacity small
    enough that its rows take the sample bracket, where the plans and the one launch's phases differ. The work
    spaces start empty, so that the probe's readers (``last_records``, ``last_stamps``) find this test's alone. The
    bracket takes two rounds, shared by the splits, so that every wait has its stamps, and the record searches for
    each crossing, so that every search phase has its stamps."""
    monkeypatch.setattr(bench_gpu, "DEVICE", device)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROUND_NG", 0)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_WHOLE_SAMPLE", 0)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_RANK_TOP", 0)
    monkeypatch.setattr(triton_filter, "_buffers", {})
    monkeypatch.setattr(triton_filter, "CAP", 512)
    monkeypatch.setattr(triton_filter, "NS", 256)
    monkeypatch.setattr(triton_filter, "CH", 8)
    sets = bench_gpu.make_sets(1, 4096, torch.float32, 1 << 10)
    return sets, tuple(torch.full((1,), v, dtype=dt, device=device) for v, dt in ((50, torch.int64),
                                                                                 (0.9, torch.float32),
                                                                                 (0.0, torch.float32)))
