"""SPEC 4.11: inputs handed over as views that are not contiguous, on every declared noise path and rule.

Each example is called twice on each noise path the backend declares (its seeds, its injected noise): once as
the caller laid it out and once under ``integrity.strided_inputs``, which hands every tensor over as a view into
a poisoned buffer (1-D: every other element; 2-D: the middle columns of a wider buffer, as vocabulary-padded
logits). The two outputs must be equal; where they differ, both calls are made again, so that a backend whose
outputs vary from call to call is named not deterministic rather than blamed on the layout. A ``ValueError`` or
``UnsupportedError`` naming the tensor is a refusal, counted; a failure leaves a pair reproducer (conditions
"plain" and "strided").
"""

from __future__ import annotations

from reference.batch import FIELDS
from specverify.backends import UnsupportedError
from specverify.checks.common import call_example, paths, run_property
from specverify.checks.integrity import strided_inputs
from specverify.checks.runner import CheckFailure, Context, Needs, NotApplicable
from specverify.checks.structural import declared_methods, method_for, share_of_examples, outputs_equal
from specverify.strategies import spec_examples

STRIDED_CASES = ("views",)
STRIDED_NEEDS = Needs(noise="any")
NAMES = FIELDS + ("uniform", "exponential", "seed")     # a refusal names one of these


def check_strided_inputs(ctx: Context, case: str) -> None:
    caps = ctx.backend.capabilities
    declared = paths(ctx)
    if not declared:
        raise NotApplicable("backend declares neither injected noise nor seeds: its calls cannot be repeated")
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
