"""Target filters (SPEC 3.4) in float32 on the GPU: each filtered row's cut found by a search over values,
with no sort of the row and no float64 kept set. ``triton_sampler`` runs the three cut launches here between
pass 1 and pass 2 of ``triton_chain``; pass 2 then applies the cut (``triton_cut.kept``). The block and tree
rules take the -inf-masked copy of ``triton_mask`` instead.

The kept set of a row is a prefix of its tokens sorted by logit descending, lower index first on ties
(top-k keeps whole tie groups, top-p may split one, min-p cuts by value). It is stored per row as a record:

    record  [6, R] float32, R = B K1, row (b, j) at b K1 + j:
            cut value c, cut index i: keep l > c, or l == c at an index <= i (c = -inf: no prefix cut);
            floor: keep exp(l / T - max) >= floor (min-p; 0 when off); Z': the kept mass, with the row's
            largest exp(l / T - max) = 1; the row max of l / T (pass 1's); how it was found (0 no search,
            1 from the gathered bracket, 2 the slow path)

The launches and their argument list are ``triton_cut_kernel``'s (``_cut_kernel``); this module holds the
cut's settings and plans them for a call (``cut_launches``).

How a row's cut is found (``triton_cut``, ``triton_search``). Masses are fixed point (``MASS_ONE`` per unit
of exp(l / T - max)), so every sum is exact and independent of the split and tile plan: the result is deterministic and
batch-invariant. A strided sample of NS logits is tallied on two grids of drops from the row max, giving a
bracket [lo, hi) of order keys that should hold the top-k crossing (the k-th largest logit) or, with top-k
off, the top-p crossing (where the sorted mass reaches top_p), with a wide margin. One read of the row sums
count and mass at and above hi, the min-p mass, and gathers the bracket's tokens (a top-k row with nothing
above its bracket and min-p off needs no mass from it, and is read unweighed). The resolve launch searches
the gathered tokens for the crossings, NC candidates a step, exactly (once few enough lie in the interval, a
step tallies only those, copied to a scratch, and the last FINISH_N are ranked against each other); at most
RANK_N gathered tokens are ranked against each other instead (``triton_rank``), with the same result. Where
min-p alone decides the cut (it keeps fewer tokens than the others would), nothing is searched. Where the
bracket missed or overflowed, that program narrows the interval alone (NC candidate keys per read of the
row), gathers it and searches it the same way.
"""

from __future__ import annotations

import sys
import threading
import types

import torch

from specverify.kernels.triton_chain import _row_stats_cut_kernel
from specverify.kernels.triton_cut_kernel import _cut_kernel
from specverify.kernels.triton_filter_plan import _recipe, one_launch_splits
from specverify.kernels.triton_kernels import default_splits
from specverify.kernels.triton_launch import alignment_mask, unit_stride

