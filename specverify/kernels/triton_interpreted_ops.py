"""Two of the Triton interpreter's operations, shortened, with the same results (``triton_launch`` holds the
interpreter's other shortcuts):

    reduce_combines_in_a_tree()         ``tl.reduce`` of a combine of the kernel's own in a tree of whole-array
                                        combines
    combine_numbers_without_splats()    a tensor and a Python number or a tensor of its type, with no cast or splat
Each returns False, changing nothing, where the interpreter is not as expected.

Why the tree: the interpreter runs such a reduction one element at a time, calling the combine (a Python function of
interpreted operations) once per element, where ``tl.sum``, ``tl.max`` and ``tl.min`` take one numpy call; a record
of the one-launch cut reduces [256]-element tensors of six operands that way. Here the elements are combined in
adjacent pairs, (x0, x1), (x2, x3), ..., the pairs' results again in pairs, and so on: log2(n) calls of the combine
on arrays. Adjacent pairs keep the elements' order, so an associative combine (which ``tl.reduce`` requires, and which
the GPU's own tree of shuffles assumes) gives what the element-by-element reduction gives; the kernels' combines are
integer adds, minima and maxima, and adds of integer-valued floats, which no order changes. Both shortcuts hold for
every kernel the process interprets, a backend's under test too: a combine that is not associative (a float sum's
rounding, a bug) gives the tree's fold there, as the GPU gives its own, where the interpreter would give a left fold.

Why the numbers: many of a kernel's binary operations pair a block with a Python number (``i < n``, ``x * 2``) or a
scalar (``x - m``), and the interpreter makes that operand a block of the block's shape (a splat: a new array and two
tensors) before numpy combines the two. Where neither operand needs a cast, it stays a one-element array here, which
numpy broadcasts to the same values; and operands of one type skip the type checks' dozen steps.
"""

from __future__ import annotations

import numpy as np


def reduce_combines_in_a_tree() -> bool:
    """Replaces the interpreter's element-by-element ``generic_reduce`` with the tree above (once; idempotent)."""
    try:
        from triton.runtime import interpreter
        ops = interpreter.ReduceOps
        original = ops.generic_reduce
        ops.to_tensor  # noqa: B018 (the helper the tree uses must exist)
    except (ImportError, AttributeError):
        return False
    # the state the tree reads (axis, combine_fn, keep_dims) is what the constructor takes
    if _parameters(ops.__init__) != ["self", "axis", "combine_fn", "keep_dims"]:
        return False
    if getattr(original, "specverify_tree", False):
        return True

    def generic_reduce(self, input):
        whole_axis, axis = self.axis, 0 if self.axis is None else self.axis
        shape, dtypes = input[0].handle.data.shape, [arg.dtype for arg in input]
        # every operand flattened where the reduction is of the whole tensor (the interpreter's own ``unravel``
        # flattens only the first)
        data = [arg.handle.data.reshape(-1) if whole_axis is None else np.moveaxis(arg.handle.data, axis, 0)
                for arg in input]
        while data[0].shape[0] > 1:
            pairs = data[0].shape[0] // 2
            left = [self.to_tensor(np.ascontiguousarray(d[0:2 * pairs:2]), t) for d, t in zip(data, dtypes)]
            right = [self.to_tensor(np.ascontiguousarray(d[1:2 * pairs:2]), t) for d, t in zip(data, dtypes)]
            out = self.combine_fn.fn(*left, *right)
            out = out if isinstance(out, tuple) else (out,)
            # an odd element out follows the pairs' results, its place in the order kept
            data = [np.concatenate([_values(o, lhs), d[2 * pairs:]]) for o, lhs, d in zip(out, left, data)]
        ret = []
        for d, dtype in zip(data, dtypes):
            value = d[0]
            if self.keep_dims:
                value = np.expand_dims(value, axis) if whole_axis is not None else value.reshape((1,) * len(shape))
            elif whole_axis is None:
                value = value.item()
            ret.append(self.to_tensor(value, dtype))
        return ret

    generic_reduce.specverify_tree = True
    generic_reduce.specverify_original = original
    ops.generic_reduce = generic_reduce
    return True


def _values(out, like) -> np.ndarray:
    """A combine's result as an array of ``like``'s shape and numpy dtype (a combine may return a constant)."""
    data = like.handle.data
    if hasattr(out, "handle"):
        return np.broadcast_to(out.handle.data, data.shape).astype(data.dtype)
    return np.full(data.shape, getattr(out, "value", out), dtype=data.dtype)


def combine_numbers_without_splats() -> bool:
    """Where a binary operation's type checks pair a tensor of a non-pointer type with a Python number (not a bool)
    or a tensor of its own type, and the computation type is that type (no cast), the number is checked and made a
    constant as Triton makes it, and a scalar beside a block is given the block's type with its one value, where
    Triton would splat it to the block's shape: the operation's numpy call broadcasts it. Tensors of one type and
    shape are returned as Triton's checks return them. Every other pair (pointers, casts, blocks of two shapes), and
    every check that refuses, takes Triton's own (once; idempotent)."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
        semantic = interpreter.interpreter_semantic
        check = type(semantic).binary_op_type_checking_impl
        semantic.computation_type_impl, semantic._cast_to_computation_type, semantic.to_tensor_type  # noqa: B018
    except (ImportError, AttributeError):
        return False
    if _parameters(check) != ["self", "lhs", "rhs", "allow_lhs_ptr", "allow_rhs_ptr", "arithmetic_check", "div_or_mod"]:
        return False
    if getattr(semantic.__dict__.get("binary_op_type_checking_impl"), "specverify_numbers", False):
        return True
    tensor, block_type = tl.core.tensor, tl.core.block_type

    def type_checked(lhs, rhs, allow_lhs_ptr=False, allow_rhs_ptr=False, arithmetic_check=True, div_or_mod=False):
        if arithmetic_check:
            if type(lhs) is tensor:
                one, other, first = lhs, rhs, False
            elif type(rhs) is tensor:
                one, other, first = rhs, lhs, True
            else:
                one = None
            if one is not None and not one.dtype.is_ptr():
                own = one.dtype
                if type(other) in (int, float):
                    its, is_number = semantic.to_tensor_type(other), True
                elif type(other) is tensor and other.dtype == own:
                    its, is_number = own, False
                else:
                    its = None
                if its is not None and own == (semantic.computation_type_impl(its, is_number, own, False, div_or_mod)
                                               if first else
                                               semantic.computation_type_impl(own, False, its, is_number, div_or_mod)):
                    if is_number:       # Triton's range checks, and its constant
                        other = semantic._cast_to_computation_type(other, own)
                    # the broadcast: equal types stay, and a scalar takes the block's type with its one value
                    one_block, other_block = type(one.type) is block_type, type(other.type) is block_type
                    if one_block and not other_block:
                        other = tensor(other.handle, one.type)
                    elif other_block and not one_block:
                        one = tensor(one.handle, other.type)
                    elif one_block and one.type.shape.values != other.type.shape.values:
                        return check(semantic, lhs, rhs, allow_lhs_ptr, allow_rhs_ptr, arithmetic_check, div_or_mod)
                    return (other, one) if first else (one, other)
        return check(semantic, lhs, rhs, allow_lhs_ptr, allow_rhs_ptr, arithmetic_check, div_or_mod)

    type_checked.specverify_numbers = True
    semantic.binary_op_type_checking_impl = type_checked
    return True


def _parameters(fn) -> list:
    """fn's parameter names, in order ([] where it has no signature)."""
    import inspect
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []
