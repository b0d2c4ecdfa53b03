"""The splits' tallies of the one-launch cut (``triton_cut_kernel``'s STAGE 3): each split of a row tallies its
gathered tokens at NT keys spread over the row's bracket as it packs them into the row's list, so that the
record's key searches (``triton_search.resolve``) start from the tallied interval that holds each crossing,
not from the whole bracket. ``@triton.jit`` functions on one row (``m`` its max of l / T, ``inv_t`` = 1 / T);
gathered tokens are int64 (key << 32 | 2**32 - 1 - index):

    tally_keys(lo, hi, NT)  -> [NT] int64 keys: lo, then keys whose logits split [value(lo), value(hi - 1)] evenly
    tally_pack(...)         a split's tokens into the row's list, and its tallies (count and mass at or above
                            each key) to the work space, in one read
    bucket_pack(...)        the same, each token's count and mass added to its bucket of the row's sums instead
                            (and the token stored at its slot in the bucket, with SLOTS)
    row_buckets(...)        -> the row's tallies [NT] from those buckets (ONE_LAUNCH_ROW_TALLY)
    bucket_sums / from_top  its two halves: the buckets' own sums loaded, then summed from the top
    bucket_of(a, b, lo, hi, NT) -> the bucket that is [a, b) whole, or -1
    row_tallies(...)        -> the row's tallies [NT], its splits' summed
    hinted(...)             an interval narrowed to the tallied keys that bound its crossing most closely

Work space per (row, split): [NT] counts, then [NT] masses (``triton_cut.split_tallies``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_cut import KMAX, KMIN, NONE, decode, key_value, order_key, weight
from specverify.kernels.triton_gather import claim


@triton.jit
def tally_keys(lo, hi, NT: tl.constexpr):
    """[NT] int64 keys in [lo, hi): lo, then keys whose logits split [value(lo), value(hi - 1)] evenly (logits
    near a crossing lie close together by value, where keys stretch across binades and zero). Keys that
    would fall outside (lo, hi), as with an end that is no finite logit, are lo, which narrows nothing; the
    keys ascend either way."""
    va, vb, usable = _key_span(lo, hi)
    return _key_at(tl.arange(0, NT), lo, hi, va, vb, usable, NT)


@triton.jit
def _key_span(lo, hi):
    """(value(lo), value(hi - 1), whether keys between them split it): ``tally_keys``' ends."""
    va = key_value(tl.maximum(lo, KMIN + 1).to(tl.int32))
    vb = key_value((tl.minimum(hi, KMAX) - 1).to(tl.int32))
    return va, vb, (lo > KMIN) & (va < vb) & (vb - va < float("inf"))


@triton.jit
def _key_at(t, lo, hi, va, vb, usable, NT: tl.constexpr):
    """``tally_keys``' key t (any shape of int32 t in [0, NT)), the same bits whichever tensor asks."""
    v = va + (vb - va) * (t.to(tl.float32) / NT)
    key = order_key(v).to(tl.int64)
    return tl.where(usable & (t > 0) & (key > lo) & (key < hi), key, lo)


@triton.jit
def bucket_of(a, b, lo, hi, NT: tl.constexpr):
    """The bucket of ``bucket_pack``'s that is [a, b) whole, where a is one of ``tally_keys(lo, hi, NT)`` and no key
    lies in (a, b); else -1 (also where it cannot confirm one). Scalar arithmetic, no reduction: the midpoint of
    a's float and the next places the bucket within one, and the keys next to that place, computed as ``_key_at``
    computes them for every caller, confirm it (a token's bucket is the last whose key is at or below its own, so of
    equal keys the last)."""
    va, vb, usable = _key_span(lo, hi)
    # the place of the midpoint between a's float and the next: the last t whose key rounds to a lies just below
    # it, where keys repeat too (an unusable span, its keys all lo, divides by 1: no guess of it is confirmed)
    at = tl.minimum(tl.maximum(a, KMIN), KMAX - 2).to(tl.int32)
    # differences, not the midpoint itself, which rounds to one of the two floats
    v = key_value(at)
    place = ((v - va) + 0.5 * (key_value(at + 1) - v)) / tl.where(usable, vb - va, 1.0) * NT
    # a value outside the keys' span (or NaN, from a key that is no float's) guesses 0, which no check confirms
    guess = tl.where((place >= 0.0) & (place <= NT), place, 0.0).to(tl.int32)
    t = tl.full([], -1, tl.int32)
    for d in tl.static_range(3):
        c = tl.minimum(tl.maximum(guess + (d - 1), 0), NT - 1)
        after = tl.where(c + 1 < NT, _key_at(tl.minimum(c + 1, NT - 1), lo, hi, va, vb, usable, NT), KMAX)
        t = tl.where(usable & (_key_at(c, lo, hi, va, vb, usable, NT) == a) & (after > a) & (after >= b), c, t)
    return t


