"""Structural checks (SPEC 4.3-4.5, 4.8): properties that hold for every input, checked exactly.

output_structure      -1 after the emitted tokens, num_accepted consistent, ids in [0, V) and in the
                      support of the distribution they were drawn from
uninitialized_memory  outputs do not depend on memory the backend never wrote: one run with torch's
                      deterministic fill of uninitialised memory (NaN / max int), one with a different
                      poison (plausible values), both equal to each other and to the reference
batch_invariance      a request's output does not change when others are added, removed, reordered
determinism           same seed (or noise) twice gives the same output
zero_draft_layouts    zero-draft requests first / middle / last, all-zero batch, empty batch
repeated_calls        a second call with new draft probabilities of the same shapes sees them (stale state)
interface_parity      the full convention is accepted; what is not declared raises UnsupportedError
synthetic_validation  synthetic rate unset or outside [0, 1] is a ValueError naming it, never 0
request_alignment     cached draft probabilities re-ordered to the batch, zero-draft requests skipped
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager

import torch
import reference
from reference import Noise, SpecBatch, leviathan, select_requests
from reference.sample import target_probs
from specverify.backends import UnsupportedError
from specverify.checks.common import CheckFailure, fail, not_applicable, on_device, run_examples, \
    structure_problems, timed
from specverify.checks.differential import compare_to_reference
from specverify.strategies import Profile, spec_examples

CONVENTION = ("method", "noise", "seed", "synthetic_acceptance_rate", "num_speculative_steps")


# ---- helpers -----------------------------------------------------------------------------------
def support_problems(batch: SpecBatch, out, method: str = "standard") -> list[str]:
    """The extra token must have positive probability under the distribution it was drawn from."""
    cpu = batch.to("cpu")
    ids, n = out.token_ids.cpu(), out.num_accepted.cpu()
    d_off, l_off = cpu.draft_offsets().tolist(), cpu.logit_offsets().tolist()
    problems = []
    for b in range(cpu.num_requests):
        m, k = int(n[b]), int(cpu.num_draft_tokens[b])
        y = int(ids[b, m])
        logits = cpu.target_logits[l_off[b] + m].double()
        t = float(cpu.temperature[b])
        if t == 0:
            if y != reference.greedy.argmax(logits):
                problems.append(f"request {b}: greedy extra token {y} is not argmax {reference.greedy.argmax(logits)}")
            continue
        w = target_probs(logits, t)
        if method == "standard" and m < k:
            x = int(cpu.draft_token_ids[d_off[b] + m])
            q = leviathan.one_hot(x, cpu.vocab_size) if cpu.draft_probs is None else cpu.draft_probs[d_off[b] + m].double()
            w = leviathan.residual(w, q)
        if not 0 <= y < cpu.vocab_size or w[y] <= 0:
            problems.append(f"request {b}: extra token {y} at position {m} has probability 0")
    return problems


def _call(backend, example, profile: Profile, *, prefer_seeded: bool = True, **kwargs):
    """Call with the example's seeds if the backend has a seeded path, else with its injected noise."""
    caps = backend.capabilities
    seeded = "seeded" in caps.noise and (prefer_seeded or "injected" not in caps.noise)
    batch, noise = on_device(example.batch, None if seeded else example.noise, profile.device)
    if seeded:
        return backend(batch, seed=example.seeds.clone(), **kwargs)
    return backend(batch, noise=noise, **kwargs)


def _call_with_shared_noise(backend, batch: SpecBatch, noise: Noise, seeds: torch.Tensor, profile: Profile):
    """Call with ``noise`` if the backend takes injected noise, else with ``seeds``. Returns the output
    and the noise the reference must use to reproduce it (None when the backend's stream is its own)."""
    caps = backend.capabilities
    if "injected" in caps.noise:
        dev_batch, dev_noise = on_device(batch, noise, profile.device)
        return backend(dev_batch, noise=dev_noise), noise
    out = backend(on_device(batch, None, profile.device)[0], seed=seeds)
    shared = Noise.from_seeds(seeds, batch.num_draft_tokens, batch.vocab_size) if caps.seeded_stream == "philox" else None
    return out, shared


def _outputs_equal(a, b) -> bool:
    return a.emitted() == b.emitted() and torch.equal(a.num_accepted.cpu(), b.num_accepted.cpu())


def _device_or_na(result, backend, profile):
    if profile.device not in backend.capabilities.devices:
        return not_applicable(result, f"backend does not run on {profile.device}")
    return None


def _examples(profile: Profile):
    return spec_examples(profile)


def _run_property(result, profile: Profile, body, **kwargs):
    """Runs ``body(example)`` over the profile's generated batches; fails ``result`` with the shrunk
    counterexample if any example raises CheckFailure."""
    message, counterexample = run_examples(_examples(profile), profile, body, **kwargs)
    return fail(result, message, counterexample) if message else result