CAP = 8192       # tokens gathered per row
NS, CH = 4096, 32    # the sample: NS logits in chunks of CH
NG = 32          # candidates per grid of the sample bracket by mass (top-p alone)
NG_COUNT = 16    # and by count (top-k)
# the standard deviations of the sample's count or mass that each side of the bracket keeps: a crossing outside it
# costs the slow path, and each token inside costs the read, the pack and the record
BRACKET_SIGMAS = 4.0
# the slow path reads a row whole in one program for each of its steps: in tiles of SLOW_TILE (a power of 2) with
# the next in flight and each thread summing its own lanes until the read's end, from the row's max down and,
# below a bracket, just below it first (``triton_slow``), or (0) in tiles of 128 whose sums the program reduces a
# tile, over keys split evenly (docs/benchmarks.md, the twenty-sixth session: 1,024 cuts a missed row's cost 3-6x)
SLOW_TILE = 1024
MAX_SPLITS = 16
# stage 1 splits its rows until about this many programs read: with one program a row, a batch of a few
# hundred rows leaves the read latency-bound
READ_PROGRAMS = 2048
# NG to LAZY_PASS1_MAXNREG are the launches' shapes on the GPU (``_SETTINGS``), read into each plan, which an
# assignment to any setting empties, so that a probe (ci/filter_stages.py --set) or a test may change them at any
# time: the stage probe's choices on the H100 (docs/benchmarks.md, issue 29).
# stage 1's tile and warps: four logits a thread, placed by a warp ballot each (``triton_gather.gather``)
BLOCK_READ, READ_WARPS = 1024, 8
# the tile of a read that weighs nothing (keys, counts and the gather: few registers a logit)
COUNT_TILE = 512
# registers a thread of the read may hold (0: as ptxas likes): its kernel holds every loop of ``sweep``, and
# the largest would set the occupancy of all (uncapped, 99 registers)
READ_MAXNREG = 64
# the bracket's and the record's warps (0: pass 1's) and register caps (0: none): the bracket's mass tally
# holds 173 registers uncapped, and 168 at 4 warps fit three programs an SM without spilling. At 8 warps the
# record spills, and uncapped at 4 (250 registers) two programs an SM leave its search waiting on loads,
# where 96 registers fit five: 660 on 132 SMs, one wave of B = 128's 640 rows. The PRE plan's bracket
# before pass 1 (STAGE 4, top-k's rows by count) is a kernel of its own, and its own shape suits it best
BRACKET_WARPS, BRACKET_MAXNREG, RECORD_WARPS, RECORD_MAXNREG = 4, 168, 4, 96
PRE_BRACKET_WARPS, PRE_BRACKET_MAXNREG = 4, 128
# registers a thread of pass 1 gathering (PRE) may hold: ptxas takes 48 where 40 suffice, and 48 fit five
# programs of 8 warps an SM where 40 fit six
PASS1_MAXNREG = 40
# and where it also sums for the lazy cut: uncapped, ptxas takes 40 and schedules the three loops better
LAZY_PASS1_MAXNREG = 0
# sample entries a step of the bracket's tally on the GPU: its sums are [NG, SAMPLE_TILE] a program, so the
# tile sets the registers of stage 0 and so how many of its programs an SM holds; MASS_SAMPLE_TILE for a
# bracket by mass (top-p alone), whose three sums a point spill at 256 (docs/benchmarks.md, issue 29)
SAMPLE_TILE, MASS_SAMPLE_TILE = 256, 128
SEARCH_TILE = 256       # gathered tokens a step of the record launch's tallies on the GPU
# candidate keys per search step on the GPU: the tally of every gathered token against each key is the
# step's cost, so fewer keys and more steps is cheaper
NC_GPU = 4
# the most gathered tokens a row's cut is ranked over at once (``triton_rank``; 0: always search): a
# [RANK_N, RANK_N] comparison a row; a vocabulary this short compiles the record launch without the search
# and the slow path, whose registers leave few programs an SM
RANK_N = 64
# the search's scratch holds CAP / SCRATCH_SHARE tokens a row (0: none, every step tallies all gathered tokens);
# it ends by ranking its interval's tokens once at most FINISH_N are left (a power of 2, at most RANK_N; 0: never)
SCRATCH_SHARE, FINISH_N = 4, 16
# a batch of at most this many rows (B K1; B = 4 at k = 4) is cut in one launch (STAGE 3): a small batch's call
# is bound by its host, and the three launches' plan is up to six launches to the one's (docs/benchmarks.md)
ONE_LAUNCH_ROWS = 20
# its read's tile on the GPU: two logits a thread of its 8 warps, where one left each warp's loop a chain of waits (at
# B = 1 top-p's read ends 0.8 us sooner than at 256, and as soon as at 1,024; docs/benchmarks.md, the thirty-fourth
# session)
ONE_LAUNCH_TILE = 512
# it splits its rows until about this many programs read, at most ONE_LAUNCH_SPLITS a row (a split's region
# is CAP / 32 tokens then), and never past the GPU's SMs (``one_launch_sms``): one program an SM of an H100's or
# H200's 132 (B = 1's 5 rows: 25 splits each), where more programs (a second wave) cost more than their shorter
# reads save, and a split left for it stalls its row's others
ONE_LAUNCH_PROGRAMS, ONE_LAUNCH_SPLITS = 128, 32
# the one launch's programs kept within the GPU's SMs (1), or planned from ONE_LAUNCH_PROGRAMS alone (0), so that a
# probe can time the two plans in one process (ci/filter_stages.py --latency)
ONE_LAUNCH_FIT_SMS = 1
# each of its splits tallies its gathered tokens at this many keys spread over the bracket (0: none), so that
# the record's search starts from the sums' narrow interval rather than the whole bracket; TALLY_TILE tokens a
# step of that tally on the GPU (a [TALLY_TILE, TALLY_N] tally a step); with ONE_LAUNCH_ROW_TALLY, the row's
# TALLY_N buckets that they add their tokens to, PACK_TILE tokens a step: one step for a split's usual share
# (top-p's about 130 at B = 1, where 32 a step took 2.2 us more: docs/benchmarks.md, the twenty-seventh session)
TALLY_N, TALLY_TILE, PACK_TILE = 256, 32, 256
# the one launch computes pass 1's partials itself where its splits are pass 1's (1: ``pass1_splits`` plans pass 1
# so), so that a filtered call of a few rows is two launches as an unfiltered one is; a split polls its row's
# word of published splits up to HANDOFF_SPIN times before it computes an unpublished one itself
# (``triton_handoff``)
ONE_LAUNCH_PASS1, HANDOFF_SPIN = 1, 4096
# the one launch's splits tally the sample bracket's rounds between them, each its share of the sample's tiles, and
# hand the shares over as pass 1's partials are (1), where every split tallied the whole sample alone (0)
ONE_LAUNCH_SHARED = 1
# the widest sample tile of a split's share there (the narrower of it and the tile that gives every split one; a
# test narrows it, so that each split tallies several)
ONE_LAUNCH_SHARE_TILE = 128
# with top-k passed and more rows than that, pass 1 gathers the unweighed top-k rows (``triton_cut.unweighed``)
# as it reads them, after a count bracket launched before it (STAGE 4), so that the cut reads only the other
# rows (1); off (0), the cut reads every row (ci/bench_gpu.py --filters --set GATHER_IN_PASS1=0 times it)
GATHER_IN_PASS1 = 1
# a cut of top-p alone in the three launches searches only the rows pass 2 needs (``triton_lazy``; 0: every row)
LAZY_CUT = 1
# registers a thread of the one launch may hold (0: as ptxas likes). It runs one program an SM, but uncapped ptxas
# fits some of its plans to several: 128 registers and spills with top-p's tensor alone passed, 48 with min-p's
# (ci/cut_sass.py, docs/benchmarks.md)
ONE_LAUNCH_MAXNREG = 255
# the one launch stamps each split's phases with the GPU's clock in its work space (1; ``triton_cut.stamp``), for
# ci/filter_stages.py --stamps; off (0) the kernel holds none of it
ONE_LAUNCH_STAMPS = 0
# its read counts each lane's tokens and stores them in a second pass over its part of the row (2;
# ``triton_gather.gather_lanes``), where an atomic add a tile and warp (0) returns their slots after a round trip to
# memory that the warp waits on: top-p's read at B = 1 takes 5.7 us with the lanes against 8.9 with the atomic. (1, a
# scan of each tile, was slower still and is gone; docs/benchmarks.md, the twenty-third and twenty-seventh sessions)
ONE_LAUNCH_SCAN_GATHER = 2
# with TALLY_N (a power of 2), its splits add each token to its bucket of the row's TALLY_N sums, which the record
# loads once (1; ``triton_tally.bucket_pack``), where each split tallies its tokens at every key and the record sums
# the splits' tallies (0); its searches then copy from the list in wide tiles. At 256 keys its record ends 1 to 3 us
# sooner than the splits' tallies at 64 with top-k or top-p on (docs/benchmarks.md)
ONE_LAUNCH_ROW_TALLY = 1
# the one launch's sample bracket by count (top-k's) in one round of this many points (a power of 2), its end cells
# the bracket, where two rounds (0) refine the first's cells after a second rendezvous of the row's splits: at
# B = 1 the second round and its wait take 3.5 us of top-k's launch. Top-p alone keeps its two rounds: one round's
# cells of its mass, at 64 or 128 points, overflowed the gather and cost the slow path (docs/benchmarks.md, the
# twenty-eighth session)
ONE_LAUNCH_ROUND_NG = 64
# the one launch's pass 1 keeps three tiles' loads in flight ahead of its sums (1; ``triton_chain._split_stats``'s
# AHEAD), where each tile's load is waited on in turn (0): one program an SM cannot hide the wait behind another's.
# At B = 1 its own partials are in 1.2 us sooner, and its launch ends 0.9-1.2 us sooner (docs/benchmarks.md, the
# twenty-ninth session)
ONE_LAUNCH_PASS1_AHEAD = 1
# its count bracket's one round (ONE_LAUNCH_ROUND_NG) from the whole sample, which every split loads after its own
# pass-1 partials and counts alone between its publish and its polls, with the drops from the sample's max (1 or 2;
# ``triton_bracket``'s WHOLE): no share, no rendezvous, no row max; where each split tallies its share after the
# norms (0). 2 finds the bracket's two ends by counting at 4 grid points a step, where 1 counts at every point: the
# same bracket in about half the instructions. At B = 1 top-k's launch ends 2.6 us sooner than with 0 and 0.8 us
# sooner than with 1; top-p's rows skip the sample (docs/benchmarks.md, the thirtieth and thirty-first sessions)
ONE_LAUNCH_WHOLE_SAMPLE = 2
# its record copies a top-k row's kept set, and whatever lies between it and the bracket's top, out of the packed list
# in one pass, where the row's bucket sums put it among RANK_N tokens, and ranks the copy at once
# (``triton_search.top_set``, 1); where its top-k search and then its top-p search each copy their interval's tokens
# from the list (0)
ONE_LAUNCH_RANK_TOP = 1
# the tokens a tile of its record's copies out of the packed list, in two passes of lanes with the next tile's load
# in flight (``triton_search._keep_lanes``; 0: four search tiles, 1,024 on the GPU). At B = 1 top-p's copy and steps
# took as long with 2,048 and 2.3 us longer with 4,096 (docs/benchmarks.md, the thirty-second session); the tests
# take the copies in narrow tiles with it, where the interpreter's default tile holds each list whole
ONE_LAUNCH_COPY_TILE = 0
# its record loads the row's bucket sums once and hands them to the copy of top-k's set and to the searches (1),
# where each loads them itself (0): a top-p row, which ``top_set`` leaves to the searches, loaded them twice, and
# its record took 2.5 us from its partial sums to its tallies against top-k with top-p's 1.1. Stamped at B = 1,
# top-p's launch ends 0.3 us sooner with it (docs/benchmarks.md, the thirty-second session)
ONE_LAUNCH_SUMS_ONCE = 1
# its bracket of a top-p row in one round of this many points (a power of 2, at least 4; 0: two shared rounds) from
# the whole sample's cells: the row's splits each count their share of the sample into the cells of the round's
# grid, drops from the sample's max, and store it before they publish their pass 1 (``triton_sample.store_cells``),
# so that after the norms every split takes the bracket from the cells' bounds on the mass below each point, with
# no rendezvous of its own (``triton_bracket``). At B = 1 top-p's launch ends 5.9 us sooner than with the two rounds,
# and 5.0 us sooner than with 1,024 points; every split counting the whole sample's cells alone, by one histogram,
# took 5 us at 512 points and 10 us at 1,024 (docs/benchmarks.md, the thirty-third session)
ONE_LAUNCH_MASS_CELLS = 512
# with ONE_LAUNCH_ROW_TALLY, its splits also store each token at its slot in its bucket, this many slots a bucket (a
# power of 2; 0: none), the slot the count that the bucket's atomic add returns (``triton_tally.bucket_pack``): a
# key search whose tallied interval is one bucket of at most this many tokens ranks them from their slots at once
# (``triton_search.resolve``), where it copies them out of the list first and steps until few are left. At B = 1
# top-p's launch ends 4.4 us sooner with 32 slots than with none, and 1.3 us sooner than with 64, whose rank compares
# 64 tokens with 64 (docs/benchmarks.md, the thirty-fourth session)
ONE_LAUNCH_BUCKET_SLOTS = 32
# with ONE_LAUNCH_MASS_CELLS, each split loads the row's cells in flight with the row's norms (1), where it loads them
# after the norms (0). Stamped at B = 1, top-p's bracket ends 1.3 us sooner and its launch 1.5 us sooner with them
# ahead. (The cells' sample loaded before pass 1, ONE_LAUNCH_SAMPLE_AHEAD, ended it no sooner and went:
# docs/benchmarks.md, the thirty-fifth session)
ONE_LAUNCH_CELLS_AHEAD = 1
# with the lanes' gather (ONE_LAUNCH_SCAN_GATHER 2), each lane also stores its first this many bracket tokens at
# slots of its own in the work space as the read counts them (0 or a power of 2 up to 16; 0: none), and where no lane
# counted more, the split's region is filled from them rather than by a second pass over its share of the row, which
# re-reads every tile (``triton_gather.keep_slot``). Stamped at B = 1 with 8, the read ends 1.3 us sooner for top-p
# and 0.9 us for top-k, and each launch 0.8-1.1 us sooner; with 4, by a Poisson count, some top-p lane would count
# more in about half the calls. The slots loaded in one tile before any store ended the read 0.6 us later than slot by
# slot, and went (docs/benchmarks.md, the thirty-sixth to thirty-eighth sessions)
ONE_LAUNCH_LANE_SLOTS = 8
# a one launch of min-p's tensor alone compiles top-k's and top-p's code too, reading both as off (1): with its own
# plan (0) its pass 1 runs at half speed, though each program has an SM of its own (docs/benchmarks.md)
ONE_LAUNCH_EVERY_FILTER = 1


