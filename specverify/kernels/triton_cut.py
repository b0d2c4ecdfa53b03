"""Device functions of the target-filter cut (SPEC 3.4) that ``triton_cut_kernel``'s kernel calls: the per-token
test pass 2 applies (``kept``), and the one read of the row that gathers the bracket's tokens (the sample
bracket is ``triton_bracket``'s, the search over the tokens ``triton_search``'s). All are ``@triton.jit``
functions on one row (B requests, request b's row j at ``row_ptr``, V entries; ``m`` the row's max of l / T,
``inv_t`` = 1 / T):

    order_key(v) / key_value(key)    float32 <-> int32 keys ordered as the floats (-0.0 is +0.0)
    kept(l, idx, cut_val, cut_idx, floor, inv_t, m) -> (keep, e = exp(l / T - m))
    cut_request(...)  -> this program's row of its request and the request's filter settings
    cut_row_norms(...) -> the row's max of l / T, its sum of exp(l / T - max) and the key above its largest
    bounds(...)       -> a row's bracket as stage 0 left it in the work space
    sweep(...)        one read of [lo_v, hi_v): six of the sums of ``triton_filter.NPART``, tokens in [lo, hi)
                      stored as int64 (key << 32 | 2**32 - 1 - index) at buf_ptr
    read_split(...)   stage 1 for one split of a row: the sweep, its sums to the work space
    (the gather and the compaction of its tokens are ``triton_gather``'s)
    unpack(...)       (valid, key, index, e) of gathered slots; decode(...) the same of loaded ones

Masses are fixed point: ``MASS_ONE`` per unit of e, so sums are exact integers whatever the order.
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_gather import (INLINE_ASM, LANES, NPART, count_word, gather, gather_end, gather_lanes,
                                              gather_slots, gather_start, keep_slot, lane_groups, logit_tile,
                                              order_key)
from specverify.kernels.triton_math import request_offset, row_norms, scratch_views

MASS_ONE = tl.constexpr(17592186044416.0)   # 2**44: a row of 2**18 tokens sums below 2**62
KMIN = tl.constexpr(-2147483648)            # at or below every order key
KMAX = tl.constexpr(2147483648)             # above every order key
NONE = tl.constexpr(-9223372036854775808)   # an empty slot of the gathered tokens
DROP = tl.constexpr(104.0)                  # exp(-104) is below float32's smallest number: no mass deeper
DEFER = tl.constexpr(2147483649)            # stage 4's hi of a row it leaves to stage 0: no bracket's key


@triton.jit
def key_value(key):
    """The float32 of an int32 order key."""
    return tl.where(key >= 0, key, key ^ 0x7FFFFFFF).to(tl.float32, bitcast=True)


@triton.jit
def kept(logit, idx, cut_val, cut_idx, floor, inv_t, m):
    """(keep, e): the record's per-token test and e = exp(l / T - m), the very expression pass 2 uses."""
    e = tl.exp(logit * inv_t - m)
    keep = ((logit > cut_val) | ((logit == cut_val) & (idx <= cut_idx))) & (e >= floor)
    return keep, e


@triton.jit
def exp_normal(x):
    """tl.exp(x) where it is at least 2**-126 (x >= -87.3), else 0, for a value that is only weighed
    (``weight`` truncates anything below 2**-44 to 0): on the GPU one ex2 instruction without its handling
    of subnormal results, the three instructions of tl.exp's lowering that only those need. Bit for bit
    tl.exp's exponent of x * log2(e) elsewhere. The interpreter takes tl.exp."""
    if INLINE_ASM:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * 1.4426950408889634],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:
        return tl.exp(x)


@triton.jit
def weight(e):
    return (e * MASS_ONE).to(tl.int64)


@triton.jit
def pick(values, at, pos):
    return tl.sum(tl.where(pos == at, values, 0), axis=0)


@triton.jit
def add2(a1, b1, a2, b2):
    """The combine of a reduction or scan of two operands that adds each."""
    return a1 + a2, b1 + b2


@triton.jit
def row_settings(b, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, V, HAS_K: tl.constexpr, HAS_P: tl.constexpr,
                 HAS_M: tl.constexpr):
    """Request b's filters: (on: random with a filter on, k, k_on, top_p, p_on, floor, 1 / T)."""
    temperature = tl.load(temperature_ptr + b).to(tl.float32)
    k = tl.zeros([], tl.int64)
    top_p = tl.full([], 1.0, tl.float64)
    floor = tl.zeros([], tl.float32)
    if HAS_K:
        k = tl.load(top_k_ptr + b).to(tl.int64)
    if HAS_P:
        top_p = tl.load(top_p_ptr + b).to(tl.float64)
    if HAS_M:
        floor = tl.load(min_p_ptr + b).to(tl.float32)
    k_on = (k > 0) & (k < V)
    p_on = top_p < 1.0
    on = (k_on | p_on | (floor > 0.0)) & (temperature != 0.0)
    return on, k, k_on, top_p, p_on, floor, 1.0 / tl.where(temperature == 0.0, 1.0, temperature)


@triton.jit
def cut_request(logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, top_k_ptr, top_p_ptr, min_p_ptr, k_b, V, K1,
             HAS_K: tl.constexpr, HAS_P: tl.constexpr, HAS_M: tl.constexpr, BLOCK_B: tl.constexpr):
    """This program's row (b, j) of request b's k_b + 1: (live: j <= k_b, on: a random request with a filter
    on, row_ptr, its record index b K1 + j, k, k_on, top_p, p_on, floor, 1 / T)."""
    b = tl.program_id(0)
    j = tl.program_id(1)
    on, k, k_on, top_p, p_on, floor, inv_t = row_settings(b, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, V,
                                                          HAS_K, HAS_P, HAS_M)
    row_ptr = logits_ptr + (request_offset(num_draft_ptr, b, BLOCK_B) + b + j) * stride_logits
    return j <= k_b, on, row_ptr, b * K1 + j, k, k_on, top_p, p_on, floor, inv_t


@triton.jit
def cut_row_norms(scratch_ptr, k_b, K1, S1, n_part, ints_at, stats_at, BLOCK_K: tl.constexpr, BLOCK_S: tl.constexpr):
    """This program's row (b, j)'s max of l / T and its sum of exp(l / T - max), and the order key just above
    the row's largest logit, all three from pass 1's partials of that row alone (in the one launch that is pass
    1 too, the request's other rows may still be computing theirs)."""
    slots_ptr, part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, ticket_ptr, part_mass_ptr = \
        scratch_views(scratch_ptr, n_part, ints_at, stats_at)
    rid = tl.program_id(0) * K1 + tl.program_id(1)
    live = tl.program_id(1) <= k_b      # pass 1 writes no partials for a row past k_b: nothing to read there
    jj = tl.arange(0, BLOCK_K)
    # row_norms of "request" rid with one row (0 if live, none past k_b): the partials at rid S1 onwards
    row_max, row_sum, row_amax = row_norms(part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, rid,
                                           tl.where(live, 0, -1), 1, S1, BLOCK_K, BLOCK_S)
    ss = tl.arange(0, BLOCK_S)
    top = tl.max(tl.load(part_amax_val_ptr + rid * S1 + ss, mask=ss < tl.where(live, S1, 0), other=float("-inf")),
                 axis=0)
    return pick(row_max, 0, jj), pick(row_sum, 0, jj), order_key(top).to(tl.int64) + 1


@triton.jit
def unweighed(k_on, hi, floor):
    """Whether a filtered row's read needs no mass: top-k on, nothing above its bracket [lo, hi), min-p off.
    Its cut, Z' and top-p's target (a share of what top-k keeps) come from the gathered tokens alone, so its
    read is keys, counts and the gather, and the filtered plan's pass 1 does it (``triton_chain``)."""
    return k_on & (hi == KMAX) & (floor <= 0.0)


@triton.jit
def work_gathered(work_ptr, NR, rid):
    """Row rid's word saying whether pass 1 gathers it, in the cut's work space (``triton_cut_kernel``'s layout, NR
    rows)."""
    return work_ptr + 2 * NR + rid


@triton.jit
def work_parts(work_ptr, NR, rid, SF, split):
    """Row rid's split's NPART partial sums in the cut's work space."""
    return work_ptr + 3 * NR + (rid * SF + split) * NPART


@triton.jit
def work_tokens(work_ptr, NR, rid, SF, CAP: tl.constexpr):
    """Row rid's CAP gathered tokens in the cut's work space."""
    return work_ptr + NR * (3 + SF * NPART) + rid * CAP


@triton.jit
def packed_tokens(work_ptr, NR, rid, SF, CAP: tl.constexpr, SCRATCH: tl.constexpr):
    """Row rid's CAP-token list in the cut's work space, after every row's search scratch: the one-launch plan's
    splits put their gathered tokens there one after another."""
    return work_ptr + _packed_rows(NR, SF, CAP, SCRATCH) + rid * CAP


@triton.jit
def _packed_rows(NR, SF, CAP: tl.constexpr, SCRATCH: tl.constexpr):
    """The words before the rows' packed lists (``packed_tokens``) in the work space."""
    return NR * (3 + SF * NPART + CAP + SCRATCH)


