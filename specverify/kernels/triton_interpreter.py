"""The Triton interpreter's calls, wrappers and types, shortened, with the same results; ``shorten_the_interpreter()``
installs these and ``triton_interpreted_ops``' operations, in a process whose kernels are interpreted.

    shorten_the_interpreter()                         all of the shortcuts below and ``triton_interpreted_ops``'
    patch_language_once_per_launch()                  the interpreter patches triton.language once per launch
    run_interpreted_grids_on_a_chunk_of_their_own()   each interpreted launch runs on a frame-stack chunk of its own
    skip_discarded_overflow_checks()                  the interpreter skips int32 overflow checks it discards
    lighten_interpreted_builtins()                    the interpreter's per-operation wrappers, cheaper
    share_interpreted_shapes()                        the interpreter's tensors reuse their shapes' types
Each shortcut returns False, changing nothing, where the interpreter is not as expected, and is idempotent. Why each
holds is in its docstring; docs/testing.md times them.
"""

from __future__ import annotations

import builtins

from specverify.kernels.triton_interpreted_ops import (combine_numbers_without_splats, operate_on_equal_types,
                                                       reduce_combines_in_a_tree)


def shorten_the_interpreter() -> None:
    """Installs every shortcut, in the order each expects: the operators' shortcut wraps the lighter builtins'
    ``_patch_attr``."""
    patch_language_once_per_launch()
    run_interpreted_grids_on_a_chunk_of_their_own()
    skip_discarded_overflow_checks()
    lighten_interpreted_builtins()
    share_interpreted_shapes()
    reduce_combines_in_a_tree()
    combine_numbers_without_splats()
    operate_on_equal_types()


def patch_language_once_per_launch() -> bool:
    """Under the Triton interpreter, a call from one @triton.jit function to another re-patches
    triton.language into its interpreted form on every call, although the launch has patched it
    already: with helpers called per tile, that re-patching is a third to a half of the interpreted
    run time. This skips it while the modules a function sees are patched; the launch still patches
    first and restores last. The kernels' results do not change (the patched functions are the same).
    Returns False, changing nothing, where the interpreter's internals are not the expected ones."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
        original, scope = interpreter._patch_lang, interpreter._LangPatchScope
    except (ImportError, AttributeError):
        return False
    if getattr(original, "specverify_once", False):
        return True

    langs_of = {}   # a module's imports do not change after its functions are defined

    def patch_lang(fn):
        langs = langs_of.get(fn)
        if langs is None:
            langs = langs_of[fn] = tuple(v for v in fn.__globals__.values() if v is tl or v is tl.core)
        if langs and all(not tl.core.is_builtin(getattr(lang, "load", None)) for lang in langs):
            return scope()          # already patched by this launch: nothing to patch, nothing to restore
        return original(fn)

    patch_lang.specverify_once = True
    interpreter._patch_lang = patch_lang
    return True


# Words in the frame of the launch's first call: more than a 16 KiB chunk holds, so that it always starts a
# chunk, and over 3,096 (with CPython's minimum overhead of 1,000 words, over 32 KiB), so that the chunk is
# 64 KiB with about 39 KiB above the frame.
_LAUNCH_FRAME_WORDS = 3_200


def run_interpreted_grids_on_a_chunk_of_their_own() -> bool:
    """CPython 3.11 keeps Python frames in 16 KiB chunks: a call whose frame does not fit in the current chunk
    maps a new one, and its return unmaps it. An interpreted launch makes millions of calls a few frames deep,
    starting from wherever its caller's stack ends (pytest's, xdist's, Hypothesis's and the harness's frames
    below it): where that is near a chunk's end, its calls cross the end all the time and each crossing maps
    and unmaps a chunk (hundreds of thousands of pairs in one filtered conformance case, a third of its CPU
    time, as system time). Here each launch calls the grid loop from a frame larger than any chunk's
    remainder, which starts a 64 KiB chunk with about 39 KiB free above it, three times the interpreter's
    deepest chain of frames below the grid loop: the programs' calls stay in that chunk, whatever the depth
    of the caller, and a launch maps one chunk. Only the frame's size changes (a code object's stack size
    above what it uses); the launch is the interpreter's own. Returns False, changing nothing, where the
    interpreter's internals are not the expected ones."""
    try:
        from triton.runtime import interpreter
        run = interpreter.GridExecutor.__call__
    except (ImportError, AttributeError):
        return False
    if getattr(run, "specverify_chunk", False):
        return True

    def launch_on_a_chunk(self, *args, **kwargs):
        return run(self, *args, **kwargs)

    launch_on_a_chunk.__code__ = launch_on_a_chunk.__code__.replace(co_stacksize=_LAUNCH_FRAME_WORDS)
    launch_on_a_chunk.specverify_chunk = True
    interpreter.GridExecutor.__call__ = launch_on_a_chunk
    return True


