"""The record's rank of at most RANK_N gathered tokens (specverify/kernels/triton_rank.py): ``rank_cut``, called
from a test kernel a case a program, must return the six results (whether the cut is found, its key and index, Z',
the mass and count top-k keeps) that the filters' definition gives token by token in Python integers, on the
kernel's own weights. The kernel runs on the device the other filter tests run on (the interpreter without CUDA).
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from filter_settings import DEVICES
from specverify.kernels.triton_cut import kept, key_value, unpack, weight
from specverify.kernels.triton_rank import rank_cut

BLOCK_N = 64
V = 1000


@triton.jit
def _rank_cases(buf_ptr, ints_ptr, floats_ptr, out_ptr, weights_ptr, V, BLOCK_N: tl.constexpr):
    """Case c: its tokens at buf_ptr + c BLOCK_N; ints [c, 5]: n, c_hi, k, k_on, p_on; floats [c, 3]: top_p, floor,
    1 / T. The mass above is c_hi tokens of weight 1 each (their min-p mass half of it), and the whole row's is that,
    the tokens' and, in every third case, three times the tokens' below them. out [c, 8] int64: ``rank_cut``'s (ok,
    cut key, cut index, Z', w_k, c_k), then w_hi and the whole row's mass; weights [c, 2, BLOCK_N]: each token's
    weight as the rank weighs it, and as min-p's test of a kept token weighs it (``triton_cut.kept``'s e), or -1
    where that e is below the floor."""
    c = tl.program_id(0)
    buf = buf_ptr + c * BLOCK_N
    n = tl.load(ints_ptr + 5 * c).to(tl.int64)
    c_hi = tl.load(ints_ptr + 5 * c + 1).to(tl.int64)
    k = tl.load(ints_ptr + 5 * c + 2).to(tl.int64)
    k_on = tl.load(ints_ptr + 5 * c + 3) != 0
    p_on = tl.load(ints_ptr + 5 * c + 4) != 0
    top_p = tl.load(floats_ptr + 3 * c)
    floor = tl.load(floats_ptr + 3 * c + 1)
    inv_t = tl.load(floats_ptr + 3 * c + 2)
    i = tl.arange(0, BLOCK_N)
    valid, key, idx, e = unpack(buf, i, i < n, inv_t, 0.0)
    w_hi = c_hi * weight(tl.full([], 1.0, tl.float32))
    w_tokens = tl.sum(tl.where(valid, weight(e), 0), axis=0)
    # a third of the cases have mass below the tokens too, three times theirs: top-p's target may lie past them
    w_all = w_hi + tl.where(c % 3 == 0, 4 * w_tokens, w_tokens)
    ok, cut_key, cut_idx, z, w_k, c_k = rank_cut(buf, n, c_hi, w_hi, w_hi // 2, w_all, k, k_on, top_p, p_on, floor, V,
                                                 inv_t, 0.0, BLOCK_N)
    at = out_ptr + c * 8
    tl.store(at, ok.to(tl.int64))
    tl.store(at + 1, cut_key.to(tl.int64))
    tl.store(at + 2, cut_idx.to(tl.int64))
    tl.store(at + 3, z.to(tl.int64))
    tl.store(at + 4, w_k.to(tl.int64))
    tl.store(at + 5, c_k.to(tl.int64))
    tl.store(at + 6, w_hi.to(tl.int64))
    tl.store(at + 7, w_all.to(tl.int64))
    _, e_kept = kept(tl.where(valid, key_value(key), float("-inf")), idx, 0.0, 0, floor, inv_t, 0.0)
    tl.store(weights_ptr + (2 * c) * BLOCK_N + i, tl.where(valid, weight(e), 0))
    tl.store(weights_ptr + (2 * c + 1) * BLOCK_N + i, tl.where(valid & (e_kept >= floor), weight(e_kept), -1))


def _packed(values: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """The gathered tokens' int64 words (order key << 32 | 2**32 - 1 - index) of float32 logits and indices."""
    bits = values.to(torch.float32).view(torch.int32).to(torch.int64)
    key = torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    return (key << 32) | (2**32 - 1 - idx)