# ---- output structure ---------------------------------------------------------------------------
def check_output_structure(backend, case: str, profile: Profile):
    with timed("output_structure", case, backend, "structural") as result:
        if _device_or_na(result, backend, profile):
            return result
        count = {"n": 0}

        def body(example):
            out = _call(backend, example, profile)
            problems = structure_problems(example.batch, out) or support_problems(example.batch, out)
            if problems:
                raise CheckFailure("; ".join(problems[:3]))
            count["n"] += example.batch.num_requests

        _run_property(result, profile, body)
        result.samples = count["n"]
        return result
    return result


# ---- uninitialised memory -----------------------------------------------------------------------
@contextmanager
def deterministic_fill():
    """torch.empty & co. return NaN (floats) or the max integer while inside."""
    prev = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.utils.deterministic.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev[0], warn_only=prev[1])
        torch.utils.deterministic.fill_uninitialized_memory = prev[2]


@contextmanager
def plausible_poison(value: int = 3):
    """A second poison: fresh allocations hold a plausible value (a valid token id, a small float),
    so an unwritten slot looks like data; on CUDA, freed blocks are also pre-filled."""
    originals = (torch.empty, torch.empty_like, torch.Tensor.new_empty)

    def fill(t):
        return t.fill_(value) if t.numel() and t.dtype != torch.bool else t

    torch.empty = lambda *a, **k: fill(originals[0](*a, **k))
    torch.empty_like = lambda *a, **k: fill(originals[1](*a, **k))
    torch.Tensor.new_empty = lambda self, *a, **k: fill(originals[2](self, *a, **k))
    if torch.cuda.is_available():
        blocks = [torch.full((1 << 20,), value, dtype=torch.int64, device="cuda") for _ in range(16)]
        del blocks  # back to the caching allocator, holding the pattern
    try:
        yield
    finally:
        torch.empty, torch.empty_like, torch.Tensor.new_empty = originals


