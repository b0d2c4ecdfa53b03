"""The Triton sampler's launch path (specverify/kernels/triton_launch.py): the fast relaunch that skips the
JIT's dispatch, its cache key, the hooks it must still call, and the interpreter's shape shortcut.

Without CUDA the kernels run under the Triton interpreter (tests/triton_sampler_cases.py sets it up); the
fast relaunch is a compiled-kernel path, so its end-to-end cases run on CUDA alone.
"""

from __future__ import annotations

import pytest
import torch

import reference
from reference import Noise, SpecBatch
from triton_sampler_cases import _CUDA, TritonBackend, _batch, _same, triton_kernels, triton_launch
from specverify.kernels import triton_interpreter  # noqa: E402 (after the interpreter is switched on)


def test_fast_launch_key_separates_what_triton_specialises_on():
    """The fast-relaunch cache (triton_launch.launch) may reuse a compiled kernel only for a launch that
    Triton would compile identically. Its key is the launch recipe (integers by value, dtypes, options)
    plus the alignment mask: a 4-byte-offset view (not 16-byte aligned), another dtype, stride, shape or
    option must each change the key; fresh tensors with the same properties must not."""
    base = torch.zeros(64)
    assert triton_launch.alignment_mask(base, None, base[4:]) == 0
    assert triton_launch.alignment_mask(base, base[1:], None, base[2:]) == 0b1010

    def recipe_id(**change):
        args = dict(B=1, K1=5, V=1000, device=torch.device("cpu"), block_v=None, splits=None, num_warps=None,
                    strides=(1000, 1000, 1000), dtypes=(torch.float32,) * 3, has_q=True, seeded=False,
                    synthetic=False)
        args.update(change)
        return triton_kernels.launch_recipe(**args)[0]

    same = recipe_id()
    assert recipe_id() == same
    changed = [recipe_id(B=2), recipe_id(K1=4), recipe_id(V=1001), recipe_id(block_v=16), recipe_id(splits=(3, 2)),
               recipe_id(num_warps=4), recipe_id(strides=(1024, 1000, 1000)),
               recipe_id(dtypes=(torch.bfloat16,) + (torch.float32,) * 2), recipe_id(has_q=False),
               recipe_id(seeded=True), recipe_id(synthetic=True), recipe_id(block=True)]
    assert same not in changed and len(set(changed)) == len(changed)


@pytest.mark.skipif(not _CUDA, reason="the fast relaunch is a compiled-kernel path (off under the interpreter)")
def test_fast_relaunch_matches_reference_across_alignments_and_shapes(monkeypatch):
    """Calls that hit the fast-relaunch cache give the reference's tokens: the same shapes again with fresh
    tensors, then views offset by one element (logits, draft probs and noise 4 bytes off 16-byte alignment,
    which a kernel compiled for aligned pointers would load with misaligned vector accesses), then aligned
    again. The cache must have been hit, and must hold separate entries for the two alignments."""
    monkeypatch.setattr(triton_launch, "_compiled", {})
    backend = TritonBackend()

    def offset(t: torch.Tensor) -> torch.Tensor:
        flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        flat[1:].copy_(t.reshape(-1))
        return flat[1:].view(t.shape)

    for round_ in range(3):
        for misaligned in (False, True, False):
            batch = _batch(300 + round_, "cuda", num_requests=3, vocab_size=1000, max_draft=3, zero_draft_fraction=0.0)
            noise = Noise.draw(batch, torch.Generator().manual_seed(round_))
            if misaligned:
                batch = SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, offset(batch.target_logits),
                                  offset(batch.draft_probs), batch.temperature)
                noise = Noise(offset(noise.uniform), offset(noise.exponential))
                assert batch.target_logits.data_ptr() % 16 != 0
            _same(reference.sample(batch, noise=noise), backend(batch, noise=noise))
    cache = triton_launch._compiled
    misaligned_entries = {key[2] != 0 for key in cache}   # key: (recipe id, device, alignment mask, pass)
    assert misaligned_entries == {True, False}

    # The last (aligned) call once more: both of its launches must now go through the cache.
    hits = []

    class Counting:
        """The compiled kernel, counting the launches made through it."""

        def __init__(self, compiled):
            self.compiled = compiled

        def __getattr__(self, name):
            if name == "run":
                hits.append(name)
            return getattr(self.compiled, name)

    for key, (compiled, constexprs) in list(cache.items()):
        cache[key] = (Counting(compiled), constexprs)
    _same(reference.sample(batch, noise=noise), backend(batch, noise=noise))
    assert len(hits) == 2


