"""Shared pieces of the checks: running a property over Hypothesis examples, moving inputs to the
profile's device, validating an output's structure, and timing a check into a CheckResult."""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch
from hypothesis import given

from reference import Noise, SpecBatch, SpecOutput
from specverify.checks.result import FAIL, NOT_APPLICABLE, PASS, CheckResult
from specverify.strategies import Profile, hypothesis_settings


class CheckFailure(AssertionError):
    """A property does not hold; the message says where and why."""


def on_device(batch: SpecBatch, noise: Noise | None, device: str):
    moved = batch.to(device)
    if noise is None:
        return moved, None
    return moved, Noise(noise.uniform.to(device), noise.exponential.to(device))


def run_examples(strategy, profile: Profile, body, examples: int | None = None,
                 shrink: bool = True) -> tuple[str | None, str | None]:
    """Run ``body`` on Hypothesis examples; returns (failure message, shrunk counterexample) or (None, None)."""

    @hypothesis_settings(profile, examples, shrink)
    @given(strategy)
    def prop(example):
        body(example)

    try:
        prop()
    except Exception as exc:  # noqa: BLE001 - any exception from the backend is a finding
        notes = [n for n in getattr(exc, "__notes__", []) if "Example(" in n or "Falsifying" in n]
        kind = "" if isinstance(exc, CheckFailure) else f"{type(exc).__name__}: "
        return f"{kind}{exc}", " ".join(notes) or None
    return None, None


def structure_problems(batch: SpecBatch, out: SpecOutput) -> list[str]:
    """SPEC 4.3 structure: shapes, dtypes, -1 after the emitted tokens, num_accepted consistent with the
    tokens (accepted drafts equal the drafts), every emitted id in [0, V)."""
    B, V = batch.num_requests, batch.vocab_size
    problems = []
    if not isinstance(out, SpecOutput):
        return [f"backend returned {type(out).__name__}, expected SpecOutput"]
    ids, n = out.token_ids, out.num_accepted
    if ids.dtype != torch.int64 or n.dtype != torch.int64:
        problems.append(f"dtypes token_ids={ids.dtype}, num_accepted={n.dtype}; expected int64")
    if ids.dim() != 2 or ids.shape[0] != B or ids.shape[1] < batch.max_draft + 1:
        return problems + [f"token_ids shape {tuple(ids.shape)}, expected [B, K + 1] = [{B}, >= {batch.max_draft + 1}]"]
    if tuple(n.shape) != (B,):
        return problems + [f"num_accepted shape {tuple(n.shape)}, expected [{B}]"]
    ids, n = ids.cpu(), n.cpu()
    k = batch.num_draft_tokens.cpu()
    drafts = batch.draft_token_ids.cpu().tolist()
    off = batch.draft_offsets().cpu().tolist()
    for b in range(B):
        a = int(n[b])
        if not 0 <= a <= int(k[b]):
            problems.append(f"request {b}: num_accepted {a} outside [0, {int(k[b])}]")
            continue
        row = ids[b].tolist()
        emitted, rest = row[: a + 1], row[a + 1:]
        if any(not 0 <= t < V for t in emitted):
            problems.append(f"request {b}: emitted ids {emitted} outside [0, {V})")
        if emitted[:a] != drafts[off[b]: off[b] + a]:
            problems.append(f"request {b}: accepted tokens {emitted[:a]} are not the drafts {drafts[off[b]:off[b] + a]}")
        if any(t != -1 for t in rest):
            problems.append(f"request {b}: slots after the {a + 1} emitted tokens are {rest}, expected -1")
        if len(problems) >= 5:
            break
    return problems


@contextmanager
def timed(check: str, case: str, backend, kind: str):
    """Yields a CheckResult to fill; records the time, and turns an unexpected exception into a failure.
    The exception ends the ``with`` block, so every check returns ``result`` after it too."""
    name = backend if isinstance(backend, str) else getattr(backend, "name", repr(backend))
    result = CheckResult(check=check, case=case, backend=name, kind=kind, status=PASS)
    start = time.perf_counter()
    try:
        yield result
    except CheckFailure as exc:
        result.status, result.message = FAIL, str(exc)
    except Exception as exc:  # noqa: BLE001
        result.status, result.message = FAIL, f"{type(exc).__name__}: {exc}"
    finally:
        result.seconds = time.perf_counter() - start


def not_applicable(result: CheckResult, why: str) -> CheckResult:
    result.status, result.message = NOT_APPLICABLE, why
    return result


def fail(result: CheckResult, message: str, counterexample: str | None = None) -> CheckResult:
    result.status, result.message, result.counterexample = FAIL, message, counterexample
    return result
