"""Reproducers: a failing backend call, reduced to its smallest failing sub-batch, saved to a file,
printed as Python that rebuilds it exactly, and replayed against any backend.

A reproducer of kind "call" holds one call (batch, injected noise or per-request seeds, method and
synthetic settings) with the reference's answer and the backend's. Replaying it calls a backend the
same way and compares under the same noise. A failure that no single call shows (a statistical
test, two calls that should agree) gives a reproducer of kind "check": the check, its case and the
profile, which the harness regenerates deterministically.

File layout (``torch.save`` of plain tensors, strings and numbers; ``torch.load(weights_only=True)``
reads it):

    format      "specverify-reproducer/1"
    kind        "call" or "check"
    check, case, backend, profile, device, message, origin (the full case: its description or seed)
    batch       {num_draft_tokens, draft_token_ids, target_logits, draft_probs, temperature, top_k, top_p,
                 min_p, tree_parents, allow_nonfinite} on the CPU
    noise       {uniform [T], exponential [B, V]} or None      (kind "call")
    seeds       [B] int64 or None                               (kind "call")
    kwargs      {method, synthetic_acceptance_rate, num_speculative_steps, and coin for a fixed-coin call}
    requests    the kept requests' indices in the failing batch, and full_requests its size
    expected, got   {token_ids, num_accepted, accepted_nodes (trees; None otherwise)} or None;
                expected_error, got_error strings or None
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

import reference
from reference import Noise, SpecBatch, SpecOutput, select_requests
from reference.batch import FIELDS
from specverify.checks.differential import compare_to_reference

FORMAT = "specverify-reproducer/1"
BATCH_FIELDS = FIELDS
REDUCTION_CALLS = 48          # backend calls one reduction may spend
DECIMAL_ELEMENTS = 256        # tensors up to this size print as decimal lists, larger ones as bytes


@dataclass
class Call:
    """One backend call: the caller's batch, its injected noise or per-request seeds, and keywords."""

    batch: SpecBatch
    noise: Noise | None
    seeds: torch.Tensor | None
    kwargs: dict

    def cpu(self) -> "Call":
        return Call(self.batch.to("cpu"), None if self.noise is None else self.noise.to("cpu"),
                    None if self.seeds is None else self.seeds.cpu(), dict(self.kwargs))

    def to(self, device) -> "Call":
        return Call(self.batch.to(device), None if self.noise is None else self.noise.to(device),
                    None if self.seeds is None else self.seeds.to(device), dict(self.kwargs))

    def select(self, requests: list[int]) -> "Call":
        idx = torch.tensor(requests, dtype=torch.int64)
        return Call(select_requests(self.batch, idx), None if self.noise is None else self.noise.select(self.batch, idx),
                    None if self.seeds is None else self.seeds[idx], dict(self.kwargs))

    @property
    def path(self) -> str:
        return "injected" if self.noise is not None else "seeded"


@dataclass
class Outcome:
    """How a backend's call compares with the reference's: ``category`` None when they agree."""

    category: str | None
    message: str = ""
    requests: list = field(default_factory=list)     # requests that diverge, when known
    expected: SpecOutput | None = None
    got: SpecOutput | None = None
    expected_error: str | None = None
    got_error: str | None = None
    lines: list = field(default_factory=list)        # per-request comparison, for replay


def shared_noise(call: Call, seeded_stream: str) -> Noise | None:
    """The noise the reference uses to reproduce the call: the injected noise, or the Philox stream of
    the seeds when the backend's stream is the reference's; None when no noise can be shared (its own
    stream, or its own coins fixed: ``coin=``)."""
    if call.noise is not None:
        return call.noise
    if seeded_stream == "philox" and call.seeds is not None and call.kwargs.get("coin") is None:
        return Noise.from_seeds(call.seeds, call.batch.num_draft_tokens, call.batch.vocab_size)
    return None