@triton.jit
def split_tallies(work_ptr, NR, rid, SF, split, CAP: tl.constexpr, SCRATCH: tl.constexpr, NT: tl.constexpr):
    """Row rid's split's tallies in the one-launch plan's work space, after the packed lists: [NT] counts, then
    [NT] masses, of its gathered tokens at or above each of ``triton_tally.tally_keys``."""
    return work_ptr + NR * (3 + SF * NPART + 2 * CAP + SCRATCH) + (rid * SF + split) * (2 * NT)


@triton.jit
def bracket_shares(work_ptr, NR, rid, SF, CAP: tl.constexpr, SCRATCH: tl.constexpr, NT: tl.constexpr,
                   NG: tl.constexpr):
    """Row rid's shares of its sample bracket's tallies in the one-launch plan's work space, after its splits'
    tallies: room for [2 rounds, SF, 3, G] words at any grid G <= NG, or [SF, 3, G] of one round at G <= 2 NG
    (``triton_bracket``'s SHARED tally)."""
    return work_ptr + NR * (3 + SF * NPART + 2 * CAP + SCRATCH + SF * 2 * NT) + rid * SF * (6 * NG)


@triton.jit
def bucket_slots(work_ptr, NR, rid, SF, CAP: tl.constexpr, SCRATCH: tl.constexpr, NT: tl.constexpr, NG: tl.constexpr,
                 SLOTS: tl.constexpr):
    """Row rid's [NT, SLOTS] slots of its buckets' tokens in the one-launch plan's work space, after the bracket's
    shares (``triton_tally.bucket_pack``): a bucket's first tokens, in the order its count reached them."""
    return work_ptr + NR * (3 + SF * NPART + 2 * CAP + SCRATCH + SF * 2 * NT + SF * 6 * NG) + rid * (NT * SLOTS)


# the one launch's stamps a split (``triton_cut_kernel``'s STAMPS): its eight phases (0-7), the record's seven (8-14),
# which the split that writes the record stamps (``triton_record``), and what the splits wait on: its own pass-1
# partials published (15, ``triton_handoff``), then each round of the sample bracket's shared tally, its own share
# published and every split's in (16-19, ``triton_bracket``); the SM it runs on (SM_SLOT, ``place``); the steps of the
# record's last key search, which its writer stamps (21-23, and 24 its first copy, ``triton_search._find``)
STAMPS_N = tl.constexpr(25)
SM_SLOT = tl.constexpr(20)


@triton.jit
def lane_slots(work_ptr, NR, rid, SF, CAP: tl.constexpr, SCRATCH: tl.constexpr, NT: tl.constexpr, NG: tl.constexpr,
               SLOTS: tl.constexpr, LANE_WORDS: tl.constexpr):
    """This split's LANE_WORDS words of its lanes' slots (``triton_gather.keep_slot``) of row rid in the one-launch
    plan's work space, after the buckets' slots."""
    return bucket_slots(work_ptr, NR, NR, SF, CAP, SCRATCH, NT, NG, SLOTS) + (rid * SF + tl.program_id(2)) * LANE_WORDS


@triton.jit
def stamps_at(work_ptr, NR, rid, SF, CAP: tl.constexpr, SCRATCH: tl.constexpr, NT: tl.constexpr, NG: tl.constexpr,
              SLOTS: tl.constexpr, LANE_WORDS: tl.constexpr = 0):
    """This split's STAMPS_N stamp slots of row rid in the one-launch plan's work space, after the lanes' slots
    (``stamp``)."""
    return bucket_slots(work_ptr, NR, NR, SF, CAP, SCRATCH, NT, NG, SLOTS) + NR * SF * LANE_WORDS + \
        (rid * SF + tl.program_id(2)) * STAMPS_N


@triton.jit
def stamp(stamps_ptr, phase: tl.constexpr, after):
    """Stores the stamp of ``phase`` (< STAMPS_N) at this split's slots (``stamps_at``): the GPU's %globaltimer
    (ns) once ``after`` (an int32 of what the phase computed) is known and every thread is past the phase; in the
    interpreter phase + 1, a clock that only says the stamp was reached."""
    tl.debug_barrier()
    if INLINE_ASM:
        # the input ties the read to ``after``, and an impure asm is neither hoisted nor merged
        clock = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [tl.zeros([], tl.int32) + after],
                                          dtype=tl.int64, is_pure=False, pack=1)
        tl.store(stamps_ptr + phase, clock)
    else:
        tl.store(stamps_ptr + phase, tl.zeros([], tl.int64) + phase + 1 + after * 0)


