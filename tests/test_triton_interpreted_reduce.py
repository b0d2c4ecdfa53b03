"""The interpreter's tree of combines for ``tl.reduce`` (specverify/kernels/triton_interpreted_reduce.py): it must
give what the interpreter's own element-by-element reduction gives, on every axis and with kept dimensions, for an
associative combine that is not commutative (the first nonzero element), so that an order of pairs that mixes the
elements up fails. Interpreter only: on CUDA the reduction is compiled.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from triton_sampler_cases import _CUDA, triton_kernels
from specverify.kernels.triton_interpreted_reduce import reduce_combines_in_a_tree

pytestmark = pytest.mark.skipif(_CUDA, reason="the tree replaces the interpreter's reduction; CUDA compiles its own")


@triton.jit
def _first_low_high_sum(f1, lo1, hi1, s1, f2, lo2, hi2, s2):
    """The first nonzero (associative, not commutative), the least, the most and the sum."""
    return tl.where(f1 != 0, f1, f2), tl.minimum(lo1, lo2), tl.maximum(hi1, hi2), s1 + s2


@triton.jit
def _reduce_kernel(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr, AXIS: tl.constexpr):
    """out [4, R] (AXIS 1: each row's, kept as [R, 1]), [4, C] (AXIS 0) or [4] (AXIS -1: the whole tile's) of
    x [R, C] int64: the first nonzero, the least, the most and the sum."""
    rr, cc = tl.arange(0, R)[:, None], tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + rr * C + cc)
    if AXIS == 1:
        f, lo, hi, s = tl.reduce((x, x, x, x), 1, _first_low_high_sum, keep_dims=True)
        tl.store(out_ptr + rr, f)
        tl.store(out_ptr + R + rr, lo)
        tl.store(out_ptr + 2 * R + rr, hi)
        tl.store(out_ptr + 3 * R + rr, s)
    elif AXIS == 0:
        f, lo, hi, s = tl.reduce((x, x, x, x), 0, _first_low_high_sum)
        c = tl.arange(0, C)
        tl.store(out_ptr + c, f)
        tl.store(out_ptr + C + c, lo)
        tl.store(out_ptr + 2 * C + c, hi)
        tl.store(out_ptr + 3 * C + c, s)
    else:
        f, lo, hi, s = tl.reduce((x, x, x, x), None, _first_low_high_sum)
        tl.store(out_ptr, f)
        tl.store(out_ptr + 1, lo)
        tl.store(out_ptr + 2, hi)
        tl.store(out_ptr + 3, s)


def _expected(x: torch.Tensor, axis: int) -> torch.Tensor:
    """[4, n] the four reductions of x along axis (-1: of x flattened, [4, 1]), in Python, element by element."""
    lines = [x.flatten()] if axis == -1 else list(x.T if axis == 0 else x)
    rows = []
    for line in lines:
        values = line.tolist()
        rows.append([next((v for v in values if v != 0), 0), min(values), max(values), sum(values)])
    return torch.tensor(rows, dtype=torch.int64).T


@pytest.mark.parametrize("axis", [1, 0, -1], ids=["rows-kept", "columns", "whole"])
def test_tree_of_combines_reduces_as_the_interpreter_does_element_by_element(axis, monkeypatch):
    """A [16, 32] tile whose lines start with runs of zeros of every length (so the first nonzero lies at every
    place of a line, some lines all zeros), reduced by the tree and by the interpreter's own reduction."""
    assert triton_kernels.interpreted() and reduce_combines_in_a_tree()
    R, C = 16, 32
    g = torch.Generator().manual_seed(7)
    x = torch.randint(-(1 << 40), 1 << 40, (R, C), generator=g, dtype=torch.int64)
    for r in range(R):
        x[r, :2 * r + (r % 3)] = 0
    for c in range(C):
        x[:c % (R + 1), c] = 0
    x[3] = 0
    width = {1: R, 0: C, -1: 1}[axis]

    def run() -> torch.Tensor:
        out = torch.full((4 * width,), -1, dtype=torch.int64)
        _reduce_kernel[(1,)](x, out, R, C, axis)
        return out.view(4, width)

    tree = run()
    assert torch.equal(tree, _expected(x, axis)), (tree, _expected(x, axis))
    if axis != -1:      # the interpreter's own reduction of a whole tile flattens only a tuple's first operand
        from triton.runtime import interpreter
        monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce",
                            interpreter.ReduceOps.generic_reduce.specverify_original)
        assert torch.equal(run(), tree)