def judge(backend, call: Call, device: str, seeded_stream: str, tol: float, failure_types: tuple) -> Outcome:
    """Call ``backend`` (the guarded backend) as ``call`` says, on ``device``, and compare with the
    reference. ``failure_types`` are the exception types that are findings of the guard itself."""
    shared = shared_noise(call, seeded_stream)
    outcome = Outcome(None)
    try:
        outcome.expected = reference.sample(call.batch, noise=shared, **call.kwargs) if shared is not None else None
    except ValueError as exc:
        outcome.expected_error = f"ValueError: {exc}"
    try:
        dev_noise = None if call.noise is None else call.noise.to(device)
        outcome.got = backend(call.batch.to(device), noise=dev_noise, seed=call.seeds, **call.kwargs)
    except failure_types as exc:
        outcome.category, outcome.message, outcome.got_error = "guard", str(exc), str(exc)
        return outcome
    except Exception as exc:  # noqa: BLE001 - whatever the backend raises is compared with the reference
        outcome.got_error = f"{type(exc).__name__}: {exc}"
        if outcome.expected_error is None or not isinstance(exc, ValueError):
            outcome.category, outcome.message = f"raises {type(exc).__name__}", outcome.got_error
        return outcome
    if outcome.expected_error is not None:
        outcome.category = "no error"
        outcome.message = f"the reference raises {outcome.expected_error}; the backend returned"
        return outcome
    if outcome.expected is None:
        return outcome
    cmp = compare_to_reference(call.batch, outcome.got.padded(outcome.expected.token_ids.shape[1]), shared,
                               tol=tol, expected=outcome.expected, **call.kwargs)
    by_request = {d.request: d for d in cmp.divergences}
    for b, row in enumerate(outcome.expected.emitted()):
        d = by_request.get(b)
        outcome.lines.append(f"request {b}: agrees, emitted {row}" if d is None else str(d))
    if cmp.real:
        outcome.category, outcome.message = "divergence", str(cmp.real[0])
        outcome.requests = [d.request for d in cmp.real]
    return outcome


def reduce(fails, size: int, hints: list[int]) -> list[int]:
    """The smallest failing set of requests found within REDUCTION_CALLS calls of ``fails(requests)``:
    single hinted requests first (a per-request property fails on one request), then removal of
    ever smaller chunks of the rest (delta debugging)."""
    calls = 0
    for b in hints[:3]:
        calls += 1
        if fails([b]):
            return [b]
    current = list(range(size))
    chunk = len(current) // 2
    while chunk >= 1 and calls < REDUCTION_CALLS:
        i, removed = 0, False
        while i < len(current) and calls < REDUCTION_CALLS:
            trial = current[:i] + current[i + chunk:]
            calls += 1
            if trial and fails(trial):
                current, removed = trial, True
            else:
                i += chunk
        if not removed:
            chunk //= 2
    return current


