"""The record's narrowing of a key search to the tallied keys (specverify/kernels/triton_tally.py): ``hinted``,
called from a test kernel a case a program, must return the interval, and the sums at its ends, that its definition
gives in Python integers. The kernel runs on the device the other filter tests run on (the interpreter without
CUDA).
"""

from __future__ import annotations

import random

import pytest
import torch
import triton
import triton.language as tl

from filter_settings import DEVICES, order_keys, tally_keys_of
from specverify.kernels.triton_cut import KMAX, KMIN
from specverify.kernels.triton_tally import bucket_of, hinted

NT = 16
CASES = 96


@triton.jit
def _hinted_cases(keys_ptr, sums_ptr, ends_ptr, out_ptr, NT: tl.constexpr):
    """Case c: keys [c, NT] int64, sums [c, 2, NT] (count, mass) int64, ends [c, 8] int64: a, ca, wa, b, cb, wb,
    target, by mass (0 or 1); out [c, 6]: ``hinted``'s (a, ca, wa, b, cb, wb)."""
    c = tl.program_id(0)
    j = tl.arange(0, NT)
    keys = tl.load(keys_ptr + c * NT + j)
    t_cnt = tl.load(sums_ptr + 2 * c * NT + j)
    t_mass = tl.load(sums_ptr + (2 * c + 1) * NT + j)
    e = ends_ptr + 8 * c
    a, ca, wa, b, cb, wb = tl.load(e), tl.load(e + 1), tl.load(e + 2), tl.load(e + 3), tl.load(e + 4), tl.load(e + 5)
    if tl.load(e + 7) != 0:
        a, ca, wa, b, cb, wb = hinted(keys, t_cnt, t_mass, a, ca, wa, b, cb, wb, tl.load(e + 6), True)
    else:
        a, ca, wa, b, cb, wb = hinted(keys, t_cnt, t_mass, a, ca, wa, b, cb, wb, tl.load(e + 6), False)
    at = out_ptr + 6 * c
    tl.store(at, a)
    tl.store(at + 1, ca)
    tl.store(at + 2, wa)
    tl.store(at + 3, b)
    tl.store(at + 4, cb)
    tl.store(at + 5, wb)


def _case(rng: random.Random) -> tuple:
    """(keys, counts, masses, ends) of a case: NT ascending keys, some repeated (an empty bucket between each
    pair), F at each key the count and mass at or above it (neither rises with the key), ends (a, ca, wa, b, cb,
    wb, target, by mass) with a and b drawn among the keys or between them, target across F's range or at a key's
    F."""
    keys = sorted(rng.randrange(0, 40) * 1000 for _ in range(NT))
    cnt = [0 if j + 1 < NT and keys[j] == keys[j + 1] else rng.randrange(0, 4) for j in range(NT)]
    mass = [c * rng.randrange(1, 1 << 30) for c in cnt]
    above_c, above_w = rng.randrange(0, 5), rng.randrange(0, 1 << 32)
    t_cnt = [above_c + sum(cnt[j:]) for j in range(NT)]
    t_mass = [above_w + sum(mass[j:]) for j in range(NT)]
    a = rng.choice(keys) - rng.choice((0, 0, 500, 40_000))
    b = max(a + 1, rng.choice(keys) + rng.choice((0, 0, 500, 40_000)))
    by_mass = rng.randrange(2)
    f = t_mass if by_mass else t_cnt
    # a third of the targets are some key's F exactly: reaching it is F >= target
    target = rng.choice(f) if rng.randrange(3) == 0 else rng.randrange(min(f), max(f) + 2)
    ends = (a, rng.randrange(1 << 20), rng.randrange(1 << 40), b, rng.randrange(1 << 20), rng.randrange(1 << 40),
            target, by_mass)
    return keys, t_cnt, t_mass, ends


def _hinted_by_definition(keys, t_cnt, t_mass, ends) -> tuple:
    """``hinted``'s (a, ca, wa, b, cb, wb) by its docstring: a moves to the largest key inside (a, b) whose F reaches
    the target, b to the smallest whose F does not, each with the sums at that key; an end with no such key stays,
    with the sums it was given."""
    a, ca, wa, b, cb, wb, target, by_mass = ends
    f = t_mass if by_mass else t_cnt
    inside = [j for j in range(NT) if a < keys[j] < b]
    up = [j for j in inside if f[j] >= target]
    down = [j for j in inside if f[j] < target]
    if up:
        j = max(up, key=lambda i: keys[i])
        a, ca, wa = keys[j], t_cnt[j], t_mass[j]
    if down:
        j = min(down, key=lambda i: keys[i])
        b, cb, wb = keys[j], t_cnt[j], t_mass[j]
    return a, ca, wa, b, cb, wb


@pytest.mark.parametrize("device", DEVICES)
def test_hinted_narrows_to_the_tallied_keys_that_bound_the_crossing(device):
    """96 cases of 16 tallied keys, by count and by mass: repeated keys, ends that are keys or lie between them or
    outside every key, targets that every key reaches or none does (so that an end keeps its given sums), must give
    the definition's interval and sums. ``hinted`` takes the sums at each new end from one reduction, as the least
    (a's) or the most (b's) of the sums on its side, which holds because F never rises with the key."""
    rng = random.Random(29)
    cases = [_case(rng) for _ in range(CASES)]
    keys = torch.tensor([c[0] for c in cases], dtype=torch.int64, device=device)
    sums = torch.tensor([[c[1], c[2]] for c in cases], dtype=torch.int64, device=device)
    ends = torch.tensor([c[3] for c in cases], dtype=torch.int64, device=device)
    out = torch.empty(CASES, 6, dtype=torch.int64, device=device)
    _hinted_cases[(CASES,)](keys, sums, ends, out, NT=NT)
    got = out.cpu().tolist()
    want = [list(_hinted_by_definition(*c)) for c in cases]
    assert got == want, [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w][:5]
    # the cases reach every branch: each end moved in some and stayed in others, by count and by mass
    moved = [(g[0] != c[3][0], g[3] != c[3][3], c[3][7]) for g, c in zip(got, cases)]
    assert {(m_a, m_b) for m_a, m_b, _ in moved} == {(True, True), (True, False), (False, True), (False, False)}
    assert {by for *_, by in moved} == {0, 1}