@triton.jit
def place(stamps_ptr, rid, SF):
    """Stores where this split runs at slot SM_SLOT of its stamps (``stamps_at``): 1 + the GPU's %smid, which says
    whether programs of the launch share an SM; in the interpreter, which runs them one by one, each alone, 1 +
    its split's number in the launch."""
    if INLINE_ASM:
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [tl.zeros([], tl.int32)], dtype=tl.int32,
                                       is_pure=False, pack=1)
    else:
        sm = rid * SF + tl.program_id(2)
    tl.store(stamps_ptr + SM_SLOT, sm.to(tl.int64) + 1)


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
    # the split's sums and its lanes' gathered count in one reduction, since each is a round trip through shared
    # memory (the count is the lanes' total where NW = LANES; the other gathers write their groups' own)
    if D > 0:
        # the lanes that counted more than their slots hold, in the count's high word: the reduction says whether
        # any did
        flagged = count.to(tl.int64) + ((count > D).to(tl.int64) << 32)
        c_hi_s, w_hi_s, w_all_s, n = sums4(c_hi.to(tl.int64), w_hi, w_all, flagged)
        if GATHER:
            if gather_on:
                if (n >> 32) == 0:
                    gather_slots(count, slots_ptr, group_ptr, sub, D, BLOCK_V)
                else:
                    gather_lanes(row_ptr, lo_v, hi_v, lo32, hi32, count, group_ptr, sub, BLOCK_V)
        n = n & 4294967295
    else:
        if NW == LANES:
            if GATHER:
                if gather_on:
                    gather_lanes(row_ptr, lo_v, hi_v, lo32, hi32, count, group_ptr, sub, BLOCK_V)
        c_hi_s, w_hi_s, w_all_s, n = sums4(c_hi.to(tl.int64), w_hi, w_all, count.to(tl.int64))
    if MINP:
        w_hi_mp_s, c_mp_s, w_mp_s, _ = sums4(w_hi_mp, c_mp.to(tl.int64), w_mp, tl.zeros_like(w_mp))
    else:                       # no min-p: every token passes its test
        w_hi_mp_s, c_mp_s, w_mp_s = w_hi_s, (hi_v - lo_v).to(tl.int64), w_all_s
    gather_end(parts_ptr, group, count, n, NW)
    return c_hi_s, w_hi_s, w_hi_mp_s, w_all_s, c_mp_s, w_mp_s, n


@triton.jit
def sums4(a, b, c, d):
    """The sums of four [N] tensors of one dtype in one reduction (``join4``)."""
    return split4(tl.sum(join4(a, b, c, d), axis=0))


@triton.jit
def join4(a, b, c, d):
    """[N, 2, 2]: four [N] tensors of one dtype joined, for one sum or running sum of all four over N: one round trip
    through shared memory on the GPU, where each tensor's would be one, and numpy's under the interpreter, which runs a
    combine of the kernel's own element by element in Python. (A joined max, and the record's eight partial sums
    joined, compiled to more barriers than their reductions with a combine of their own, so those stay.)"""
    return tl.join(tl.join(a, b), tl.join(c, d))


@triton.jit
def split4(x):
    """The four tensors [...] of ``join4``'s x [..., 2, 2], in its order."""
    ab, cd = tl.split(x)
    a, b = tl.split(ab)
    c, d = tl.split(cd)
    return a, b, c, d


@triton.jit
def unpack(buf_ptr, i, live, inv_t, m):
    """(valid, key, index, e) of gathered slots i."""
    return decode(tl.load(buf_ptr + i, mask=live, other=NONE), inv_t, m)


@triton.jit
def decode(packed, inv_t, m):
    """(valid, key, index, e) of gathered tokens as loaded (NONE: an empty slot)."""
    valid = packed != NONE
    key = (packed >> 32).to(tl.int32)
    e = tl.where(valid, exp_normal(key_value(key) * inv_t - m), 0.0)     # e is only weighed
    return valid, key, (4294967295 - (packed & 4294967295)).to(tl.int32), e


@triton.jit
def bounds(work_ptr, rid, V, CAP: tl.constexpr):
    """The row's bracket: stage 0's, or everything where the row has at most CAP tokens (no stage 0 then)."""
    lo = tl.full([], KMIN, tl.int64)
    hi = tl.full([], KMAX, tl.int64)
    if V > CAP:
        lo = tl.load(work_ptr + 2 * rid)
        hi = tl.load(work_ptr + 2 * rid + 1)
    return lo, hi


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