@dataclass
class Reproducer:
    kind: str                    # "call", "pair" (one call under two conditions) or "check"
    check: str
    case: str
    backend: str
    profile: str
    device: str
    message: str
    origin: str = ""
    call: Call | None = None
    requests: list = field(default_factory=list)
    full_requests: int = 0
    outcome: Outcome | None = None
    conditions: list = field(default_factory=list)   # kind "pair": PAIR_CONDITIONS names, one per run

    @classmethod
    def of_check(cls, result, profile) -> "Reproducer":
        """The "check" reproducer of a failed CheckResult: replay re-runs the check on its case."""
        return cls("check", result.check, result.case, result.backend, profile.name, profile.device,
                   result.message, origin=result.counterexample or "")

    def to_dict(self) -> dict:
        d = {"format": FORMAT, "kind": self.kind, "check": self.check, "case": self.case, "backend": self.backend,
             "profile": self.profile, "device": self.device, "message": self.message, "origin": self.origin,
             "requests": list(self.requests), "full_requests": self.full_requests,
             "conditions": list(self.conditions)}
        if self.call is not None:
            c = self.call
            d["batch"] = {f: getattr(c.batch, f) for f in BATCH_FIELDS}
            d["batch"]["allow_nonfinite"] = c.batch.allow_nonfinite
            d["noise"] = None if c.noise is None else {"uniform": c.noise.uniform, "exponential": c.noise.exponential}
            d["seeds"] = c.seeds
            d["kwargs"] = dict(c.kwargs)
        if self.outcome is not None:
            o = self.outcome
            for name in ("expected", "got"):
                out = getattr(o, name)
                d[name] = None if out is None else {"token_ids": out.token_ids.cpu(), "num_accepted": out.num_accepted.cpu(),
                                                    "accepted_nodes": _cpu(out.accepted_nodes)}
            d["expected_error"], d["got_error"] = o.expected_error, o.got_error
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Reproducer":
        if d.get("format") != FORMAT:
            raise ValueError(f"not a specverify reproducer (format {d.get('format')!r}, expected {FORMAT!r})")
        call = None
        if d["kind"] in ("call", "pair"):
            noise = d["noise"]
            call = Call(SpecBatch(**d["batch"]), None if noise is None else Noise(noise["uniform"], noise["exponential"]),
                        d["seeds"], dict(d["kwargs"]))
        outcome = None
        if "expected" in d:
            def out(v):
                return None if v is None else SpecOutput(v["token_ids"], v["num_accepted"], v.get("accepted_nodes"))
            outcome = Outcome("recorded", expected=out(d["expected"]), got=out(d["got"]),
                              expected_error=d["expected_error"], got_error=d["got_error"])
        return cls(d["kind"], d["check"], d["case"], d["backend"], d["profile"], d["device"], d["message"],
                   d["origin"], call, list(d["requests"]), int(d["full_requests"]), outcome,
                   list(d.get("conditions", ())))

    def stem(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self.backend}-{self.check}-{self.case}")

    def save(self, directory) -> Path:
        """Writes STEM.pt and its sidecar STEM.txt under ``directory``; returns the .pt path."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.stem()}.pt"
        torch.save(self.to_dict(), path)
        path.with_suffix(".txt").write_text(self.describe(str(path)))
        return path

    def describe(self, path: str = "FILE") -> str:
        """The sidecar: what the reproducer is, how to replay it, and the Python that rebuilds it."""
        lines = [f"specverify reproducer: {self.check}[{self.case}] failed on backend {self.backend!r} "
                 f"(profile {self.profile}, device {self.device})", f"failure: {self.message}"]
        if self.origin:
            lines.append(f"full case: {self.origin}")
        if self.kind == "pair":
            lines.append(f"the same call made under each of {self.conditions}: replay makes it so again and "
                         "compares the outputs")
        elif self.kind == "call":
            lines.append(f"reduced to {len(self.requests)} of {self.full_requests} request(s) of the failing call "
                         f"(their indices there: {self.requests[:20]}{' ...' if len(self.requests) > 20 else ''})")
        else:
            lines.append("no single call shows this failure: replay re-runs the check on this case")
        lines += ["", "replay against the backend, then against the correct CPU backend and the reference:",
                  f"    specverify replay {path} BACKEND", f"    specverify replay {path} cpu",
                  f"    specverify replay {path} reference"]
        if self.call is not None:
            lines += ["", "the call, as Python:", "", python_source(self.call, self.outcome)]
        return "\n".join(lines) + "\n"


def reproduce(result, profile, backend, tolerance: float, errors: tuple) -> Reproducer:
    """The failure as a reproducer: the failing call (the one a guard or a comparison flagged, else the
    latest) reduced to its smallest sub-batch that fails the same way; where no single call fails on
    its own, the call the check made under two conditions that gave two outputs (``backend.failed_pair``:
    kind "pair"), else a "check" reproducer. ``backend`` is the check's GuardedBackend."""
    found = Reproducer.of_check(result, profile)
    call = backend.failed_call or backend.last_call
    if call is None:
        return found

    def run(c: Call):
        return judge(backend, c, profile.device, backend.capabilities.seeded_stream, tolerance, errors)

    try:
        call = call.cpu()
        full = run(call)
        if full.category is None:
            pair = getattr(backend, "failed_pair", None)
            if pair:
                size = call.batch.num_requests
                found.kind, found.call, found.conditions = "pair", call, list(pair)
                found.requests, found.full_requests = list(range(size)), size
            return found
        size = call.batch.num_requests
        keep = reduce(lambda requests: run(call.select(requests)).category == full.category, size, full.requests)
        outcome = run(call.select(keep)) if len(keep) < size else full
        if outcome.category != full.category:
            keep, outcome = list(range(size)), full
        reduced = call.select(keep) if len(keep) < size else call
    except Exception as exc:  # noqa: BLE001 - a failure to reduce never hides the failure itself
        found.message += f" (no single-call reproducer: {type(exc).__name__}: {exc})"
        return found
    found.kind, found.call, found.requests, found.full_requests, found.outcome = "call", reduced, keep, size, outcome
    return found


def load(path) -> Reproducer:
    """The reproducer saved at ``path`` (``Reproducer.save``); OSError where the file cannot be opened, ValueError
    saying why where it holds no reproducer."""
    try:
        saved = torch.load(path, weights_only=True)
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - torch.load raises many kinds for a file that is not its format
        raise ValueError(f"not a reproducer saved by specverify (torch.load: {type(exc).__name__})") from None
    if not isinstance(saved, dict):
        raise ValueError(f"not a specverify reproducer (it holds a {type(saved).__name__})")
    try:
        return Reproducer.from_dict(saved)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"a specverify reproducer that lacks or mistypes its field {exc}") from None