@triton.jit
def _bucket_of_cases(spans_ptr, queries_ptr, out_ptr, Q: tl.constexpr, NT: tl.constexpr):
    """Span c: its ends [c, 2] int64 (lo, hi); queries [c, Q, 2] int64 (a, b); out [c, Q] int32: ``bucket_of``'s."""
    c = tl.program_id(0)
    q = tl.arange(0, Q)
    a, b = tl.load(queries_ptr + (c * Q + q) * 2), tl.load(queries_ptr + (c * Q + q) * 2 + 1)
    tl.store(out_ptr + c * Q + q, bucket_of(a, b, tl.load(spans_ptr + 2 * c), tl.load(spans_ptr + 2 * c + 1), NT))


def _key(v: float) -> int:
    """The order key of float32 v."""
    return int(order_keys(v))


@pytest.mark.parametrize("device", DEVICES)
def test_bucket_of_finds_each_tallied_keys_bucket_and_no_other(device):
    """``bucket_of(a, b, lo, hi)`` names the bucket of ``bucket_pack``'s that is [a, b) whole, or -1: the last of the
    keys equal to a (a token's bucket is the last whose key is at or below its own), provided no key lies in (a, b).
    Over spans of logits wide and narrow (where neighbouring keys are equal) and spans whose keys are all lo, asked at
    each key with the next larger key (or hi) as b, at each key with b past the next key, and one above each key: it
    must name that bucket or -1 and nothing else, and on spans of distinct keys it must name every bucket, at 16 keys
    and at the one launch's 256."""
    nt = 16
    spans = [(_key(-3.0), _key(5.0)), (_key(-40.0), _key(0.25)), (_key(1.0), _key(1.0) + 10),
             (_key(0.5), _key(0.5) + 4),
             (_key(-1.0) - 9, _key(-1.0) + 9), (KMIN, _key(2.0)), (_key(7.0), KMAX)]
    ends = torch.tensor(spans, dtype=torch.int64, device=device)
    keys = tally_keys_of(ends, nt).cpu().tolist()
    queries, want, distinct = [], [], []
    for (lo, hi), k in zip(spans, keys):
        qs, ws = [], []
        for t in range(nt):
            last = max(j for j in range(nt) if k[j] == k[t])
            after = min([x for x in k if x > k[t]] + [min(hi, KMAX)])
            qs += [(k[t], after), (k[t], after + 1), (k[t] + 1, after)]
            ws += [last, -1 if after < min(hi, KMAX) else last, -1 if k[t] + 1 not in k else None]
        qs += [(lo, hi)] * (64 - len(qs))       # a power of 2 of queries, the rest unchecked
        ws += [None] * (64 - len(ws))
        queries.append(qs)
        want.append(ws)
        distinct.append(len(set(k)) == nt)
    q = len(queries[0])
    out = torch.empty(len(spans), q, dtype=torch.int32, device=device)
    _bucket_of_cases[(len(spans),)](ends, torch.tensor(queries, dtype=torch.int64, device=device), out, Q=q, NT=nt)
    got = out.cpu().tolist()
    for c, (g, w) in enumerate(zip(got, want)):
        for i, (gi, wi) in enumerate(zip(g, w)):
            # a query one above a key that is itself a key is the last query's bucket again: not checked
            assert wi is None or gi in (-1, wi), (c, i, queries[c][i], gi, wi, keys[c])
            if distinct[c] and wi is not None:
                assert gi == wi, (c, i, queries[c][i], gi, wi, keys[c])
    # the spans reach every case: distinct keys; equal neighbours, the last of them found; keys all lo (a span from
    # KMIN, or to KMAX, whose last key has no float), which confirm no bucket
    assert distinct == [True, True, False, False, False, False, False], (distinct, keys)
    for c in (2, 3, 4):
        assert any(k < nt - 1 and keys[c][k] == keys[c][k + 1] for k in range(nt)), keys[c]
        assert sum(gi == wi for gi, wi in zip(got[c], want[c]) if wi is not None and wi >= 0) >= 8, (got[c], want[c])
    assert got[5].count(-1) == got[6].count(-1) == q and len(set(keys[5])) == len(set(keys[6])) == 1, (got, keys)
    # at the one launch's 256 keys, over brackets 0.01 to 12 wide, every bucket is found
    wide = [(_key(v), _key(v + w)) for v, w in ((-30.0, 12.0), (-8.5, 3.0), (-1.2, 0.3), (2.0, 0.01))]
    ends = torch.tensor(wide, dtype=torch.int64, device=device)
    keys = tally_keys_of(ends, 256).cpu().tolist()
    after = [[min([x for x in k if x > k[t]] + [hi]) for t in range(256)] for (_, hi), k in zip(wide, keys)]
    queries = torch.tensor([[(k[t], a[t]) for t in range(256)] for k, a in zip(keys, after)], device=device)
    out = torch.empty(len(wide), 256, dtype=torch.int32, device=device)
    _bucket_of_cases[(len(wide),)](ends, queries, out, Q=256, NT=256)
    assert all(len(set(k)) == 256 for k in keys) and out.cpu().tolist() == [list(range(256))] * len(wide), out
