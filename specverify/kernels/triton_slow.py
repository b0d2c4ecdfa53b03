"""The slow path of the target-filter cut (SPEC 3.4): a row's cut from the row itself, where its bracket missed or
overflowed (``triton_record``). ``@triton.jit`` functions on one row (``row_ptr``, V entries; ``m`` the row's max
of l / T, ``inv_t`` = 1 / T):

    slow_cut(...)     the cut from the whole row, by NC-way narrowing, then ``triton_search.resolve`` on the
                      tokens of the narrowed interval, gathered to ``buf_ptr``
    kept_mass(...)    its Z', by the per-token test itself

Each narrowing step, the gather and Z' read the whole row in one program. With TILE (> 0) they read it in tiles
of TILE, the next tile's load in flight, each thread summing its own lanes and the program reducing once a read
(``_at_keys_wide``, ``_gather``, ``kept_mass``); with TILE 0, in tiles of BLOCK, each tile's sums reduced across
the program.
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_cut import (KMAX, KMIN, key_value, kept, order_key, pick, weight)
from specverify.kernels.triton_search import resolve


@triton.jit
def _at_keys(row_ptr, V, inv_t, m, cand, NC: tl.constexpr, BLOCK: tl.constexpr):
    """Count and mass of the row at or above each of the NC candidate keys (one read)."""
    cnt = tl.zeros([NC], tl.int64)
    mass = tl.zeros([NC], tl.int64)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        logit = tl.load(row_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
        ge = mask[:, None] & (order_key(logit)[:, None] >= cand[None, :])
        cnt += tl.sum(ge.to(tl.int64), axis=0)
        mass += tl.sum(tl.where(ge, weight(tl.exp(logit * inv_t - m))[:, None], 0), axis=0)
    return cnt, mass


@triton.jit
def _at_keys_wide(row_ptr, V, inv_t, m, cand, NC: tl.constexpr, TILE: tl.constexpr):
    """``_at_keys`` in tiles of TILE with the next tile's load in flight: each thread sums its own lanes, and
    the program reduces them once (integer sums: the same in any order)."""
    cnt = tl.zeros([TILE, NC], tl.int32)
    mass = tl.zeros([TILE, NC], tl.int64)
    lanes = tl.arange(0, TILE)
    ahead = tl.load(row_ptr + lanes, mask=lanes < V, other=float("-inf")).to(tl.float32)
    for start in range(0, V, TILE):
        logit = ahead
        offs = start + TILE + lanes
        ahead = tl.load(row_ptr + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
        ge = ((start + lanes) < V)[:, None] & (order_key(logit)[:, None] >= cand[None, :])
        cnt += ge.to(tl.int32)
        mass += tl.where(ge, weight(tl.exp(logit * inv_t - m))[:, None], 0)
    return tl.sum(cnt.to(tl.int64), axis=0), tl.sum(mass, axis=0)


@triton.jit
def _keys_of_row(row_ptr, V, inv_t, m, cand, NC: tl.constexpr, BLOCK: tl.constexpr, TILE: tl.constexpr):
    """``_at_keys``, or with TILE ``_at_keys_wide``."""
    if TILE > 0:
        cc, cw = _at_keys_wide(row_ptr, V, inv_t, m, cand, NC, TILE)
    else:
        cc, cw = _at_keys(row_ptr, V, inv_t, m, cand, NC, BLOCK)
    return cc, cw


@triton.jit
def _narrow(row_ptr, V, inv_t, m, a, b, ca, wa, cb, wb, target, BY_MASS: tl.constexpr, CAP: tl.constexpr,
            NC: tl.constexpr, BLOCK: tl.constexpr, TILE: tl.constexpr = 0, width=1.0, above=KMAX):
    """Shrink [a, b), F(a) >= target > F(b) with F the count (or mass) at or above a key, until it holds at
    most CAP tokens or one key. Every step reads the row once and splits the interval NC + 1 ways. With TILE, an
    interval open to KMAX ends at ``above``, the order key just above the row's max (F is 0 at both, and NC-way
    steps over the empty keys up to KMAX would each cost a read), and one open to KMIN (a crossing below the
    bracket, which its sample's noise puts just below) first splits at NC values below b's, width, 4 width, 16
    width, ... under it (``_below``)."""
    jv = tl.arange(0, NC) + 1
    if TILE > 0:
        b = tl.minimum(b, tl.maximum(above, a + 1))
        if (a == KMIN) & (b - a > NC + 1) & (ca - cb > CAP):
            cand = _below(a, b, width, NC)
            cc, cw = _keys_of_row(row_ptr, V, inv_t, m, cand, NC, BLOCK, TILE)
            a, b, ca, wa, cb, wb = _step(cand, cc, cw, a, b, ca, wa, cb, wb, target, BY_MASS, NC)
    for _ in range(16):
        if (b - a > 1) & (ca - cb > CAP):
            cand = a + ((b - a) * jv) // (NC + 1)
            cc, cw = _keys_of_row(row_ptr, V, inv_t, m, cand, NC, BLOCK, TILE)
            a, b, ca, wa, cb, wb = _step(cand, cc, cw, a, b, ca, wa, cb, wb, target, BY_MASS, NC)
    return a, b, ca, wa, cb, wb


@triton.jit
def _step(cand, cc, cw, a, b, ca, wa, cb, wb, target, BY_MASS: tl.constexpr, NC: tl.constexpr):
    """[a, b) and F at its ends after a read of F at the NC ascending candidate keys in it (counts cc, masses
    cw): from the last candidate still at or above target to the first below it."""
    jv = tl.arange(0, NC) + 1
    if BY_MASS:
        n_ge = tl.sum((cw >= target).to(tl.int32), axis=0)
    else:
        n_ge = tl.sum((cc >= target).to(tl.int32), axis=0)
    a, ca, wa = (tl.where(n_ge > 0, pick(cand, n_ge, jv), a), tl.where(n_ge > 0, pick(cc, n_ge, jv), ca),
                 tl.where(n_ge > 0, pick(cw, n_ge, jv), wa))
    b, cb, wb = (tl.where(n_ge < NC, pick(cand, n_ge + 1, jv), b),
                 tl.where(n_ge < NC, pick(cc, n_ge + 1, jv), cb),
                 tl.where(n_ge < NC, pick(cw, n_ge + 1, jv), wb))
    return a, b, ca, wa, cb, wb


@triton.jit
def _below(a, b, width, NC: tl.constexpr):
    """[NC] ascending keys in (a, b) (b - a > NC + 1): those of b's value less width * 4^(NC - 1), ..., 4 width,
    width, clamped into (a, b) in order. Any ascending keys in (a, b) keep the narrowing exact; these only choose
    where it looks first."""
    jv = tl.arange(0, NC)
    v = key_value(b.to(tl.int32)) - width * tl.exp2(2.0 * (NC - 1 - jv).to(tl.float32))
    key = tl.minimum(tl.maximum(order_key(v).to(tl.int64), a + 1 + jv), b - NC + jv)
    return key


@triton.jit
def _gather(row_ptr, V, a, b, buf_ptr, CAP: tl.constexpr, BLOCK: tl.constexpr, TILE: tl.constexpr = 0):
    """Gather the tokens with keys in [a, b) in index order (at most CAP); returns how many there are. With
    TILE, in tiles of TILE with the next tile's load in flight."""
    n_buf = tl.zeros([], tl.int64)
    if TILE > 0:
        lanes = tl.arange(0, TILE)
        ahead = tl.load(row_ptr + lanes, mask=lanes < V, other=float("-inf")).to(tl.float32)
        for start in range(0, V, TILE):
            offs = start + lanes
            key = order_key(ahead)
            ahead = tl.load(row_ptr + offs + TILE, mask=offs + TILE < V, other=float("-inf")).to(tl.float32)
            n_buf = _gather_tile(key, offs, V, a, b, buf_ptr, n_buf, CAP)
    else:
        for start in range(0, V, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            key = order_key(tl.load(row_ptr + offs, mask=offs < V, other=float("-inf")).to(tl.float32))
            n_buf = _gather_tile(key, offs, V, a, b, buf_ptr, n_buf, CAP)
    return n_buf


@triton.jit
def _gather_tile(key, offs, V, a, b, buf_ptr, n_buf, CAP: tl.constexpr):
    """``_gather``'s step: the tile's tokens at offs with keys in [a, b) stored after the n_buf before them;
    returns n_buf with them."""
    inside = (offs < V) & (key >= a) & (key < b)
    at = n_buf + tl.cumsum(inside.to(tl.int64), 0) - 1
    tl.store(buf_ptr + at, (key.to(tl.int64) << 32) | (4294967295 - offs.to(tl.int64)), mask=inside & (at < CAP))
    return n_buf + tl.sum(inside.to(tl.int64), axis=0)


@triton.jit
def _nth_index(row_ptr, V, key_c, n, BLOCK: tl.constexpr):
    """The index of the n-th token (n >= 1, in index order) whose order key is key_c."""
    seen = tl.zeros([], tl.int64)
    found = tl.zeros([], tl.int32)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        eq = (offs < V) & (order_key(tl.load(row_ptr + offs, mask=offs < V, other=0.0).to(tl.float32)) == key_c)
        hit = eq & (seen + tl.cumsum(eq.to(tl.int64), 0) == n)
        found += tl.sum(tl.where(hit, offs, 0), axis=0)
        seen += tl.sum(eq.to(tl.int64), axis=0)
    return found


@triton.jit
def kept_mass(row_ptr, V, cut_val, cut_idx, floor, inv_t, m, BLOCK: tl.constexpr, TILE: tl.constexpr = 0):
    """Z' by the per-token test itself (one read): the slow path's kept mass. With TILE, in tiles of TILE with
    the next tile's load in flight."""
    if TILE > 0:
        lanes = tl.arange(0, TILE)
        acc = tl.zeros([TILE], tl.int64)
        ahead = tl.load(row_ptr + lanes, mask=lanes < V, other=float("-inf")).to(tl.float32)
        for start in range(0, V, TILE):
            logit = ahead
            offs = start + lanes
            ahead = tl.load(row_ptr + offs + TILE, mask=offs + TILE < V, other=float("-inf")).to(tl.float32)
            keep, e = kept(logit, offs, cut_val, cut_idx, floor, inv_t, m)
            acc += tl.where(keep, weight(e), 0)
    else:
        acc = tl.zeros([BLOCK], tl.int64)
        for start in range(0, V, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            logit = tl.load(row_ptr + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
            keep, e = kept(logit, offs, cut_val, cut_idx, floor, inv_t, m)
            acc += tl.where(keep, weight(e), 0)
    return tl.sum(acc, axis=0)


@triton.jit
def slow_cut(row_ptr, V, buf_ptr, scr_at, k, k_on, top_p, p_on, floor, m, inv_t, lo, hi, c_hi, w_hi,
             CAP: tl.constexpr, NC: tl.constexpr, BLOCK: tl.constexpr, SCRATCH: tl.constexpr, FINISH: tl.constexpr,
             TILE: tl.constexpr = 0, above=KMAX):
    """(cut key, cut index) when the bracket missed: top-k's crossing first (its kept mass sets top-p's
    target), then top-p's, each narrowed from the counts at lo and hi (the sweep's at hi), then gathered;
    a crossing inside one tie group wider than CAP is read off the group's counts (and, for top-p, the
    index of its last kept token). TILE: the tile of its reads of the row (0: BLOCK's, reduced a tile), and with
    it where ``_narrow`` looks first: ``above`` is the order key just above the row's max."""
    cut_key = tl.full([], KMIN, tl.int64)
    cut_idx = tl.zeros([], tl.int32) + V
    c_k = tl.zeros([], tl.int64) + V
    width = tl.full([], 1.0, tl.float32)    # the bracket's in l: where a crossing below it is looked for first
    if TILE > 0:
        if (lo > KMIN) & (hi < KMAX) & (lo < hi):
            width = key_value(hi.to(tl.int32)) - key_value(lo.to(tl.int32))
        width = tl.where((width > 0.0) & (width < float("inf")), width, 1.0)
    # the count and mass at or above lo, and the row's whole mass: the sweep sums only those above hi, and
    # weighs nothing for a top-k row with nothing above (one more read, on this path alone)
    jc = tl.arange(0, NC)
    c_lo, w_lo = _keys_of_row(row_ptr, V, inv_t, m, tl.where(jc == 1, KMIN, lo), NC, BLOCK, TILE)
    c_lo, w_lo, w_all = pick(c_lo, 0, jc), pick(w_lo, 0, jc), pick(w_lo, 1, jc)
    w_k = w_all
    if k_on:
        up, mid = c_hi >= k, c_lo >= k
        a, ca, wa = tl.where(up, hi, tl.where(mid, lo, KMIN)), tl.where(up, c_hi, tl.where(mid, c_lo, V)), \
            tl.where(up, w_hi, tl.where(mid, w_lo, w_all))
        b, cb, wb = tl.where(up, KMAX, tl.where(mid, hi, lo)), tl.where(up, 0, tl.where(mid, c_hi, c_lo)), \
            tl.where(up, 0, tl.where(mid, w_hi, w_lo))
        a, b, ca, wa, cb, wb = _narrow(row_ptr, V, inv_t, m, a, b, ca, wa, cb, wb, k, False, CAP, NC, BLOCK, TILE,
                                       width, above)
        if ca - cb > CAP:       # one key: its whole tie group is kept
            cut_key, w_k, c_k = a, wa, ca
        else:
            n_in = _gather(row_ptr, V, a, b, buf_ptr, CAP, BLOCK, TILE)
            ok, cut_key, cut_idx, z, w_k, c_k = resolve(buf_ptr, n_in, scr_at,
                                                         a, b, cb, wb, wb, w_all, k, True, top_p, False, floor, V,
                                                         inv_t, m, NC, BLOCK, SCRATCH, FINISH)
    if p_on:
        target = (top_p.to(tl.float64) * w_k.to(tl.float64)).to(tl.int64)
        up, mid = w_hi >= target, w_lo >= target
        a, ca, wa = tl.where(up, hi, tl.where(mid, lo, KMIN)), tl.where(up, c_hi, tl.where(mid, c_lo, V)), \
            tl.where(up, w_hi, tl.where(mid, w_lo, w_all))
        b, cb, wb = tl.where(up, KMAX, tl.where(mid, hi, lo)), tl.where(up, 0, tl.where(mid, c_hi, c_lo)), \
            tl.where(up, 0, tl.where(mid, w_hi, w_lo))
        if k_on:                # top-p keeps a prefix of what top-k kept
            a, ca, wa, b, cb, wb = cut_key, c_k, w_k, tl.full([], KMAX, tl.int64), c_k * 0, w_k * 0
        a, b, ca, wa, cb, wb = _narrow(row_ptr, V, inv_t, m, a, b, ca, wa, cb, wb, target, True, CAP, NC, BLOCK,
                                       TILE, width, above)
        if ca - cb > CAP:       # one key: its first ceil((target - mass above) / mass each) tokens are kept
            w_c = weight(tl.exp(key_value(a.to(tl.int32)) * inv_t - m))
            n_tie = tl.minimum(tl.maximum((target - wb + w_c - 1) // tl.maximum(w_c, 1), 1), ca - cb)
            cut_key = a
            cut_idx = tl.where(n_tie < ca - cb, _nth_index(row_ptr, V, a.to(tl.int32), n_tie, BLOCK), V)
        else:
            n_in = _gather(row_ptr, V, a, b, buf_ptr, CAP, BLOCK, TILE)
            ok, cut_key, cut_idx, z, w_k, c_k = resolve(buf_ptr, n_in, scr_at,
                                                         a, b, cb, wb, wb, w_k, k, False, top_p, True, floor, V,
                                                         inv_t, m, NC, BLOCK, SCRATCH, FINISH)
    return cut_key, cut_idx