def write_reproducer(result, directory, profile=None, spec: str | None = None) -> str | None:
    """Saves the reproducer of a failed CheckResult under ``directory`` and records its path in
    ``result.reproducer`` and the command replaying it on ``spec`` (the backend as the user named it)
    in ``result.replay``: the reproducer the runner attached (``result.repro``, dropped from memory
    once written), else, given the ``profile``, a "check" reproducer (a check that hung or crashed)."""
    repro = result.__dict__.pop("repro", None)
    if result.status != "fail" or result.reproducer:
        return result.reproducer
    if repro is None and profile is not None:
        repro = Reproducer.of_check(result, profile)
    if repro is None:
        return None
    result.reproducer = str(repro.save(directory))
    result.replay = f"specverify replay {result.reproducer} {spec or result.backend}"
    return result.reproducer


def _cpu(t):
    return None if t is None else t.cpu()


def _shown(out: SpecOutput) -> str:
    """The emitted tokens, and for a tree call each request's accepted path (local node indices)."""
    if not isinstance(out.accepted_nodes, torch.Tensor):
        return str(out.emitted())
    paths = [row[:a] for row, a in zip(out.accepted_nodes.cpu().tolist(), out.num_accepted.cpu().tolist())]
    return f"{out.emitted()} along the paths {paths}"


# ---- printing that round-trips ---------------------------------------------------------------------
def _number(x) -> str:
    if isinstance(x, float) and not math.isfinite(x):
        return f"float('{x}')"
    return repr(x)


def tensor_source(t: torch.Tensor) -> str:
    """A Python expression that rebuilds ``t`` bit for bit (on the CPU): decimal values for small
    tensors (every float32 / bfloat16 / float16 value is exact in float64 and repr round-trips), raw
    bytes for large ones; empty tensors keep their shape."""
    t = t.detach().cpu().contiguous()
    dtype = str(t.dtype)
    shape = repr(tuple(t.shape))
    if t.numel() == 0:
        return f"torch.empty({shape}, dtype={dtype})"
    if t.numel() > DECIMAL_ELEMENTS:
        data = t.view(torch.uint8).numpy().tobytes().hex()
        return f"torch.frombuffer(bytearray.fromhex('{data}'), dtype={dtype}).reshape({shape}).clone()"
    if t.is_floating_point():
        values = ", ".join(_number(float(v)) for v in t.double().flatten().tolist())
        return f"torch.tensor([{values}], dtype=torch.float64).to({dtype}).reshape({shape})"
    values = ", ".join(str(int(v)) for v in t.flatten().tolist())
    return f"torch.tensor([{values}], dtype={dtype}).reshape({shape})"


def python_source(call: Call, outcome: Outcome | None = None) -> str:
    """Python that rebuilds the call exactly: ``batch``, ``noise`` or ``seed``, and ``kwargs``."""
    b = call.batch
    fields = ",\n".join(f"    {f}={'None' if getattr(b, f) is None else tensor_source(getattr(b, f))}"
                        for f in BATCH_FIELDS)
    if b.allow_nonfinite:
        fields += ",\n    allow_nonfinite=True"
    lines = ["import torch", "from reference import Noise, SpecBatch", "", f"batch = SpecBatch(\n{fields},\n)"]
    if call.noise is not None:
        lines.append(f"noise = Noise(\n    uniform={tensor_source(call.noise.uniform)},\n"
                     f"    exponential={tensor_source(call.noise.exponential)},\n)")
        lines.append("seed = None")
    else:
        seed = "None  # an int seed or none: not recorded" if call.seeds is None else tensor_source(call.seeds)
        lines += ["noise = None", f"seed = {seed}"]
    lines.append(f"kwargs = {call.kwargs!r}")
    if outcome is not None:
        expected = outcome.expected_error or (_shown(outcome.expected) if outcome.expected is not None else "?")
        got = outcome.got_error or (_shown(outcome.got) if outcome.got is not None else "?")
        lines.append(f"# backend(batch, noise=noise, seed=seed, **kwargs): the reference gives {expected}; "
                     f"the backend gave {got}")
    return "\n".join(lines)


__all__ = ["Call", "Outcome", "Reproducer", "judge", "load", "python_source", "reduce", "reproduce", "shared_noise",
           "tensor_source", "write_reproducer"]