def skip_discarded_overflow_checks() -> bool:
    """Under the Triton interpreter, every int32 add, sub and mul also computes its result in int64 and
    compares it with the int32 range, then hands the comparison to ``device_assert``, which drops it
    unless the interpreter runs with debug on (it does not by default: no overflow was ever asserted).
    That discarded check is about a third of the interpreted run time; this skips it while debug is off.
    With debug on, the checks run and assert as before. Only the interpreter's semantic object is
    patched: compiled kernels are generated by other instances. Returns False, changing nothing, where
    the interpreter's internals are not the expected ones."""
    try:
        from triton.runtime import interpreter
        semantic = interpreter.interpreter_semantic
        original = type(semantic).binary_op_sanitize_overflow_impl
        semantic.builder.options.debug  # noqa: B018 (the option the skip depends on must exist)
    except (ImportError, AttributeError):
        return False
    if getattr(semantic.__dict__.get("binary_op_sanitize_overflow_impl"), "specverify_skip", False):
        return True

    def sanitize(lhs, rhs, binary_op):
        if semantic.builder.options.debug:
            original(semantic, lhs, rhs, binary_op)

    sanitize.specverify_skip = True
    semantic.binary_op_sanitize_overflow_impl = sanitize
    return True


def lighten_interpreted_builtins() -> bool:
    """The interpreter's per-operation costs, with the same results: the numpy dtype of a Triton
    type is looked up in a dict built anew on every call (most loads, casts and integer ops ask), and
    each patched builtin filters its keyword arguments through a new dict to replace ``_semantic``.
    Here the dtype is cached per element type and the keyword is set in the call's own dict. And the type
    checks of every binary operation: two comparisons (``_compare_plainly``), the promotion of its
    operands' types (``_remember_promotions``) and the broadcast of equal shapes
    (``_skip_equal_broadcasts``). Returns False, changing nothing, where the interpreter's internals are
    not the expected ones."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
        get_np_dtype, semantic = interpreter._get_np_dtype, interpreter.interpreter_semantic
        interpreter._patch_attr  # noqa: B018 (replaced below)
    except (ImportError, AttributeError):
        return False
    if getattr(get_np_dtype, "specverify_cached", False):
        return True
    dtypes = {}

    def np_dtype(tt_dtype):
        key = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        if isinstance(key, tl.pointer_type):    # unhashable; every pointer is a uint64
            return get_np_dtype(key)
        found = dtypes.get(key)
        if found is None:
            found = dtypes[key] = get_np_dtype(key)
        return found

    def patch_attr(obj, name, member, builder, scope):
        def patched(*args, **kwargs):
            kwargs["_semantic"] = semantic
            return member(*args, **kwargs)
        scope.set_attr(obj, name, patched)

    np_dtype.specverify_cached = True
    interpreter._get_np_dtype, interpreter._patch_attr = np_dtype, patch_attr
    _compare_plainly(tl.core)
    _remember_promotions(semantic, tl.core)
    _skip_equal_broadcasts(semantic, tl.core)
    return True


def _skip_equal_broadcasts(semantic, core) -> None:
    """Most binary operations take two blocks of one shape, which ``broadcast_impl_value`` then walks
    dimension by dimension to find that the broadcast shape is theirs and return both unchanged. Here
    two plain block types of equal shapes return unchanged at once, as Triton's walk returns them; every
    other pair (a scalar, another rank or extent, a type of another class) takes Triton's own."""
    broadcast = type(semantic).broadcast_impl_value
    if getattr(semantic.__dict__.get("broadcast_impl_value"), "specverify_equal", False):
        return
    block_type = core.block_type

    def broadcast_value(lhs, rhs):
        lhs_ty, rhs_ty = lhs.type, rhs.type
        if type(lhs_ty) is block_type and type(rhs_ty) is block_type and lhs_ty.shape.values == rhs_ty.shape.values:
            return lhs, rhs
        return broadcast(semantic, lhs, rhs)

    broadcast_value.specverify_equal = True
    semantic.broadcast_impl_value = broadcast_value


