"""The interpreter's shortcuts (specverify/kernels/triton_interpreted_ops.py). The tree of combines for
``tl.reduce`` must give what the interpreter's own element-by-element reduction gives, on every axis and with kept
dimensions, for an associative combine that is not commutative (the first nonzero element), so that an order of
pairs that mixes the elements up fails. The numbers without splats, and the operators that go straight to the
builder, must give the types, dtypes and values of Triton's own path, operand by operand, and leave to it what they
do not take. Interpreter only: on CUDA every operation is compiled.
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
    """out [20, N] float64 of x [N] and its scalar s (x's type) with Python numbers, with s, each side, with
    themselves, across two shapes, and a float32 block with an int32 one past float32's integers (INT: x is integer,
    which floor division and modulo take; a float's rows 3 and 4 stay as they were)."""
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
    tl.store(out_ptr + 16 * N + i, x * x - x)
    tl.store(out_ptr + 17 * N + i, s * s - 2 * s + 1)
    tl.store(out_ptr + 18 * N + i, tl.sum(tl.where(x[:, None] < x[None, :], 1.0, 0.0), axis=1))
    tl.store(out_ptr + 19 * N + i, (x / 3).to(tl.float32) + (i + 16777217))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32], ids=str)
def test_numbers_without_splats_give_the_values_of_the_splatted_numbers(dtype, monkeypatch):
    """Blocks of int32, int64 and float32 with Python numbers on either side (an int, a float that an int block must
    not take as its own type, int32's least), with a scalar of their own type, and with themselves (a scalar with
    itself and with numbers too), through add, sub, mul, floor division, modulo, true division, minimum, maximum and
    comparisons: with the shortcut as Triton's own checks and splats give them, bit for bit, and as torch computes
    the plain cases."""
    from specverify.kernels.triton_interpreted_ops import combine_numbers_without_splats
    assert triton_kernels.interpreted() and combine_numbers_without_splats()
    x = torch.tensor([-8, -5, -3, -1, 1, 2, 3, 4, 5, 6, 7, 9, 11, 13, 17, 100], dtype=dtype)
    s = torch.tensor([3], dtype=dtype)

    def run() -> torch.Tensor:
        out = torch.full((20, 16), -0.5, dtype=torch.float64)
        _with_numbers_kernel[(1,)](x, s, out, 16, not dtype.is_floating_point)
        return out

    shortcut = run()
    xd = x.double()
    assert torch.equal(shortcut[0], xd + 3) and torch.equal(shortcut[1], 3 - xd) and torch.equal(shortcut[11], xd + 3)
    assert torch.equal(shortcut[7], (xd < 4).double()) and torch.equal(shortcut[14], (3 < xd).double())
    assert torch.equal(shortcut[9], (x.float() * 1.5).double())
    assert torch.equal(shortcut[16], xd * xd - xd) and torch.equal(shortcut[17], torch.full((16,), 4.0, dtype=xd.dtype))
    assert torch.equal(shortcut[18], (xd[:, None] < xd[None, :]).double().sum(1))
    assert torch.equal(shortcut[19], ((x / 3).float() + (torch.arange(16) + 16777217).float()).double())
    from triton.runtime import interpreter
    monkeypatch.delattr(interpreter.interpreter_semantic, "binary_op_type_checking_impl")
    splatted = run()
    assert torch.equal(shortcut, splatted), (shortcut != splatted).nonzero().tolist()


def test_shortcuts_stand_down_for_an_interpreter_they_do_not_match(monkeypatch):
    """Each shortcut reads the interpreter's own state (a reduction's axis, combine and kept dimensions; the type
    checks' arguments; the arguments of the function that patches each builtin): where a Triton's constructor, type
    checks or patching take other parameters, installing it must refuse and leave Triton's own in place, rather than
    misread them."""
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
    from specverify.kernels.triton_interpreted_ops import operate_on_equal_types
    other_patch = lambda obj, name, member, builder, scope, extra=None: None      # noqa: E731
    monkeypatch.setattr(interpreter, "_patch_attr", other_patch)
    assert operate_on_equal_types() is False and interpreter._patch_attr is other_patch