@triton.jit
def bucket_pack(buf_ptr, parts_ptr, region, dst_ptr, total_ptr, row_ptr, lo, hi, inv_t, m, CAP: tl.constexpr,
                NT: tl.constexpr, BITS: tl.constexpr, BLOCK: tl.constexpr, slots_ptr=None, SLOTS: tl.constexpr = 0,
                own=0, OWN: tl.constexpr = False):
    """``triton_gather.pack`` of one split that also adds each token's count and mass to its bucket of the row's
    [2, NT] int64 sums at row_ptr (counts, then masses; zero before the row's first split): bucket t holds the
    keys in [key t, key t + 1) of ``tally_keys(lo, hi, NT)``, found by a binary search of BITS = log2(NT) steps
    over the keys, each computed where it is compared (``_key_at``). The record's tallies are the buckets'
    sums from the top (``row_buckets``): one load of the row's, where ``tally_pack`` leaves SF splits' of them,
    and a token's cost does not grow with NT. SLOTS: each token is also stored at the row's [NT, SLOTS] slots at
    slots_ptr, in its bucket's row at the count before its own (its atomic add's return), where under SLOTS: the
    bucket's first SLOTS tokens, whichever split packed them. OWN: the split's count is ``own``, as the read wrote it
    (``triton_gather.claim``), so that its first tile's load is in flight with the claim's atomic add."""
    if OWN:
        tl.debug_barrier()      # every thread's gathered stores are in before any thread loads them
        first = tl.load(buf_ptr + tl.arange(0, BLOCK), mask=tl.arange(0, BLOCK) < tl.minimum(own, region), other=NONE)
    n, at, copied = claim(parts_ptr, region, total_ptr, CAP, own, OWN)
    va, vb, usable = _key_span(lo, hi)
    for start in range(0, n, BLOCK):
        i = start + tl.arange(0, BLOCK)
        if OWN:     # the first tile as loaded before the claim, the others here
            packed = tl.where(start == 0, first, tl.load(buf_ptr + i, mask=(i < n) & (i >= BLOCK), other=NONE))
        else:
            packed = tl.load(buf_ptr + i, mask=i < n, other=NONE)
        tl.store(dst_ptr + at + i, packed, mask=i < copied)
        valid, _, _, e = decode(packed, inv_t, m)
        key = packed >> 32
        bucket = tl.zeros([BLOCK], tl.int32)      # key 0 is lo, at or below every gathered token's
        for bit in tl.static_range(BITS):
            up = bucket + (NT >> (bit + 1))
            bucket = tl.where(_key_at(up, lo, hi, va, vb, usable, NT) <= key, up, bucket)
        slot = tl.atomic_add(row_ptr + bucket, tl.full([BLOCK], 1, tl.int64), mask=valid, sem="relaxed")
        tl.atomic_add(row_ptr + NT + bucket, weight(e), mask=valid, sem="relaxed")
        if SLOTS > 0:
            tl.store(slots_ptr + bucket * SLOTS + slot, packed, mask=valid & (slot < SLOTS))


@triton.jit
def row_buckets_at(tickets_ptr, NR, rid, NT: tl.constexpr):
    """Row rid's [2, NT] int64 bucket sums, after the one launch's [5, NR] int32 tickets (at an even word: 8-byte
    aligned): zero between calls, as the tickets are, since the row's record zeroes them (``triton_record``)."""
    first = tickets_ptr + 5 * NR + (5 * NR) % 2
    return first.to(tl.pointer_type(tl.int64)) + rid * (2 * NT)


@triton.jit
def row_buckets(row_ptr, NT: tl.constexpr):
    """(count, mass) [NT] at or above each of ``tally_keys``: the row's bucket sums (``bucket_pack``) from the
    top (the record zeroes them after, ``triton_record``)."""
    return from_top(bucket_sums(row_ptr, NT))


@triton.jit
def bucket_sums(row_ptr, NT: tl.constexpr):
    """(count, mass) [NT] of each bucket alone (``bucket_pack``): loaded where a caller wants them in flight early."""
    jj = tl.arange(0, NT)
    return tl.load(row_ptr + jj), tl.load(row_ptr + NT + jj)


@triton.jit
def from_top(sums):
    """``row_buckets`` of the buckets' own (count, mass) ``sums``."""
    # both sums from the top in one scan of the two joined: each scan or reduction is a round trip through shared
    # memory, and the interpreter runs a combine of the kernel's own element by element
    cnt, mass = sums
    return tl.split(tl.cumsum(tl.join(cnt, mass), 0, reverse=True))


