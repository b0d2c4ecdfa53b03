"""The filter cut's slow path (specverify/kernels/triton_slow.py) on one row, called from a test kernel with a
missed bracket that the test places: above the crossing, below it, or around it with more tokens than the
gather holds. The slow path exists for a bracket that missed, so its cut must not depend on where that bracket
lay; with SLOW_TILE (``TILE``) it reads the row in wide tiles, starts an interval open to KMAX at the row's max
and looks for a crossing below the bracket first just below it (``_below``), and it must find the same cut, bit
for bit. The kernel runs on the device the other filter tests run on (the interpreter without CUDA).
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from filter_settings import DEVICES
from specverify.kernels.triton_cut import KMAX, order_key, pick
from specverify.kernels.triton_slow import _at_keys, slow_cut

V, CAP, BLOCK = 300, 16, 512


@triton.jit
def _slow_cut_of_row(row_ptr, V, buf_ptr, out_ptr, lo, hi, k, top_p, CAP: tl.constexpr, TILE: tl.constexpr,
                     BLOCK: tl.constexpr):
    """out [2] int64: ``slow_cut``'s (cut key, cut index) of the row at row_ptr (V <= BLOCK logits, temperature
    1, min-p off) after the bracket [lo, hi) missed; its count and mass at or above hi, and the row's max, read
    here as pass 1 and the read would have."""
    # as the work space and the filter tensors hold them
    lo, hi, k, top_p = lo.to(tl.int64), hi.to(tl.int64), k.to(tl.int64), top_p + tl.zeros([], tl.float32)
    offs = tl.arange(0, BLOCK)
    m = tl.max(tl.load(row_ptr + offs, mask=offs < V, other=float("-inf")), axis=0)
    jc = tl.arange(0, 4)
    c, w = _at_keys(row_ptr, V, 1.0, m, tl.where(jc == 0, hi, KMAX), 4, BLOCK)
    above = order_key(m).to(tl.int64) + 1
    key, idx = slow_cut(row_ptr, V, buf_ptr, CAP, k, k > 0, top_p, top_p < 1.0, 0.0, m, 1.0, lo, hi, pick(c, 0, jc),
                        pick(w, 0, jc), CAP, 4, BLOCK, 0, 0, TILE, above)
    tl.store(out_ptr, key)
    tl.store(out_ptr + 1, idx.to(tl.int64))


def _key(value: float) -> int:
    """The order key (``triton_cut.order_key``) of a float32 value."""
    bits = int(torch.tensor([value], dtype=torch.float32).view(torch.int32))
    return bits if bits >= 0 else bits ^ 0x7FFFFFFF


def _cut(row: torch.Tensor, lo: int, hi: int, k: int, top_p: float, tile: int) -> tuple:
    buf = torch.zeros(CAP, dtype=torch.int64, device=row.device)
    out = torch.zeros(2, dtype=torch.int64, device=row.device)
    _slow_cut_of_row[(1,)](row, V, buf, out, lo, hi, k, top_p, CAP=CAP, TILE=tile, BLOCK=BLOCK)
    return tuple(out.tolist())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k, top_p", [(40, 1.0), (0, 0.9), (120, 0.8)], ids=["top-k", "top-p", "top-k-top-p"])
def test_slow_path_finds_one_cut_wherever_the_missed_bracket_lay(device, k, top_p):
    """Brackets of two tokens' values above the crossing (the interval open to KMIN: ``_below``'s first look),
    below it (the interval open to KMAX, started at the row's max with a tile), and around it with more tokens
    than the gather's 16 (the interval between them), each with the slow path's reads in tiles of 128 logits
    reduced a tile and in tiles of 64 or 512 summed once a read: one cut, the one a bracket around the whole
    row leads to. A below-the-bracket look that moved an end without its count, or an end past the row's max,
    would move it."""
    row = torch.randn(V, generator=torch.Generator().manual_seed(17)).to(device)
    ordered = row.sort(descending=True).values.tolist()
    want = _cut(row, _key(ordered[-1]), _key(ordered[0]), k, top_p, 0)
    crossing = next(i for i, v in enumerate(ordered) if _key(v) <= want[0])
    brackets = {"above": (_key(ordered[crossing - 18]), _key(ordered[crossing - 20])),
                "below": (_key(ordered[crossing + 20]), _key(ordered[crossing + 18])),
                "around": (_key(ordered[crossing + 30]), _key(ordered[crossing - 30]))}
    assert 30 < crossing < V - 30, crossing
    for name, (lo, hi) in brackets.items():
        for tile in (0, 64, 512):
            assert _cut(row, lo, hi, k, top_p, tile) == want, (name, tile)
