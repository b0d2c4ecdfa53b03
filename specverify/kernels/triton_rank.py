"""The cut of a row whose bracket gathered few tokens (``triton_filter``'s record launch calls it in place of
``triton_search.resolve``, with the same arguments and results): each gathered token's place in the order comes
from one sort of the gathered tokens, where the search takes a tally a step.
A row of a small vocabulary is gathered whole, so its cut is always found this way.

    rank_cut(buf_ptr, n, c_hi, w_hi, w_hi_mp, w_k, k, k_on, top_p, p_on, floor, V, inv_t, m, BLOCK_N)
        buf_ptr    n <= BLOCK_N gathered tokens (int64, key << 32 | 2**32 - 1 - index), as ``sweep`` stores them
        c_hi, w_hi, w_hi_mp   count, mass and min-p mass of the row's tokens above the bracket
        -> (ok, cut key, cut index, Z', mass top-k kept, count top-k kept), as ``resolve`` returns them
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_cut import KMAX, KMIN, NONE, decode, pick, weight
from specverify.kernels.triton_search import gathered_kept_mass


@triton.jit
def rank_cut(buf_ptr, n, c_hi, w_hi, w_hi_mp, w_k, k, k_on, top_p, p_on, floor, V, inv_t, m, BLOCK_N: tl.constexpr):
    """``resolve`` for at most BLOCK_N gathered tokens, with the same results: each token's place in the order
    comes from one sort of the gathered tokens (``tl.sort``), where the search takes a tally a step.
    Top-k keeps a token with fewer than k tokens of larger key; top-p keeps one whose preceding kept mass is
    below the target (the shortest prefix that reaches it; a target under one unit keeps the first token).
    A row gathered whole always finds its cut here (ok)."""
    i = tl.arange(0, BLOCK_N)
    # descending packed values put a larger key first and, within a key, the lower index first: the token at
    # position j has j tokens before it, so each test below is a prefix of the order
    order = tl.sort(tl.load(buf_ptr + i, mask=i < n, other=NONE), descending=True)
    valid, key, idx, e = decode(order, inv_t, m)
    key = key.to(tl.int64)
    w = tl.where(valid, weight(e), 0)
    keep = valid
    c_k = c_hi + tl.sum(valid.to(tl.int64), axis=0)
    ok = c_k > c_hi
    w_in = tl.sum(w, axis=0)
    if k_on:
        ok = ok & (c_hi < k) & (c_k >= k)
        # fewer than k tokens of larger key: at or above the key of the (k - c_hi)-th gathered token (ties kept)
        at = k - c_hi - 1
        kth = tl.where(at < 0, KMAX, tl.where(at >= c_k - c_hi, KMIN, pick(key, at, i)))
        keep = keep & (key >= kth)
        c_k = c_hi + tl.sum(keep.to(tl.int64), axis=0)
        w_in = tl.sum(tl.where(keep, w, 0), axis=0)
        w_k = w_hi + w_in
    if p_on:
        target = tl.maximum((top_p.to(tl.float64) * w_k.to(tl.float64)).to(tl.int64), 1)
        ok = ok & (w_hi < target) & (w_hi + w_in >= target)
        kept_w = tl.where(keep, w, 0)
        keep = keep & (w_hi + tl.cumsum(kept_w, axis=0) - kept_w < target)
    # the kept prefix ends at its smallest key; a tie group it splits ends at its last kept index
    cut_key = tl.min(tl.where(keep, key, KMAX), axis=0)
    split = tl.sum((valid & ~keep & (key == cut_key)).to(tl.int32), axis=0) > 0
    last = tl.max(tl.where(keep & (key == cut_key), idx, -1), axis=0)
    cut_idx = tl.where(split, last, V).to(tl.int32)
    return ok, cut_key, cut_idx, gathered_kept_mass(buf_ptr, n, cut_key, cut_idx, w_hi_mp, floor, inv_t, m,
                                                     BLOCK_N), w_k, c_k