@triton.jit
def tally_pack(buf_ptr, parts_ptr, region, dst_ptr, total_ptr, tallies_ptr, keys, inv_t, m, CAP: tl.constexpr,
               NT: tl.constexpr, BLOCK: tl.constexpr):
    """``triton_gather.pack`` of one split (its atomic gather's tokens at buf_ptr, its place by ``claim``) that
    also tallies them at ``keys`` (count and mass at or above each) to tallies_ptr, in the same read."""
    n, at, copied = claim(parts_ptr, region, total_ptr, CAP)
    cnt = tl.zeros([BLOCK, NT], tl.int32)
    mass = tl.zeros([BLOCK, NT], tl.int64)
    for start in range(0, n, BLOCK):
        i = start + tl.arange(0, BLOCK)
        packed = tl.load(buf_ptr + i, mask=i < n, other=NONE)
        tl.store(dst_ptr + at + i, packed, mask=i < copied)
        valid, _, _, e = decode(packed, inv_t, m)
        ge = valid[:, None] & ((packed >> 32)[:, None] >= keys[None, :])
        cnt += ge.to(tl.int32)
        mass += tl.where(ge, weight(e)[:, None], 0)
    jj = tl.arange(0, NT)
    tl.store(tallies_ptr + jj, tl.sum(cnt, axis=0).to(tl.int64))
    tl.store(tallies_ptr + NT + jj, tl.sum(mass, axis=0))


@triton.jit
def row_tallies(tallies_ptr, SF, NT: tl.constexpr, BLOCK_F: tl.constexpr):
    """(count, mass) [NT]: the SF splits' tallies from tallies_ptr (split 0's) summed."""
    ff = tl.arange(0, BLOCK_F)[:, None]
    at = tallies_ptr + ff * (2 * NT) + tl.arange(0, NT)[None, :]
    return tl.sum(tl.load(at, mask=ff < SF, other=0), axis=0), tl.sum(tl.load(at + NT, mask=ff < SF, other=0), axis=0)


@triton.jit
def hinted(keys, t_cnt, t_mass, a, ca, wa, b, cb, wb, target, BY_MASS: tl.constexpr):
    """[a, b) with F(a) >= target > F(b) narrowed to the tallied keys inside it that bound the crossing most
    closely (keys ascending; t_cnt, t_mass: F at each key, the count and mass of every gathered token at or above
    it, so neither rises with the key). a's new key is the largest inside that reaches target, and its F the least
    of theirs; b's the smallest inside that does not, and its F the most of theirs: one reduction of six operands,
    since each reduction is a round trip through shared memory."""
    inside = (keys > a) & (keys < b)
    if BY_MASS:
        reach = t_mass >= target
    else:
        reach = t_cnt >= target
    up, down = inside & reach, inside & ~reach
    # keys and counts reduce as int32, which take one shuffle and one min or max a step where int64 take two and
    # four: the record, which one program runs alone, waits on fetching its code more than on anything else. The
    # keys are order keys (int32 values, those inside (a, b) a finite float's, below the int32 maximum) and a
    # count is at most V, so the int32 ends say whether any key was up or down
    low, high = -2147483648, 2147483647
    most = tl.full([], 9223372036854775807, tl.int64)
    k32, c32 = keys.to(tl.int32), t_cnt.to(tl.int32)
    a2, c_a, w_a, b2, c_b, w_b = tl.reduce((tl.where(up, k32, low), tl.where(up, c32, high),
                                            tl.where(up, t_mass, most), tl.where(down, k32, high),
                                            tl.where(down, c32, -1), tl.where(down, t_mass, -1)), 0, _bounds_of)
    moved_a, moved_b = a2 > low, b2 < high
    return (tl.where(moved_a, a2.to(tl.int64), a), tl.where(moved_a, c_a.to(tl.int64), ca), tl.where(moved_a, w_a, wa),
            tl.where(moved_b, b2.to(tl.int64), b), tl.where(moved_b, c_b.to(tl.int64), cb), tl.where(moved_b, w_b, wb))


@triton.jit
def _bounds_of(a1, ca1, wa1, b1, cb1, wb1, a2, ca2, wa2, b2, cb2, wb2):
    """``hinted``'s combine: a's key the largest and its sums the least, b's key the smallest and its sums the most."""
    return (tl.maximum(a1, a2), tl.minimum(ca1, ca2), tl.minimum(wa1, wa2), tl.minimum(b1, b2), tl.maximum(cb1, cb2),
            tl.maximum(wb1, wb2))