def test_numbers_without_splats_return_the_types_of_tritons_checks():
    """The shortcut's operands must have the types Triton's own type checks give (so that every operation after them
    makes the tensor Triton makes), and values that broadcast to Triton's: over blocks of two shapes, a block with a
    scalar either side, blocks and scalars with numbers, two types, and division's computation types too; and a
    number out of its block's range must be refused alike."""
    import numpy as np
    from triton.runtime import interpreter
    from triton.runtime.interpreter import TensorHandle
    from specverify.kernels.triton_interpreted_ops import combine_numbers_without_splats
    assert combine_numbers_without_splats()
    semantic = interpreter.interpreter_semantic
    own = type(semantic).binary_op_type_checking_impl
    np_of = {tl.float32: np.float32, tl.int32: np.int32, tl.int64: np.int64}

    def t(shape, dtype):
        data = (np.arange(int(np.prod(shape)) if shape else 1) + 1).astype(np_of[dtype]).reshape(shape or [1])
        return tl.tensor(TensorHandle(data, dtype), tl.block_type(dtype, list(shape)) if shape else dtype)

    f32, i32, i64 = tl.float32, tl.int32, tl.int64
    pairs = [(t([4, 1], f32), t([1, 4], f32)), (t([4], i32), t([], i32)), (t([], i32), t([4], i32)), (t([4], i64), 3),
             (2.5, t([4], f32)), (t([], f32), 1.5), (4, t([], i64)), (t([4], f32), t([4], i32)), (t([4], i32), 1.5),
             (t([4], i64), t([4], i64)), (t([2, 4], i32), t([2, 4], i32))]
    for lhs, rhs in pairs:
        for div in (False, True):
            got, want = semantic.binary_op_type_checking_impl(lhs, rhs, div_or_mod=div), own(semantic, lhs, rhs,
                                                                                              div_or_mod=div)
            assert [str(g.type) for g in got] == [str(w.type) for w in want], (lhs, rhs, div)
            for g, w in zip(got, want):
                assert g.handle.data.dtype == w.handle.data.dtype
                assert np.array_equal(np.broadcast_to(g.handle.data, w.handle.data.shape), w.handle.data)
    # a number its block's type cannot hold is refused, by Triton's own range check, as Triton refuses it
    for check in (semantic.binary_op_type_checking_impl, lambda a, b: own(semantic, a, b)):
        with pytest.raises(ValueError, match="out of range for type int32"):
            check(t([4], i32), 2 ** 31)


def _spied(name: str) -> tuple:
    """(shortcut, own, calls) for a tensor's operator or ``where``: what the installed ``_patch_attr`` puts in its
    place, over Triton's own member spied on, which appends each call's arguments to calls."""
    from triton.runtime import interpreter
    from specverify.kernels.triton_interpreted_ops import operate_on_equal_types
    assert triton_kernels.interpreted() and operate_on_equal_types()
    semantic = interpreter.interpreter_semantic
    member = tl.core.where if name == "where" else getattr(tl.core.tensor, name)
    calls = []

    def own(*args, _semantic=None):
        calls.append(args)
        return member(*args, _semantic=semantic)

    class Scope:
        def set_attr(self, obj, attr, value):
            self.value = value

    scope = Scope()
    interpreter._patch_attr(tl.core if name == "where" else tl.core.tensor, name, own, None, scope)
    return scope.value, own, calls


def _debug_on(monkeypatch) -> None:
    """The interpreter's options with debug mode on (int overflow checks) for the rest of the test."""
    import dataclasses
    from triton.runtime import interpreter
    builder = interpreter.interpreter_semantic.builder
    monkeypatch.setattr(builder, "options", dataclasses.replace(builder.options, debug=True))