_buffers: dict = {}
_off: dict = {}
_plans: dict = {}
_splits: dict = {}


def _work(logits: torch.Tensor, stream, words: int, rows: int, ticket_words: int) -> tuple:
    """The cut launches' int64 work space, float32 records [6 rows] and int32 tickets (ticket_words, at least 5 rows;
    zero: the one-launch plan leaves them so), one of each per (thread, logits' device, stream), grown as needed."""
    key = (threading.get_ident(), logits.get_device(), stream)
    held = _buffers.get(key)
    if held is not None:
        work, record, tickets, views = held
        view = views.get(rows)      # held only while record and tickets hold this many rows
        if view is not None and work.numel() >= words and tickets.numel() >= ticket_words:
            return work, view, tickets
    else:
        work, record, tickets, views = None, None, None, {}
    device = logits.device
    if work is None or work.numel() < words:
        work = torch.empty(words, dtype=torch.int64, device=device)
    if record is None or record.numel() < 6 * rows:
        record, views = torch.empty(6 * rows, dtype=torch.float32, device=device), {}
    if tickets is None or tickets.numel() < ticket_words:
        tickets = torch.zeros(ticket_words, dtype=torch.int32, device=device)
    if rows not in views:
        views[rows] = record[:6 * rows]
    _buffers[key] = (work, record, tickets, views)
    return work, views[rows], tickets


