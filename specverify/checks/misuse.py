"""Checks of how a backend answers misuse and the calls it does not support (SPEC 4.5, 4.8, 3).

interface_parity      the full convention is accepted; what is not declared raises UnsupportedError
synthetic_validation  synthetic rate unset or outside [0, 1] is a ValueError naming it, never 0
request_alignment     cached draft probabilities re-ordered to the batch, zero-draft requests skipped;
                      a request without cached rows is a ValueError naming that request
"""

from __future__ import annotations

import inspect
import time

import torch

import reference
from reference import Noise, SpecBatch
from specverify.backends import UnsupportedError
from specverify.checks.common import on_device
from specverify.checks.result import FAIL, PASS, CheckResult
from specverify.checks.runner import CheckFailure, Context, Needs
from specverify.checks.structural import layout_batch

CONVENTION = ("method", "noise", "seed", "synthetic_acceptance_rate", "num_speculative_steps")
ANY_BACKEND = Needs(method=None, noise=None, device=False)   # interface parity asks every backend


def check_interface_parity(ctx: Context, case: str) -> None:
    """Every combination of method, noise path, device and logit dtype is either served or refused with
    UnsupportedError naming it; never a TypeError from a lagging signature (seed 003)."""
    backend = ctx.backend
    try:
        params = inspect.signature(backend.wrapped.__call__).parameters
    except (TypeError, ValueError):
        params = {}
    has_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    missing = [name for name in CONVENTION if name not in params and not has_var_kw]
    if missing:
        raise CheckFailure(f"signature lacks {missing}: calls with them raise TypeError")
    caps = backend.capabilities
    takes_coin = "coin" in params or has_var_kw
    if "coins" in caps.noise and not takes_coin:
        raise CheckFailure("declares the noise path 'coins' but its signature lacks coin: calls with it raise "
                           "TypeError")
    # fixed coins are optional: a backend whose signature has no coin is not asked for them
    noise_paths = ("injected", "seeded") + (("coins",) if takes_coin else ())
    g = torch.Generator().manual_seed(3)
    for device in sorted({ctx.profile.device, "cpu"}):
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            batch = layout_batch([2, 0, 1], 11, g, greedy=False, dense=ctx.profile.dense_drafts)
            batch = SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, batch.target_logits.to(dtype),
                              batch.draft_probs, batch.temperature)
            for method in reference.METHODS:
                synth = dict(synthetic_acceptance_rate=0.5, num_speculative_steps=2) if method == "synthetic" else {}
                for path in noise_paths:
                    declared = (method in caps.methods and path in caps.noise and device in caps.devices
                                and dtype in caps.logit_dtypes)
                    dev_batch, dev_noise = on_device(batch, Noise.draw(batch, g), device)
                    call = dict(noise=dev_noise) if path == "injected" else dict(seed=5)
                    if path == "coins":
                        call["coin"] = 0.5
                    what = f"device={device}, dtype={dtype}, method={method}, " + (
                        "fixed coins" if path == "coins" else f"{path} noise")
                    try:
                        backend(dev_batch, method=method, **call, **synth)
                    except UnsupportedError as exc:
                        if declared:
                            raise CheckFailure(f"{what}: declared supported but raised UnsupportedError: {exc}")
                        continue
                    except TypeError as exc:
                        raise CheckFailure(f"{what}: TypeError (signature lags the convention): {exc}") from None
                    except CheckFailure as exc:
                        raise CheckFailure(f"{what}: {exc}") from None
                    if not declared:
                        raise CheckFailure(f"{what}: not declared in capabilities but served "
                                           "(capabilities must say what the backend does)")
                    ctx.result.samples += 1


def check_synthetic_validation(ctx: Context, case: str) -> None:
    """An unset or out-of-range synthetic rate is a ValueError naming synthetic_acceptance_rate; it
    never defaults to 0.0, which would silently reject every draft (seed 000)."""
    g = torch.Generator().manual_seed(5)
    batch = layout_batch([2, 1], 9, g, greedy=False, dense=ctx.profile.dense_drafts)
    dev_batch, dev_noise = on_device(batch, Noise.draw(batch, g), ctx.profile.device)
    call = dict(noise=dev_noise) if "injected" in ctx.backend.capabilities.noise else dict(seed=1)
    for rate in (None, -0.1, 1.5, float("nan")):
        try:
            out = ctx.backend(dev_batch, method="synthetic", synthetic_acceptance_rate=rate, num_speculative_steps=2,
                              **call)
        except ValueError as exc:
            if "synthetic_acceptance_rate" not in str(exc):
                raise CheckFailure(f"rate={rate!r}: ValueError does not name synthetic_acceptance_rate: {exc}")
            ctx.result.samples += 1
            continue
        except CheckFailure:
            raise
        except Exception as exc:  # noqa: BLE001
            raise CheckFailure(f"rate={rate!r}: {type(exc).__name__} instead of ValueError: {exc}") from None
        raise CheckFailure(f"rate={rate!r} was accepted (num_accepted={out.num_accepted.tolist()}); "
                           "it must be a ValueError naming synthetic_acceptance_rate")


MISSING_REQUEST = "req-0x5eed-absent"   # a request id no message contains by accident


def _alignment_problem(align_fn, result: CheckResult) -> str | None:
    g = torch.Generator().manual_seed(2)
    cached = torch.rand(3, 2, 5, generator=g)
    a, b, c = cached
    scenarios = [
        (["a", "b", "c"], ["a", "b", "c"], [2, 0, 1], torch.cat([a[:2], c[:1]])),
        (["a", "b", "c"], ["c", "a", "b"], [1, 2, 0], torch.cat([c[:1], a[:2]])),
        (["a", "b", "c"], ["b", "c"], [0, 2], c[:2]),
        (["a", "b", "c"], ["a", "b", "c"], [0, 0, 0], cached.new_zeros(0, 5)),
    ]
    for cached_ids, ids, counts, want in scenarios:
        got = align_fn(cached, cached_ids, ids, torch.tensor(counts))
        if tuple(got.shape) != tuple(want.shape) or not torch.equal(got, want):
            return (f"cached {cached_ids}, batch {ids} with drafts {counts}: got rows of shape "
                    f"{tuple(got.shape)} that differ from the expected re-ordering")
        result.samples += 1
    try:
        align_fn(cached, ["a", "b", "c"], ["a", MISSING_REQUEST], torch.tensor([1, 1]))
    except ValueError as exc:
        if MISSING_REQUEST not in str(exc):
            return f"a request without cached rows raised ValueError without naming it ({MISSING_REQUEST!r}): {exc}"
        return None
    except Exception as exc:  # noqa: BLE001
        return f"a request without cached rows raised {type(exc).__name__} instead of ValueError: {exc}"
    return "a request with drafts but no cached probabilities was silently filled"


def check_request_alignment(align_fn, case: str = "cached", *, name: str = "align") -> CheckResult:
    """SPEC 4.8 with ``align_fn(cached_probs, cached_ids, request_ids, num_draft_tokens) -> [T, V]``."""
    result = CheckResult(check="request_alignment", case=case, backend=getattr(align_fn, "name", name),
                         kind="structural", status=PASS)
    start = time.perf_counter()
    try:
        problem = _alignment_problem(align_fn, result)
    except Exception as exc:  # noqa: BLE001
        problem = f"{type(exc).__name__}: {exc}"
    if problem:
        result.status, result.message = FAIL, problem
    result.seconds = time.perf_counter() - start
    return result


__all__ = ["ANY_BACKEND", "CONVENTION", "check_interface_parity", "check_request_alignment",
           "check_synthetic_validation"]
