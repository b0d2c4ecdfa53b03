"""Stage 1 of the target-filter cut (``triton_cut_kernel``'s kernel calls it): one read of a split of a row, its
sums to the cut's work space and its bracket tokens to the split's region. ``@triton.jit`` functions on one row
(``row_ptr``, V entries; ``m`` the row's max of l / T, ``inv_t`` = 1 / T), in ``triton_cut``'s work-space layout:

    sweep(...)        one read of [lo_v, hi_v): six of the sums of ``triton_filter.NPART``, tokens in [lo, hi)
                      stored as int64 (key << 32 | 2**32 - 1 - index) at buf_ptr
    read_split(...)   stage 1 for one split of a row: the sweep, its sums to the work space

The gather of the tokens is ``triton_gather``'s; masses are ``triton_cut``'s fixed point (``weight``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_cut import KMAX, exp_normal, sums4, unweighed, weight, work_parts, work_tokens
from specverify.kernels.triton_gather import (LANES, count_word, gather, gather_end, gather_lanes, gather_slots,
                                              gather_start, keep_slot, lane_groups, logit_tile, order_key)


@triton.jit
def sweep(row_ptr, lo_v, hi_v, lo, hi, inv_t, m, floor, weigh, only_mp, buf_ptr, region, parts_ptr,
          HAS_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_COUNT: tl.constexpr, NW_V: tl.constexpr,
          NW_COUNT: tl.constexpr, slots_ptr=None, D: tl.constexpr = 0):
    """One read of [lo_v, hi_v): (count, mass, min-p mass) at keys >= hi, the whole mass, the min-p (count,
    mass); the tokens in [lo, hi) go to buf_ptr's ``region`` slots in lane groups (``gather``; NW_V and NW_COUNT
    its NW for the two tiles, ``triton_gather.ballot_warps``), in no particular order, and their counts to
    parts_ptr (``gather_end``). Its loops: with the min-p sums (floor > 0; without the gather where [lo, hi) is
    empty), without them (floor 0: every token passes, and they are a fifth of the read's instructions), and,
    where the caller needs no mass (``weigh`` false), without any: keys, counts and the gather alone, since the
    exponential and the int64 sums are most of the read's instructions. Masses are 0 there, and tiles of
    BLOCK_COUNT. Where min-p is the row's only filter (``only_mp``), its Z' is the min-p mass alone: the loop
    sums the min-p count and mass, the other four are 0, and nothing is gathered (its record compacts nothing). Also
    returns the lanes' gathered count, int64 (NW = LANES; 0 where nothing is gathered), as ``gather_end`` writes it.
    D (with NW = LANES): the slots of each lane at slots_ptr that keep its tokens as it counts them (``_sweep_run``)."""
    minp = False
    if HAS_M:           # without a min_p tensor, floor is 0: no min-p loop is compiled
        minp = floor > 0.0
    if minp & only_mp:
        zero = tl.zeros([], tl.int64)
        c_mp, w_mp = _sweep_min_p(row_ptr, lo_v, hi_v, inv_t, m, floor, BLOCK_V)
        c_hi, w_hi, w_hi_mp, w_all, n = zero, zero, zero, zero, zero
    elif minp:
        # min-p alone gathers nothing: its loop without the gather's code holds fewer registers
        if lo < hi:
            c_hi, w_hi, w_hi_mp, w_all, c_mp, w_mp, n = _sweep_run(row_ptr, lo_v, hi_v, lo, hi, inv_t, m, floor,
                                                                   buf_ptr, region, parts_ptr, True, True, True,
                                                                   BLOCK_V, NW_V, slots_ptr, D)
        else:
            c_hi, w_hi, w_hi_mp, w_all, c_mp, w_mp, n = _sweep_run(row_ptr, lo_v, hi_v, lo, hi, inv_t, m, floor,
                                                                   buf_ptr, region, parts_ptr, True, True, False,
                                                                   BLOCK_V, NW_V)
    elif weigh:
        c_hi, w_hi, w_hi_mp, w_all, c_mp, w_mp, n = _sweep_run(row_ptr, lo_v, hi_v, lo, hi, inv_t, m, floor, buf_ptr,
                                                               region, parts_ptr, True, False, True, BLOCK_V, NW_V,
                                                               slots_ptr, D)
    else:
        c_hi, w_hi, w_hi_mp, w_all, c_mp, w_mp, n = _sweep_run(row_ptr, lo_v, hi_v, lo, hi, inv_t, m, floor, buf_ptr,
                                                               region, parts_ptr, False, False, True, BLOCK_COUNT,
                                                               NW_COUNT, slots_ptr, D)
    return c_hi, w_hi, w_hi_mp, w_all, c_mp, w_mp, n


@triton.jit
def _sweep_min_p(row_ptr, lo_v, hi_v, inv_t, m, floor, BLOCK_V: tl.constexpr):
    """(count, mass) of [lo_v, hi_v)'s tokens that pass min-p (e >= floor): all that a row filtered by min-p
    alone needs, in a loop of a few instructions a token, so that it runs at the memory's speed."""
    c_mp = tl.zeros([BLOCK_V], tl.int32)
    w_mp = tl.zeros([BLOCK_V], tl.int64)
    ahead1 = logit_tile(row_ptr, lo_v, hi_v, BLOCK_V)
    ahead2 = logit_tile(row_ptr, lo_v + BLOCK_V, hi_v, BLOCK_V)
    ahead3 = logit_tile(row_ptr, lo_v + 2 * BLOCK_V, hi_v, BLOCK_V)
    for start in range(lo_v, hi_v, BLOCK_V):
        logit = ahead1
        ahead1, ahead2 = ahead2, ahead3
        ahead3 = logit_tile(row_ptr, start + 3 * BLOCK_V, hi_v, BLOCK_V)
        e = tl.exp(logit * inv_t - m)
        # a masked lane's -inf gives e = 0, below any floor > 0
        mp = e >= floor
        c_mp += mp.to(tl.int32)
        w_mp += tl.where(mp, weight(e), 0)
    return tl.sum(c_mp, 0).to(tl.int64), tl.sum(w_mp, 0)


@triton.jit
def _sweep_run(row_ptr, lo_v, hi_v, lo, hi, inv_t, m, floor, buf_ptr, region, parts_ptr, MASS: tl.constexpr,
               MINP: tl.constexpr, GATHER: tl.constexpr, BLOCK_V: tl.constexpr, NW: tl.constexpr,
               slots_ptr=None, D: tl.constexpr = 0):
    """``sweep``'s loop, with the masses (MASS) and the min-p sums (MINP: floor > 0) or without (every token
    passes), and the gather (GATHER, where [lo, hi) may hold tokens) or without. Per lane sums: no reduction
    in the loop (a tile's reduction to place its bracket tokens in order cost a third of the read). Keys
    compare as int32 (int64 compares take twice the instructions): hi = KMAX, above every key, compares as
    2**31 - 1, and lo is below KMAX wherever anything is gathered. D (NW = LANES): each lane also stores its first D
    tokens at its slots at slots_ptr as it counts them, and where none counted more (a flag in the count's high word,
    summed with it), they fill the region in place of the second pass."""
    tl.static_assert(D == 0 or NW == LANES, "only the lanes' gather keeps its tokens in slots")
    zi = tl.zeros([BLOCK_V], tl.int32)
    zl = tl.zeros([BLOCK_V], tl.int64)
    c_hi, c_mp = zi, zi
    w_hi, w_hi_mp, w_all, w_mp = zl, zl, zl, zl
    gather_on = lo < hi
    # hi = KMAX gives hi32 = 2**31 - 1, which only the NaN of those bits reaches (a non-finite row, whose
    # tokens are its own concern): no flag to test a token
    hi32 = tl.minimum(hi, KMAX - 1).to(tl.int32)
    lo32 = tl.minimum(lo, KMAX - 1).to(tl.int32)
    group, sub = lane_groups(region, BLOCK_V, NW)
    group_ptr = buf_ptr + group * sub
    count = zi
    count_ptr = count_word(parts_ptr)
    gather_start(parts_ptr, NW)
    # the loads run three tiles ahead of the sums: one load in flight a thread leaves the read latency-bound
    ahead1 = logit_tile(row_ptr, lo_v, hi_v, BLOCK_V)
    ahead2 = logit_tile(row_ptr, lo_v + BLOCK_V, hi_v, BLOCK_V)
    ahead3 = logit_tile(row_ptr, lo_v + 2 * BLOCK_V, hi_v, BLOCK_V)
    for start in range(lo_v, hi_v, BLOCK_V):
        offs = start + tl.arange(0, BLOCK_V)
        mask = offs < hi_v
        logit = ahead1
        ahead1, ahead2 = ahead2, ahead3
        ahead3 = logit_tile(row_ptr, start + 3 * BLOCK_V, hi_v, BLOCK_V)
        key = order_key(logit)
        ge = mask & (key >= hi32)
        inside = mask & (key >= lo32) & ~ge
        c_hi += ge.to(tl.int32)
        if MASS:
            if MINP:    # e is compared with the floor as pass 2 compares it (``kept``)
                e = tl.exp(logit * inv_t - m)
            else:
                e = exp_normal(logit * inv_t - m)
            w = weight(e)
            w_hi += tl.where(ge, w, 0)
            w_all += w
            if MINP:
                mp = mask & (e >= floor)
                w_hi_mp += tl.where(ge & mp, w, 0)
                c_mp += mp.to(tl.int32)
                w_mp += tl.where(mp, w, 0)
        if GATHER:
            if gather_on:
                if D > 0:
                    keep_slot(slots_ptr, key, offs, inside, count, D, BLOCK_V)
                count = gather(key, offs, inside, group_ptr, count, sub, count_ptr, BLOCK_V, NW)
    if D == 0:
        if NW == LANES:
            if GATHER:
                if gather_on:
                    gather_lanes(row_ptr, lo_v, hi_v, lo32, hi32, count, group_ptr, sub, BLOCK_V)
    counted = count.to(tl.int64)
    if D > 0:
        # the lanes that counted more than their slots hold, in the count's high word: the reduction says whether
        # any did
        counted += (count > D).to(tl.int64) << 32
    # the split's sums and its lanes' gathered count in one reduction, since each is a round trip through shared
    # memory (the count is the lanes' total where NW = LANES; the other gathers write their groups' own)
    c_hi_s, w_hi_s, w_all_s, n = sums4(c_hi.to(tl.int64), w_hi, w_all, counted)
    if D > 0:
        if GATHER:
            if gather_on:
                if (n >> 32) == 0:
                    gather_slots(count, slots_ptr, group_ptr, sub, D, BLOCK_V)
                else:
                    gather_lanes(row_ptr, lo_v, hi_v, lo32, hi32, count, group_ptr, sub, BLOCK_V)
        n = n & 4294967295
    if MINP:
        w_hi_mp_s, c_mp_s, w_mp_s, _ = sums4(w_hi_mp, c_mp.to(tl.int64), w_mp, tl.zeros_like(w_mp))
    else:                       # no min-p: every token passes its test
        w_hi_mp_s, c_mp_s, w_mp_s = w_hi_s, (hi_v - lo_v).to(tl.int64), w_all_s
    gather_end(parts_ptr, group, count, n, NW)
    return c_hi_s, w_hi_s, w_hi_mp_s, w_all_s, c_mp_s, w_mp_s, n


@triton.jit
def read_split(row_ptr, rid, NR, work_ptr, lo, hi, V, SF, chunk, region, k_on, p_on, inv_t, m, floor,
          HAS_M: tl.constexpr, CAP: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_COUNT: tl.constexpr,
          NW_V: tl.constexpr, NW_COUNT: tl.constexpr, slots_ptr=None, D: tl.constexpr = 0):
    """Stage 1 for this program's split of the row, bracket [lo, hi): the sweep's sums to work, its bracket
    tokens to its region in lane groups (``triton_gather.gather``; NW_V and NW_COUNT its NW for the two
    tiles). A top-k row with nothing above its bracket and min-p off is read without masses: its cut and Z'
    come from the gathered tokens alone (top-p's target from the mass top-k keeps), so its whole mass is left
    0. Returns the split's gathered count where its gather is the lanes' (NW_V = NW_COUNT = LANES), as it writes it;
    D: the slots of each lane at slots_ptr that keep its tokens as it counts them (``sweep``)."""
    split = tl.program_id(2)
    lo_v = split * chunk
    buf = work_tokens(work_ptr, NR, rid, SF, CAP) + split * region
    mine = work_parts(work_ptr, NR, rid, SF, split)
    weigh = ~unweighed(k_on, hi, floor)
    c_hi, w_hi, w_hi_mp, w_all, c_mp, w_mp, n = sweep(
        row_ptr, lo_v, tl.minimum(lo_v + chunk, V), lo, hi, inv_t, m, floor, weigh, ~k_on & ~p_on, buf, region, mine,
        HAS_M, BLOCK_V, BLOCK_COUNT, NW_V, NW_COUNT, slots_ptr, D)
    tl.store(mine, c_hi)
    tl.store(mine + 1, w_hi)
    tl.store(mine + 2, w_hi_mp)
    tl.store(mine + 4, w_all)
    tl.store(mine + 5, c_mp)
    tl.store(mine + 6, w_mp)
    return n
