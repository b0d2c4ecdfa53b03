"""Stage 2 of the target-filter cut (``triton_filter``): a row's record from its bracket's sums and gathered
tokens, by ranking them (``triton_rank``), searching them (``triton_search``), or, where the bracket missed
or overflowed, the slow path's own reads of the row (``triton_slow``). One ``@triton.jit`` function on one row, in
``triton_cut_kernel``'s work-space layout and ``triton_filter``'s record layout (their module docstrings).
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_cut import (KMIN, MASS_ONE, key_value, packed_tokens, split_tallies,
                                           stamp, weight, work_parts, work_tokens)
from specverify.kernels.triton_gather import NPART, compact
from specverify.kernels.triton_rank import rank_cut
from specverify.kernels.triton_search import resolve, top_set
from specverify.kernels.triton_slow import kept_mass, slow_cut
from specverify.kernels.triton_tally import bucket_sums, from_top


@triton.jit
def _totals(parts_ptr, SF, BLOCK_F: tl.constexpr):
    """The sums of fields 0, 1, 2, 4, 5 and 6 over a row's SF splits' partial sums, in one reduction (each is a round
    trip through shared memory), int64."""
    at = parts_ptr + tl.arange(0, BLOCK_F) * NPART
    on = tl.arange(0, BLOCK_F) < SF
    # the two counts (fields 0 and 5, at most V) add as int32: a step of an int64 sum takes two shuffles and two
    # adds, and the record waits on fetching its code more than on anything else
    c_hi, w_hi, w_hi_mp, w_all, c_mp, w_mp = tl.reduce(
        (tl.load(at, mask=on, other=0).to(tl.int32), tl.load(at + 1, mask=on, other=0),
         tl.load(at + 2, mask=on, other=0), tl.load(at + 4, mask=on, other=0),
         tl.load(at + 5, mask=on, other=0).to(tl.int32), tl.load(at + 6, mask=on, other=0)), 0, _add6)
    return c_hi.to(tl.int64), w_hi, w_hi_mp, w_all, c_mp.to(tl.int64), w_mp


@triton.jit
def _add6(a1, b1, c1, d1, e1, f1, a2, b2, c2, d2, e2, f2):
    """``_totals``' combine: each of the six sums adds."""
    return a1 + a2, b1 + b2, c1 + c2, d1 + d2, e1 + e2, f1 + f2