def _remember_promotions(semantic, core) -> None:
    """The type both operands of a binary operation are cast to (``computation_type_impl``) is worked out
    through a dozen type tests for each operation, though it depends only on the two element types (equal
    when their names are: a scalar type is made from its name alone), which of the two is a Python number,
    and whether the operation divides. Here each answer is remembered per those five values, after Triton
    has given it once; a combination Triton refuses raises each time, as before. Installed only where the
    remembered answer is Triton's own for every pair of the usual element types."""
    promote = type(semantic).computation_type_impl
    if getattr(semantic.__dict__.get("computation_type_impl"), "specverify_remembered", False):
        return
    seen = {}

    def computation_type(a_ty, a_is_scalar, b_ty, b_is_scalar, div_or_mod):
        key = (a_ty, a_is_scalar, b_ty, b_is_scalar, div_or_mod)
        found = seen.get(key)
        if found is None:
            found = seen[key] = promote(semantic, a_ty, a_is_scalar, b_ty, b_is_scalar, div_or_mod)
        return found

    computation_type.specverify_remembered = True
    semantic.computation_type_impl = computation_type
    kinds = [getattr(core, name) for name in ("int1", "int8", "int16", "int32", "int64", "uint8", "uint32", "uint64",
                                               "float16", "bfloat16", "float32", "float64")]
    for case in [(a, sa, b, sb, d) for a in kinds for b in kinds for sa in (False, True) for sb in (False, True)
                 for d in (False, True)]:
        try:
            want = promote(semantic, *case)
        except Exception as exc:    # noqa: BLE001 (a refused combination must be refused alike)
            want = type(exc)
        try:
            got = computation_type(*case), computation_type(*case)
        except Exception as exc:    # noqa: BLE001
            got = (type(exc),) * 2
        if not (got[0] == want and got[1] == want and str(got[1]) == str(want)):
            del semantic.computation_type_impl
            return


def _compare_plainly(core) -> None:
    """Every binary operation compares its operands' element types (``dtype.__eq__``) and, broadcasting,
    their block shapes with the broadcast shape, a triton.language tuple against a list of ints
    (``tuple.__eq__``). Both first normalise the other side: an element type goes through the constexpr
    unwrapping unchanged, and the list becomes a new triton.language tuple whose type is worked out from
    scratch, to compare its values as a list (the two: about 8% of an interpreted launch). Here those two
    plain cases compare directly, giving what the normalised comparison gives; any other operand takes
    Triton's own ``__eq__``. The two classes are triton.language's own, so a kernel compiled in the same
    process would see the shortcut too, with the same results."""
    dtype, Tuple = core.dtype, core.tuple
    dtype_eq, tuple_eq, constexpr = dtype.__eq__, Tuple.__eq__, core.constexpr
    if getattr(dtype_eq, "specverify_plain", False):
        return

    def dtype_equals(self, other):
        if isinstance(other, dtype):        # unwrapping leaves a dtype as it is
            return self.name == other.name
        return dtype_eq(self, other)

    def tuple_equals(self, other):
        kind = builtins.type(other)
        if (kind is list or kind is builtins.tuple) and all(builtins.type(v) is int for v in other):
            return constexpr(self.values == list(other))    # the values the normalised tuple would hold
        return tuple_eq(self, other)

    dtype_equals.specverify_plain = True
    dtype.__eq__, Tuple.__eq__ = dtype_equals, tuple_equals
    if not _compares_as_triton(core, dtype_eq, tuple_eq):
        dtype.__eq__, Tuple.__eq__ = dtype_eq, tuple_eq