def _cases(seed: int) -> tuple:
    """(buf [C, BLOCK_N], ints [C, 5], floats [C, 3]): lists of 0 to 64 tokens with logits in [-6, 0], some on a
    coarse grid so that ties are many (a crossing inside a tie group, top-k's whole tie group), under top-k, top-p,
    both, and with min-p's floor, k at 1, inside, at and past the list, and c_hi tokens above it (0, 3)."""
    g = torch.Generator().manual_seed(seed)
    bufs, ints, floats = [], [], []
    for n in (0, 1, 2, 7, 33, 63, 64):
        for coarse in (False, True):
            values = -6 * torch.rand(n, generator=g)
            if coarse:
                values = (values * 2).round() / 2
            idx = torch.randperm(V, generator=g)[:n]
            buf = torch.full((BLOCK_N,), -2**63, dtype=torch.int64)
            buf[:n] = _packed(values, idx)
            for k_on, p_on in ((1, 0), (0, 1), (1, 1)):
                for k in (1, max(1, n // 3), n + 3):
                    for c_hi in (0, 3):
                        top_p = float(torch.rand((), generator=g)) if p_on else 1.0
                        floor = 0.02 if (n + k) % 3 == 0 else 0.0
                        bufs.append(buf)
                        ints.append([n, c_hi, k, k_on, p_on])
                        floats.append([top_p, floor, 1.0 if coarse else 1.5])
    return torch.stack(bufs), torch.tensor(ints, dtype=torch.int32), torch.tensor(floats, dtype=torch.float32)


def _value(key: int) -> float:
    """The float32 of an int32 order key (``triton_cut.key_value``), the key wrapped to 32 bits as the kernel's is."""
    key = (key + 2**31) % 2**32 - 2**31
    bits = key if key >= 0 else key ^ 0x7FFFFFFF
    return torch.tensor([bits], dtype=torch.int32).view(torch.float32).item()


def _cut_by_definition(words: list, c_hi: int, k: int, k_on: bool, p_on: bool, top_p: float, floor: float,
                       w: list, w_floor: list, w_hi: int, w_all: int) -> list:
    """The six results SPEC's cut asks of the gathered tokens ``words`` (packed, in any order) with weights ``w``,
    token by token and in Python integers: top-k keeps a token with fewer than k - c_hi tokens of larger key, top-p
    one whose kept mass ahead of it (larger packed words) is below the target, the target the int64 truncation of
    float64 top_p times top-k's kept mass (or the row's), at least one unit. Z' without min-p is the kept weights'
    sum; with it, the mass of the tokens at or above the cut that pass the floor (``w_floor``, -1 where not)."""
    n = len(words)
    keys = [x >> 32 for x in words]
    idx = [2**32 - 1 - (x & 0xFFFFFFFF) for x in words]
    keep = [True] * n
    w_k = w_all
    c_k = c_hi + n
    if k_on:
        keep = [c_hi + sum(keys[j] > keys[i] for j in range(n)) < k for i in range(n)]
        w_k = w_hi + sum(w[i] for i in range(n) if keep[i])
        c_k = c_hi + sum(keep)
    target = max(int(float(torch.tensor(top_p, dtype=torch.float32)) * float(w_k)), 1)
    if p_on:
        top_k_kept = keep
        keep = [top_k_kept[i] and w_hi + sum(w[j] for j in range(n) if top_k_kept[j] and words[j] > words[i]) < target
                for i in range(n)]
    ok = n > 0
    if k_on:
        ok = ok and c_hi < k <= c_hi + n
    if p_on:
        ok = ok and w_hi < target <= (w_k if k_on else w_hi + sum(w))
    kept_keys = [keys[i] for i in range(n) if keep[i]]
    cut_key = min(kept_keys) if kept_keys else 2**31
    split = any(not keep[i] and keys[i] == cut_key for i in range(n))
    cut_idx = max(idx[i] for i in range(n) if keep[i] and keys[i] == cut_key) if split else V
    if floor > 0:
        cut_val = _value(cut_key)
        values = [_value(key) for key in keys]
        z = w_hi // 2 + sum(w_floor[i] for i in range(n) if w_floor[i] >= 0 and (
            values[i] > cut_val or (values[i] == cut_val and idx[i] <= cut_idx)))
    else:
        z = w_hi // 2 + sum(w[i] for i in range(n) if keep[i])
    return [int(ok), cut_key, cut_idx, z, w_k, c_k]


@pytest.mark.parametrize("device", DEVICES)
def test_rank_returns_the_cut_that_the_filters_define(device):
    """Every case's six results must be those the filters' definition gives token by token (``_cut_by_definition``),
    where the cut is found and where it is not (an empty list, top-k past the tokens and c_hi, top-p's target above
    what they hold): the records take the cut, Z' and how it was found from them. Ties on the coarse grid put
    crossings inside tie groups, which the rank finds from the largest packed word left out, and both found cuts
    and failed ones, split tie groups and min-p's floor must appear among the cases. The weights are the kernel's
    own, so that the check is of the rank's counting, not of float32 exponentials."""
    buf, ints, floats = _cases(0)
    C = buf.shape[0]
    out = torch.empty(C, 8, dtype=torch.int64, device=device)
    weights = torch.empty(C, 2, BLOCK_N, dtype=torch.int64, device=device)
    _rank_cases[(C,)](buf.to(device), ints.to(device), floats.to(device), out, weights, V, BLOCK_N=BLOCK_N)
    out, weights = out.cpu(), weights.cpu()
    wrong = []
    for c in range(C):
        n, c_hi, k, k_on, p_on = ints[c].tolist()
        top_p, floor, _ = floats[c].tolist()
        want = _cut_by_definition(buf[c, :n].tolist(), c_hi, k, bool(k_on), bool(p_on), top_p, floor,
                                  weights[c, 0, :n].tolist(), weights[c, 1, :n].tolist(), *out[c, 6:].tolist())
        if out[c, :6].tolist() != want:
            wrong.append((ints[c].tolist(), floats[c].tolist(), out[c, :6].tolist(), want))
    assert not wrong, (len(wrong), wrong[:3])
    ok = out[:, 0].bool()
    split = ok & (out[:, 2] < V)
    with_floor = ok & (floats[:, 1] > 0)
    assert int(ok.sum()) > 100 and int((~ok).sum()) > 20 and int(split.sum()) > 10, (ok.sum(), split.sum())
    assert int(with_floor.sum()) > 20, with_floor.sum()