def cut_launches(pass1: tuple, top_k, top_p, min_p, pass2: tuple | None = None) -> tuple:
    """(the launch steps, record [6, B K1]) of pass 1 and the cut: ``pass1`` is triton_chain's pass-1 step,
    whose arguments and scratch the cut shares; top_k / top_p / min_p [B] or None (off for every request).
    Pass 1, then three steps (two where rows are gathered whole: no bracket), or one for at most
    ONE_LAUNCH_ROWS rows; with top-k passed, where pass 1's splits are the cut's (``pass1_splits``), the count
    bracket, pass 1 gathering the unweighed rows, then the three. CAP, NS, CH, READ_PROGRAMS, RANK_N,
    SCRATCH_SHARE, FINISH_N, ONE_LAUNCH_ROWS, GATHER_IN_PASS1 and the launch shapes (``_settings``) are read here,
    so that a test can shrink them to reach the sample and slow paths, turn ranking, the search's scratch or
    its ranked end off, or choose the plan. ``pass2``: the pass-2 step (``triton_chain``) of a call of the
    standard rule, which makes a cut of top-p alone in the three launches lazy (``triton_lazy``; LAZY_CUT):
    its pass 1 also sums the masses before the drafts, and stage 0 leaves the rows pass 2 needs no cut of."""
    _, grid1, args1, meta1, key1, stream = pass1
    logits, temperature = args1[0], args1[2]
    top_k, top_p, min_p = unit_stride(top_k), unit_stride(top_p), unit_stride(min_p)
    if ONE_LAUNCH_EVERY_FILTER and top_k is None and top_p is None and min_p is not None \
            and grid1[0] * grid1[1] <= ONE_LAUNCH_ROWS:
        top_k, top_p = _filters_off(min_p)
    meta2 = None if pass2 is None else pass2[3]
    # a filter not passed is None in the key, one passed its dtype; the settings are not in it: a change of any
    # empties the plans
    plan_key = (id(meta1), id(meta2), top_k is not None and top_k.dtype, top_p is not None and top_p.dtype,
                min_p is not None and min_p.dtype)
    plan = _plans.get(plan_key)
    if plan is None or plan[0] is not meta1 or plan[1] is not meta2:
        if len(_plans) >= 4096:     # fuzzed shapes in a long run: start over rather than hold every meta
            _plans.clear()
        plan = _plans[plan_key] = _plan(pass1, top_k, top_p, min_p, pass2)
    _, _, rid, sf, chunk, region, words, stages, lazy, then_pass1, ticket_words = plan
    # pass 1's key covers the shared arguments; the filters' dtypes are in the recipe, their alignment here
    key = None if key1 is None else (rid, key1, alignment_mask(top_k, top_p, min_p))
    work, record, tickets = _work(logits, stream, words, grid1[0] * grid1[1], ticket_words)
    # the drafts, q, its row stride, the uniforms and the seeds that the lazy cut's stage 0 tests, from pass 2's
    # arguments (rows, then noise: ``triton_chain.chain_launches``); never read otherwise (LAZY is off), so zeros,
    # which the launcher takes as they are where a tensor costs it a data_ptr call
    tested = tuple(pass2[2][i] for i in (2, 3, 4, 7, 10)) if lazy else (0, 0, 0, 0, 0)
    args = (*args1[:5], temperature if top_k is None else top_k, temperature if top_p is None else top_p,
            temperature if min_p is None else min_p, work, record, tickets, *args1[5:11], sf, chunk, region, *tested)
    if len(stages) == 1 and not then_pass1:     # the one launch that is pass 1 too: a call of a few rows
        stage, grid, meta = stages[0]
        return ((_cut_kernel, grid, args, meta, key and key + (stage,), stream),), record
    steps = tuple((_cut_kernel, grid, args, meta, key and key + (stage,), stream) if stage is not None else
                  (_row_stats_cut_kernel, grid, args1 + (work, region, tested[0]) + args[5:8], meta,
                   key and key + ("pass 1",), stream)
                  for stage, grid, meta in stages)
    return ((pass1,) + steps if then_pass1 else steps), record