def _small_int32():
    """A [8] int32 block of 0..7, whose adds, differences and products with small numbers do not overflow."""
    import numpy as np
    from triton.runtime.interpreter import TensorHandle
    return tl.tensor(TensorHandle(np.arange(8, dtype=np.int32), tl.int32), tl.block_type(tl.int32, [8]))


def _operand(shape: list, dtype, seed: int):
    """A tensor of shape ([]: a scalar) and Triton type dtype whose values hit its type's edges: each integer
    type's least and greatest (so that adds and products wrap), and a float's infinities, signed zeros and NaN."""
    import numpy as np
    from triton.runtime.interpreter import TensorHandle, _get_np_dtype
    np_dtype = _get_np_dtype(dtype)
    if dtype == tl.int1:
        edges = np.array([True, False, True, True, False])
    elif dtype == tl.bfloat16:      # numpy has no bfloat16: the interpreter holds its bits as uint16
        floats = np.array([-np.inf, -1.5, -0.0, 0.0, 1.5, np.nan, np.inf, 3.0, 1024.0], dtype=np.float32)
        edges = (floats.view(np.uint32) >> 16).astype(np.uint16)
    elif dtype.is_floating():
        edges = np.array([-np.inf, -1.5, -0.0, 0.0, 1.5, np.nan, np.inf, 3.0, 1024.0], dtype=np_dtype)
    else:
        info = np.iinfo(np_dtype)
        edges = np.array([info.min, info.max, 0, 1, 7, info.max - 1, info.min + 3], dtype=np_dtype)
    size = int(np.prod(shape)) if shape else 1
    data = np.random.default_rng(seed).choice(edges, size).astype(np_dtype).reshape(shape or [1])
    return tl.tensor(TensorHandle(data, dtype), tl.block_type(dtype, list(shape)) if shape else dtype)


def _result(fn, *args):
    """(type name, numpy dtype, shape, float signs, values with NaN as a string) of fn(*args), or the exception's
    type."""
    import numpy as np
    try:
        out = fn(*args)
    except Exception as e:      # noqa: BLE001 (Triton's own refusals must stay refusals)
        return type(e)
    data = out.handle.data
    values = ["nan" if v != v else v for v in data.flatten().tolist()]      # NaN equals NaN here
    signs = np.signbit(data).flatten().tolist() if data.dtype.kind == "f" else None     # -0.0 is not 0.0
    return str(out.type), data.dtype, data.shape, signs, values


@pytest.mark.filterwarnings("ignore::RuntimeWarning")     # numpy's, of the edges' overflows and NaNs
@pytest.mark.parametrize("name", ["__add__", "__sub__", "__mul__", "__lt__", "__le__", "__gt__", "__ge__", "__eq__",
                                  "__ne__", "__and__", "__or__", "__xor__"])