@pytest.mark.skipif(not _CUDA, reason="the fast relaunch is a compiled-kernel path (off under the interpreter)")
def test_fast_relaunch_still_calls_registered_launch_hooks():
    """Profilers (proton, the Triton launch hooks) must still see every launch that skips the JIT path: a hook
    registered on the enter chain is called once per launch, both launches of each call, cached or not."""
    from triton import knobs
    chain = knobs.runtime.launch_enter_hook
    seen = []

    def hook(metadata):
        seen.append(metadata)

    batch = _batch(400, "cuda", num_requests=2, vocab_size=500, max_draft=2, zero_draft_fraction=0.0)
    backend = TritonBackend()
    backend(batch, seed=1)  # compiled and cached before the hook is registered
    chain.add(hook)
    try:
        for seed in (2, 3):
            _same(reference.sample(batch, seed=seed), backend(batch, seed=seed))
    finally:
        chain.remove(hook)
    assert len(seen) == 4


def test_shape_shortcut_stands_down_for_a_triton_whose_tensors_it_does_not_match(monkeypatch):
    """The interpreter's shape shortcut (``triton_interpreter.share_interpreted_shapes``) sets the attributes
    Triton's tensor constructor sets today; a Triton whose constructor sets one more must keep its own, or
    interpreted tensors would lack it. The shortcut checks itself against Triton's constructors when it
    installs, and refuses then (and wherever it does not match the installed Triton, which the GPU's may
    not)."""
    from triton.language import core
    installed = getattr(core.tensor.__init__, "specverify_triton", None)
    tensor_init, block_init = installed or (core.tensor.__init__, core.block_type.__init__)

    def one_more(self, handle, type):
        tensor_init(self, handle, type)
        self.layout = "a newer Triton's"

    monkeypatch.setattr(core.tensor, "__init__", one_more)
    monkeypatch.setattr(core.block_type, "__init__", block_init)
    assert triton_interpreter.share_interpreted_shapes() is False
    assert core.tensor.__init__ is one_more and core.block_type.__init__ is block_init
    monkeypatch.setattr(core.tensor, "__init__", tensor_init)
    if triton_interpreter.share_interpreted_shapes():       # a Triton it matches: the shortcut's tensors are whole
        assert core.tensor(None, core.block_type(core.float32, [4])).numel == 4


def test_every_launch_compiles_without_fused_multiply_adds(monkeypatch):
    """The kernels' numerics are the interpreter's only if no multiply and add are fused into an FMA: a fused
    exp(l * (1 / T) - max) at a draft differs from pass 1's rounded l / T by up to 5e-4 at T = 0.001 (the boundary
    case's top-token fallback request). CI runs the interpreter, which never fuses, so the option itself is what is
    checked here, on both launch paths: the JIT launch (no key) and the first launch of a cached key."""
    seen = []

    class Kernel:
        arg_names = ["a"]

        def __getitem__(self, grid):
            def run(*args, **options):
                seen.append(options)
            return run

    triton_launch.launch(Kernel(), (1, 1, 1), (0,), {}, key=None)
    monkeypatch.setattr(triton_launch, "_FAST_LAUNCH", True)
    monkeypatch.setattr(triton_launch, "_compiled", {})
    triton_launch.launch(Kernel(), (1, 1, 1), (0,), {}, key=("fma-test",))
    assert seen == [{"enable_fp_fusion": False}] * 2


def test_no_sampler_kernel_is_launched_around_the_launch_path():
    """``COMPILE_OPTIONS`` reach a kernel only through ``triton_launch.launch``: a ``kernel[grid](...)`` written
    anywhere else in the package compiles with Triton's default FMA fusion, which the interpreter cannot show. The
    fingerprint kernel (integer words only, no multiply-add to fuse) is the one other launch."""
    import ast
    from pathlib import Path

    kernels = Path(triton_launch.__file__).parent
    launches = {}
    for path in sorted(kernels.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            # kernel[grid](...); an item of a sequence called (ops[0](...)) is no launch
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) \
                    and not isinstance(node.func.slice, ast.Constant):
                launches.setdefault(path.name, []).append(ast.unparse(node.func.value))
    assert launches == {"triton_launch.py": ["kernel", "kernel"], "fingerprint.py": ["_fingerprint_kernel"]}, launches