def _compares_as_triton(core, dtype_eq, tuple_eq) -> bool:
    """Whether the plain comparisons give Triton's own results on the cases they take, and on their
    neighbours that they leave to Triton (a constexpr, a bool among the ints, a shorter list)."""
    f32, shape = core.float32, core.tuple([2, 8])
    dtypes = (core.float32, core.int32, core.block_type(core.float32, [2]), core.constexpr(core.float32), "fp32")
    shapes = ([2, 8], (2, 8), [2, 9], [2], [2, True], [2, core.constexpr(8)], [])
    try:
        return all(bool(f32 == other) == bool(dtype_eq(f32, other)) for other in dtypes) and \
            all(bool(shape == other) == bool(tuple_eq(shape, other)) for other in shapes)
    except Exception:       # noqa: BLE001 (any failure means the comparisons do not fit this Triton)
        return False


def share_interpreted_shapes() -> bool:
    """Every operation the interpreter runs makes a triton.language tensor, and most a block type, and each
    of those builds its shape as a triton.language tuple, whose type (one constexpr type per dimension) is
    worked out anew: a quarter of the interpreted run time. Here a tensor or block type of a shape seen
    before gets a fresh tuple of the same values with that shape's type and element count reused (types and
    constexprs are never changed in place); the first of each shape, and any argument outside the plain
    cases, goes through Triton's own constructor, whose checks and errors stay as they were. Called only
    where the kernels are interpreted (no kernel is compiled in such a process). Returns False, changing
    nothing, where triton.language is not as expected."""
    try:
        from triton.language import core
        Tuple, tensor, block_type = core.tuple, core.tensor, core.block_type
        tensor_init, block_init = tensor.__init__, block_type.__init__
    except (ImportError, AttributeError):
        return False
    if getattr(tensor_init, "specverify_shared", False):
        return True
    new = object.__new__
    tensors, blocks = {}, {}

    def shape_of(values, tuple_type):
        shape = new(Tuple)
        shape.values, shape.type = list(values), tuple_type
        return shape

    def init_tensor(self, handle, type):
        entry = tensors.get(getattr(type, "name", None))
        if entry is None:
            tensor_init(self, handle, type)
            if isinstance(getattr(type, "name", None), str):
                tensors[type.name] = (self.numel, builtins.tuple(self.shape.values), self.shape.type)
            return
        numel, values, tuple_type = entry
        self.handle, self.shape, self.numel, self.type, self.dtype = \
            handle, shape_of(values, tuple_type), numel, type, type.scalar

    def init_block(self, element_ty, shape):
        values = shape.values if builtins.type(shape) is Tuple else shape if builtins.type(shape) is list else None
        key = None
        if values is not None and all(builtins.type(v) is int for v in values):
            key = builtins.tuple(values)
            entry = blocks.get(key)
            if entry is not None:
                tuple_type, numel, text = entry
                self.element_ty, self.shape, self.numel = element_ty, shape_of(key, tuple_type), numel
                self.name = f"<{text}, {element_ty}>"
                return
        block_init(self, element_ty, shape)
        if key is not None:
            blocks[key] = (self.shape.type, self.numel, str(self.shape))

    init_tensor.specverify_shared = True
    init_tensor.specverify_triton = (tensor_init, block_init)
    tensor.__init__, block_type.__init__ = init_tensor, init_block
    if not _same_as_triton(core, tensor_init, block_init):
        tensor.__init__, block_type.__init__ = tensor_init, block_init
        return False
    return True


def _same_as_triton(core, tensor_init, block_init) -> bool:
    """Whether the shortcut builds a block type and a tensor whose attributes equal those of Triton's own
    constructors (a Triton that sets another attribute makes it refuse, rather than leave it unset)."""
    def state(obj):
        return {k: (str(v), type(v)) for k, v in vars(obj).items()}

    try:
        ty = core.block_type(core.float32, [2, 8])
        seen = core.block_type(core.float32, [2, 8])        # the second of its shape takes the shortcut
        own = object.__new__(core.block_type)
        block_init(own, core.float32, [2, 8])
        first = core.tensor(None, ty)
        again = core.tensor(None, seen)
        own_tensor = object.__new__(core.tensor)
        tensor_init(own_tensor, None, ty)
    except Exception:       # noqa: BLE001 (any failure means the shortcut does not fit this Triton)
        return False
    return state(seen) == state(own) == state(ty) and state(again) == state(own_tensor) == state(first)
