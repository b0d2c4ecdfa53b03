"""Pieces the checks share: running a property over Hypothesis examples, moving inputs to the
profile's device, and calling a backend with the noise an example carries."""

from __future__ import annotations

from hypothesis import given
from hypothesis.internal.conjecture import engine as _hypothesis_engine
from hypothesis.internal.conjecture import providers as _hypothesis_providers
from hypothesis.reporting import default as default_reporter
from hypothesis.reporting import with_reporter

from reference import Noise, SpecBatch
from specverify.checks.runner import CheckFailure, Context
from specverify.strategies import Example, Profile, hypothesis_settings


# Hypothesis shrinks a failing example for up to 300 s by default; a failing check should cost little
# more than a passing one (the reproducer's request-level reduction then makes the batch minimal), so
# shrinking stops after SHRINK_SECONDS and reports the smallest example found so far. A private knob
# of Hypothesis's engine: where it is missing, Hypothesis's own budget applies.
SHRINK_SECONDS = 6
if hasattr(_hypothesis_engine, "MAX_SHRINKING_SECONDS"):
    _hypothesis_engine.MAX_SHRINKING_SECONDS = SHRINK_SECONDS

# Hypothesis mixes into its draws the constants written in every local module the process has imported so far
# (numbers in specverify's and reference's sources, for one), so a derandomized check would draw other examples
# after other imports: in a pytest-xdist worker, after whichever tests ran there first. With none, a check's
# examples depend on its strategy alone, as SPEC 5 asks. A private function of Hypothesis's provider: where it
# is missing, the draws are Hypothesis's own.
if hasattr(_hypothesis_providers, "_get_local_constants") and hasattr(_hypothesis_providers, "Constants"):
    _NO_LOCAL_CONSTANTS = _hypothesis_providers.Constants()
    _hypothesis_providers._get_local_constants = lambda: _NO_LOCAL_CONSTANTS


def _report_without_shrink_warning(message) -> None:
    """Hypothesis's reports, less its warning that shrinking stopped: here that is the budget above,
    not five minutes of slow progress."""
    if not str(message).startswith("WARNING: Hypothesis has spent more than"):
        default_reporter(message)


def on_device(batch: SpecBatch, noise: Noise | None, device: str):
    return batch.to(device), None if noise is None else noise.to(device)


def describe_drawn(drawn) -> str:
    """A drawn value in one line: an Example by its description (sizes, styles, and the seed of the
    torch.Generator its tensor contents come from), call keywords as a dict."""
    if isinstance(drawn, tuple):
        return " with ".join(describe_drawn(d) for d in drawn)
    return drawn.description if isinstance(drawn, Example) else repr(drawn)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _finding(exc: BaseException, with_example: bool = True) -> str:
    kind = "" if isinstance(exc, CheckFailure) else f"{type(exc).__name__}: "
    drawn = getattr(exc, "specverify_drawn", None) if with_example else None
    return f"{kind}{exc}" + (f" [Hypothesis example {describe_drawn(drawn)}]" if drawn is not None else "")


def run_examples(strategy, profile: Profile, body, examples: int | None = None,
                 shrink: bool = True) -> tuple[str | None, str | None]:
    """Run ``body`` on Hypothesis examples; returns (failure message, the failing example described)
    or (None, None). Every distinct failure Hypothesis finds is reported, one line each with its own
    example; Hypothesis replays the failing examples last, so the last one drawn is the last failure's."""
    last = []

    @hypothesis_settings(profile, examples, shrink)
    @given(strategy)
    def prop(drawn):
        last[:] = [drawn]
        try:
            body(drawn)
        except Exception as exc:
            exc.specverify_drawn = drawn
            raise

    try:
        with with_reporter(_report_without_shrink_warning):
            prop()
    except Exception as exc:  # noqa: BLE001 - any exception from the backend is a finding
        found = _leaves(exc)
        where = f"Hypothesis example {describe_drawn(last[0])}" if last else None
        if len(found) == 1:
            return _finding(found[0], with_example=False), where
        lines = [f"{len(found)} distinct failures:"] + [f"  {i + 1}. {_finding(e)}" for i, e in enumerate(found)]
        return "\n".join(lines), where
    return None, None


def run_property(ctx: Context, strategy, body, **kwargs) -> None:
    """Runs ``body(example)`` over generated examples; fails the check with the shrunk counterexample."""
    message, counterexample = run_examples(strategy, ctx.profile, body, **kwargs)
    if message:
        ctx.fail(message, counterexample)


def call_example(ctx: Context, example, *, seeded: bool, **kwargs):
    """Call the backend on ``example`` with its seeds (``seeded``) or its injected noise, on the profile's
    device. Returns the output and the noise the reference must use to reproduce it (None for a
    seeded call on a stream of the backend's own)."""
    caps = ctx.backend.capabilities
    if seeded:
        batch, _ = on_device(example.batch, None, ctx.profile.device)
        out = ctx.backend(batch, seed=example.seeds.clone(), **kwargs)
        shared = None
        if caps.seeded_stream == "philox":
            shared = Noise.from_seeds(example.seeds, example.batch.num_draft_tokens, example.batch.vocab_size)
        return out, shared
    batch, noise = on_device(example.batch, example.noise, ctx.profile.device)
    return ctx.backend(batch, noise=noise, **kwargs), example.noise


def paths(ctx: Context, prefer_seeded: bool = True) -> list[str]:
    """The backend's declared noise paths, the preferred one first."""
    order = ("seeded", "injected") if prefer_seeded else ("injected", "seeded")
    return [p for p in order if p in ctx.backend.capabilities.noise]