def _filters_off(like: torch.Tensor) -> tuple:
    """(top_k, top_p) [B] that turn both off (k = 0, p = 1), on like's device, held for the next call."""
    key = (like.shape[0], like.get_device())
    off = _off.get(key)
    if off is None:
        if len(_off) >= 64:
            _off.clear()
        off = _off[key] = (torch.zeros(like.shape, dtype=torch.int64, device=like.device),
                           torch.ones(like.shape, dtype=torch.float32, device=like.device))
    return off


# the settings that a cut's plan depends on, in ``triton_filter_plan._recipe``'s order (a probe or a test may change
# any of them at any time: an assignment empties the plans, ``_Settings``)
_SETTINGS = ("CAP", "NS", "CH", "READ_PROGRAMS", "RANK_N", "SCRATCH_SHARE", "FINISH_N", "ONE_LAUNCH_ROWS",
             "GATHER_IN_PASS1", "MAX_SPLITS", "NG", "NG_COUNT", "BLOCK_READ", "READ_WARPS", "COUNT_TILE",
             "READ_MAXNREG", "BRACKET_WARPS", "BRACKET_MAXNREG", "RECORD_WARPS", "RECORD_MAXNREG", "SAMPLE_TILE",
             "MASS_SAMPLE_TILE", "SEARCH_TILE", "NC_GPU", "PASS1_MAXNREG", "PRE_BRACKET_WARPS", "PRE_BRACKET_MAXNREG",
             "LAZY_PASS1_MAXNREG", "ONE_LAUNCH_TILE", "ONE_LAUNCH_PROGRAMS", "ONE_LAUNCH_SPLITS", "TALLY_N",
             "TALLY_TILE", "ONE_LAUNCH_PASS1", "HANDOFF_SPIN", "ONE_LAUNCH_SHARED", "ONE_LAUNCH_SHARE_TILE", "LAZY_CUT",
             "ONE_LAUNCH_STAMPS", "ONE_LAUNCH_MAXNREG", "ONE_LAUNCH_FIT_SMS", "ONE_LAUNCH_SCAN_GATHER",
             "ONE_LAUNCH_ROW_TALLY", "ONE_LAUNCH_EVERY_FILTER", "BRACKET_SIGMAS", "SLOW_TILE", "PACK_TILE",
             "ONE_LAUNCH_ROUND_NG", "ONE_LAUNCH_PASS1_AHEAD", "ONE_LAUNCH_WHOLE_SAMPLE", "ONE_LAUNCH_RANK_TOP",
             "ONE_LAUNCH_COPY_TILE", "ONE_LAUNCH_SUMS_ONCE", "ONE_LAUNCH_MASS_CELLS",
             "ONE_LAUNCH_BUCKET_SLOTS", "ONE_LAUNCH_CELLS_AHEAD", "ONE_LAUNCH_LANE_SLOTS")


