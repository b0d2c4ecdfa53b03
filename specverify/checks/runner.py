"""The one runner every check goes through: declaration, applicability, guarded calls, verdict.

A check is declared once (``Check``): its kind, its cases, and what it needs from a backend
(``Needs``: a method, a noise path, the profile's device, CUDA graphs). ``execute`` then

1. decides n/a from the declaration alone (the reason names what is missing);
2. hands the check a ``Context`` whose ``backend`` is a ``GuardedBackend``: every call gets a private
   copy of its inputs (the caller's tensors, from which the reference is computed, are never handed
   to the backend), fails if the backend wrote into that copy, validates every output the same way
   (SPEC 1: int64, shapes, device, ids in [0, V) or -1 padding, accepted tokens equal to the drafts),
   and records what the call exercised (method, noise path, greedy requests) for the coverage report;
3. times the check and turns any exception into a FAIL line naming it;
4. bounds the disagreements excused as numerically ambiguous, by one rule for every check
   (``Context.agree``), at the harness's tolerance or the backend's tighter one.

Check functions are ``fn(ctx, case) -> None``: they raise ``CheckFailure`` (or call ``ctx.fail``)
and fill ``ctx.result`` with their statistics.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from reference import Noise, SpecBatch, SpecOutput
from reference.batch import FIELDS
from specverify.backends import HARNESS_AMBIGUITY_MARGIN, noise_path
from specverify.checks.deviations import matching, note_unmet
from specverify.checks.differential import Comparison, ambiguous_bound, compare_to_reference
from specverify.checks.integrity import Copies, handing_over_strided, private_batch, strided_copy, written_inputs
from specverify.checks.repro import Call, Reproducer, python_source
from specverify.checks.repro import reproduce as repro_of
from specverify.checks.result import FAIL, KNOWN, NOT_APPLICABLE, PASS, CheckResult
from specverify.checks.tree_output import path_tokens
from specverify.registry import checked_backend
from specverify.strategies import Profile

KINDS = ("exact", "statistical", "structural")
CORE_KINDS = ("exact", "statistical")    # SPEC 4.1 and 4.2: agreement with the reference, distributions


class CheckFailure(AssertionError):
    """A property does not hold; the message says where and why."""


class NotApplicable(Exception):
    """Raised by a check that finds, from a measurement, that it cannot run within what the profile
    allows (a case whose measured cost is over the profile's budget): n/a with the reason, never a pass."""


@dataclass(frozen=True)
class Needs:
    """What a (check, case) needs a backend to declare before it can run.

    noise: "any" (some noise path), "injected", "philox" (a seeded path reproducing the reference's
    stream), "shared" (injected, or the philox seeded stream: noise the reference can share),
    "batch_invariant" (injected, or a seeded stream declared independent of batch position), "placeable"
    (injected, or fixed coins: uniforms the caller can place), None.
    """

    method: str | None = "standard"
    noise: str | None = "any"
    device: bool = True
    cuda_graphs: bool = False
    empty_batch: bool = False
    target_filters: bool = False
    placeholders: bool = False
    max_draft: int = 0          # the longest draft the case's batches hold, when fixed (statistical cases)
    dense_draft_probs: bool = False  # the case's batches carry a dense q (draft_probs)
    q_as_given: bool = False    # the case's q rows sum to other than 1 on purpose, and the rule reads them as given


@dataclass(frozen=True)
class Check:
    name: str
    kind: str                                  # "exact", "statistical", "structural"
    fn: Callable                               # fn(ctx, case) -> None
    cases: tuple
    doc: str
    needs: Callable[[str], Needs] = lambda case: Needs()
    # cases planned only on a profile with large vocabularies (``Profile.large_vocabs``, the nightly's); every
    # other case is planned on every profile, whatever its name
    large_vocabs_only: frozenset = frozenset()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"check {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        unknown = sorted(set(self.large_vocabs_only) - set(self.cases))
        if unknown:
            raise ValueError(f"check {self.name!r}: large_vocabs_only names cases it does not have: {unknown}")


def _has_noise(caps, noise: str) -> str | None:
    declared = caps.noise
    if noise == "any":
        return None if declared else "backend declares no noise path"
    if noise == "injected":
        return None if "injected" in declared else "backend does not declare injected noise"
    philox = "seeded" in declared and caps.seeded_stream == "philox"
    if noise == "philox":
        if "seeded" not in declared:
            return "backend does not declare seeded noise"
        return None if philox else ("backend's seeded stream is its own (not reproducible by the reference): "
                                    "checked statistically")
    if noise == "batch_invariant":
        if "injected" in declared or ("seeded" in declared and getattr(caps, "seeded_batch_invariant", True)):
            return None
        return ("backend declares that its seeded stream depends on batch position (seeded_batch_invariant="
                "False) and has no injected noise: batch invariance cannot be checked")
    if noise == "placeable":
        return None if "injected" in declared or "coins" in declared else (
            "backend's uniforms cannot be placed: no injected noise, and no fixed coins (noise path \"coins\", "
            "coin=) for its own stream")
    if noise == "shared":
        return None if "injected" in declared or philox else "needs injected noise or the reference's seeded stream"
    raise ValueError(f"unknown noise need {noise!r}")


def not_applicable_because(needs: Needs, caps, profile: Profile) -> str | None:
    """None if a backend with ``caps`` can be checked for ``needs`` on ``profile``, else why not."""
    if needs.cuda_graphs:
        if profile.device != "cuda":
            return (f"profile device is {profile.device}: CUDA graphs are checked only on a CUDA device "
                    "(nightly GPU profile); not covered by this run")
        if not getattr(caps, "cuda_graphs", False):
            return "backend does not declare cuda_graphs"
    if needs.method is not None and needs.method not in caps.methods:
        return f"backend does not declare method {needs.method!r}"
    if needs.noise is not None:
        why = _has_noise(caps, needs.noise)
        if why:
            return why
    if needs.device and profile.device not in caps.devices:
        return f"backend does not run on {profile.device}"
    if needs.target_filters and not getattr(caps, "target_filters", False):
        return "backend does not declare target_filters (top_k, top_p, min_p)"
    if needs.dense_draft_probs and not getattr(caps, "dense_draft_probs", True):
        return "backend takes one-hot drafters only (dense_draft_probs=False): the case drafts from a dense q"
    if needs.q_as_given and getattr(caps, "draft_probs_up_to_scale", False):
        return ("backend reads draft_probs up to scale (draft_probs_up_to_scale=True): the case's q sums to "
                "1 + 5e-4 on purpose, to reach the residual's fallback to p")
    if needs.placeholders and not getattr(caps, "placeholders", False):
        return "backend does not declare placeholders (-1 drafts)"
    if needs.empty_batch and not getattr(caps, "empty_batches", True):
        return "backend declares that it does not take empty batches"
    limit = getattr(caps, "max_draft", None)
    if limit is not None and needs.max_draft > limit:
        return f"the case has {needs.max_draft} drafts per request; the backend declares at most {limit}"
    return None


# ---- guarded calls --------------------------------------------------------------------------------
def output_problems(batch: SpecBatch, out, device: torch.device | None = None, limit: int = 5) -> list[str]:
    """SPEC 1 output structure, checked the same way for every call: a SpecOutput of int64 tensors on
    the batch's device, token_ids [B, >= K + 1], num_accepted [B] in [0, k_b], the accepted tokens equal
    to the drafts (for trees, to the tokens of the root-to-node path in accepted_nodes, SPEC 3.8), every
    emitted id in [0, V), -1 after the emitted tokens."""
    if not isinstance(out, SpecOutput):
        return [f"backend returned {type(out).__name__}, expected SpecOutput"]
    ids, n = out.token_ids, out.num_accepted
    if not isinstance(ids, torch.Tensor) or not isinstance(n, torch.Tensor):
        return [f"outputs are {type(ids).__name__} and {type(n).__name__}, expected tensors"]
    B, V, K = batch.num_requests, batch.vocab_size, batch.max_draft
    problems = []
    if ids.dtype != torch.int64 or n.dtype != torch.int64:
        problems.append(f"dtypes token_ids={ids.dtype}, num_accepted={n.dtype}; expected int64")
    if device is not None and (ids.device != device or n.device != device):
        problems.append(f"outputs on token_ids={ids.device}, num_accepted={n.device}; the batch is on {device}")
    if ids.dim() != 2 or ids.shape[0] != B or ids.shape[1] < K + 1:
        return problems + [f"token_ids shape {tuple(ids.shape)}, expected [B, K + 1] = [{B}, >= {K + 1}]"]
    if tuple(n.shape) != (B,):
        return problems + [f"num_accepted shape {tuple(n.shape)}, expected [{B}]"]
    if ids.is_floating_point() or n.is_floating_point() or ids.dtype == torch.bool:
        return problems
    # checked where the batch lives, with one host sync when all is well (a statistical check makes
    # thousands of calls); outputs on another device on the host
    on_device = ids.device == n.device == batch.device
    where = batch.device if on_device else torch.device("cpu")
    ids, n = ids.to(where).long(), n.to(where).long()
    k = batch.num_draft_tokens.to(where)
    pos = torch.arange(ids.shape[1], device=where)
    emitted = pos[None, :] <= n[:, None]
    accepted = pos[None, :] < n[:, None]
    T, flagged, paths = batch.num_drafts, None, {}
    if batch.tree_parents is not None:   # SPEC 3.8: the accepted tokens are the path's, not the slots'
        drafts, flagged, describe = path_tokens(batch, out.accepted_nodes, torch.minimum(n.clamp(min=0), k),
                                                ids.shape[1])
        if drafts is None:
            return problems + [describe()[-1]]
    elif T:
        slot = (batch.draft_offsets().to(where)[:-1, None] + pos[None, :]).clamp(max=T - 1)
        drafts = torch.where(pos[None, :] < k[:, None], batch.draft_token_ids.to(where)[slot], -2)
    else:
        drafts = torch.full_like(ids, -2)
    bad_count = (n < 0) | (n > k)
    out_of_range = (emitted & ((ids < 0) | (ids >= V))).any(1)
    not_drafts = (accepted & (ids != drafts)).any(1)
    not_padded = (~emitted & (ids != -1)).any(1)
    bad = bad_count | out_of_range | not_drafts | not_padded
    if flagged is not None:
        bad = bad | flagged
    if on_device and not bool(bad.any()):
        return problems
    if flagged is not None and bool(flagged.any()):
        paths = describe()
    ids, n, k, drafts, bad, bad_count, out_of_range, not_drafts, not_padded = (
        t.cpu() for t in (ids, n, k, drafts, bad, bad_count, out_of_range, not_drafts, not_padded))
    for b in bad.nonzero().flatten().tolist():
        a = int(n[b])
        if bool(bad_count[b]):
            problems.append(f"request {b}: num_accepted {a} outside [0, {int(k[b])}]")
            continue
        if b in paths:
            problems.append(f"request {b}: {paths[b]}")
        row = ids[b].tolist()
        if bool(out_of_range[b]):
            problems.append(f"request {b}: emitted ids {row[:a + 1]} outside [0, {V})")
        if bool(not_drafts[b]):
            what = "the path's tokens" if batch.tree_parents is not None else "the drafts"
            problems.append(f"request {b}: accepted tokens {row[:a]} are not {what} {drafts[b, :a].tolist()}")
        if bool(not_padded[b]):
            problems.append(f"request {b}: slots after the {a + 1} emitted tokens are {row[a + 1:]}, expected -1")
        if len(problems) >= limit:
            break
    return problems


class CallObserver:
    """Told of every guarded backend call as it starts and ends. The check pool installs one in its
    workers (``observe_calls``) to time each call out on its own and to name the call that hung; the
    checks themselves never see it."""

    def started(self, call: Call) -> None:
        pass

    def finished(self) -> None:
        pass


_OBSERVER = CallObserver()


def observe_calls(observer: CallObserver | None) -> None:
    """Install ``observer`` for every guarded call of this process (None: observe nothing)."""
    global _OBSERVER
    _OBSERVER = observer or CallObserver()


class GuardedBackend:
    """The backend as every check sees it (see the module docstring). Attributes other than the call
    (``name``, ``capabilities``, ``sample_into``, helpers) pass through unchanged."""

    def __init__(self, backend) -> None:
        self._backend = backend
        self.covered: set[str] = set()
        self.last_call: Call | None = None      # the latest call, as the caller made it
        self.failed_call: Call | None = None    # the latest call a guard or a comparison found wrong
        self.failed_pair: tuple | None = None   # conditions under which the latest call gave two outputs
        self._copies = Copies()                 # the private copies' memory, reused from call to call

    def __getattr__(self, name):
        return getattr(self._backend, name)

    @property
    def wrapped(self):
        """The backend itself (for inspecting its signature, never for calling around the guard)."""
        return self._backend

    def __call__(self, batch: SpecBatch, *, noise: Noise | None = None, seed=None, **kwargs) -> SpecOutput:
        strided = handing_over_strided()
        copy_of = strided_copy if strided else self._copies.of
        given = private_batch(batch, copy_of)
        given_noise = None if noise is None else Noise(copy_of(noise.uniform), copy_of(noise.exponential))
        given_seed = copy_of(seed) if isinstance(seed, torch.Tensor) else seed
        self.last_call = Call(batch, noise, seed if isinstance(seed, torch.Tensor) else None, dict(kwargs))
        _OBSERVER.started(self.last_call)
        try:
            out = self._backend(given, noise=given_noise, seed=given_seed, **kwargs)
        except SystemExit as exc:
            self.failed_call = self.last_call
            raise CheckFailure(f"the backend called sys.exit({exc.code!r}) during a call") from None
        finally:
            _OBSERVER.finished()
        pairs = [(f, getattr(given, f), getattr(batch, f)) for f in FIELDS]
        if noise is not None:
            pairs += [("noise.uniform", given_noise.uniform, noise.uniform),
                      ("noise.exponential", given_noise.exponential, noise.exponential)]
        if isinstance(seed, torch.Tensor):
            pairs.append(("seed", given_seed, seed))
        written = written_inputs(pairs, self._copies.fingerprint_of)
        if written:
            self.failed_call = self.last_call
            raise CheckFailure(f"backend wrote into its inputs: {', '.join(written)}")
        if not strided:     # the kept copies are plain ones: a later plain call is handed none of these
            self._copies.give_back(pairs)
        problems = output_problems(batch, out, batch.device)
        if problems:
            self.failed_call = self.last_call
            raise CheckFailure("output structure: " + "; ".join(problems[:3]))
        self.covered.update((kwargs.get("method", "standard"), noise_path(noise, kwargs.get("coin")),
                             str(batch.target_logits.dtype).replace("torch.", "")))
        if bool((batch.temperature == 0).any()):
            self.covered.add("greedy")
        return out


# ---- context and execution ------------------------------------------------------------------------
@dataclass
class Context:
    backend: GuardedBackend
    profile: Profile
    result: CheckResult
    decisions: int = 0
    ambiguous: list = field(default_factory=list)
    deviations: tuple = ()                         # declared deviations of this check and case
    known: list = field(default_factory=list)      # divergences a declared deviation excuses

    @property
    def tolerance(self) -> float:
        """The harness's ambiguity margin, or the backend's tighter one."""
        return min(HARNESS_AMBIGUITY_MARGIN, getattr(self.backend.capabilities, "ambiguity_margin",
                                                     HARNESS_AMBIGUITY_MARGIN))

    def agree(self, batch: SpecBatch, got: SpecOutput, noise: Noise, *, where: str = "", **kwargs) -> Comparison:
        """Compare ``got`` with the reference under ``noise``: a real divergence fails at once; ambiguous
        ones are counted, and ``execute`` bounds them for the whole check."""
        cmp = compare_to_reference(batch, got, noise, tol=self.tolerance, **kwargs)
        method = kwargs.get("method", "standard")     # a method-scoped deviation covers its method's calls only
        known = [d for d in cmp.real if matching(str(d), self.deviations, method)]
        self.known.extend((d, method) for d in known)
        real = [d for d in cmp.real if d not in known]
        if real:
            last = self.backend.last_call
            seeded = last is not None and last.noise is None and last.seeds is not None
            self.backend.failed_call = Call(batch, None if seeded else noise, last.seeds if seeded else None,
                                            dict(kwargs))
            prefix = f"{where}: " if where else ""
            raise CheckFailure(f"{prefix}{len(real)} real divergence(s) from the reference; first: {real[0]}")
        self.decisions += cmp.decisions
        self.ambiguous.extend(cmp.ambiguous)
        return cmp

    def undeclared(self, problems: list[str], method: str) -> list[str]:
        """The ``problems`` (texts of one call under ``method``) that no declared deviation covers; the covered
        ones are kept as known, as an excused divergence is."""
        real = []
        for text in problems:
            if matching(text, self.deviations, method):
                self.known.append((text, method))
            else:
                real.append(text)
        return real

    def fail(self, message: str, counterexample: str | None = None) -> None:
        self.result.fail(message, counterexample)


def _bound_ambiguous(ctx: Context) -> None:
    if not ctx.decisions:
        return
    bound = ambiguous_bound(ctx.decisions)
    note = f"{ctx.decisions} decisions vs the reference, {len(ctx.ambiguous)} ambiguous (bound {bound})"
    result = ctx.result
    result.message = f"{result.message}; {note}" if result.message else note
    if result.kind == "exact":
        result.statistic = float(len(ctx.ambiguous))
        result.samples = result.samples or ctx.decisions
    if len(ctx.ambiguous) > bound and result.status != FAIL:
        ctx.fail(f"too many ambiguous divergences: {note}; e.g. {ctx.ambiguous[0]}")


def _apply_deviations(ctx: Context) -> None:
    """A failure (or excused divergences) matching a declared deviation becomes a known deviation; a
    declared deviation that did not occur is said, so that it gets removed (an intermittent one only noted)."""
    result = ctx.result
    known = matching(result.message, ctx.deviations) if result.status == FAIL else None
    if known is None and result.status != FAIL and ctx.known:
        first, method = ctx.known[0]
        known = matching(str(first), ctx.deviations, method)
        result.message = f"{len(ctx.known)} divergence(s) as declared, e.g. {first} (method {method})"
    if known is not None:
        result.status, result.deviation = KNOWN, known.reason
        result.message = f"known deviation ({known.reason}): {result.message}"
    elif result.status == PASS:
        note_unmet(result, ctx.deviations)


def execute(check: Check, backend, case: str, profile: Profile, deviations: tuple = (), *, reproducer: bool = True,
            **options) -> CheckResult:
    """Run one declared check on one case; always returns a CheckResult (never raises for the backend).
    ``deviations`` are declared by the run, in addition to the backend's; ``options`` go to the check.
    Without ``reproducer`` a failure carries no reproducer: for callers that ask only whether a check
    fails, since reducing a statistical case's failing call can take longer than the check itself."""
    name = getattr(backend, "name", repr(backend))
    result = CheckResult(check=check.name, case=case, backend=str(name), kind=check.kind, status=PASS)
    start, ctx = time.perf_counter(), None
    try:
        backend = checked_backend(backend, str(name))
        why = not_applicable_because(check.needs(case), backend.capabilities, profile)
        if why:
            result.status, result.message = NOT_APPLICABLE, why
            result.seconds = time.perf_counter() - start
            return result
        profile = profile.within(backend.capabilities)     # generated batches stay inside what it declares
        declared = tuple(getattr(backend.capabilities, "deviations", ())) + tuple(deviations)
        ctx = Context(GuardedBackend(backend), profile, result,
                      deviations=tuple(d for d in declared if d.covers(check.name, case)))
        try:
            check.fn(ctx, case, **options)
        finally:
            result.covered = sorted(ctx.backend.covered)
        if result.status != FAIL:
            _bound_ambiguous(ctx)
    except CheckFailure as exc:
        result.status, result.message = FAIL, str(exc)
    except NotApplicable as exc:
        result.status, result.message = NOT_APPLICABLE, str(exc)
    except Exception as exc:  # noqa: BLE001 - whatever the backend raises is a finding, never a crash
        result.status, result.message = FAIL, f"{type(exc).__name__}: {exc}"
    if ctx is not None and ctx.deviations:
        _apply_deviations(ctx)
    if result.status == FAIL and ctx is not None and reproducer:
        result.repro = reproduce(ctx)
        if result.repro.call is not None:
            result.counterexample = python_source(result.repro.call, result.repro.outcome)
    result.seconds = time.perf_counter() - start
    return result


def reproduce(ctx: Context) -> Reproducer:
    """The failure as a reproducer (``repro.reproduce``), failing calls judged as every check judges them."""
    return repro_of(ctx.result, ctx.profile, ctx.backend, ctx.tolerance, (CheckFailure,))


__all__ = ["CORE_KINDS", "CallObserver", "Check", "CheckFailure", "Context", "GuardedBackend", "Needs", "NotApplicable",
           "execute", "not_applicable_because", "observe_calls", "output_problems", "private_batch", "reproduce"]
