"""SPEC 4.11: inputs handed over as views that are not contiguous, on every declared noise path and rule.

Each example is called twice on each noise path the backend declares (its seeds, its injected noise): once as
the caller laid it out and once under ``integrity.strided_inputs``, which hands every tensor over as a view into
a poisoned buffer (1-D: every other element; 2-D: the middle columns of a wider buffer, as vocabulary-padded
logits). The two outputs must be equal; where they differ, both calls are made again, so that a backend whose
outputs vary from call to call is named not deterministic rather than blamed on the layout. A ``ValueError`` or
``UnsupportedError`` naming the tensor is a refusal, counted; a failure leaves a pair reproducer (conditions
"plain" and "strided").

    views                the batch's tensors, the noise and the seeds as views (every backend)
    sample_into_outputs  a backend's graph-capturable entry (``sample_into``, where it declares cuda_graphs) called
                         eagerly with its outputs as views of wider poisoned buffers (``out[:, :K + 1]``): the
                         values of the same call into contiguous outputs, the buffers' other elements untouched
"""

from __future__ import annotations

import torch

from reference import Noise, SpecOutput, philox
from reference.batch import FIELDS
from specverify.backends import UnsupportedError
from specverify.checks.common import call_example, paths, run_property
from specverify.checks.integrity import INT_POISON, outside_view, strided_copy, strided_inputs
from specverify.checks.runner import CheckFailure, Context, Needs, NotApplicable, output_problems
from specverify.checks.structural import declared_methods, method_for, share_of_examples, outputs_equal
from specverify.checks.tree_cases import chains_as_trees
from specverify.generate import random_batch
from specverify.strategies import spec_examples

STRIDED_CASES = ("views", "sample_into_outputs")
STRIDED_NEEDS = Needs(noise="any")
NAMES = FIELDS + ("uniform", "exponential", "seed")     # a refusal names one of these


def check_strided_inputs(ctx: Context, case: str) -> None:
    caps = ctx.backend.capabilities
    declared = paths(ctx)
    if not declared:
        raise NotApplicable("backend declares neither injected noise nor seeds: its calls cannot be repeated")
    if case == "sample_into_outputs":
        _sample_into_outputs(ctx, declared)
        return
    methods = declared_methods(ctx)
    refused = []

    def body(example):
        example, kwargs = method_for(example, methods, ctx)
        for path in declared:
            seeded = path == "seeded"
            plain = call_example(ctx, example, seeded=seeded, **kwargs)[0]
            try:
                with strided_inputs():
                    strided = call_example(ctx, example, seeded=seeded, **kwargs)[0]
            except (ValueError, UnsupportedError) as exc:
                if not any(name in str(exc) for name in NAMES):
                    raise CheckFailure(f"{path} noise: strided inputs refused with {type(exc).__name__} "
                                       f"naming no input: {exc}") from None
                refused.append(str(exc))
                continue
            ctx.result.samples += example.batch.num_requests
            if outputs_equal(plain, strided):
                continue
            # a layout that matters gives the same two outputs again; a backend that varies from call to call does not
            again = call_example(ctx, example, seeded=seeded, **kwargs)[0]
            with strided_inputs():
                again_strided = call_example(ctx, example, seeded=seeded, **kwargs)[0]
            for first, second, how in ((plain, again, "contiguous"), (strided, again_strided, "strided")):
                if not outputs_equal(first, second):
                    raise CheckFailure(f"{path} noise: the same {how} call gave {first.emitted()}, then "
                                       f"{second.emitted()}: not deterministic (the determinism check), so the "
                                       "layouts cannot be compared")
            ctx.backend.failed_pair = ("plain", "strided")
            raise CheckFailure(f"{path} noise, {kwargs['method']}: inputs as strided views gave {strided.emitted()}, "
                               f"the same values contiguous gave {plain.emitted()}")

    run_property(ctx, spec_examples(ctx.profile, filters=caps.target_filters, placeholders=caps.placeholders), body,
                 examples=share_of_examples(ctx.profile, 2))
    if refused:
        ctx.result.message = f"the backend refused {len(refused)} strided call(s) (allowed by SPEC 4.11): {refused[0]}"


def _outputs(B: int, K: int, device, tree: bool, strided: bool) -> SpecOutput:
    """Outputs full of poison: contiguous, or each a view of a wider buffer (``strided_copy``'s layout)."""
    def make(*shape):
        t = torch.full(shape, INT_POISON, dtype=torch.int64, device=device)
        return strided_copy(t) if strided else t
    return SpecOutput(make(B, K + 1), make(B), make(B, K) if tree else None)


def _buffers_outside(out: SpecOutput) -> list[str]:
    """The outputs whose buffers were written outside the view."""
    written = []
    for name in ("token_ids", "num_accepted", "accepted_nodes"):
        t = getattr(out, name)
        changed = 0 if t is None else int((outside_view(t) != INT_POISON).sum())
        if changed:
            written.append(f"{name} ({changed} elements outside the view)")
    return written


def _sample_into_outputs(ctx: Context, declared: list) -> None:
    backend = ctx.backend
    if not getattr(backend.capabilities, "cuda_graphs", False):
        raise NotApplicable("backend declares no graph-capturable entry (cuda_graphs): sample_into is not called")
    methods = ["standard"] + (["tree"] if "tree" in backend.capabilities.methods else [])
    device = ctx.profile.device
    for i in range(max(2, ctx.profile.examples // 10)):
        g = torch.Generator().manual_seed(4_000 + i)
        batch = random_batch(g, num_requests=6, vocab_size=min(ctx.profile.max_vocab, 50),
                             drafter="dense" if ctx.profile.dense_drafts else "none").to(device)
        B, K = batch.num_requests, batch.max_draft
        noise = Noise.draw(batch, g).to(device)
        seeds = philox.request_seeds(1_000 * i, B).to(device)
        for method in methods:
            given = batch if method == "standard" else chains_as_trees(batch)
            for path in declared:
                kwargs = dict(method=method, **({"seed_tensor": seeds} if path == "seeded" else {"noise": noise}))
                plain, viewed = (_outputs(B, K, device, method == "tree", strided) for strided in (False, True))
                backend.sample_into(plain, given, **kwargs)
                backend.sample_into(viewed, given, **kwargs)
                where = f"sample_into, {path} noise, {method}, call {i}"
                # the contiguous call must itself write well-formed outputs: an entry that writes nothing would
                # leave both calls' poison equal
                problems = output_problems(given, plain, given.device)
                if problems:
                    raise CheckFailure(f"{where}: contiguous outputs: {'; '.join(problems[:3])}")
                outside = _buffers_outside(viewed)
                if outside:
                    raise CheckFailure(f"{where}: outputs given as views were written outside them: "
                                       f"{', '.join(outside)}")
                for name in ("token_ids", "num_accepted", "accepted_nodes"):
                    a, b = getattr(plain, name), getattr(viewed, name)
                    if a is not None and not torch.equal(a.cpu(), b.cpu()):
                        raise CheckFailure(f"{where}: {name} written into a view differs from the contiguous "
                                           f"call's: {b.cpu().tolist()} vs {a.cpu().tolist()}")
                ctx.result.samples += B

