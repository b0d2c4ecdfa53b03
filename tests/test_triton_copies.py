"""The record's copy of a narrow key interval out of a row's list of gathered tokens
(specverify/kernels/triton_search.py, ``_keep_wide``), called from a test kernel on a list the test writes. The
one launch's record copies the interval its key search starts from out of the whole list in two passes, each lane
counting its tokens and then storing them from its place; the three launches' record and the slow path in one pass
that scans each tile across the program. The record tests' lists fit one of the interpreter's wide tiles, where a
lane holds at most one token; here the tiles are narrow, so that each lane carries several from tile to tile, as on
the GPU. The kernel runs on the device the other filter tests run on (the interpreter without CUDA).
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from filter_settings import DEVICES
from specverify.kernels.triton_cut import NONE
from specverify.kernels.triton_search import _keep_wide

N, TILE = 200, 16


@triton.jit
def _copy_interval(src_ptr, n, dst_ptr, out_ptr, a, b, SCRATCH: tl.constexpr, BLOCK: tl.constexpr,
                   LANES: tl.constexpr):
    """out [1] int64: how many of the n tokens at src_ptr with keys in [a, b) ``_keep_wide`` copied to dst_ptr
    (at most SCRATCH)."""
    tl.store(out_ptr, _keep_wide(src_ptr, n, dst_ptr, a, b, SCRATCH, BLOCK, LANES))


def _copy(tokens: torch.Tensor, a: int, b: int, scratch: int, lanes: bool) -> tuple:
    """(the count ``_keep_wide`` returns, the first ``scratch`` slots of its destination) for int64 tokens."""
    dst = torch.full((scratch,), 7, dtype=torch.int64, device=tokens.device)
    out = torch.zeros(1, dtype=torch.int64, device=tokens.device)
    _copy_interval[(1,)](tokens, tokens.numel(), dst, out, a, b, SCRATCH=scratch, BLOCK=TILE, LANES=lanes)
    return int(out), dst.cpu()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lanes", [False, True], ids=["one-pass", "two-pass-lanes"])
def test_interval_copy_holds_each_token_of_the_interval_once(device, lanes):
    """A list of 200 tokens (keys of a few hundred values, empty slots among them) in tiles of 16: the copy of
    [a, b) must hold each of the interval's tokens once and nothing else, and say how many; with fewer slots
    than the interval holds, it must fill every slot with distinct tokens of the interval and say how many slots
    it filled. A lane that loses its place between tiles, or a second pass that finds other tokens than the
    first counted, leaves a slot unwritten or a token twice."""
    gen = torch.Generator().manual_seed(3)
    keys = torch.randint(-300, 300, (N,), generator=gen)
    tokens = (keys << 32) | (2**32 - 1 - torch.arange(N))
    tokens[torch.randperm(N, generator=gen)[:20]] = NONE.value
    a, b = -60, 80
    inside = sorted(t for t in tokens.tolist() if t != NONE.value and a <= t >> 32 < b)
    assert len(inside) > 2 * TILE       # several tokens a lane over the tiles
    n, dst = _copy(tokens.to(device), a, b, 128, lanes)
    assert n == len(inside) and sorted(dst[:n].tolist()) == inside
    n, dst = _copy(tokens.to(device), a, b, 16, lanes)
    held = dst.tolist()
    assert n == 16 and len(set(held)) == 16 and set(held) <= set(inside)