def check_uninitialized_memory(backend, case: str, profile: Profile):
    with timed("uninitialized_memory", case, backend, "structural") as result:
        if _device_or_na(result, backend, profile):
            return result

        def body(example):
            with deterministic_fill():
                first = _call(backend, example, profile)
            with plausible_poison():
                second = _call(backend, example, profile)
            for label, out in (("deterministic-fill run", first), ("plausible-poison run", second)):
                problems = structure_problems(example.batch, out)
                if problems:
                    raise CheckFailure(f"{label}: " + "; ".join(problems[:3]))
            if not _outputs_equal(first, second):
                raise CheckFailure(f"outputs depend on uninitialised memory: {first.emitted()} vs {second.emitted()}")

        return _run_property(result, profile, body, examples=max(5, profile.examples // 2))
    return result


# ---- batch invariance and determinism -----------------------------------------------------------
def _sub_batches(B: int, g: torch.Generator):
    if B == 0:
        return []
    perm = torch.randperm(B, generator=g)
    return [("reversed", torch.arange(B - 1, -1, -1)), ("shuffled", perm), ("every other", torch.arange(0, B, 2)),
            ("last alone", torch.tensor([B - 1])), ("duplicated", torch.cat([perm, perm[:2]]))]


def check_batch_invariance(backend, case: str, profile: Profile):
    with timed("batch_invariance", case, backend, "structural") as result:
        if _device_or_na(result, backend, profile):
            return result

        def body(example):
            g = torch.Generator().manual_seed(example.batch.num_requests)
            subs = _sub_batches(example.batch.num_requests, g)
            for path in ("seeded", "injected"):
                if path not in backend.capabilities.noise:
                    continue
                full = _call(backend, example, profile, prefer_seeded=path == "seeded").emitted()
                for label, idx in subs:
                    sub = type(example)(select_requests(example.batch, idx), example.noise.select(example.batch, idx),
                                        example.seeds[idx], example.description)
                    got = _call(backend, sub, profile, prefer_seeded=path == "seeded").emitted()
                    want = [full[i] for i in idx.tolist()]
                    if got != want:
                        raise CheckFailure(f"{path} noise, sub-batch {label} {idx.tolist()}: outputs {got} "
                                           f"but the same requests in the full batch gave {want}")

        return _run_property(result, profile, body, examples=max(5, profile.examples // 2))
    return result


def check_determinism(backend, case: str, profile: Profile):
    with timed("determinism", case, backend, "structural") as result:
        if _device_or_na(result, backend, profile):
            return result

        def body(example):
            for seeded in (True, False):
                if ("seeded" if seeded else "injected") not in backend.capabilities.noise:
                    continue
                a = _call(backend, example, profile, prefer_seeded=seeded)
                b = _call(backend, example, profile, prefer_seeded=seeded)
                if not _outputs_equal(a, b):
                    raise CheckFailure(f"same {'seed' if seeded else 'noise'}, different outputs: "
                                       f"{a.emitted()} vs {b.emitted()}")

        return _run_property(result, profile, body, examples=max(5, profile.examples // 2))
    return result


# ---- zero-draft layouts -------------------------------------------------------------------------
ZERO_DRAFT_LAYOUTS = {
    "zero first": [0, 3, 2], "zero middle": [2, 0, 3], "zero last": [3, 2, 0], "zeros between": [1, 0, 0, 2, 0],
    "all zero": [0, 0, 0], "single zero": [0], "empty batch": [],
}


def _layout_batch(counts: list[int], V: int, g: torch.Generator, greedy: bool) -> SpecBatch:
    k = torch.tensor(counts, dtype=torch.int64)
    T, B = int(k.sum()), len(counts)
    q = torch.softmax(torch.randn(T, V, generator=g), dim=-1)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1) if T else torch.zeros(0, dtype=torch.int64)
    temps = torch.zeros(B) if greedy else torch.full((B,), 0.8)
    return SpecBatch(k, drafts, torch.randn(T + B, V, generator=g), q, temps)


def _check_batches(result, backend, cases, g: torch.Generator, profile: Profile):
    """Runs ``cases`` (label, batch, seeds), in order, through ``_first_problem``; fails ``result`` at the
    first problem, else counts the requests as samples."""
    for label, batch, seeds in cases:
        problem = _first_problem(backend, batch, g, seeds, profile)
        if problem:
            return fail(result, f"{label}: {problem}")
        result.samples += batch.num_requests
    return result


def _first_problem(backend, batch: SpecBatch, g: torch.Generator, seeds: torch.Tensor, profile: Profile):
    """Calls the backend with noise it shares with the reference; returns the first structural problem
    or real (not margin-ambiguous) disagreement, or None."""
    out, noise = _call_with_shared_noise(backend, batch, Noise.draw(batch, g), seeds, profile)
    problems = structure_problems(batch, out)
    if problems:
        return "; ".join(problems[:3])
    if noise is not None:
        cmp = compare_to_reference(batch, out, noise, tol=backend.capabilities.ambiguity_margin)
        if cmp.real:
            return str(cmp.real[0])
    return None


def check_zero_draft_layouts(backend, case: str, profile: Profile):
    with timed("zero_draft_layouts", case, backend, "structural") as result:
        if _device_or_na(result, backend, profile):
            return result
        g = torch.Generator().manual_seed(7)
        cases = ((f"{label} {counts}", _layout_batch(counts, 37, g, greedy),
                  torch.arange(len(counts), dtype=torch.int64) * 7919 + 1)
                 for label, counts in ZERO_DRAFT_LAYOUTS.items() for greedy in (False, True))
        return _check_batches(result, backend, cases, g, profile)
    return result


# ---- repeated calls (stale state) ---------------------------------------------------------------
def check_repeated_calls(backend, case: str, profile: Profile):
    """Consecutive calls with the same shapes but new logits and draft probabilities must each see
    their own inputs: a backend that keeps the previous call's draft state (the CUDA-graph replay bug of
    seed 004) emits tokens of the wrong distribution."""
    with timed("repeated_calls", case, backend, "structural") as result:
        if _device_or_na(result, backend, profile):
            return result
        caps = backend.capabilities
        g = torch.Generator().manual_seed(11)
        counts = [3, 0, 2, 4, 1, 3]
        if "injected" not in caps.noise and caps.seeded_stream != "philox":
            return not_applicable(result, "needs injected noise or the reference's seeded stream")
        cases = ((f"call {call + 1} of 4 with fresh inputs of the same shapes", _layout_batch(counts, 23, g, False),
                  torch.randint(0, 2 ** 40, (len(counts),), generator=g, dtype=torch.int64))
                 for call in range(4))
        return _check_batches(result, backend, cases, g, profile)
    return result


# ---- interface parity ---------------------------------------------------------------------------
def check_interface_parity(backend, case: str, profile: Profile):
    """Every combination of method, noise path and logit dtype is either served or refused with
    UnsupportedError naming it; never a TypeError from a lagging signature (seed 003)."""
    with timed("interface_parity", case, backend, "structural") as result:
        try:
            params = inspect.signature(backend.__call__).parameters
        except (TypeError, ValueError):
            params = {}
        has_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        missing = [name for name in CONVENTION if name not in params and not has_var_kw]
        if missing:
            return fail(result, f"signature lacks {missing}: calls with them raise TypeError")
        caps = backend.capabilities
        g = torch.Generator().manual_seed(3)
        devices = {profile.device, "cpu"}
        for device in sorted(devices):
            for dtype in (torch.float32, torch.bfloat16, torch.float16):
                batch = _layout_batch([2, 0, 1], 11, g, greedy=False)
                batch = SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, batch.target_logits.to(dtype),
                                  batch.draft_probs, batch.temperature)
                for method in reference.METHODS:
                    synth = dict(synthetic_acceptance_rate=0.5, num_speculative_steps=2) if method == "synthetic" else {}
                    for path in ("injected", "seeded"):
                        declared = (method in caps.methods and path in caps.noise and device in caps.devices
                                    and dtype in caps.logit_dtypes)
                        dev_batch, dev_noise = on_device(batch, Noise.draw(batch, g), device)
                        call = dict(noise=dev_noise) if path == "injected" else dict(seed=5)
                        what = f"device={device}, dtype={dtype}, method={method}, {path} noise"
                        try:
                            out = backend(dev_batch, method=method, **call, **synth)
                        except UnsupportedError as exc:
                            if declared:
                                return fail(result, f"{what}: declared supported but raised UnsupportedError: {exc}")
                            continue
                        except TypeError as exc:
                            return fail(result, f"{what}: TypeError (signature lags the convention): {exc}")
                        if not declared:
                            return fail(result, f"{what}: not declared in capabilities but served "
                                                "(capabilities must say what the backend does)")
                        problems = structure_problems(batch, out)
                        if problems:
                            return fail(result, f"{what}: " + "; ".join(problems[:2]))
                        result.samples += 1
        return result
    return result


# ---- synthetic-rate validation ------------------------------------------------------------------
def check_synthetic_validation(backend, case: str, profile: Profile):
    """An unset or out-of-range synthetic rate is a ValueError naming synthetic_acceptance_rate; it
    never defaults to 0.0, which would silently reject every draft (seed 000)."""
    with timed("synthetic_validation", case, backend, "structural") as result:
        if "synthetic" not in backend.capabilities.methods:
            return not_applicable(result, "backend does not declare the synthetic method")
        if _device_or_na(result, backend, profile):
            return result
        g = torch.Generator().manual_seed(5)
        batch = _layout_batch([2, 1], 9, g, greedy=False)
        dev_batch, dev_noise = on_device(batch, Noise.draw(batch, g), profile.device)
        call = dict(noise=dev_noise) if "injected" in backend.capabilities.noise else dict(seed=1)
        for rate in (None, -0.1, 1.5, float("nan")):
            try:
                out = backend(dev_batch, method="synthetic", synthetic_acceptance_rate=rate, num_speculative_steps=2,
                              **call)
            except ValueError as exc:
                if "synthetic_acceptance_rate" not in str(exc):
                    return fail(result, f"rate={rate!r}: ValueError does not name synthetic_acceptance_rate: {exc}")
                result.samples += 1
                continue
            except Exception as exc:  # noqa: BLE001
                return fail(result, f"rate={rate!r}: {type(exc).__name__} instead of ValueError: {exc}")
            return fail(result, f"rate={rate!r} was accepted (num_accepted={out.num_accepted.tolist()}); "
                                "it must be a ValueError naming synthetic_acceptance_rate")
        return result
    return result


# ---- request alignment ----------------------------------------------------------------------------
def check_request_alignment(align_fn, case: str = "cached", profile: Profile | None = None, *, name: str = "align"):
    """SPEC 4.8 with ``align_fn(cached_probs, cached_ids, request_ids, num_draft_tokens) -> [T, V]``."""
    with timed("request_alignment", case, getattr(align_fn, "name", name), "structural") as result:
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
                return fail(result, f"cached {cached_ids}, batch {ids} with drafts {counts}: got rows of shape "
                                    f"{tuple(got.shape)} that differ from the expected re-ordering")
            result.samples += 1
        try:
            align_fn(cached, ["a", "b", "c"], ["a", "d"], torch.tensor([1, 1]))
        except (KeyError, ValueError) as exc:
            if "d" not in str(exc):
                return fail(result, f"missing request raised {type(exc).__name__} without naming it: {exc}")
        else:
            return fail(result, "a request with drafts but no cached probabilities was silently filled")
        return result
    return result


__all__ = ["CONVENTION", "ZERO_DRAFT_LAYOUTS", "check_batch_invariance", "check_determinism",
           "check_interface_parity", "check_output_structure", "check_repeated_calls", "check_request_alignment",
           "check_synthetic_validation", "check_uninitialized_memory", "check_zero_draft_layouts",
           "deterministic_fill", "plausible_poison", "support_problems"]
