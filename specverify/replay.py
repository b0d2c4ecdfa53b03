"""``specverify replay FILE BACKEND``: re-run a reproducer against a backend and show the difference.

A "call" reproducer is replayed as one guarded call on the path it was recorded on (injected noise,
or per-request seeds; a seeded call on the reference's Philox stream may be replayed as injected
noise by a backend without a seeded path). Each request's expected and actual tokens are printed,
with the decision margin where they differ. A "pair" reproducer (a failure no single call shows: the
same call gave two outputs, under two poison fills or twice) makes that call again under each
recorded condition and compares the outputs. A "check" reproducer re-runs its check on its case in
a worker process, as ``specverify check`` does. An engine reproducer (SPEC 8, JSON) re-runs its engine
check on its case and profile (``engine_cli.replay_engine``). Exit status: 1 while the backend still fails, 0
when it agrees, 2 when the reproducer cannot be replayed on that backend (with the reason).
"""

from __future__ import annotations

import sys
from dataclasses import replace

import torch

from reference import Noise
from specverify.backends import HARNESS_AMBIGUITY_MARGIN
from specverify.checks.repro import Call, judge, load
from specverify.checks.result import FAIL
from specverify.checks.runner import CheckFailure, GuardedBackend
from specverify.checks.structural import PAIR_CONDITIONS, outputs_equal
from specverify.pool import BackendLoadError, CheckPool
from specverify.registry import get_backend
from specverify.strategies import get_profile


def _device(requested: str | None, recorded: str) -> str:
    if requested:
        return requested
    return recorded if recorded == "cpu" or torch.cuda.is_available() else "cpu"


def _path_for(call: Call, caps, device: str) -> tuple[Call | None, str]:
    """The call as this backend can take it, and how; None with the reason when it cannot."""
    if torch.device(device).type not in caps.devices:
        return None, f"the backend does not run on {device} (it declares {sorted(caps.devices)}; see --device)"
    method = call.kwargs.get("method", "standard")
    if method not in caps.methods:
        return None, f"the backend does not declare method {method!r}"
    if call.noise is not None:
        if "injected" in caps.noise:
            return call, "injected noise"
        return None, "the reproducer's call uses injected noise; the backend does not declare injected noise"
    if "seeded" in caps.noise:
        return call, f"per-request seeds ({caps.seeded_stream} stream)"
    if "injected" in caps.noise:
        noise = Noise.from_seeds(call.seeds, call.batch.num_draft_tokens, call.batch.vocab_size)
        return Call(call.batch, noise, None, call.kwargs), "injected noise: the Philox stream of the recorded seeds"
    return None, "the backend declares no noise path"


def replay_file(path: str, spec: str, device: str | None = None) -> int:
    from specverify.engine_cli import read_engine_reproducer, replay_engine  # noqa: PLC0415 - engines: SPEC 8
    engine_repro = read_engine_reproducer(path)
    if engine_repro is not None:
        return replay_engine(path, engine_repro, spec)
    try:
        repro = load(path)
    except OSError as exc:
        print(f"specverify: error: cannot read reproducer {path!r}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"specverify: error: cannot read reproducer {path!r}: {exc}", file=sys.stderr)
        return 2
    print(f"reproducer: {repro.check}[{repro.case}], recorded on backend {repro.backend!r} "
          f"(profile {repro.profile}, device {repro.device})\nrecorded failure: {repro.message}")
    device = _device(device, repro.device)
    if repro.kind == "check":
        return _replay_check(repro, spec, device)
    backend = get_backend(spec)
    caps = backend.capabilities
    call, how = _path_for(repro.call, caps, device)
    if call is None:
        print(f"cannot replay on {spec!r}: {how}", file=sys.stderr)
        return 2
    if repro.kind == "pair":
        return _replay_pair(repro, backend, call, how, device)
    B = call.batch.num_requests
    print(f"replaying {B} request(s) (of {repro.full_requests} in the failing call) on {backend.name!r}, "
          f"device {device}, {how}, {call.kwargs}")
    tol = min(HARNESS_AMBIGUITY_MARGIN, getattr(caps, "ambiguity_margin", HARNESS_AMBIGUITY_MARGIN))
    outcome = judge(GuardedBackend(backend), call, device, caps.seeded_stream, tol, (CheckFailure,))
    for line in outcome.lines:
        print(f"  {line}")
    if outcome.got_error:
        print(f"  the backend raised: {outcome.got_error}")
    if outcome.expected_error:
        print(f"  the reference raises: {outcome.expected_error}")
    if outcome.expected is None and outcome.expected_error is None:
        print("  no shared noise (the backend's seeded stream is its own): only the output structure is checked")
    if outcome.category is not None:
        print(f"STILL FAILS ({outcome.category}): {outcome.message}")
        return 1
    print(f"no failure: {backend.name!r} agrees with the reference on this call")
    return 0


def _replay_pair(repro, backend, call: Call, how: str, device: str) -> int:
    """The recorded call, made once under each recorded condition (poison fills, or none): the outputs
    must be equal. Exit 1 when they still differ."""
    outs = []
    print(f"replaying the recorded call ({call.batch.num_requests} request(s)) on {backend.name!r}, device {device}, "
          f"{how}, once under each of {repro.conditions}")
    guarded = GuardedBackend(backend)
    dev_call = call.to(device)
    for condition in repro.conditions:
        with PAIR_CONDITIONS[condition]():
            out = guarded(dev_call.batch, noise=dev_call.noise, seed=dev_call.seeds, **dev_call.kwargs)
        outs.append(out)
        print(f"  under {condition}: {out.emitted()}")
    if not outputs_equal(outs[0], outs[1]):
        print("STILL FAILS: the same call gave different outputs")
        return 1
    print(f"no failure: {backend.name!r} gave the same outputs under {repro.conditions}")
    return 0


def _replay_check(repro, spec: str, device: str) -> int:
    profile = replace(get_profile(repro.profile), device=device)
    print(f"no single call shows this failure: re-running {repro.check}[{repro.case}] (profile {profile.name}) "
          f"on {spec!r}")
    pool = CheckPool(spec, profile, workers=1, timeout=profile.check_timeout)
    try:
        pool.load()
        result = pool.run([(repro.check, repro.case)])[0]
    except BackendLoadError as exc:
        print(f"specverify: error: {exc}", file=sys.stderr)
        return 2
    finally:
        pool.close()
    print(result.line())
    if result.status == FAIL:
        print("STILL FAILS")
        return 1
    print(f"no failure: {result.status}")
    return 0


__all__ = ["replay_file"]