def _settings() -> tuple:
    """The settings as they stand, in ``_SETTINGS``' order: a recipe's settings."""
    here = globals()
    return tuple(here[name] for name in _SETTINGS)


def _plan(pass1: tuple, top_k, top_p, min_p, pass2: tuple | None) -> tuple:
    """What of ``cut_launches`` depends only on the passes' metas (cached by ``triton_kernels.launch_recipe``),
    which filters are passed, their dtypes and the settings, which the caller keeps in ``_plans`` (a call of a
    few rows costs its host's work): (meta1, meta2, rid, SF, chunk, region, words, stages, whether it cuts
    lazily, whether pass 1 runs first as it is: not where the plan gathers in pass 1 or the one launch is pass
    1, the tickets' int32 words). An entry holds both metas, so that their ids are not reused while it lives."""
    _, grid1, args1, meta1, _, _ = pass1
    meta2 = None if pass2 is None else pass2[3]
    given = tuple(f for f in (top_k, top_p, min_p) if f is not None)
    flags = (top_k is not None, top_p is not None, min_p is not None)
    lazy = None
    if meta2 is not None and LAZY_CUT and top_p is not None and not (meta2["SYNTHETIC"] or meta2["BLOCK"]):
        lazy = (meta2["HAS_Q"], meta2["SEEDED"])
    B, K1, S1 = grid1
    rid, sf, chunk, region, words, stages = cut_recipe(B, K1, args1[5], S1, args1[11], meta1, flags,
                                                       tuple(f.dtype for f in given), lazy,
                                                       one_launch_sms(args1[0].device))
    first_stage, _, first_meta = stages[0]
    then_pass1 = first_stage not in (4, None) and not first_meta["PASS1"]
    # the recipe's plan may not cut lazily even where the call allows it (the one launch)
    lazy_cut = any(meta.get("LAZY", False) for _, _, meta in stages)
    # the tickets: [5, R] int32, then with ROW_TALLY each row's [2, TALLY_N] int64 buckets at an even word
    rows = B * K1
    ticket_words = 5 * rows + (5 * rows) % 2 + sum(4 * rows * meta["TALLY_N"] for _, _, meta in stages
                                                   if meta.get("ROW_TALLY"))
    return meta1, meta2, rid, sf, chunk, region, words, stages, lazy_cut, then_pass1, ticket_words


