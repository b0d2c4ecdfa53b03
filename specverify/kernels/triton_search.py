"""The search half of the target-filter cut (SPEC 3.4): from the tokens ``triton_read.sweep`` gathered, each
row's cut (``triton_slow`` finds it from the whole row when the bracket missed). ``@triton.jit`` functions on
one row (``m`` the row's max of l / T, ``inv_t`` = 1 / T); gathered tokens are int64 (key << 32 | 2**32 - 1 -
index) at ``buf_ptr``:

    resolve(...)      the cut from the n gathered tokens, or ok = False; given the splits' tallies
                      (``triton_tally``), each key search starts from the tallied interval that holds its crossing
    top_set(...)      top-k's kept set and what lies above it, where few, copied out of the list for ranking
    gathered_kept_mass(...)   Z' from the gathered tokens and the mass above them

Searches are NC-way: NC candidates split the interval (the values of tokens spread over the interval, its
middle, and one above its low end), one tally counts (and weighs) what lies at or above each, and the
interval shrinks to the piece where the target is crossed. Once the interval holds few enough of the tokens,
they are copied to the row's scratch (``scr_at`` slots past ``buf_ptr``, SCRATCH of them) and later steps
tally that copy alone, with what lies above the interval carried as a constant; once it holds at most
FINISH, they are ranked against each other in one step.
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_cut import KMIN, NONE, decode, key_value, kept, pick, stamp, unpack, weight
from specverify.kernels.triton_tally import bucket_of, hinted, row_buckets, row_tallies, tally_keys


@triton.jit
def _values(packed, key_eq, BY_INDEX: tl.constexpr):
    """(valid, value) of loaded tokens: the value searched over is the key, or (BY_INDEX) the index of a token
    whose key is key_eq (others are not valid)."""
    key = (packed >> 32).to(tl.int32)
    if BY_INDEX:
        return (packed != NONE) & (key == key_eq), 4294967295 - (packed & 4294967295)
    return packed != NONE, key.to(tl.int64)


@triton.jit
def _tally(buf_ptr, n, cand, key_eq, inv_t, m, BY_INDEX: tl.constexpr, NC: tl.constexpr, BLOCK_R: tl.constexpr):
    """(count, mass) of the n gathered tokens with keys at or above each candidate; BY_INDEX: of those whose
    key is key_eq, with indices at or above each candidate."""
    cnt = tl.zeros([BLOCK_R, NC], tl.int32)
    mass = tl.zeros([BLOCK_R, NC], tl.int64)
    # the next tile's load is in flight while this one is tallied
    ahead = tl.load(buf_ptr + tl.arange(0, BLOCK_R), mask=tl.arange(0, BLOCK_R) < n, other=NONE)
    for start in range(0, n, BLOCK_R):
        _, _, _, e = decode(ahead, inv_t, m)
        valid, value = _values(ahead, key_eq, BY_INDEX)
        i = start + BLOCK_R + tl.arange(0, BLOCK_R)
        ahead = tl.load(buf_ptr + i, mask=i < n, other=NONE)
        ge = valid[:, None] & (value[:, None] >= cand[None, :])
        cnt += ge.to(tl.int32)
        mass += tl.where(ge, weight(e)[:, None], 0)
    return tl.sum(cnt, axis=0).to(tl.int64), tl.sum(mass, axis=0)


@triton.jit
def _sum_gathered(buf_ptr, n, inv_t, m, BLOCK_R: tl.constexpr):
    """(count, mass) of the n gathered tokens, all of which lie in the interval they were gathered from."""
    cnt = tl.zeros([BLOCK_R], tl.int64)
    mass = tl.zeros([BLOCK_R], tl.int64)
    for start in range(0, n, BLOCK_R):
        i = start + tl.arange(0, BLOCK_R)
        valid, key, idx, e = unpack(buf_ptr, i, i < n, inv_t, m)
        cnt += valid.to(tl.int64)
        mass += tl.where(valid, weight(e), 0)
    return tl.sum(cnt, axis=0), tl.sum(mass, axis=0)


@triton.jit
def _keep_between(src_ptr, n, dst_ptr, a, b, key_eq, BY_INDEX: tl.constexpr, SCRATCH: tl.constexpr,
                  BLOCK_R: tl.constexpr):
    """Copy the tokens of src[0, n) with keys in [a, b) (BY_INDEX: with key key_eq and indices in [a, b)) to
    dst in order, at most SCRATCH of them; returns how many were copied. dst may be src: each token moves
    down or stays."""
    copied = tl.zeros([], tl.int64)
    for start in range(0, n, BLOCK_R):
        i = start + tl.arange(0, BLOCK_R)
        packed = tl.load(src_ptr + i, mask=i < n, other=NONE)
        valid, value = _values(packed, key_eq, BY_INDEX)
        inside = valid & (value >= a) & (value < b)
        at = copied + tl.cumsum(inside.to(tl.int64), 0) - 1
        # in place, a tile's destination can overlap its own source: every thread loads before any stores
        tl.debug_barrier()
        tl.store(dst_ptr + at, packed, mask=inside & (at < SCRATCH))
        copied += tl.sum(inside.to(tl.int64), axis=0)
    tl.debug_barrier()          # what any thread copied is in place before any thread tallies it
    return tl.minimum(copied, SCRATCH)


@triton.jit
def _keep_narrow(src_ptr, n, dst_ptr, a, b, SCRATCH: tl.constexpr, BLOCK: tl.constexpr):
    """``_keep_between`` by key into a dst apart from src, in tiles of BLOCK with the next tile's load in flight:
    the one pass over every gathered token that a search from a narrow interval makes, where the narrow
    interval's few tokens make the copy's stores few."""
    copied = tl.zeros([], tl.int32)
    ahead = _list_tile(src_ptr, 0, n, BLOCK)
    for start in range(0, n, BLOCK):
        packed = ahead
        ahead = _list_tile(src_ptr, start + BLOCK, n, BLOCK)
        inside = _between(packed, a, b)
        at = copied + tl.cumsum(inside.to(tl.int32), 0) - 1
        tl.store(dst_ptr + at, packed, mask=inside & (at < SCRATCH))
        copied += tl.sum(inside.to(tl.int32), axis=0)
    tl.debug_barrier()          # what any thread copied is in place before any thread tallies it
    return tl.minimum(copied, SCRATCH).to(tl.int64)


@triton.jit
def _keep_lanes(src_ptr, n, dst_ptr, a, b, SCRATCH: tl.constexpr, BLOCK: tl.constexpr):
    """``_keep_narrow`` in two passes over src, with no exchange between warps a tile: each lane counts its
    tokens with keys in [a, b), then stores them from its place, the count of the lanes before it (one scan)."""
    count = tl.zeros([BLOCK], tl.int32)
    ahead = _list_tile(src_ptr, 0, n, BLOCK)
    for start in range(0, n, BLOCK):
        packed = ahead
        ahead = _list_tile(src_ptr, start + BLOCK, n, BLOCK)
        count += _between(packed, a, b).to(tl.int32)
    at = tl.cumsum(count, 0) - count
    copied = tl.sum(count, axis=0)
    if copied > 0:
        ahead = _list_tile(src_ptr, 0, n, BLOCK)
        for start in range(0, n, BLOCK):
            packed = ahead
            ahead = _list_tile(src_ptr, start + BLOCK, n, BLOCK)
            inside = _between(packed, a, b)
            tl.store(dst_ptr + at, packed, mask=inside & (at < SCRATCH))
            at += inside.to(tl.int32)
    tl.debug_barrier()          # what any thread copied is in place before any thread tallies it
    return tl.minimum(copied, SCRATCH).to(tl.int64)


@triton.jit
def _keep_wide(src_ptr, n, dst_ptr, a, b, SCRATCH: tl.constexpr, BLOCK: tl.constexpr, LANES: tl.constexpr):
    """``_keep_narrow``, or with LANES ``_keep_lanes``: the copy of a narrow interval out of a long list (the one
    launch's searches take the lanes, the three launches' and the slow path's one pass)."""
    if LANES:
        return _keep_lanes(src_ptr, n, dst_ptr, a, b, SCRATCH, BLOCK)
    else:
        return _keep_narrow(src_ptr, n, dst_ptr, a, b, SCRATCH, BLOCK)


@triton.jit
def _list_tile(src_ptr, start, n, BLOCK: tl.constexpr):
    """[BLOCK] gathered tokens of the n at src_ptr from start (NONE past n)."""
    i = start + tl.arange(0, BLOCK)
    return tl.load(src_ptr + i, mask=i < n, other=NONE)


@triton.jit
def _between(packed, a, b):
    """Which loaded tokens have keys in [a, b) (NONE, an empty slot, has none)."""
    key = (packed >> 32).to(tl.int64)
    return (packed != NONE) & (key >= a) & (key < b)


@triton.jit
def _candidates(src_ptr, n_src, a, b, key_eq, BY_INDEX: tl.constexpr, NC: tl.constexpr):
    """[NC] ascending candidates in (a, b): a + 1 (the end, where one value is left above target), the middle
    (the interval at least halves), and the values of NC - 2 tokens spread over the n_src at src_ptr, which
    (in no particular order) split the tokens rather than the values: each step leaves a share of the tokens
    of about 1 / (NC - 1). A token outside (a, b) gives the middle instead."""
    jv = tl.arange(0, NC)
    mid = a + (b - a) // 2
    pos = (n_src * (jv - 1)) // (NC - 1)
    valid, value = _values(tl.load(src_ptr + pos, mask=(jv >= 2) & (pos < n_src), other=NONE), key_eq, BY_INDEX)
    spread = tl.where(valid & (value > a) & (value < b), value, mid)
    return _ascending(tl.where(jv == 0, a + 1, tl.where(jv == 1, mid, spread)), NC)


@triton.jit
def _ascending(x, NC: tl.constexpr):
    """[NC] x sorted ascending, by each one's rank among the others (an [NC, NC] comparison: a few whole-tensor
    operations, where a sorting network is dozens, each one Python under the interpreter)."""
    jv = tl.arange(0, NC)
    before = (x[None, :] < x[:, None]) | ((x[None, :] == x[:, None]) & (jv[None, :] < jv[:, None]))
    rank = tl.sum(before.to(tl.int32), axis=1)
    return tl.sum(tl.where(rank[None, :] == jv[:, None], x[None, :], 0), axis=1)


@triton.jit
def _rank_finish(src_ptr, n, c_off, w_off, target, base, key_eq, inv_t, m, BY_INDEX: tl.constexpr,
                 BY_MASS: tl.constexpr, FINISH: tl.constexpr):
    """``_find``'s result over the n <= FINISH tokens at src_ptr, which are all those of the interval, with
    F(b) = (c_off, w_off): F at each token's value by comparing every token with every other at once; the
    largest value reaching target is the answer (the interval's smallest does)."""
    i = tl.arange(0, FINISH)
    packed = tl.load(src_ptr + i, mask=i < n, other=NONE)
    valid, value = _values(packed, key_eq, BY_INDEX)
    _, _, _, e = decode(packed, inv_t, m)
    w = tl.where(valid, weight(e), 0)
    ge = valid[None, :] & (value[None, :] >= value[:, None])        # [i, j]: token j at or above token i
    f_c = c_off + tl.sum(ge.to(tl.int64), axis=1)
    f_w = w_off + tl.sum(tl.where(ge, w[None, :], 0), axis=1)
    if BY_MASS:
        reach = valid & (base + f_w >= target)
    else:
        reach = valid & (base + f_c >= target)
    c = tl.max(tl.where(reach, value, -1 << 40), axis=0)
    at = valid & (value == c)
    ca, wa = tl.max(tl.where(at, f_c, 0), axis=0), tl.max(tl.where(at, f_w, 0), axis=0)
    return c, ca, wa, ca - tl.sum(at.to(tl.int64), axis=0), wa - tl.sum(tl.where(at, w, 0), axis=0)


@triton.jit
def _find(buf_ptr, n, scr_at, a, b, ca, wa, cb, wb, target, base, key_eq, inv_t, m, BY_INDEX: tl.constexpr,
          BY_MASS: tl.constexpr, NC: tl.constexpr, BLOCK_R: tl.constexpr, SCRATCH: tl.constexpr,
          FINISH: tl.constexpr, WIDE: tl.constexpr = False, stamps=None, STAMPS: tl.constexpr = False,
          TILE: tl.constexpr = 0):
    """The largest c in [a, b) with base + F(c) >= target, F the count (BY_MASS: the mass) at or above c as
    ``_tally`` counts it over the n tokens at buf_ptr, given F at a, which reaches target, and at b, which
    does not: (c, the count and mass at c, the count and mass at c + 1). Once [a, b) holds fewer than SCRATCH
    tokens and at most half of those tallied, they move to the scratch at buf_ptr + scr_at (buf_ptr's
    tokens stay): F(c) is then their tally plus F(b) at the move. Once it holds at most FINISH (0: never),
    they are ranked (``_rank_finish``) instead of searched further; WIDE: a key search copies them there from
    buf_ptr's tokens in wide tiles, two passes of few steps over a long list (``_keep_lanes``), where a search
    that starts from the whole bracket makes one (``_keep_narrow``). STAMPS: stamps 21 on entry, 24 once an
    interval that starts narrow has moved, 22 once the steps are done and the last tokens copied, 23 once ranked
    (``triton_cut.stamp``). TILE: the tokens a tile of its copies out of buf_ptr's (0: 4 BLOCK_R)."""
    if STAMPS:
        stamp(stamps, 21, (a ^ b ^ ca ^ cb).to(tl.int32))
        tl.store(stamps + 24, tl.zeros([], tl.int64))     # an earlier search's first copy is not this one's
    jv = tl.arange(0, NC) + 1
    shift = tl.zeros([], tl.int64)      # the tallied tokens: n_src of them from buf_ptr + shift
    n_src = n + shift
    c_off, w_off = shift, shift         # F(b) when they moved
    # an interval that starts narrow (the splits' tallies) moves before its first step
    if (b - a > 1) & (ca - cb < SCRATCH) & (2 * (ca - cb) <= n_src) & ((FINISH == 0) | (ca - cb > FINISH)):
        if BY_INDEX:
            n_src = _keep_between(buf_ptr, n_src, buf_ptr + scr_at, a, b, key_eq, BY_INDEX, SCRATCH, BLOCK_R)
        else:
            n_src = _keep_wide(buf_ptr, n_src, buf_ptr + scr_at, a, b, SCRATCH, TILE if TILE > 0 else 4 * BLOCK_R,
                               WIDE)
        shift = scr_at + tl.zeros([], tl.int64)
        c_off, w_off = cb, wb
        if STAMPS:
            stamp(stamps, 24, n_src.to(tl.int32))
    for _ in range(32):     # each step at least halves the interval: 32 steps cover 2**32 keys
        if (b - a > 1) & ((FINISH == 0) | (ca - cb > FINISH)):
            cand = _candidates(buf_ptr + shift, n_src, a, b, key_eq, BY_INDEX, NC)
            cnt, mass = _tally(buf_ptr + shift, n_src, cand, key_eq, inv_t, m, BY_INDEX, NC, BLOCK_R)
            cnt, mass = cnt + c_off, mass + w_off
            if BY_MASS:
                n_ge = tl.sum((base + mass >= target).to(tl.int32), axis=0)
            else:
                n_ge = tl.sum((base + cnt >= target).to(tl.int32), axis=0)
            up, down = n_ge > 0, n_ge < NC
            a, ca, wa = tl.where(up, pick(cand, n_ge, jv), a), tl.where(up, pick(cnt, n_ge, jv), ca), \
                tl.where(up, pick(mass, n_ge, jv), wa)
            b, cb, wb = tl.where(down, pick(cand, n_ge + 1, jv), b), tl.where(down, pick(cnt, n_ge + 1, jv), cb), \
                tl.where(down, pick(mass, n_ge + 1, jv), wb)
            if (b - a > 1) & (ca - cb < SCRATCH) & (2 * (ca - cb) <= n_src):
                n_src = _keep_between(buf_ptr + shift, n_src, buf_ptr + scr_at, a, b, key_eq, BY_INDEX, SCRATCH,
                                      BLOCK_R)
                shift = scr_at + tl.zeros([], tl.int64)
                c_off, w_off = cb, wb
    if FINISH > 0:
        if (b - a > 1) & (ca - cb <= FINISH):
            # the interval's tokens, alone and in order, at the scratch: copied there unless they already are
            if WIDE and not BY_INDEX:
                if shift != scr_at:
                    n_src = _keep_wide(buf_ptr, n_src, buf_ptr + scr_at, a, b, SCRATCH,
                                       TILE if TILE > 0 else 4 * BLOCK_R, WIDE)
                    c_off, w_off = cb, wb
                elif n_src != ca - cb:
                    n_src = _keep_between(buf_ptr + shift, n_src, buf_ptr + scr_at, a, b, key_eq, BY_INDEX, SCRATCH,
                                          BLOCK_R)
                    c_off, w_off = cb, wb
            elif (shift != scr_at) | (n_src != ca - cb):
                n_src = _keep_between(buf_ptr + shift, n_src, buf_ptr + scr_at, a, b, key_eq, BY_INDEX, SCRATCH,
                                      BLOCK_R)
                c_off, w_off = cb, wb
            if STAMPS:
                stamp(stamps, 22, n_src.to(tl.int32))
            a, ca, wa, cb, wb = _rank_finish(buf_ptr + scr_at, n_src, c_off, w_off, target, base, key_eq, inv_t, m,
                                             BY_INDEX, BY_MASS, FINISH)
    if STAMPS:
        stamp(stamps, 23, (a ^ ca).to(tl.int32))
    return a, ca, wa, cb, wb


@triton.jit
def _key_find(buf_ptr, n, scr_at, a, b, ca, wa, cb, wb, target, lo, hi, inv_t, m, BY_MASS: tl.constexpr,
              NC: tl.constexpr, BLOCK_R: tl.constexpr, SCRATCH: tl.constexpr, FINISH: tl.constexpr, WIDE: tl.constexpr,
              stamps, STAMPS: tl.constexpr, TILE: tl.constexpr, slots_ptr, SLOTS: tl.constexpr, NT: tl.constexpr):
    """``_find`` of a key search (base 0), or, with SLOTS, where [a, b) is one bucket of ``tally_keys(lo, hi, NT)``
    (``triton_tally.bucket_of``) and holds at most SLOTS tokens, ``_rank_finish`` of them at the bucket's slots at
    slots_ptr (``triton_tally.bucket_pack``): the ranked end of ``_find``'s search, without its copy out of the list
    or its steps. STAMPS: 21 and 22 on entry (no copy: 24 reads 0), 23 once ranked, as ``_find`` stamps them."""
    zero = tl.zeros([], tl.int64)
    # two call sites of _find: with one, under a flag that is False where SLOTS is 0, Triton 3.6 compiles the ranked
    # branch there too, with the bucket's names unbound
    if SLOTS > 0:
        t = bucket_of(a, b, lo, hi, NT)
        if (t >= 0) & (b - a > 1) & (ca - cb >= 1) & (ca - cb <= SLOTS):
            if STAMPS:
                stamp(stamps, 21, (a ^ b ^ ca ^ cb).to(tl.int32))
                tl.store(stamps + 24, tl.zeros([], tl.int64))
                stamp(stamps, 22, (ca - cb).to(tl.int32))
            c, c_at, w_at, c_above, w_above = _rank_finish(slots_ptr + t * SLOTS, ca - cb, cb, wb, target, zero, 0,
                                                           inv_t, m, False, BY_MASS, SLOTS)
            if STAMPS:
                stamp(stamps, 23, (c ^ c_at).to(tl.int32))
        else:
            c, c_at, w_at, c_above, w_above = _find(buf_ptr, n, scr_at, a, b, ca, wa, cb, wb, target, zero, 0, inv_t,
                                                    m, False, BY_MASS, NC, BLOCK_R, SCRATCH, FINISH, WIDE, stamps,
                                                    STAMPS, TILE)
    else:
        c, c_at, w_at, c_above, w_above = _find(buf_ptr, n, scr_at, a, b, ca, wa, cb, wb, target, zero, 0, inv_t, m,
                                                False, BY_MASS, NC, BLOCK_R, SCRATCH, FINISH, WIDE, stamps, STAMPS,
                                                TILE)
    return c, c_at, w_at, c_above, w_above


@triton.jit
def resolve(buf_ptr, n, scr_at, lo, hi, c_hi, w_hi, w_hi_mp, w_k, k, k_on, top_p, p_on, floor, V, inv_t, m,
            NC: tl.constexpr, BLOCK_R: tl.constexpr, SCRATCH: tl.constexpr, FINISH: tl.constexpr, tallies_ptr=None,
            SF=0, NT: tl.constexpr = 0, BLOCK_F: tl.constexpr = 1, stamps=None, STAMPS: tl.constexpr = False,
            buckets_ptr=None, ROW_TALLY: tl.constexpr = False, TILE: tl.constexpr = 0, sums=None, slots_ptr=None,
            SLOTS: tl.constexpr = 0):
    """The cut from the n tokens gathered from [lo, hi), given the (count, mass, min-p mass) at or above hi;
    w_k is the mass top-k kept where top-k is off. Returns (ok: the crossings lie among the tokens, cut key,
    cut index, Z', mass top-k kept, count top-k kept). Counts and masses below are the gathered tokens' own.
    With min-p off, Z' comes from the search's own sums (every token of a tie group weighs the same); with it
    on, from one more pass over the tokens (``gathered_kept_mass``). With NT, the SF splits' tallies at
    tallies_ptr (``triton_tally``): the gathered totals come from them, and each key search starts from the
    tallied interval that holds its crossing; with ROW_TALLY, the row's bucket sums at buckets_ptr give the
    tallies (``triton_tally.bucket_pack``), and a search copies from the list in wide tiles, in two passes
    (``_keep_lanes``). STAMPS: its phases stamped at ``stamps`` (``triton_cut.stamp``): 9 the tallies, 10
    top-k's crossing, 11 top-p's, 12 its tie group; 21 to 23 the last key search's steps (``_find``). TILE: the
    key searches' copy tile (``_find``). sums: the bucket sums as ``row_buckets`` gives them, where the caller
    has them (None: loaded here). SLOTS (with ROW_TALLY): the buckets' first SLOTS tokens at slots_ptr, which a key
    search whose tallied interval is one bucket of at most SLOTS tokens ranks at once (``_key_find``)."""
    jt = tl.arange(0, max(NT, 2))
    if NT > 0:
        keys = tally_keys(lo, hi, NT)
        if sums is not None:
            t_cnt, t_mass = sums
        elif ROW_TALLY:
            t_cnt, t_mass = row_buckets(buckets_ptr, NT)
        else:
            t_cnt, t_mass = row_tallies(tallies_ptr, SF, NT, BLOCK_F)
        # the sums at lo, key 0's: one reduction of the two joined
        n_in, w_all_in = tl.split(tl.sum(tl.join(tl.where(jt == 0, t_cnt, 0), tl.where(jt == 0, t_mass, 0)), axis=0))
        if STAMPS:
            stamp(stamps, 9, (n_in ^ w_all_in ^ tl.max(keys, axis=0)).to(tl.int32))
    else:
        n_in, w_all_in = _sum_gathered(buf_ptr, n, inv_t, m, BLOCK_R)
    kept_in = w_all_in
    ok = n_in > 0
    c_k = c_hi + n_in
    cut_key = lo
    cut_idx = tl.zeros([], tl.int32) + V
    zero = tl.zeros([], tl.int64)
    if k_on:
        ok = ok & (c_hi < k) & (c_k >= k)
        a, ca, wa, b, cb, wb = lo, n_in, w_all_in, hi, zero, zero
        if NT > 0:
            a, ca, wa, b, cb, wb = hinted(keys, t_cnt, t_mass, a, ca, wa, b, cb, wb, k - c_hi, False)
        cut_key, c_at, w_at, c_above, w_above = _key_find(buf_ptr, n, scr_at, a, b, ca, wa, cb, wb, k - c_hi, lo, hi,
                                                          inv_t, m, False, NC, BLOCK_R, SCRATCH, FINISH, ROW_TALLY,
                                                          stamps, STAMPS, TILE, slots_ptr, SLOTS, NT)
        c_k, w_k = c_hi + c_at, w_hi + w_at
        w_all_in = w_at
        kept_in = w_at          # top-k keeps its crossing's whole tie group
        if STAMPS:
            stamp(stamps, 10, (cut_key ^ w_at).to(tl.int32))
    if p_on:
        target = (top_p.to(tl.float64) * w_k.to(tl.float64)).to(tl.int64)
        ok = ok & (w_hi < target) & (w_hi + w_all_in >= target)
        a, ca, wa, b, cb, wb = cut_key, c_k - c_hi, w_all_in, hi, zero, zero
        if NT > 0:
            a, ca, wa, b, cb, wb = hinted(keys, t_cnt, t_mass, a, ca, wa, b, cb, wb, target - w_hi, True)
        cut_key, c_at, w_at, c_above, w_above = _key_find(buf_ptr, n, scr_at, a, b, ca, wa, cb, wb, target - w_hi,
                                                          lo, hi, inv_t, m, True, NC, BLOCK_R, SCRATCH, FINISH,
                                                          ROW_TALLY, stamps, STAMPS, TILE, slots_ptr, SLOTS, NT)
        if STAMPS:
            stamp(stamps, 11, (cut_key ^ w_at ^ c_above).to(tl.int32))
        # the crossing's tie group: the first ceil((target - mass above it) / its mass each) are kept
        ties = c_at - c_above
        n_kept = ties
        # a group of one (most crossings) keeps its token: no int64 division, whose chain is long
        kept_in = w_above + ties * (w_at - w_above)
        if ties > 1:
            e_c = tl.exp(key_value(cut_key.to(tl.int32)) * inv_t - m)
            # a key that is no token's (a failed search: not ok) weighs nothing here
            w_c = tl.maximum(weight(tl.where((cut_key > KMIN) & (e_c <= 1.0), e_c, 0.0)), 1)
            n_kept = tl.minimum(tl.maximum((target - w_hi - w_above + w_c - 1) // w_c, 1), ties)
            kept_in = w_above + n_kept * ((w_at - w_above) // ties)
        if n_kept < ties:
            idx, c_at, w_at, c_above, w_above = _find(buf_ptr, n, scr_at, zero, zero + V, ties, zero, zero, zero,
                                                      ties - n_kept + 1, zero, cut_key.to(tl.int32), inv_t, m,
                                                      True, False, NC, BLOCK_R, SCRATCH, FINISH)
            cut_idx = idx.to(tl.int32)
        if STAMPS:
            stamp(stamps, 12, cut_idx + kept_in.to(tl.int32))
    z = w_hi_mp + kept_in
    if floor > 0.0:
        z = gathered_kept_mass(buf_ptr, n, cut_key, cut_idx, w_hi_mp, floor, inv_t, m, BLOCK_R)
    return ok, cut_key, cut_idx, z, w_k, c_k


@triton.jit
def top_set(buf_ptr, n, scr_at, lo, hi, c_hi, k, k_on, RANK_N: tl.constexpr, SCRATCH: tl.constexpr,
            BLOCK_R: tl.constexpr, NT: tl.constexpr, buckets_ptr, stamps=None, STAMPS: tl.constexpr = False,
            TILE: tl.constexpr = 0, sums=None):
    """(src, count): where top-k is on and the row's bucket sums (``triton_tally.row_buckets``, at ``tally_keys``
    of [lo, hi)) put its crossing among the top RANK_N of the n > RANK_N gathered tokens at buf_ptr, every token at
    or above the crossing's tallied interval, copied to the scratch at buf_ptr + scr_at in wide tiles
    (``_keep_lanes``), and how many; else buf_ptr and n. Every token that top-k keeps, and so every token that
    top-p and min-p may keep after it, is in the copy, and whatever lies between it and hi is in it too, so that
    ``triton_rank.rank_cut`` of the copy is ``resolve``'s cut of the whole list, in one step where the two
    searches copy from the list twice. STAMPS: stamps 9 once the sums are in and 22 once the copy is. TILE: the
    copy's tile (0: 4 BLOCK_R). sums: the bucket sums as ``row_buckets`` gives them (None: loaded here)."""
    src = buf_ptr
    count = n
    keys = tally_keys(lo, hi, NT)
    if sums is None:
        t_cnt, t_mass = row_buckets(buckets_ptr, NT)
    else:
        t_cnt, t_mass = sums
    if STAMPS:
        stamp(stamps, 9, (tl.max(t_cnt, axis=0) ^ tl.max(keys, axis=0)).to(tl.int32))
    if k_on & (n > RANK_N):
        zero = tl.zeros([], tl.int64)
        a, ca, _, _, _, _ = hinted(keys, t_cnt, t_mass, lo, pick(t_cnt, 0, tl.arange(0, NT)), zero, hi, zero, zero,
                                   k - c_hi, False)
        if ca <= RANK_N:
            count = _keep_wide(buf_ptr, n, buf_ptr + scr_at, a, hi, SCRATCH, TILE if TILE > 0 else 4 * BLOCK_R, True)
            src = buf_ptr + scr_at
            if STAMPS:
                stamp(stamps, 22, count.to(tl.int32))
    return src, count


@triton.jit
def gathered_kept_mass(buf_ptr, n, cut_key, cut_idx, w_hi_mp, floor, inv_t, m, BLOCK_R: tl.constexpr):
    """Z': the (min-p) mass above the bracket plus that of the gathered tokens the cut keeps."""
    z = w_hi_mp
    cut_val = key_value(cut_key.to(tl.int32))
    for start in range(0, n, BLOCK_R):
        i = start + tl.arange(0, BLOCK_R)
        valid, key, idx, e = unpack(buf_ptr, i, i < n, inv_t, m)
        keep, e = kept(tl.where(valid, key_value(key), float("-inf")), idx, cut_val, cut_idx, floor, inv_t, m)
        z += tl.sum(tl.where(valid & keep, weight(e), 0), axis=0)
    return z