def test_operators_on_equal_types_give_tritons_results(name, monkeypatch):
    """Each operator the shortcut runs at once, on two tensors of one type (blocks of one shape, a block with a scalar
    of its element type either side, two scalars) of every integer width and sign, bool and the floats, with values at
    the types' edges (wrapping adds and products, NaN, signed zeros): the result's type, numpy dtype, shape and values
    must be Triton's own, and Triton's own path must not have run. Two types, two shapes and debug mode's int
    overflow checks must take Triton's own path."""
    fast, own, calls = _spied(name)
    types = [tl.int1, tl.int8, tl.int16, tl.int32, tl.int64, tl.uint8, tl.uint32, tl.uint64, tl.float16,
             tl.bfloat16, tl.float32, tl.float64]
    shortcut_ran = 0
    for k, dtype in enumerate(types):
        for shapes in ([[8], [8]], [[2, 4], [2, 4]], [[8], []], [[], [2, 4]], [[], []]):
            x, y = _operand(shapes[0], dtype, k), _operand(shapes[1], dtype, k + 50)
            calls.clear()
            got = _result(fast, x, y)
            ran_own = bool(calls)
            assert got == _result(own, x, y), (name, dtype, shapes)
            shortcut_ran += not ran_own
            # Triton refuses bitwise operators on floats, and its own path does the refusing
            assert ran_own == (isinstance(got, type) or name in ("__and__", "__or__", "__xor__")
                               and dtype.is_floating()), (name, dtype, shapes)
    assert shortcut_ran >= 40, shortcut_ran
    # two types, two shapes: Triton's own path, with its own results
    for x, y in ((_operand([8], tl.int32, 1), _operand([8], tl.int64, 2)),
                 (_operand([8], tl.float32, 3), _operand([1, 8], tl.float32, 4))):
        calls.clear()
        got = _result(fast, x, y)
        assert calls and got == _result(own, x, y), (name, x, y)
    if name in ("__add__", "__sub__", "__mul__"):     # debug mode checks int overflow on Triton's own path
        _debug_on(monkeypatch)
        small = _small_int32()
        calls.clear()
        got = _result(fast, small, small)
        assert calls and got == _result(own, small, small)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")     # numpy's, of the edges' overflows and NaNs
@pytest.mark.parametrize("name", ["__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__lt__",
                                  "__ge__", "__eq__", "__ne__", "__and__", "__rand__", "__xor__", "__ror__"])
def test_operators_with_numbers_give_tritons_results(name, monkeypatch):
    """A Python number beside a tensor (right of the operator, or left through the reflected one) of every integer
    width and sign, bool and the floats: ints small, negative, at int32's ends and past them (uint32's and int64's
    numbers), a bool (Triton's path), and floats with signed zeros, NaN and infinities. The result, or the refusal
    (a number out of the type's range, a negative one with an unsigned type, a float where the type is integer and
    bitwise), must be Triton's own; the shortcut must have run where Triton computes in the tensor's own type, and
    not in debug mode's overflow checks."""
    fast, own, calls = _spied(name)
    numbers = [3, -5, 0, 2 ** 31 - 1, -2 ** 31, 2 ** 31, 2 ** 40, True, 1.5, -0.0, 0.0, float("nan"), float("inf"),
               1e300]
    shortcut_ran = 0
    for k, dtype in enumerate([tl.int1, tl.int8, tl.int32, tl.int64, tl.uint8, tl.uint32, tl.float16, tl.bfloat16,
                               tl.float32, tl.float64]):
        for shape in ([8], [2, 4], []):
            x = _operand(shape, dtype, k)
            for number in numbers:
                calls.clear()
                got = _result(fast, x, number)
                shortcut_ran += not calls
                assert got == _result(own, x, number), (name, dtype, shape, number)
    assert shortcut_ran >= 100, shortcut_ran
    if name in ("__add__", "__rsub__", "__mul__"):
        _debug_on(monkeypatch)
        small = _small_int32()
        calls.clear()
        got = _result(fast, small, 3)
        assert calls and got == _result(own, small, 3)


def _pointers(shape: list, element, seed: int):
    """A pointer to element, or a block of shape of them ([]: a scalar), at distinct 16-byte-aligned addresses."""
    import numpy as np
    from triton.runtime.interpreter import TensorHandle
    size = int(np.prod(shape)) if shape else 1
    data = (np.random.default_rng(seed).choice(1 << 20, size, replace=False).astype(np.uint64) << np.uint64(4)) \
        + np.uint64(1 << 40)
    ptr = tl.pointer_type(element)
    return tl.tensor(TensorHandle(data.reshape(shape or [1]), ptr), tl.block_type(ptr, list(shape)) if shape else ptr)


def test_pointer_plus_offsets_gives_tritons_addresses():
    """A pointer (to a float, an int64, a bool: their byte widths) or a block of them plus signed offsets (int32,
    int64; of its shape, a scalar, or a block beside a scalar pointer, which Triton broadcasts) or a Python int (small,
    negative, an int64 one) must give Triton's own addresses and type without Triton's path. Unsigned offsets, blocks
    of two shapes, uint32's ints, bools and floats (which Triton refuses) take Triton's own path."""
    fast, own, calls = _spied("__add__")
    shortcut_ran = 0
    for k, element in enumerate([tl.float32, tl.int64, tl.int1, tl.float16]):
        for pshape, oshape in (([8], [8]), ([2, 4], [2, 4]), ([8], []), ([], [8]), ([], [2, 4]), ([], [])):
            for offsets in (_operand(oshape, tl.int32, k), _operand(oshape, tl.int64, k + 1), 3, -7, 2 ** 40):
                ptr = _pointers(pshape, element, k)
                calls.clear()
                got = _result(fast, ptr, offsets)
                assert not calls and got == _result(own, ptr, offsets), (element, pshape, oshape, offsets)
                shortcut_ran += 1
    assert shortcut_ran == 120
    for ptr, offsets in ((_pointers([8], tl.float32, 1), _operand([8], tl.uint32, 2)),
                         (_pointers([8], tl.float32, 3), _operand([1, 8], tl.int32, 4)),
                         (_pointers([2, 4], tl.float32, 5), _operand([4], tl.int32, 6)),
                         (_pointers([8], tl.float32, 7), 2 ** 31), (_pointers([8], tl.float32, 8), True),
                         (_pointers([8], tl.float32, 9), 1.5)):
        calls.clear()
        got = _result(fast, ptr, offsets)
        assert calls and got == _result(own, ptr, offsets), (ptr, offsets)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")     # numpy's, of the edges' NaNs
def test_where_on_equal_types_gives_tritons_results():
    """``tl.where`` of a bool block and two tensors of its shape and one type (every width, sign and float, values at
    the edges), or one of them and a Python number either side (in range, past int32's, a float with an int type,
    signed zeros, NaN), must give Triton's own type, dtype and values, or its refusal; without Triton's path where
    Triton computes in the tensor's type. A scalar condition, two types, two numbers, a bool and a float that Triton
    computes an int type's block with take Triton's own."""
    fast, own, calls = _spied("where")
    for k, dtype in enumerate([tl.int1, tl.int8, tl.int32, tl.int64, tl.uint32, tl.float16, tl.float32, tl.float64]):
        for shape in ([8], [2, 4], []):
            c, x, y = _operand(shape, tl.int1, k), _operand(shape, dtype, k + 1), _operand(shape, dtype, k + 2)
            calls.clear()
            got = _result(fast, c, x, y)
            assert not calls and got == _result(own, c, x, y), (dtype, shape)
    shortcut_ran = 0
    for k, dtype in enumerate([tl.int8, tl.int32, tl.int64, tl.uint32, tl.float16, tl.float32, tl.float64]):
        for number in (0, -3, 2 ** 40, 1.5, -0.0, float("nan")):
            c, x = _operand([8], tl.int1, k), _operand([8], dtype, k + 3)
            for args in ((c, x, number), (c, number, x)):
                calls.clear()
                got = _result(fast, *args)
                shortcut_ran += not calls
                assert got == _result(own, *args), (dtype, number, args.index(number))
    assert shortcut_ran >= 40, shortcut_ran
    for c, x, y in ((_operand([], tl.int1, 1), _operand([8], tl.int32, 2), _operand([8], tl.int32, 3)),
                    (_operand([8], tl.int1, 4), _operand([8], tl.int32, 5), _operand([8], tl.int64, 6)),
                    (_operand([8], tl.int1, 7), 1.0, 0.0), (_operand([8], tl.int1, 8), _operand([8], tl.int32, 9), 1.5),
                    (_operand([8], tl.int1, 10), True, _operand([8], tl.int32, 11))):
        calls.clear()
        got = _result(fast, c, x, y)
        assert calls and got == _result(own, c, x, y)
