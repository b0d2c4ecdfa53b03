"""The record's copy of a narrow key interval out of a row's list of gathered tokens
(specverify/kernels/triton_search.py, ``_keep_wide``), called from a test kernel on a list the test writes. The
one launch's record copies the interval its key search starts from out of the whole list: in one pass that scans
each tile across the program, or in two (ONE_LAUNCH_COPY_LANES), each lane counting its tokens and then storing
them from its place; and where the search ranks its last few tokens, it may pick them from the list into registers
instead (``_pick_between``, ONE_LAUNCH_COPY_LANES=2). The record tests' lists fit one of the interpreter's wide
tiles, where a lane holds at most one token; here the tiles are narrow, so that each lane carries several from tile
to tile, as on the GPU. The kernels run on the device the other filter tests run on (the interpreter without CUDA).
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from filter_settings import DEVICES
from specverify.kernels.triton_cut import NONE
from specverify.kernels.triton_search import _keep_wide, _pick_between

N, TILE = 200, 16


@triton.jit
def _copy_interval(src_ptr, n, dst_ptr, out_ptr, a, b, SCRATCH: tl.constexpr, BLOCK: tl.constexpr,
                   LANES: tl.constexpr):
    """out [1] int64: how many of the n tokens at src_ptr with keys in [a, b) ``_keep_wide`` copied to dst_ptr
    (at most SCRATCH)."""
    tl.store(out_ptr, _keep_wide(src_ptr, n, dst_ptr, a, b, SCRATCH, BLOCK, LANES))


@triton.jit
def _pick_interval(src_ptr, n, out_ptr, a, b, FINISH: tl.constexpr, BLOCK: tl.constexpr):
    """out [FINISH] int64: ``_pick_between``'s tokens of the n at src_ptr with keys in [a, b)."""
    tl.store(out_ptr + tl.arange(0, FINISH), _pick_between(src_ptr, n, a, b, FINISH, BLOCK))


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


@pytest.mark.parametrize("device", DEVICES)
def test_interval_pick_holds_the_intervals_tokens_in_list_order(device):
    """The same list, in tiles of 16: ``_pick_between`` of an interval of at most FINISH tokens spread over several
    tiles must return each of them once, in the list's order, and NONE in the slots past them; an interval of
    none, all NONE. A tile whose place is not carried to the next, or a one-hot sum that meets two tokens in a
    slot, returns another token or a sum of two."""
    gen = torch.Generator().manual_seed(3)
    keys = torch.randint(-300, 300, (N,), generator=gen)
    tokens = (keys << 32) | (2**32 - 1 - torch.arange(N))
    tokens[torch.randperm(N, generator=gen)[:20]] = NONE.value
    for a, b in ((150, 190), (-300, -270), (301, 400)):
        inside = [t for t in tokens.tolist() if t != NONE.value and a <= t >> 32 < b]
        assert len(inside) <= 16 and (len(inside) >= 5 or a > 300), (a, b, len(inside))
        out = torch.zeros(16, dtype=torch.int64, device=device)
        _pick_interval[(1,)](tokens.to(device), N, out, a, b, FINISH=16, BLOCK=TILE)
        assert out.cpu().tolist() == inside + [NONE.value] * (16 - len(inside)), (a, b)