@triton.jit
def write_record(row_ptr, rid, NR, live, on, lo, hi, work_ptr, record_ptr, V, SF, region, k, k_on, top_p, p_on,
                 floor, inv_t, m, z, above, CAP: tl.constexpr, NC: tl.constexpr, BLOCK_F: tl.constexpr,
                 BLOCK_R: tl.constexpr, BLOCK_FB: tl.constexpr, RANK_N: tl.constexpr, RANK_BLOCK: tl.constexpr,
                 ONLY_RANK: tl.constexpr, SCRATCH: tl.constexpr, FINISH: tl.constexpr, n_packed=0,
                 PACKED: tl.constexpr = False, TALLY_N: tl.constexpr = 0, stamps=None, STAMPS: tl.constexpr = False,
                 buckets_ptr=None, ROW_TALLY: tl.constexpr = False, SLOW_TILE: tl.constexpr = 0,
                 RANK_TOP: tl.constexpr = 0, COPY_TILE: tl.constexpr = 0, SUMS_ONCE: tl.constexpr = False,
                 slots_ptr=None, SLOTS: tl.constexpr = 0):
    """Stage 2: the row's record from its bracket [lo, hi)'s sums and tokens (an unfiltered row's keeps
    everything, with pass 1's sum). PACKED: the splits put their tokens one after another in the row's
    list (``packed_tokens``), n_packed of them (more than CAP where a split's overflowed), so nothing is
    compacted here; with TALLY_N, each also tallied its tokens at TALLY_N keys as it packed them
    (``triton_tally``), and the search starts from their sums; with ROW_TALLY, from the row's bucket sums at
    buckets_ptr instead (``triton_tally.bucket_pack``), which it zeroes. STAMPS: the one
    launch's record phases stamped at ``stamps`` (``triton_cut.stamp``, 8 to 14: the sums, then ``resolve``'s 9
    to 12, resolved, stored). SLOW_TILE: the slow path's tile (``triton_slow``; 0: BLOCK_FB's). RANK_TOP (with
    ROW_TALLY): a top-k row's kept set, where the bucket sums put it among RANK_N tokens, is copied out of the list and
    ranked (``triton_search.top_set``) rather than searched.
    COPY_TILE: the tokens a tile of the copies out of the packed list (0: 4 BLOCK_R). SUMS_ONCE (with ROW_TALLY): the
    bucket sums are loaded here once, for the copy of top-k's set and the searches alike. SLOTS (with ROW_TALLY): the
    row's buckets' first SLOTS tokens at slots_ptr (``triton_tally.bucket_pack``), which a key search ranks where its
    interval is one bucket of at most SLOTS tokens."""
    tl.static_assert(PACKED or TALLY_N == 0, "the splits tally only in the one launch, which packs")
    rec = record_ptr + rid
    cut_key = tl.full([], KMIN, tl.int64)
    cut_idx = tl.zeros([], tl.int32) + V
    floor_out = tl.zeros([], tl.float32)
    z_out = z
    how = tl.zeros([], tl.int32)
    if live & on:
        parts = work_parts(work_ptr, NR, rid, SF, 0)
        if SUMS_ONCE and ROW_TALLY:     # in flight with the partial sums' loads
            own_sums = bucket_sums(buckets_ptr, TALLY_N)
        # the search's scratch, [R, SCRATCH] after the gathered tokens, as an offset from buf: the gathered
        # tokens, or the packed list after every row's scratch
        if PACKED:
            buf = packed_tokens(work_ptr, NR, rid, SF, CAP, SCRATCH)
            scr_at = rid.to(tl.int64) * (SCRATCH - CAP) - NR.to(tl.int64) * SCRATCH
        else:
            buf = work_tokens(work_ptr, NR, rid, SF, CAP)
            scr_at = NR.to(tl.int64) * CAP + rid.to(tl.int64) * (SCRATCH - CAP)
        c_hi, w_hi, w_hi_mp, w_all, c_mp, w_mp = _totals(parts, SF, BLOCK_F)
        # min-p alone decides when what it keeps lies inside the top-k and top-p prefixes (each of its
        # tokens weighs at least the floor, so the mass before the last one is below the target)
        lb = (top_p * tl.where(k_on, w_mp, w_all).to(tl.float64)).to(tl.int64)
        alone = (floor > 0.0) & ((c_mp <= k) | ~k_on) & ((w_mp - weight(floor) < lb) | ~p_on)
        if STAMPS:
            stamp(stamps, 8, (lb ^ c_hi ^ w_hi ^ w_all ^ c_mp ^ w_hi_mp).to(tl.int32) + alone.to(tl.int32))
        z_w = w_mp
        if (k_on | p_on) & ~alone:
            if PACKED:
                n = tl.where(n_packed <= CAP, n_packed, -1).to(tl.int64)
            else:
                n = compact(buf, parts, SF, region, BLOCK_F, BLOCK_R)
            if ONLY_RANK:       # a short row, gathered whole: no search and no slow path compiled
                ok, cut_key, cut_idx, z_w, w_k, c_k = rank_cut(buf, n, c_hi, w_hi, w_hi_mp, w_all, k, k_on, top_p,
                                                               p_on, floor, V, inv_t, m, RANK_BLOCK)
                how = how + 1
            else:
                src, n_rank = buf, n
                if SUMS_ONCE and ROW_TALLY:
                    sums = from_top(own_sums)
                else:
                    sums = None
                if RANK_TOP:
                    src, n_rank = top_set(buf, n, scr_at, lo, tl.minimum(hi, above), c_hi, k, k_on, RANK_N, SCRATCH,
                                          BLOCK_R, TALLY_N, buckets_ptr, stamps, STAMPS, COPY_TILE, sums)
                if (n_rank > 0) & (n_rank <= RANK_N):
                    ok, key_b, idx_b, z_b, w_k, c_k = rank_cut(src, n_rank, c_hi, w_hi, w_hi_mp, w_all, k, k_on, top_p,
                                                               p_on, floor, V, inv_t, m, RANK_BLOCK)
                else:
                    # no token lies above the row's largest logit: a narrower interval, fewer search steps
                    ok, key_b, idx_b, z_b, w_k, c_k = resolve(buf, tl.maximum(n, 0), scr_at, lo,
                                                              tl.minimum(hi, above), c_hi, w_hi, w_hi_mp, w_all, k,
                                                              k_on, top_p, p_on, floor, V, inv_t, m, NC, BLOCK_R,
                                                              SCRATCH, FINISH,
                                                              split_tallies(work_ptr, NR, rid, SF, 0, CAP, SCRATCH,
                                                                            TALLY_N), SF, TALLY_N, BLOCK_F,
                                                              stamps, STAMPS, buckets_ptr, ROW_TALLY, COPY_TILE,
                                                              sums, slots_ptr, SLOTS)
                if ok & (n >= 0):
                    cut_key, cut_idx, z_w, how = key_b, idx_b, z_b, how + 1
                else:
                    cut_key, cut_idx = slow_cut(row_ptr, V, buf, scr_at, k, k_on, top_p, p_on, floor, m, inv_t, lo, hi,
                                                c_hi, w_hi, CAP, NC, BLOCK_FB, SCRATCH, FINISH, SLOW_TILE, above)
                    cut_val = tl.where(cut_key == KMIN, float("-inf"), key_value(cut_key.to(tl.int32)))
                    z_w = kept_mass(row_ptr, V, cut_val, cut_idx, floor, inv_t, m, BLOCK_FB, SLOW_TILE)
                    how = how + 2
        floor_out = floor
        z_out = z_w.to(tl.float32) / MASS_ONE
        if ROW_TALLY:       # zero for the next call, whichever way the cut was found (the search alone reads them)
            tl.debug_barrier()
            jj = tl.arange(0, 2 * TALLY_N)
            tl.store(buckets_ptr + jj, tl.zeros([2 * TALLY_N], tl.int64))
        if STAMPS:
            stamp(stamps, 13, cut_key.to(tl.int32) + cut_idx + how)
    if live:
        tl.store(rec, tl.where(cut_key == KMIN, float("-inf"), key_value(cut_key.to(tl.int32))))
        tl.store(rec + NR, cut_idx.to(tl.float32))
        tl.store(rec + 2 * NR, floor_out)
        tl.store(rec + 3 * NR, z_out)
        tl.store(rec + 4 * NR, m)
        tl.store(rec + 5 * NR, how.to(tl.float32))
        if STAMPS:
            stamp(stamps, 14, 0)
