"""The Triton interpreter's reductions of a combine of the kernel's own (``tl.reduce`` with a ``@triton.jit`` combine),
in a tree of whole-array combines:

    reduce_combines_in_a_tree()     installs it; False, changing nothing, where the interpreter is not as expected

Why: the interpreter runs such a reduction one element at a time, calling the combine (a Python function of
interpreted operations) once per element, where ``tl.sum``, ``tl.max`` and ``tl.min`` take one numpy call. A
record of the one-launch cut reduces [256]-element tensors of six operands that way, and those reductions were 40%
of an interpreted one-launch test's time. Here the elements are combined in adjacent pairs, (x0, x1), (x2, x3), ...,
the pairs' results again in pairs, and so on: log2(n) calls of the combine on arrays. Adjacent pairs keep the
elements' order, so an associative combine (which ``tl.reduce`` requires, and which the GPU's own tree of shuffles
assumes) gives what the element-by-element reduction gives; the kernels' combines are integer adds, minima and
maxima, and adds of integer-valued floats, which no order changes.
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
