"""Three of the Triton interpreter's operations, shortened, with the same results (``triton_interpreter`` holds the
interpreter's other shortcuts and installs these):

    reduce_combines_in_a_tree()         ``tl.reduce`` of a combine of the kernel's own in a tree of whole-array
                                        combines
    combine_numbers_without_splats()    a tensor and a Python number or a tensor of its type, with no cast or splat
    operate_on_equal_types()            an operator or ``tl.where`` on tensors of one type, a tensor and a number, or
                                        a pointer and its offsets, straight to the builder
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

Why the equal types: most of the operators a one-launch kernel runs take two tensors of one type (or a block and a
scalar of its element type, a number, or a pointer and its offsets), for which Triton's semantic only checks, finds
nothing to cast or broadcast, and calls one builder operation; with the wrappers around it, six layers of Python
calls. Here the builder's operation is called at once, and what it is, with the result's type, is worked out once
per operator and type.
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


# a binary operation of two tensors of one type: the builder's operation by the element type's kind (floating,
# signed, unsigned), as Triton's semantic picks it once the type checks return both unchanged
_SAME_TYPE_OPS = {
    "__add__": ("create_fadd", "create_add", "create_add"),
    "__sub__": ("create_fsub", "create_sub", "create_sub"),
    "__mul__": ("create_fmul", "create_mul", "create_mul"),
    "__lt__": ("create_fcmpOLT", "create_icmpSLT", "create_icmpULT"),
    "__le__": ("create_fcmpOLE", "create_icmpSLE", "create_icmpULE"),
    "__gt__": ("create_fcmpOGT", "create_icmpSGT", "create_icmpUGT"),
    "__ge__": ("create_fcmpOGE", "create_icmpSGE", "create_icmpUGE"),
    "__eq__": ("create_fcmpOEQ", "create_icmpEQ", "create_icmpEQ"),
    "__ne__": ("create_fcmpUNE", "create_icmpNE", "create_icmpNE"),
    "__and__": (None, "create_and", "create_and"),
    "__or__": (None, "create_or", "create_or"),
    "__xor__": (None, "create_xor", "create_xor"),
}
_MISSING = object()
_COMPARISONS = ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__")
_ARITHMETIC = ("__add__", "__sub__", "__mul__")
_BITWISE = ("__and__", "__or__", "__xor__")
# a number on the left: Python calls the tensor's reflected operator, which Triton runs as the operation on (number,
# tensor); a comparison's reflection is Python's (3 < x calls x.__gt__(3))
_REFLECTED = {"__radd__": ("__add__", True), "__rsub__": ("__sub__", True), "__rmul__": ("__mul__", True),
              "__rand__": ("__and__", True), "__ror__": ("__or__", True), "__rxor__": ("__xor__", True)}


def operate_on_equal_types() -> bool:
    """Where a tensor's arithmetic (+, -, *), comparison or bitwise operator (&, |, ^) takes a tensor of its own type
    and shape, or a block a scalar of its element type (either side), or a Python int or float that Triton computes
    in the tensor's type (either side), or ``tl.where`` a condition of their shape and two tensors of one type (or one
    and such a number), the builder's operation runs at once on the handles, with the result type Triton's semantic
    gives: its type checks return such operands unchanged, but for the scalar and the number, whose one value numpy
    broadcasts as Triton's splat would (the number made a constant by Triton's own range checks). A pointer plus
    signed offsets (or an int) likewise goes to the builder's ``addptr``. What each (operator, type) pair runs is
    decided once, by Triton's own computation type; operands of two types or shapes, unsigned offsets, bools, extra
    arguments, and the int overflow checks of debug mode take Triton's own path (once; idempotent)."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
        semantic = interpreter.interpreter_semantic
        previous = interpreter._patch_attr
        semantic.computation_type_impl, semantic._bool_like, semantic.to_tensor  # noqa: B018
        semantic.builder.create_select, semantic.builder.create_addptr  # noqa: B018
        semantic.builder.options.debug  # noqa: B018
    except (ImportError, AttributeError):
        return False
    if getattr(previous, "specverify_equal_types", False):
        return True
    if _parameters(previous) != ["obj", "name", "member", "builder", "scope"]:
        return False
    tensor, block_type, builder = tl.core.tensor, tl.core.block_type, semantic.builder
    plans, sums, constants = {}, {}, {}

    def kept(table, key, make, *args):
        """table[key], made by make(*args) the first time. A key holding None (a type without a name) is made each
        time; a table past 4,096 entries (the constants', kept by value) starts over."""
        found = table.get(key, _MISSING)
        if found is _MISSING:
            found = make(*args)
            if None not in key:
                if len(table) >= 4096:
                    table.clear()
                table[key] = found
        return found

    def plan(name, x):
        """(the builder's operation, the result type) of name on two tensors of x's type, or None. A type's name
        (its element type and shape) keys it: types are not hashable."""
        return kept(plans, (name, getattr(x.type, "name", None)), _plan, name, x)

    def _plan(name, x):
        sca = x.type.scalar
        if sca.is_ptr() or not (sca.is_floating() or sca.is_int()):
            return None
        # a type whose operations Triton computes in another (a cast first) is Triton's to run
        if name not in _BITWISE and semantic.computation_type_impl(sca, False, sca, False, False) != sca:
            return None
        if name == "where":     # and the condition's type
            return builder.create_select, x.type, semantic._bool_like(x)
        floating, signed, unsigned = _SAME_TYPE_OPS[name]
        create = floating if sca.is_floating() else signed if sca.is_int_signed() else unsigned
        if create is None:
            return None
        out = semantic._bool_like(x) if name in _COMPARISONS else x.type
        return getattr(builder, create), out

    def constant(number, x):
        """The number as Triton makes it an operand of x's element type (its range checks, its constant), or None
        where Triton computes the two in another type. Constants are never changed in place, so each is made once."""
        own = x.type.scalar
        return kept(constants, (own.name, type(number), number if type(number) is int else number.hex()),
                    _constant, number, own)

    def _constant(number, own):
        if semantic.computation_type_impl(own, False, semantic.to_tensor_type(number), True, False) != own:
            return None
        return semantic._cast_to_computation_type(number, own)

    def pointer_sum(ptr, offset):
        """The type of ptr + offset (a pointer or block of pointers, and signed integer offsets of its shape or a
        scalar either side), as Triton's broadcast gives it, or None. Kept by the two types' names."""
        return kept(sums, (getattr(ptr.type, "name", None), getattr(offset.type, "name", None)), _pointer_sum,
                    ptr.type, offset.type)

    def _pointer_sum(mine, its):
        if its.scalar.is_int_signed():
            if type(mine) is not block_type:
                return its.with_element_ty(mine) if type(its) is block_type else mine
            if type(its) is not block_type or mine.shape.values == its.shape.values:
                return mine
        return None

    def offset_of(number):
        """A pointer's int offset as Triton makes it a tensor (``to_tensor``), made once per value."""
        return kept(constants, ("offset", number), semantic.to_tensor, number)

    def operator(name, member):
        base, reflected = _REFLECTED.get(name, (name, False))
        sanitized, adds = base in _ARITHMETIC, name == "__add__"

        def fast(self, other, *args, **kwargs):
            if not args and not kwargs and not (sanitized and builder.options.debug):
                kind = type(other)
                if adds and self.type.scalar.is_ptr():
                    # an int is Triton's constant of its type (an unsigned one, past int32, takes Triton's path)
                    offset = other if kind is tensor else offset_of(other) if kind is int else None
                    out = None if offset is None else pointer_sum(self, offset)
                    if out is not None:
                        return tensor(builder.create_addptr(self.handle, offset.handle), out)
                elif kind is tensor and not reflected:
                    mine, its = self.type, other.type
                    # a scalar beside a block of its element type keeps its one value, which numpy broadcasts
                    wide = self if mine is its or type(its) is not block_type else other
                    if _same(mine, its) or _same(mine.scalar, its) and type(mine) is block_type or \
                            _same(mine, its.scalar) and type(its) is block_type:
                        found = plan(base, wide)
                        if found is not None:
                            return tensor(found[0](self.handle, other.handle), found[1])
                elif kind is int or kind is float:
                    found = plan(base, self)
                    number = None if found is None else constant(other, self)
                    if number is not None:
                        lhs, rhs = (number, self) if reflected else (self, number)
                        return tensor(found[0](lhs.handle, rhs.handle), found[1])
            kwargs["_semantic"] = semantic
            return member(self, other, *args, **kwargs)
        return fast

    def where(member):
        def fast(condition, x, y, *args, **kwargs):
            if not args and not kwargs and type(condition) is tensor:
                kind_x, kind_y = type(x), type(y)
                # two tensors of one type, or a tensor and a number Triton makes a constant of its type
                found = lhs = rhs = None
                if kind_x is tensor and (kind_y is tensor and _same(x.type, y.type) or kind_y is int or
                                         kind_y is float):
                    found = plan("where", x)
                    lhs, rhs = x, (y if kind_y is tensor or found is None else constant(y, x))
                elif kind_y is tensor and (kind_x is int or kind_x is float):
                    found = plan("where", y)
                    lhs, rhs = (None if found is None else constant(x, y)), y
                if found is not None and lhs is not None and rhs is not None and _same(condition.type, found[2]):
                    return tensor(found[0](condition.handle, lhs.handle, rhs.handle), found[1])
            kwargs["_semantic"] = semantic
            return member(condition, x, y, *args, **kwargs)
        return fast

    def patch_attr(obj, name, member, builder_, scope):
        if obj is tensor and (name in _SAME_TYPE_OPS or name in _REFLECTED):
            scope.set_attr(obj, name, operator(name, member))
        elif name == "where" and obj in (tl, tl.core):
            scope.set_attr(obj, name, where(member))
        else:
            previous(obj, name, member, builder_, scope)

    patch_attr.specverify_equal_types = True
    interpreter._patch_attr = patch_attr
    return True


def _same(a, b) -> bool:
    """Whether two types are one: the same object, or of one name (a block type's names its element type and shape),
    where ``==`` walks both."""
    if a is b:
        return True
    name = getattr(a, "name", None)
    return type(name) is str and name == getattr(b, "name", None)


def _parameters(fn) -> list:
    """fn's parameter names, in order ([] where it has no signature)."""
    import inspect
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []
