"""Launch cache for the Triton sampler: relaunch of compiled kernels without rebinding, and scratch reuse.

    launch(kernel, grid, args, meta, key, stream)   kernel[grid](*args, **meta, **COMPILE_OPTIONS), or the cached
                                                    compiled kernel
        kernel  a @triton.jit function; args its runtime parameters in signature order (tensors, ints)
        grid    (int, int, int)
        meta    its constexpr parameters (which follow args in its signature) and options (num_warps)
        key     hashable, or None for an ordinary JIT launch; see ``launch_key``
        stream  the current stream's handle (int), looked up once per call for all its launches
    launch_key(recipe_id, tensors) -> (key, stream)   key: (recipe id, device index, alignment mask)
    alignment_mask(*tensors) -> int                   bit i set when tensors[i] is not 16-byte aligned
    scratch(device, stream, words) -> [>= words] int64 tensor on device
    unit_stride(t) -> t, or a contiguous copy where its elements are not adjacent (a kernel indexes a 1-D
                      argument by its element index; SPEC 4.11)

Why: ``JITFunction.run`` binds and specialises every argument on every launch, which is most of the host
cost of a small call (docs/benchmarks.md). Once a specialisation is compiled, its ``CompiledKernel`` is
launched directly, under a key that refines Triton's specialisation: the launch recipe (every integer
argument by value, every tensor's dtype, every constexpr and option; the caller's ``recipe_id``), the
current device, and which tensors are 16-byte aligned. A hit can never reuse a kernel compiled under
other assumptions (a misaligned view gets its own entry). The caller passes no key under the interpreter;
SPECVERIFY_TRITON_FAST_LAUNCH=0 sends every launch through ``JITFunction.run``.
"""

from __future__ import annotations

import os
import threading

import torch

_FAST_LAUNCH = os.environ.get("SPECVERIFY_TRITON_FAST_LAUNCH", "1") != "0"
# Every kernel compiles without fusing a multiply and an add into one FMA. Pass 1 rounds l * (1 / T) before
# taking the row's max and sum; a fused exp(l * (1 / T) - max) elsewhere skips that rounding, which at T = 0.001
# is up to half an ulp of l / T (5e-4), so the top token's p(x) exceeds 1 by that much and a draft whose q(x) lies
# within it above p(x) is accepted (SPEC 2, the boundary case). Unfused, the GPU computes what the interpreter
# computes.
COMPILE_OPTIONS = {"enable_fp_fusion": False}
try:  # the runtime pieces CompiledKernel[grid] uses (Triton >= 3.4); without them every launch goes through JIT
    from triton import knobs as _knobs
    from triton.runtime.driver import driver as _driver
except ImportError:  # pragma: no cover (older Triton)
    _knobs = _driver = None
_compiled: dict = {}


def launch(kernel, grid: tuple, args: tuple, meta: dict, key=None, stream=None) -> None:
    """kernel[grid](*args, **meta), through the compiled kernel when ``key`` was launched before (on
    ``stream``, the current stream's handle, which the caller looked up once for all its launches).

    meta holds the kernel's constexpr parameters (which follow ``args`` in its signature) and launch
    options such as num_warps. A hit does what CompiledKernel[grid](...) does -- launch metadata, the
    launch hooks (profilers), the launcher with every parameter positionally -- without its per-call
    closure and device and stream lookups."""
    if key is None or not _FAST_LAUNCH:
        kernel[grid](*args, **meta, **COMPILE_OPTIONS)
        return
    entry = _compiled.get(key)
    if entry is None:
        compiled = kernel[grid](*args, **meta, **COMPILE_OPTIONS)
        if _knobs is not None and all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata",
                                                                       "launch_metadata")):
            _compiled[key] = (compiled, tuple(meta[name] for name in kernel.arg_names[len(args):]))
        return
    compiled, constexprs = entry
    params = args + constexprs
    if stream is None:
        stream = _driver.active.get_current_stream(_driver.active.get_current_device())
    enter, leave = _active(_knobs.runtime.launch_enter_hook), _active(_knobs.runtime.launch_exit_hook)
    compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata,
                 None if enter is None else compiled.launch_metadata(grid, stream, *params), enter, leave, *params)


def _active(hook):
    """A launch hook, or None when there is none to call: no hook, or an empty chain of hooks (the launcher
    would call into Python for nothing, and build launch metadata nobody reads)."""
    return None if hook is None or getattr(hook, "calls", None) == [] else hook


def unit_stride(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t`` where the kernels can index it as it is, else a contiguous copy (None stays None). A caller's view,
    every other element of a buffer, say, reads the buffer's other elements when indexed by element."""
    return t if t is None or t.is_contiguous() else t.contiguous()


def launch_key(recipe_id: int, tensors: tuple) -> tuple:
    """(key, stream) for the launches of one call: the fast-relaunch key (recipe id, current device,
    alignment mask of ``tensors``), to which the caller appends its pass number, and the current stream's
    handle. (None, None) without Triton's runtime driver."""
    if _driver is None:
        return None, None
    current = _driver.active.get_current_device()
    return (recipe_id, current, alignment_mask(*tensors)), _driver.active.get_current_stream(current)


def alignment_mask(*tensors) -> int:
    """Bit i set when tensors[i] (None counts as aligned) does not start on a 16-byte boundary: with the
    recipe, what Triton specialises a launch on."""
    mask = 0
    for i, t in enumerate(tensors):
        if t is not None and t.data_ptr() % 16:
            mask |= 1 << i
    return mask


_scratch_cache: dict = {}


def scratch(device: torch.device, stream, words: int) -> torch.Tensor:
    """[>= words] int64 scratch for one call. Eager calls reuse one buffer per (thread, device, stream):
    the launches of consecutive calls on one stream run in order, and every call writes what it reads
    (pass 1 resets pass 2's rendezvous state), so no call sees another's data. Threads get buffers of
    their own, since two threads may interleave their launch pairs on a shared stream; a call under
    CUDA-graph capture gets a fresh buffer from the graph's pool."""
    if stream is None or torch.cuda.is_current_stream_capturing():
        return torch.empty(words, dtype=torch.int64, device=device)
    key = (threading.get_ident(), device, stream)
    buf = _scratch_cache.get(key)
    if buf is None or buf.numel() < words:
        buf = _scratch_cache[key] = torch.empty(words, dtype=torch.int64, device=device)
    return buf