def cut_recipe(B: int, K1: int, V: int, S1: int, chunk1: int, meta1: dict, flags: tuple, dtypes: tuple,
               lazy: tuple | None = None, sms: int | None = None) -> tuple:
    """``_recipe`` of a cut after pass 1 (S1 splits of chunk1 entries, launched with meta1) at this module's
    settings; flags: (top_k, top_p, min_p) passed; dtypes: those passed, in that order; lazy and sms as _recipe's."""
    return _recipe(B, K1, V, S1, meta1["BLOCK_V"], meta1["BLOCK_B"], meta1["num_warps"], flags, dtypes, chunk1, lazy,
                   _settings(), sms)


def one_launch_sms(device: torch.device) -> int | None:
    """The SMs that the one launch's programs must fit in on ``device`` (``one_launch_splits``), or None in the
    interpreter, which runs them one by one, and with ONE_LAUNCH_FIT_SMS off."""
    if device.type != "cuda" or not ONE_LAUNCH_FIT_SMS:
        return None
    return torch.cuda.get_device_properties(device).multi_processor_count


def pass1_splits(rows: int, V: int, want1: int, top_k: bool, sms: int | None = None) -> int:
    """Pass 1's split target for a filtered call of ``rows`` rows (B K1), top-k passed or not, where ``want1``
    is its own. Where the cut's splits must be pass 1's, the target is one whose splits the cut's plan
    (``_recipe``) keeps: the one launch's for a batch of few rows (ONE_LAUNCH_PASS1: the one launch is pass 1
    too); where pass 1 gathers for the cut (top-k passed), at most MAX_SPLITS, and at least the read's target
    where that is fewer; sms: the GPU's, as ``one_launch_sms`` gives them."""
    if rows <= ONE_LAUNCH_ROWS:
        return one_launch_splits(rows, ONE_LAUNCH_PROGRAMS, ONE_LAUNCH_SPLITS, sms) if ONE_LAUNCH_PASS1 else want1
    if not GATHER_IN_PASS1 or V <= CAP or not top_k:
        return want1
    return min(MAX_SPLITS, max(want1, -(-READ_PROGRAMS // rows)))


def cut_splits(top_k, token_ids: torch.Tensor, logits: torch.Tensor) -> tuple | None:
    """The (pass 1, pass 2) split targets of a filtered call (None: the default plan), token_ids [B, K1] and
    logits [T, V] as the call's: pass 1 may be the one launch's or, with top-k passed, gather for the cut, whose
    splits are then its own. Kept, as the plans are, until a setting is assigned."""
    key = (top_k is not None, token_ids.shape, logits.shape[1], logits.get_device())
    splits = _splits.get(key, False)
    if splits is False:
        if len(_splits) >= 4096:
            _splits.clear()
        B, K1 = token_ids.shape
        device = logits.device
        want1, want2 = default_splits(B, K1 - 1, device)
        want = pass1_splits(B * K1, logits.shape[1], want1, top_k is not None, one_launch_sms(device))
        splits = _splits[key] = None if want == want1 else (want, want2)
    return splits


class _Settings(types.ModuleType):
    """This module, whose plans (``_plans``, ``_splits``) an assignment to one of its settings empties, so that a
    call looks its plan up without reading every setting: a call of a few rows is bound by its host. A probe's or
    a test's setattr (monkeypatch, ``--set``) comes here."""

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        if name in _SETTINGS:
            _plans.clear()
            _splits.clear()


sys.modules[__name__].__class__ = _Settings
