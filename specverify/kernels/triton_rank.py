"""The cut of a row whose bracket gathered few tokens (``triton_cut_kernel``'s record launch calls it in place of
``triton_search.resolve``, with the same arguments and results): each gathered token's place in the order comes
from comparing it with every other gathered token at once, one step where the search takes a tally a step.
A row of a small vocabulary is gathered whole, so its cut is always found this way.

    rank_cut(buf_ptr, n, c_hi, w_hi, w_hi_mp, w_k, k, k_on, top_p, p_on, floor, V, inv_t, m, BLOCK_N)
        buf_ptr    n <= BLOCK_N gathered tokens (int64, key << 32 | 2**32 - 1 - index), as ``sweep`` stores them
        c_hi, w_hi, w_hi_mp   count, mass and min-p mass of the row's tokens above the bracket
        -> (ok, cut key, cut index, Z', mass top-k kept, count top-k kept), as ``resolve`` returns them
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_cut import KMAX, NONE, add2, decode, weight
from specverify.kernels.triton_search import gathered_kept_mass


@triton.jit
def rank_cut(buf_ptr, n, c_hi, w_hi, w_hi_mp, w_k, k, k_on, top_p, p_on, floor, V, inv_t, m, BLOCK_N: tl.constexpr):
    """``resolve`` for at most BLOCK_N gathered tokens, with the same results: each token's place in the order
    comes from comparing it with every other gathered token at once, where the search takes a tally a step.
    Top-k keeps a token with fewer than k tokens of larger key; top-p keeps one whose preceding kept mass is
    below the target (the shortest prefix that reaches it; a target under one unit keeps the first token).
    A row gathered whole always finds its cut here (ok).

    Each reduction across the program's warps is a round trip through shared memory and a barrier, so they are
    few, and none waits on another that it need not. Where both filters are on, top-p's mass ahead of a token (a
    row of the [BLOCK_N, BLOCK_N] comparison) takes no top-k mask, so that it and top-k's count of larger keys reduce
    side by side: a token that top-k keeps has every token ahead of it kept too (none has a smaller key), and a token
    that top-k cuts is cut whatever its mass ahead. Top-k's kept mass, which top-p's target needs, takes one more
    reduction only there; then one of six operands gives the rest. The kept set is a prefix of the tokens in packed
    order (larger key first, then lower index: a larger packed word), so the cut is its smallest packed word, and the
    cut splits a tie group where the largest packed word left out has the cut's key."""
    i = tl.arange(0, BLOCK_N)
    packed = tl.load(buf_ptr + i, mask=i < n, other=NONE)
    valid, key, _, e = decode(packed, inv_t, m)
    w = tl.where(valid, weight(e), 0)
    keep = valid
    c_top = tl.zeros([], tl.int64)
    target = _target(top_p, w_k)
    if k_on & p_on:
        n_larger = _count_larger(valid, key)
        w_ahead = _mass_ahead(valid, packed, w)
        keep = keep & (c_hi + n_larger < k)
        c_top, w_top = tl.reduce((keep.to(tl.int64), tl.where(keep, w, 0)), 0, add2)
        w_k = w_hi + w_top
        target = _target(top_p, w_k)
        keep = keep & (w_hi + w_ahead < target)
    elif k_on:
        keep = keep & (c_hi + _count_larger(valid, key) < k)
    elif p_on:
        keep = keep & (w_hi + _mass_ahead(valid, packed, w) < target)
    n_valid, w_valid, c_in, w_in, last, first_out = tl.reduce(
        (valid.to(tl.int64), w, keep.to(tl.int64), tl.where(keep, w, 0), tl.where(keep, packed, 9223372036854775807),
         tl.where(valid & ~keep, packed, NONE)), 0, _prefix_ends)
    if k_on & ~p_on:    # top-k's kept set is the whole kept set
        c_top = c_in
        w_k = w_hi + w_in
    c_k = c_hi + tl.where(k_on, c_top, n_valid)
    ok = n_valid > 0
    if k_on:
        ok = ok & (c_hi < k) & (c_hi + n_valid >= k)
    if p_on:
        ok = ok & (w_hi < target) & (tl.where(k_on, w_k, w_hi + w_valid) >= target)
    cut_key = tl.where(c_in > 0, last >> 32, KMAX)
    split = (c_in > 0) & (first_out != NONE) & ((first_out >> 32) == cut_key)
    cut_idx = tl.where(split, (4294967295 - (last & 4294967295)).to(tl.int32), V).to(tl.int32)
    z = w_hi_mp + w_in
    if floor > 0.0:
        z = gathered_kept_mass(buf_ptr, n, cut_key, cut_idx, w_hi_mp, floor, inv_t, m, BLOCK_N)
    return ok, cut_key, cut_idx, z, w_k, c_k


@triton.jit
def _target(top_p, w_k):
    """Top-p's target: float64 top_p times the mass it is a share of, truncated to int64, at least one unit."""
    return tl.maximum((top_p.to(tl.float64) * w_k.to(tl.float64)).to(tl.int64), 1)


@triton.jit
def _count_larger(valid, key):
    """[BLOCK_N] int32: each token's count of valid tokens with a larger key."""
    return tl.sum((valid[None, :] & (key[None, :] > key[:, None])).to(tl.int32), axis=1)


@triton.jit
def _mass_ahead(valid, packed, w):
    """[BLOCK_N] int64: each token's mass of the valid tokens ahead of it in packed order (a larger packed word)."""
    return tl.sum(tl.where(valid[None, :] & (packed[None, :] > packed[:, None]), w[None, :], 0), axis=1)


@triton.jit
def _prefix_ends(n_a, v_a, c_a, w_a, last_a, out_a, n_b, v_b, c_b, w_b, last_b, out_b):
    """``rank_cut``'s reduction: counts and masses add, the kept prefix's last word is the smaller, the first word
    left out the larger."""
    return n_a + n_b, v_a + v_b, c_a + c_b, w_a + w_b, tl.minimum(last_a, last_b), tl.maximum(out_a, out_b)
