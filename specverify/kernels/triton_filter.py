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

The three launches share one argument list (``cut_launches``), for the rows j <= k_b of request b:

    logits_ptr ... scratch_ptr, V, K1, S1, n_part, ints_at, stats_at   pass 1's arguments (triton_chain);
                                 they read pass 1's split partials for the row max, sum and largest logit
    top_k_ptr [B] int64, top_p_ptr [B] float32/64, min_p_ptr [B] float32/64 (read when HAS_K/P/M)
    work_ptr  [words] int64      [R, 2] bracket keys (lo, hi; the one launch's too); [R] whether pass 1 gathers
                                 the row (PRE); [R, SF, NPART] partial sums; [R, CAP] gathered tokens, split s in
                                 slots [s region, (s + 1) region); [R, SCRATCH] the search's scratch
                                 (``triton_search``); in the one-launch plan, [R, CAP] each row's tokens packed
                                 split after split, [R, SF, 2 TALLY_N] its splits' tallies (``triton_tally``),
                                 then the shares of its sample bracket's tallies (``triton_cut.bracket_shares``)
    record_ptr [6, R] float32 (out)
    tickets_ptr [5, R] int32     the one-launch plan's count of a row's splits done, of the tokens they packed,
                                 and the bits of its splits' parts published (``triton_handoff``): with PASS1
                                 pass 1's partials, with SHARED the sample bracket's two rounds; all zero
                                 between calls
    SF, chunk, region            splits per row, entries per split (whole tiles), gathered tokens per split

    _cut_kernel, STAGE 0  grid (B, K1)       the row's bracket from its sample
                 STAGE 1  grid (B, K1, SF)   one read of the row: sums, and the bracket's tokens gathered
                 STAGE 2  grid (B, K1)       the record (``triton_record``)
                 STAGE 3  grid (B, K1, SF)   all three in one launch, for a batch of few rows: every split
                                             finds the row's bracket itself, reads its part, packs its
                                             tokens into the row's list and tallies them at TALLY_N keys
                                             (``triton_tally.tally_pack``), and the last split of the row to
                                             finish writes the record, its searches starting from the
                                             tallied interval of each crossing; with PASS1 (pass 1's splits
                                             the same), the launch is pass 1 too: each split computes its
                                             pass-1 partials first (``triton_handoff``), and no pass 1 runs;
                                             with SHARED, the row's splits tally the bracket's sample between
                                             them (``triton_bracket``)
                 STAGE 4  grid (B, K1)       with GATHER_IN_PASS1 (the PRE plan): the top-k rows' brackets
                                             before pass 1, which then gathers the unweighed ones
                                             (``triton_chain._row_stats_cut_kernel``, the cut's splits
                                             its own); stages 0 and 1 then skip what 4 and pass 1 did

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
import triton
import triton.language as tl

from specverify.kernels.triton_bracket import bracket, pre_bracket
from specverify.kernels.triton_chain import _row_stats_cut_kernel
from specverify.kernels.triton_cut import (DEFER, KMAX, KMIN, bounds, bracket_shares, cut_request, cut_row_norms,
                                           order_key, packed_tokens, read_split, split_tallies, stamp, work_gathered,
                                           work_parts, work_tokens)
from specverify.kernels.triton_filter_plan import _recipe, one_launch_splits
from specverify.kernels.triton_gather import pack
from specverify.kernels.triton_handoff import handoff_word, pass1_handoff
from specverify.kernels.triton_kernels import default_splits
from specverify.kernels.triton_launch import alignment_mask
from specverify.kernels.triton_lazy import SKIP, cut_needed, top_p_alone
from specverify.kernels.triton_record import write_record
from specverify.kernels.triton_tally import tally_keys, tally_pack

CAP = 8192       # tokens gathered per row
NS, CH = 4096, 32    # the sample: NS logits in chunks of CH
NG = 32          # candidates per grid of the sample bracket by mass (top-p alone)
NG_COUNT = 16    # and by count (top-k)
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
ONE_LAUNCH_TILE = 256   # its read's tile on the GPU
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
# step of that tally on the GPU (a [TALLY_TILE, TALLY_N] tally a step)
TALLY_N, TALLY_TILE = 64, 32
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


# Integer arguments equal to 1 are not specialised: at V = 1 (or one split, one token a region) the
# specialised kernel crashes Triton 3.6's CUDA pipeline (an LLVM assertion in a pass).
@triton.jit(do_not_specialize=["V", "K1", "S1", "n_part", "ints_at", "stats_at", "SF", "chunk", "region"])
def _cut_kernel(
    logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr, top_k_ptr, top_p_ptr, min_p_ptr,
    work_ptr, record_ptr, tickets_ptr, V, K1, S1, n_part, ints_at, stats_at, SF, chunk, region,
    draft_ids_ptr, q_ptr, stride_q, uniform_ptr, seeds_ptr,
    STAGE: tl.constexpr, HAS_K: tl.constexpr, HAS_P: tl.constexpr, HAS_M: tl.constexpr, CAP: tl.constexpr,
    NS: tl.constexpr, CH: tl.constexpr, NG: tl.constexpr, NG_COUNT: tl.constexpr, NC: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_F: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_SAMPLE: tl.constexpr, BLOCK_MASS: tl.constexpr, BLOCK_FB: tl.constexpr,
    BLOCK_READ: tl.constexpr, BLOCK_COUNT: tl.constexpr,
    RANK_N: tl.constexpr, RANK_BLOCK: tl.constexpr, ONLY_RANK: tl.constexpr, SCRATCH: tl.constexpr,
    FINISH: tl.constexpr, PRE: tl.constexpr, NW_READ: tl.constexpr, NW_COUNT: tl.constexpr, LAZY: tl.constexpr,
    HAS_Q: tl.constexpr, SEEDED: tl.constexpr, TALLY_N: tl.constexpr, TALLY_BLOCK: tl.constexpr,
    PASS1: tl.constexpr, SPIN: tl.constexpr, SHARED: tl.constexpr, STAMPS: tl.constexpr,
):
    """The three cut launches, one compiled kernel each (STAGE is a constexpr): 0, grid (B, K1), each filtered
    row's bracket [lo, hi) from its sample, to work[2 rid]; 1, grid (B, K1, SF), one read of each filtered
    row, split by split (a kernel of its own, so that its registers, and so the programs an SM holds, are a
    streaming kernel's); 2, grid (B, K1), each row's record from the sums and the gathered tokens. Or 3,
    grid (B, K1, SF), the one-launch plan of a few rows: each launch costs the host more than a few rows
    cost the GPU, so every split computes the bracket (the same integers: the same sample, the same code)
    instead of a launch before it, and the row's last split to finish its read writes the record; with PASS1
    it is pass 1 too, each split computing its pass-1 partials before the rest (``triton_handoff``). With PRE
    (top-k passed, many rows), STAGE 4, grid (B, K1), brackets the top-k rows before pass 1, which then
    gathers the unweighed ones (``triton_cut.unweighed``) as it reads them: stage 0 brackets the other rows
    and stage 1 reads them. With LAZY (top-p alone, ``triton_lazy``), stage 0 first tags the rows whose cut
    the call's verification does not need (lo the tag, hi SKIP), which stages 1 and 2 leave uncut."""
    k_b = tl.load(num_draft_ptr + tl.program_id(0))
    NR = tl.num_programs(0) * K1
    if STAGE == 4:
        live, on, row_ptr, rid, k, k_on, top_p, p_on, floor, inv_t = cut_request(
            logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, top_k_ptr, top_p_ptr, min_p_ptr, k_b, V, K1,
            HAS_K, HAS_P, HAS_M, BLOCK_B)
        gathers = tl.zeros([], tl.int64)
        if live & on & k_on:
            gathers = pre_bracket(row_ptr, rid, NR, work_ptr, V, SF, chunk, k, k_on, top_p, p_on, floor, inv_t, CAP,
                                   NS, CH, NG, NG_COUNT, BLOCK_SAMPLE, BLOCK_MASS)
        tl.store(work_gathered(work_ptr, NR, rid), gathers)
    else:
        if STAMPS:      # the one launch's phases timed (ci/filter_stages.py --stamps)
            stamp(work_ptr, NR, tl.program_id(0) * K1 + tl.program_id(1), SF, CAP, SCRATCH, TALLY_N, NG + NG_COUNT, 0,
                  0)
        if PASS1:       # the one launch's splits are pass 1's: the partials from the splits themselves
            # the settings first, so that their loads are in flight through pass 1 and the wait for the row's
            # splits: loaded after the norms, they cost B = 1's launch 6 us (docs/benchmarks.md, issue 29)
            live, on, row_ptr, rid, k, k_on, top_p, p_on, floor, inv_t = cut_request(
                logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, top_k_ptr, top_p_ptr, min_p_ptr, k_b, V,
                K1, HAS_K, HAS_P, HAS_M, BLOCK_B)
            pass1_handoff(logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr, V, K1, S1, n_part,
                          ints_at, stats_at, chunk, handoff_word(tickets_ptr, NR, rid, 0), k_b, SPIN, BLOCK_V, BLOCK_B)
            if STAMPS:
                stamp(work_ptr, NR, rid, SF, CAP, SCRATCH, TALLY_N, NG + NG_COUNT, 1, 0)
            m, z, above = cut_row_norms(scratch_ptr, k_b, K1, S1, n_part, ints_at, stats_at, BLOCK_K, BLOCK_S)
        else:
            # pass 1's partials first, then the settings, as the compiler schedules them best (ci/cut_sass.py)
            m, z, above = cut_row_norms(scratch_ptr, k_b, K1, S1, n_part, ints_at, stats_at, BLOCK_K, BLOCK_S)
            live, on, row_ptr, rid, k, k_on, top_p, p_on, floor, inv_t = cut_request(
                logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, top_k_ptr, top_p_ptr, min_p_ptr, k_b, V,
                K1, HAS_K, HAS_P, HAS_M, BLOCK_B)
        if STAMPS:
            stamp(work_ptr, NR, rid, SF, CAP, SCRATCH, TALLY_N, NG + NG_COUNT, 2,
                  (m == m).to(tl.int32) + k.to(tl.int32))
        if STAGE == 0:
            if live & on:
                mine = True
                if PRE:         # stage 4 bracketed the top-k rows, but for those it deferred
                    mine = ~k_on | (tl.load(work_ptr + 2 * rid + 1, mask=k_on, other=0) == DEFER)
                if LAZY:        # the rows of top-p alone (pass 1 summed their masses before the drafts)
                    if top_p_alone(on, k_on, p_on, floor):
                        mine = cut_needed(logits_ptr, stride_logits, draft_ids_ptr, q_ptr, stride_q, uniform_ptr,
                                          seeds_ptr, num_draft_ptr, scratch_ptr, work_ptr, rid, k_b, K1, S1, n_part,
                                          ints_at, stats_at, top_p, inv_t, HAS_Q, SEEDED, BLOCK_K, BLOCK_S, BLOCK_B)
                if mine:
                    lo, hi = bracket(row_ptr, V, k, k_on, top_p, p_on, z, m, inv_t, CAP, NS, CH, NG, NG_COUNT,
                                     BLOCK_SAMPLE, BLOCK_MASS, work_ptr, work_ptr, 0, SF, 0, False, 2)
                    tl.store(work_ptr + 2 * rid, lo)
                    tl.store(work_ptr + 2 * rid + 1, hi)
        elif STAGE == 1:
            if live & on:
                lo, hi = bounds(work_ptr, rid, V, CAP)
                read = True
                if PRE:         # pass 1 gathered the rows stage 4 found unweighed
                    read = tl.load(work_gathered(work_ptr, NR, rid)) == 0
                if read & (hi != SKIP):
                    read_split(row_ptr, rid, NR, work_ptr, lo, hi, V, SF, chunk, region, k_on, p_on, inv_t, m,
                               floor, HAS_M, CAP, BLOCK_READ, BLOCK_COUNT, NW_READ, NW_COUNT)
        else:
            # stage 2 writes every live row's record; in the one launch (3), a filtered row's last split to finish
            # its read writes it, and split 0 an unfiltered row's (with PASS1, its last split past its norms)
            lo = tl.full([], KMIN, tl.int64)
            hi = tl.full([], KMAX, tl.int64)
            n_packed = tl.zeros([], tl.int32)
            writes = (STAGE == 2) | (tl.program_id(2) == 0)
            if live & on:
                if STAGE == 2:
                    lo, hi = bounds(work_ptr, rid, V, CAP)
                else:
                    # with SHARED, the row's splits tally the sample between them (``triton_bracket``)
                    lo, hi = bracket(row_ptr, V, k, k_on, top_p, p_on, z, m, inv_t, CAP, NS, CH, NG, NG_COUNT,
                                     BLOCK_SAMPLE, BLOCK_MASS,
                                     bracket_shares(work_ptr, NR, rid, SF, CAP, SCRATCH, TALLY_N, NG + NG_COUNT),
                                     handoff_word(tickets_ptr, NR, rid, 1), NR, SF, SPIN, SHARED, BLOCK_F)
                    if tl.program_id(2) == 0:   # where stage 0 leaves it, for a test to compare the two
                        tl.store(work_ptr + 2 * rid, lo)
                        tl.store(work_ptr + 2 * rid + 1, hi)
                    if STAMPS:
                        stamp(work_ptr, NR, rid, SF, CAP, SCRATCH, TALLY_N, NG + NG_COUNT, 3, (lo ^ hi).to(tl.int32))
                    read_split(row_ptr, rid, NR, work_ptr, lo, hi, V, SF, chunk, region, k_on, p_on, inv_t, m,
                               floor, HAS_M, CAP, BLOCK_READ, BLOCK_COUNT, NW_READ, NW_COUNT)
                    if STAMPS:
                        stamp(work_ptr, NR, rid, SF, CAP, SCRATCH, TALLY_N, NG + NG_COUNT, 4, 0)
                    if k_on | p_on:     # the split's tokens join the row's list, so the record compacts nothing
                        split = tl.program_id(2)
                        mine = work_tokens(work_ptr, NR, rid, SF, CAP) + split * region
                        parts = work_parts(work_ptr, NR, rid, SF, split)
                        if TALLY_N > 0:     # tallied as they are packed: the record's searches start from the sums
                            tally_pack(mine, parts, region, packed_tokens(work_ptr, NR, rid, SF, CAP, SCRATCH),
                                       tickets_ptr + NR + rid,
                                       split_tallies(work_ptr, NR, rid, SF, split, CAP, SCRATCH, TALLY_N),
                                       tally_keys(lo, tl.minimum(hi, above), TALLY_N), inv_t, m, CAP, TALLY_N,
                                       TALLY_BLOCK)
                        else:
                            pack(mine, parts, region, packed_tokens(work_ptr, NR, rid, SF, CAP, SCRATCH),
                                 tickets_ptr + NR + rid, CAP, BLOCK_R)
                    if STAMPS:
                        stamp(work_ptr, NR, rid, SF, CAP, SCRATCH, TALLY_N, NG + NG_COUNT, 5, 0)
                    writes = last_split(tickets_ptr + rid, SF)
                    if writes:
                        n_packed = tl.atomic_xchg(tickets_ptr + NR + rid, 0)
            elif PASS1 & live:      # an unfiltered row's record too waits for its norms: its last split writes it
                writes = last_split(tickets_ptr + rid, SF)
            if STAMPS:
                stamp(work_ptr, NR, rid, SF, CAP, SCRATCH, TALLY_N, NG + NG_COUNT, 6, writes.to(tl.int32))
            if (STAGE == 3) & writes:   # every split of the row is past its waits: the words zero for the next call
                for which in tl.static_range(3):
                    tl.store(handoff_word(tickets_ptr, NR, rid, which), 0)
            if writes:
                write_record(row_ptr, rid, NR, live, on & (hi != SKIP), lo, hi, work_ptr, record_ptr, V, SF, region,
                             k, k_on, top_p, p_on, floor, inv_t, m, z, above, CAP, NC, BLOCK_F, BLOCK_R, BLOCK_FB,
                             RANK_N, RANK_BLOCK, ONLY_RANK, SCRATCH, FINISH, n_packed, STAGE == 3, TALLY_N)
                if live & on & (hi == SKIP):     # the lazy tag, where pass 2 reads how the cut was found
                    tl.store(record_ptr + rid + 5 * NR, lo.to(tl.float32))
            if STAMPS:
                stamp(work_ptr, NR, rid, SF, CAP, SCRATCH, TALLY_N, NG + NG_COUNT, 7, 0)


@triton.jit
def last_split(ticket_ptr, SF):
    """Whether this program is the last of its row's SF splits to pass here (the one-launch plan's ticket, zero
    again after the last)."""
    # every thread's stores are issued before the release that publishes them to the last split
    tl.debug_barrier()
    last = tl.atomic_add(ticket_ptr, 1, sem="acq_rel") == SF - 1
    if last:
        tl.store(ticket_ptr, 0)
    return last


_buffers: dict = {}
_plans: dict = {}
_splits: dict = {}


def _work(logits: torch.Tensor, stream, words: int, rows: int) -> tuple:
    """The cut launches' int64 work space, float32 records [6 rows] and int32 tickets [5 rows] (zero: the one-launch
    plan leaves them so), one of each per (thread, logits' device, stream), grown as needed."""
    key = (threading.get_ident(), logits.get_device(), stream)
    held = _buffers.get(key)
    if held is not None:
        work, record, tickets, views = held
        view = views.get(rows)      # held only while record and tickets hold this many rows
        if view is not None and work.numel() >= words:
            return work, view, tickets
    else:
        work, record, tickets, views = None, None, None, {}
    device = logits.device
    if work is None or work.numel() < words:
        work = torch.empty(words, dtype=torch.int64, device=device)
    if record is None or record.numel() < 6 * rows:
        record, views = torch.empty(6 * rows, dtype=torch.float32, device=device), {}
    if tickets is None or tickets.numel() < 5 * rows:
        tickets = torch.zeros(5 * rows, dtype=torch.int32, device=device)
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
    _, _, rid, sf, chunk, region, words, stages, lazy, then_pass1 = plan
    # pass 1's key covers the shared arguments; the filters' dtypes are in the recipe, their alignment here
    key = None if key1 is None else (rid, key1, alignment_mask(top_k, top_p, min_p))
    work, record, tickets = _work(logits, stream, words, grid1[0] * grid1[1])
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


# the settings that a cut's plan depends on, in ``triton_filter_plan._recipe``'s order (a probe or a test may change
# any of them at any time: an assignment empties the plans, ``_Settings``)
_SETTINGS = ("CAP", "NS", "CH", "READ_PROGRAMS", "RANK_N", "SCRATCH_SHARE", "FINISH_N", "ONE_LAUNCH_ROWS",
             "GATHER_IN_PASS1", "MAX_SPLITS", "NG", "NG_COUNT", "BLOCK_READ", "READ_WARPS", "COUNT_TILE",
             "READ_MAXNREG", "BRACKET_WARPS", "BRACKET_MAXNREG", "RECORD_WARPS", "RECORD_MAXNREG", "SAMPLE_TILE",
             "MASS_SAMPLE_TILE", "SEARCH_TILE", "NC_GPU", "PASS1_MAXNREG", "PRE_BRACKET_WARPS", "PRE_BRACKET_MAXNREG",
             "LAZY_PASS1_MAXNREG", "ONE_LAUNCH_TILE", "ONE_LAUNCH_PROGRAMS", "ONE_LAUNCH_SPLITS", "TALLY_N",
             "TALLY_TILE", "ONE_LAUNCH_PASS1", "HANDOFF_SPIN", "ONE_LAUNCH_SHARED", "ONE_LAUNCH_SHARE_TILE", "LAZY_CUT",
             "ONE_LAUNCH_STAMPS", "ONE_LAUNCH_MAXNREG", "ONE_LAUNCH_FIT_SMS")


def _settings() -> tuple:
    """The settings as they stand, in ``_SETTINGS``' order: a recipe's settings."""
    here = globals()
    return tuple(here[name] for name in _SETTINGS)


def _plan(pass1: tuple, top_k, top_p, min_p, pass2: tuple | None) -> tuple:
    """What of ``cut_launches`` depends only on the passes' metas (cached by ``triton_kernels.launch_recipe``),
    which filters are passed, their dtypes and the settings, which the caller keeps in ``_plans`` (a call of a
    few rows costs its host's work): (meta1, meta2, rid, SF, chunk, region, words, stages, whether it cuts
    lazily, whether pass 1 runs first as it is: not where the plan gathers in pass 1 or the one launch is pass
    1). An entry holds both metas, so that their ids are not reused while it lives."""
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
    return meta1, meta2, rid, sf, chunk, region, words, stages, lazy_cut, then_pass1


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
