"""The interpreter's tree of combines for ``tl.reduce`` (specverify/kernels/triton_interpreted_ops.py): it must
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
from specverify.kernels.triton_interpreted_ops import reduce_combines_in_a_tree

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


@triton.jit
def _with_numbers_kernel(x_ptr, s_ptr, out_ptr, N: tl.constexpr, INT: tl.constexpr):
    """out [16, N] float64 of x [N] and its scalar s (x's type) with Python numbers and with s, each side (INT: x
    is integer, which floor division and modulo take; a float's rows 3 and 4 stay as they were)."""
    i = tl.arange(0, N)
    x = tl.load(x_ptr + i)
    s = tl.load(s_ptr)
    tl.store(out_ptr + i, x + 3)
    tl.store(out_ptr + N + i, 3 - x)
    tl.store(out_ptr + 2 * N + i, x * 5)
    if INT:
        tl.store(out_ptr + 3 * N + i, x // 3)
        tl.store(out_ptr + 4 * N + i, 7 % x)
    tl.store(out_ptr + 5 * N + i, tl.minimum(x, 2))
    tl.store(out_ptr + 6 * N + i, tl.maximum(-1, x))
    tl.store(out_ptr + 7 * N + i, (x < 4).to(tl.float64))
    tl.store(out_ptr + 8 * N + i, (2 >= x).to(tl.float64))
    tl.store(out_ptr + 9 * N + i, x * 1.5)
    tl.store(out_ptr + 10 * N + i, x / 2)
    tl.store(out_ptr + 11 * N + i, x + s)
    tl.store(out_ptr + 12 * N + i, s - x)
    tl.store(out_ptr + 13 * N + i, x * s)
    tl.store(out_ptr + 14 * N + i, (s < x).to(tl.float64))
    tl.store(out_ptr + 15 * N + i, x + (1 - 2 ** 31))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32], ids=str)
def test_numbers_without_splats_give_the_values_of_the_splatted_numbers(dtype, monkeypatch):
    """Blocks of int32, int64 and float32 with Python numbers on either side (an int, a float that an int block must
    not take as its own type, int32's least) and with a scalar of their own type, through add, sub, mul,
    floor division, modulo, true division, minimum, maximum and comparisons: with the shortcut as Triton's own
    splats give them, bit for bit, and as torch computes the plain cases."""
    from specverify.kernels.triton_interpreted_ops import combine_numbers_without_splats
    assert triton_kernels.interpreted() and combine_numbers_without_splats()
    x = torch.tensor([-8, -5, -3, -1, 1, 2, 3, 4, 5, 6, 7, 9, 11, 13, 17, 100], dtype=dtype)
    s = torch.tensor([3], dtype=dtype)

    def run() -> torch.Tensor:
        out = torch.full((16, 16), -0.5, dtype=torch.float64)
        _with_numbers_kernel[(1,)](x, s, out, 16, not dtype.is_floating_point)
        return out

    shortcut = run()
    xd = x.double()
    assert torch.equal(shortcut[0], xd + 3) and torch.equal(shortcut[1], 3 - xd) and torch.equal(shortcut[11], xd + 3)
    assert torch.equal(shortcut[7], (xd < 4).double()) and torch.equal(shortcut[14], (3 < xd).double())
    assert torch.equal(shortcut[9], (x.float() * 1.5).double())
    from triton.runtime import interpreter
    monkeypatch.delattr(interpreter.interpreter_semantic, "binary_op_type_checking_impl")
    splatted = run()
    assert torch.equal(shortcut, splatted), (shortcut != splatted).nonzero().tolist()


def test_shortcuts_stand_down_for_an_interpreter_they_do_not_match(monkeypatch):
    """Each shortcut reads the interpreter's own state (a reduction's axis, combine and kept dimensions; the type
    checks' arguments): where a Triton's constructor or type checks take other parameters, installing it must refuse
    and leave Triton's own in place, rather than misread them."""
    from triton.runtime import interpreter
    from specverify.kernels.triton_interpreted_ops import combine_numbers_without_splats
    ops, semantic = interpreter.ReduceOps, interpreter.interpreter_semantic
    own_reduce = getattr(ops.generic_reduce, "specverify_original", ops.generic_reduce)
    monkeypatch.setattr(ops, "generic_reduce", own_reduce)
    monkeypatch.setattr(ops, "__init__", lambda self, axis, combine_fn, keep_dims, dtype=None: None)
    assert reduce_combines_in_a_tree() is False and ops.generic_reduce is own_reduce
    monkeypatch.delattr(semantic, "binary_op_type_checking_impl")
    own_checks = type(semantic).binary_op_type_checking_impl
    monkeypatch.setattr(type(semantic), "binary_op_type_checking_impl",
                        lambda self, lhs, rhs, allow_lhs_ptr=False, allow_rhs_ptr=False, arithmetic_check=True,
                        div_or_mod=False, rounding=None: own_checks(self, lhs, rhs, allow_lhs_ptr, allow_rhs_ptr,
                                                                   arithmetic_check, div_or_mod))
    assert combine_numbers_without_splats() is False
    assert "binary_op_type_checking_impl" not in semantic.__dict__
