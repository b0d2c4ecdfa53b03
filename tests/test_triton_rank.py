"""The two forms of the record's rank of at most RANK_N gathered tokens (specverify/kernels/triton_rank.py):
``rank_lean``, in fewer reductions across the program's warps, must return ``rank_cut``'s six results (whether the
cut is found, its key and index, Z', the mass and count top-k keeps) on the same tokens and filters, called from a
test kernel a case a program. The kernel runs on the device the other filter tests run on (the interpreter
without CUDA).
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from filter_settings import DEVICES
from specverify.kernels.triton_cut import unpack, weight
from specverify.kernels.triton_rank import rank_cut, rank_lean

BLOCK_N = 64
V = 1000


@triton.jit
def _both_ranks(buf_ptr, ints_ptr, floats_ptr, out_ptr, V, BLOCK_N: tl.constexpr):
    """Case c: its tokens at buf_ptr + c BLOCK_N; ints [c, 5]: n, c_hi, k, k_on, p_on; floats [c, 3]: top_p, floor,
    1 / T. The mass above is c_hi tokens of weight 1 each (their min-p mass half of it), and the whole row's is that,
    the tokens' and, in every third case, three times the tokens' below them. out [c, 2, 6] int64: each form's (ok,
    cut key, cut index, Z', w_k, c_k)."""
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
    valid, _, _, e = unpack(buf, i, i < n, inv_t, 0.0)
    w_hi = c_hi * weight(tl.full([], 1.0, tl.float32))
    w_tokens = tl.sum(tl.where(valid, weight(e), 0), axis=0)
    # a third of the cases have mass below the tokens too, three times theirs: top-p's target may lie past them
    w_all = w_hi + tl.where(c % 3 == 0, 4 * w_tokens, w_tokens)
    results = (rank_cut(buf, n, c_hi, w_hi, w_hi // 2, w_all, k, k_on, top_p, p_on, floor, V, inv_t, 0.0, BLOCK_N),
               rank_lean(buf, n, c_hi, w_hi, w_hi // 2, w_all, k, k_on, top_p, p_on, floor, V, inv_t, 0.0, BLOCK_N))
    for form in tl.static_range(2):
        ok, cut_key, cut_idx, z, w_k, c_k = results[form]
        at = out_ptr + (2 * c + form) * 6
        tl.store(at, ok.to(tl.int64))
        tl.store(at + 1, cut_key.to(tl.int64))
        tl.store(at + 2, cut_idx.to(tl.int64))
        tl.store(at + 3, z.to(tl.int64))
        tl.store(at + 4, w_k.to(tl.int64))
        tl.store(at + 5, c_k.to(tl.int64))


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


@pytest.mark.parametrize("device", DEVICES)
def test_lean_rank_returns_the_ranks_results(device):
    """Every case's six results must be ``rank_cut``'s, where the cut is found and where it is not (an empty list,
    top-k past the tokens and c_hi, top-p's target above what they hold): the records take the cut, Z' and how it
    was found from them. Ties on the coarse grid put crossings inside tie groups, which the lean form finds from
    the largest packed word left out, and both found cuts and failed ones must appear among the cases."""
    buf, ints, floats = _cases(0)
    out = torch.empty(buf.shape[0], 2, 6, dtype=torch.int64, device=device)
    _both_ranks[(buf.shape[0],)](buf.to(device), ints.to(device), floats.to(device), out, V, BLOCK_N=BLOCK_N)
    out = out.cpu()
    differ = (out[:, 0] != out[:, 1]).any(dim=1).nonzero().flatten().tolist()
    assert not differ, [(ints[c].tolist(), floats[c].tolist(), out[c].tolist()) for c in differ[:5]]
    ok = out[:, 0, 0].bool()
    split = ok & (out[:, 0, 2] < V)
    assert int(ok.sum()) > 100 and int((~ok).sum()) > 20 and int(split.sum()) > 10, (ok.sum(), split.sum())
