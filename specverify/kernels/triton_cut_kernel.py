"""The target-filter cut's kernel (SPEC 3.4), one ``@triton.jit`` function compiled once a stage: ``triton_filter``
holds the cut's settings and plans its launches (``cut_launches``); the record layout and how a row's cut is found
are that module's docstring's.

The three launches share one argument list (``cut_launches``), for the rows j <= k_b of request b:

    logits_ptr ... scratch_ptr, V, K1, S1, n_part, ints_at, stats_at   pass 1's arguments (triton_chain);
                                 they read pass 1's split partials for the row max, sum and largest logit
    top_k_ptr [B] int64, top_p_ptr [B] float32/64, min_p_ptr [B] float32/64 (read when HAS_K/P/M)
    work_ptr  [words] int64      [R, 2] bracket keys (lo, hi; the one launch's too); [R] whether pass 1 gathers
                                 the row (PRE); [R, SF, NPART] partial sums; [R, CAP] gathered tokens, split s in
                                 slots [s region, (s + 1) region); [R, SCRATCH] the search's scratch
                                 (``triton_search``); in the one-launch plan, [R, CAP] each row's tokens packed
                                 split after split, [R, SF, 2 TALLY_N] its splits' tallies (``triton_tally``),
                                 then the shares of its sample bracket's tallies (``triton_cut.bracket_shares``),
                                 [R, TALLY_N, SLOTS] its buckets' first tokens (``triton_cut.bucket_slots``)
    record_ptr [6, R] float32 (out)
    tickets_ptr [5, R] int32     the one-launch plan's count of a row's splits done, of the tokens they packed,
                                 and the bits of its splits' parts published (``triton_handoff``): with PASS1
                                 pass 1's partials, with SHARED the sample bracket's two rounds; then, with
                                 ROW_TALLY, [R, 2, TALLY_N] int64 (8-byte aligned) each row's bucket sums
                                 (``triton_tally.row_buckets_at``); all zero between calls
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
                                             them (``triton_bracket``), and with MASS_NG each stores its share
                                             of a top-p row's sample cells before it publishes its pass 1, so
                                             that the bracket needs no rendezvous of its own; with ROW_TALLY,
                                             the splits add their tokens to the row's TALLY_N buckets
                                             (``triton_tally.bucket_pack``)
                 STAGE 4  grid (B, K1)       with GATHER_IN_PASS1 (the PRE plan): the top-k rows' brackets
                                             before pass 1, which then gathers the unweighed ones
                                             (``triton_chain._row_stats_cut_kernel``, the cut's splits
                                             its own); stages 0 and 1 then skip what 4 and pass 1 did
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_bracket import bracket, count_bounds, pre_bracket, whole_rows
from specverify.kernels.triton_cut import (DEFER, KMAX, KMIN, bounds, bracket_shares, bucket_slots, cut_request,
                                           cut_row_norms, lane_slots, packed_tokens, place, split_tallies, stamp,
                                           stamps_at, work_gathered, work_parts, work_tokens)
from specverify.kernels.triton_gather import LANES, pack
from specverify.kernels.triton_handoff import handoff_word, pass1_handoff
from specverify.kernels.triton_lazy import SKIP, cut_needed, top_p_alone
from specverify.kernels.triton_read import read_split
from specverify.kernels.triton_record import write_record
from specverify.kernels.triton_sample import cell_words
from specverify.kernels.triton_tally import bucket_pack, row_buckets_at, tally_keys, tally_pack


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
    PASS1: tl.constexpr, SPIN: tl.constexpr, SHARED: tl.constexpr, STAMPS: tl.constexpr, ROW_TALLY: tl.constexpr,
    BUCKET_BITS: tl.constexpr, SIGMAS: tl.constexpr, SLOW_TILE: tl.constexpr,
    ROUND_NG: tl.constexpr, BLOCK_ROUND: tl.constexpr, SHARE_G: tl.constexpr, AHEAD: tl.constexpr,
    WHOLE: tl.constexpr, RANK_TOP: tl.constexpr, COPY_TILE: tl.constexpr, SUMS_ONCE: tl.constexpr,
    MASS_NG: tl.constexpr, CELL_TILE: tl.constexpr, SLOTS: tl.constexpr, CELLS_AHEAD: tl.constexpr,
    LANE_SLOTS: tl.constexpr, LANE_WORDS: tl.constexpr,
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
                                   NS, CH, NG, NG_COUNT, BLOCK_SAMPLE, BLOCK_MASS, SIGMAS)
        tl.store(work_gathered(work_ptr, NR, rid), gathers)
    else:
        stamps = work_ptr
        if STAMPS:      # the one launch's phases timed (ci/filter_stages.py --stamps)
            stamps = stamps_at(work_ptr, NR, tl.program_id(0) * K1 + tl.program_id(1), SF, CAP, SCRATCH, TALLY_N,
                               SHARE_G, SLOTS, LANE_WORDS)
            stamp(stamps, 0, 0)
            place(stamps, tl.program_id(0) * K1 + tl.program_id(1), SF)
        if PASS1:       # the one launch's splits are pass 1's: the partials from the splits themselves
            # the settings first, so that their loads are in flight through pass 1 and the wait for the row's
            # splits: loaded after the norms, they cost B = 1's launch 6 us (docs/benchmarks.md, issue 29)
            live, on, row_ptr, rid, k, k_on, top_p, p_on, floor, inv_t = cut_request(
                logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, top_k_ptr, top_p_ptr, min_p_ptr, k_b, V,
                K1, HAS_K, HAS_P, HAS_M, BLOCK_B)
            # a count bracket's whole sample (``triton_bracket``), or top-p's cells of it, which the handoff takes
            # after pass 1; the cells' shares in the room of the bracket's shared rounds, which a top-p row of cells
            # takes only where the sample has no finite max, and so no cells
            cells_ptr = bracket_shares(work_ptr, NR, rid, SF, CAP, SCRATCH, TALLY_N, SHARE_G)
            if WHOLE + MASS_NG > 0:
                _, r_lo, r_hi = count_bounds(k, V, NS, SIGMAS)
                counts, by_mass = whole_rows(k_on, p_on, WHOLE, MASS_NG)
                sample = (row_ptr, V, inv_t, live & on & (counts | by_mass) & (V > CAP), r_lo, r_hi, by_mass,
                          cells_ptr)
            else:
                sample = None
            # with WHOLE, the sample's counts (1) or the count bracket's ends (2), taken while the row's other
            # splits finish their pass 1; with MASS_NG, the sample's max, and every split's cells stored
            whole, o_mass = pass1_handoff(logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr, V,
                                          K1, S1, n_part, ints_at, stats_at, chunk,
                                          handoff_word(tickets_ptr, NR, rid, 0), k_b, SPIN, BLOCK_V, BLOCK_B, stamps,
                                          STAMPS, AHEAD, sample, max(ROUND_NG, 2), WHOLE, NS, CH, MASS_NG, CELL_TILE)
            mass = (o_mass, cells_ptr)
            words = None
            if CELLS_AHEAD:     # every split's cells are in once its partials are: loaded in flight with the norms'
                words = cell_words(cells_ptr, SF, MASS_NG, BLOCK_F, (o_mass > float("-inf")) & (o_mass < float("inf")))
            if STAMPS:
                stamp(stamps, 1, 0)
            m, z, above = cut_row_norms(scratch_ptr, k_b, K1, S1, n_part, ints_at, stats_at, BLOCK_K, BLOCK_S)
        else:
            whole = None
            mass = None
            words = None
            # pass 1's partials first, then the settings, as the compiler schedules them best (ci/cut_sass.py)
            m, z, above = cut_row_norms(scratch_ptr, k_b, K1, S1, n_part, ints_at, stats_at, BLOCK_K, BLOCK_S)
            live, on, row_ptr, rid, k, k_on, top_p, p_on, floor, inv_t = cut_request(
                logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, top_k_ptr, top_p_ptr, min_p_ptr, k_b, V,
                K1, HAS_K, HAS_P, HAS_M, BLOCK_B)
        if STAMPS:
            stamp(stamps, 2, (m == m).to(tl.int32) + k.to(tl.int32))
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
                                     BLOCK_SAMPLE, BLOCK_MASS, work_ptr, work_ptr, 0, SF, 0, False, 2, None, False,
                                     SIGMAS)
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
                                     bracket_shares(work_ptr, NR, rid, SF, CAP, SCRATCH, TALLY_N, SHARE_G),
                                     handoff_word(tickets_ptr, NR, rid, 1), NR, SF, SPIN, SHARED, BLOCK_F, stamps,
                                     STAMPS, SIGMAS, ROUND_NG, BLOCK_ROUND, whole, WHOLE, mass, MASS_NG, words)
                    if tl.program_id(2) == 0:   # where stage 0 leaves it, for a test to compare the two
                        tl.store(work_ptr + 2 * rid, lo)
                        tl.store(work_ptr + 2 * rid + 1, hi)
                    if STAMPS:
                        stamp(stamps, 3, (lo ^ hi).to(tl.int32))
                    # the split's gathered count, where its gather is the lanes': its pack claims its place with it
                    own = read_split(row_ptr, rid, NR, work_ptr, lo, hi, V, SF, chunk, region, k_on, p_on, inv_t, m,
                                     floor, HAS_M, CAP, BLOCK_READ, BLOCK_COUNT, NW_READ, NW_COUNT,
                                     lane_slots(work_ptr, NR, rid, SF, CAP, SCRATCH, TALLY_N, SHARE_G, SLOTS,
                                                LANE_WORDS), LANE_SLOTS)
                    if STAMPS:
                        stamp(stamps, 4, 0)
                    if k_on | p_on:     # the split's tokens join the row's list, so the record compacts nothing
                        split = tl.program_id(2)
                        mine = work_tokens(work_ptr, NR, rid, SF, CAP) + split * region
                        parts = work_parts(work_ptr, NR, rid, SF, split)
                        if ROW_TALLY:       # tallied in the row's buckets as they are packed
                            bucket_pack(mine, parts, region, packed_tokens(work_ptr, NR, rid, SF, CAP, SCRATCH),
                                        tickets_ptr + NR + rid, row_buckets_at(tickets_ptr, NR, rid, TALLY_N),
                                        lo, tl.minimum(hi, above), inv_t, m, CAP, TALLY_N, BUCKET_BITS, TALLY_BLOCK,
                                        bucket_slots(work_ptr, NR, rid, SF, CAP, SCRATCH, TALLY_N, SHARE_G, SLOTS),
                                        SLOTS, own, (NW_READ == LANES) & (NW_COUNT == LANES))
                        elif TALLY_N > 0:   # tallied as they are packed: the record's searches start from the sums
                            tally_pack(mine, parts, region, packed_tokens(work_ptr, NR, rid, SF, CAP, SCRATCH),
                                       tickets_ptr + NR + rid,
                                       split_tallies(work_ptr, NR, rid, SF, split, CAP, SCRATCH, TALLY_N),
                                       tally_keys(lo, tl.minimum(hi, above), TALLY_N), inv_t, m, CAP, TALLY_N,
                                       TALLY_BLOCK)
                        else:
                            pack(mine, parts, region, packed_tokens(work_ptr, NR, rid, SF, CAP, SCRATCH),
                                 tickets_ptr + NR + rid, CAP, BLOCK_R)
                    if STAMPS:
                        stamp(stamps, 5, 0)
                    writes = last_split(tickets_ptr + rid, SF)
                    if writes:
                        # relaxed: the ticket's acquire orders it after every split's claim, and the record's loads
                        # need not wait for it (its count is first read after the partial sums are in)
                        n_packed = tl.atomic_xchg(tickets_ptr + NR + rid, 0, sem="relaxed")
            elif PASS1 & live:      # an unfiltered row's record too waits for its norms: its last split writes it
                writes = last_split(tickets_ptr + rid, SF)
            if STAMPS:
                stamp(stamps, 6, writes.to(tl.int32))
            if (STAGE == 3) & writes:   # every split of the row is past its waits: the words zero for the next call
                for which in tl.static_range(3):
                    tl.store(handoff_word(tickets_ptr, NR, rid, which), 0)
            if writes:
                write_record(row_ptr, rid, NR, live, on & (hi != SKIP), lo, hi, work_ptr, record_ptr, V, SF, region,
                             k, k_on, top_p, p_on, floor, inv_t, m, z, above, CAP, NC, BLOCK_F, BLOCK_R, BLOCK_FB,
                             RANK_N, RANK_BLOCK, ONLY_RANK, SCRATCH, FINISH, n_packed, STAGE == 3, TALLY_N, stamps,
                             STAMPS, row_buckets_at(tickets_ptr, NR, rid, TALLY_N), ROW_TALLY, SLOW_TILE,
                             RANK_TOP, COPY_TILE, SUMS_ONCE,
                             bucket_slots(work_ptr, NR, rid, SF, CAP, SCRATCH, TALLY_N, SHARE_G, SLOTS), SLOTS)
                if live & on & (hi == SKIP):     # the lazy tag, where pass 2 reads how the cut was found
                    tl.store(record_ptr + rid + 5 * NR, lo.to(tl.float32))
            if STAMPS:
                stamp(stamps, 7, 0)


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
