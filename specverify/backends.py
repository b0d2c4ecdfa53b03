"""One calling convention for every sampler, and a capability declaration.

Every backend is called exactly like ``reference.sample``:

    backend(batch, *, method="standard", noise=None, seed=None,
            synthetic_acceptance_rate=None, num_speculative_steps=None) -> SpecOutput

and declares what it supports in ``Capabilities``. A backend whose rule draws uniforms of its own may also
declare the noise path "coins" and take ``coin=c`` (with or without ``seed``): every uniform its rule draws
is then c, 0 <= c < 1 (SPEC 2, fixed coins), so that the harness can place them at float32's boundaries.
What a backend does not support raises
``UnsupportedError`` naming the backend and the missing capability: never a ``TypeError`` from a
lagging signature (seed 003), never a silent fallback. The check lives here, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

import reference
from reference import Noise, SpecBatch, SpecOutput
from reference.sample import validate_call

ALL_LOGIT_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16})

# SPEC 4.1: the relative decision margin below which float32 rounding may flip a decision that the
# float64 reference takes. The harness owns it; a backend may only declare a tighter one.
HARNESS_AMBIGUITY_MARGIN = 1e-5


class UnsupportedError(NotImplementedError):
    """A backend was asked for a mode, noise path, device or dtype it does not declare."""

    def __init__(self, backend: str, what: str, supported) -> None:
        shown = ", ".join(sorted(str(s).replace("torch.", "") for s in supported)) or "none"
        super().__init__(f"backend {backend!r} does not support {what} (supported: {shown})")
        self.backend, self.what = backend, what


@dataclass(frozen=True)
class Deviation:
    """A known, accepted failure: the check and case (``"*"``: every case) where it shows, why it is
    accepted, and ``match``, a regular expression its failure text matches (a divergence such as
    "request 0, position 0: expected [1], got [0] (REAL: acceptance ...)", or the check's message).
    Only failures that match are excused; any other failure of the same check still fails the run.
    ``intermittent``: the defect shows in some runs only (it reads memory the kernel never writes, or
    races), so a run that does not meet it passes the check, says so, and does not ask for its removal."""

    check: str
    case: str
    reason: str
    match: str
    intermittent: bool = False

    def __post_init__(self) -> None:
        for name in ("check", "case", "reason", "match"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise ValueError(f"deviation {self.check!r}: {name} must be a non-empty string")
        if not isinstance(self.intermittent, bool):
            raise ValueError(f"deviation {self.check!r}: intermittent must be true or false, "
                             f"got {self.intermittent!r}")

    def covers(self, check: str, case: str) -> bool:
        return self.check == check and self.case in ("*", case)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do. ``noise``: "injected", "seeded", and "coins" (its own rule with every uniform
    it draws fixed by the caller, ``coin=``). ``seeded_stream`` says whether its seeded noise is the
    reference's Philox stream ("philox": checked bit for bit) or its own ("own": checked statistically)."""

    methods: frozenset = frozenset({"standard", "synthetic"})
    noise: frozenset = frozenset({"injected", "seeded"})
    devices: frozenset = frozenset({"cpu"})
    logit_dtypes: frozenset = ALL_LOGIT_DTYPES
    seeded_stream: str = "philox"
    # False: the backend's own seeded stream depends on a request's slot in the launch (FlashInfer's
    # Philox subsequence is the row index), so the same request and seed draw differently in another
    # batch. Batch invariance is then checked on the injected path only, or is n/a (SPEC 4).
    seeded_batch_invariant: bool = True
    max_vocab: int | None = None
    cuda_graphs: bool = False
    # Disagreements with the float64 reference are excused only where the decision is within this
    # relative margin; at most HARNESS_AMBIGUITY_MARGIN (a wider declaration is refused at load).
    ambiguity_margin: float = HARNESS_AMBIGUITY_MARGIN
    # Declared limits: the most drafts one request may carry (None: no limit), and whether a batch of
    # no requests is accepted. The checks stay inside them, and calls outside are UnsupportedError.
    max_draft: int | None = None
    empty_batches: bool = True
    # The deepest token tree (SPEC 3.8) the backend takes under method "tree" (None: no limit); a node's
    # depth counts the nodes from the root to it (reference.tree.depths).
    max_tree_depth: int | None = None
    # False: a target-only kernel, whose drafter is one-hot; a random request with draft_probs is then
    # UnsupportedError and the checks draw no dense q for it (the dense-q cases are n/a)
    dense_draft_probs: bool = True
    # True: q reaches the kernel as logits (log q) and is renormalised there, so a row of draft_probs that sums
    # to other than 1 (within the batch's tolerance) is not what it samples against. The differential examples
    # that need such a row (the residual's fallback to p: q = p (1 + 5e-4)) are left out, and the check says so.
    draft_probs_up_to_scale: bool = False
    target_filters: bool = False    # applies top_k / top_p / min_p (SPEC 3.4); undeclared: UnsupportedError
    placeholders: bool = False      # takes -1 placeholder drafts (SPEC 3.5); undeclared: UnsupportedError
    # The kernel takes the bonus token from its caller (the adapter samples it): checks of the bonus
    # token then check the adapter's sampling, and the report says so.
    bonus_sampled_by_caller: bool = False
    deviations: tuple = ()      # Deviation entries: known failures, reported as such, never as passes
    notes: tuple = field(default_factory=tuple)


def noise_path(noise, coin=None) -> str:
    """The noise path a call takes: "coins" (coin= given), "injected" (noise= given) or "seeded"."""
    return "coins" if coin is not None else "injected" if noise is not None else "seeded"


def require_supported(name: str, caps: Capabilities, batch: SpecBatch, method: str, noise, seed,
                      coin=None) -> None:
    """The one capability check every backend call goes through."""
    if method not in caps.methods:
        raise UnsupportedError(name, f"method={method!r}", caps.methods)
    path = noise_path(noise, coin)
    if path not in caps.noise:
        raise UnsupportedError(name, "fixed coins (coin=)" if path == "coins" else f"{path} noise", caps.noise)
    if batch.has_filters and not getattr(caps, "target_filters", False):
        raise UnsupportedError(name, "target filters (top_k, top_p, min_p)", ["unfiltered targets"])
    if batch.has_placeholders and not getattr(caps, "placeholders", False):
        raise UnsupportedError(name, "placeholder drafts (-1)", ["drafts in [0, V)"])
    if batch.draft_probs is not None and not getattr(caps, "dense_draft_probs", True) \
            and bool(((batch.temperature > 0) & (batch.num_draft_tokens > 0)).any()):
        raise UnsupportedError(name, "dense draft_probs with a random request", ["draft_probs None (one-hot drafts)"])
    if batch.num_requests == 0 and not caps.empty_batches:
        raise UnsupportedError(name, "an empty batch", ["batches of at least one request"])
    if caps.max_draft is not None and batch.num_requests and batch.max_draft > caps.max_draft:
        raise UnsupportedError(name, f"{batch.max_draft} drafts in one request", [f"at most {caps.max_draft}"])
    limit = getattr(caps, "max_tree_depth", None)
    if method == "tree" and limit is not None:
        depth = reference.tree.max_depth(reference.tree.parents_of(batch), batch.num_draft_tokens)
        if depth > limit:
            raise UnsupportedError(name, f"a token tree of depth {depth}", [f"depth at most {limit}"])
    device = batch.device.type
    if device not in caps.devices:
        raise UnsupportedError(name, f"device {device!r}", caps.devices)
    if batch.target_logits.dtype not in caps.logit_dtypes:
        raise UnsupportedError(name, f"target_logits dtype {batch.target_logits.dtype}", caps.logit_dtypes)
    if caps.max_vocab is not None and batch.vocab_size > caps.max_vocab:
        raise UnsupportedError(name, f"vocabulary size {batch.vocab_size} (max {caps.max_vocab})", [])


def validate_coin(coin) -> float:
    """``coin`` as a float in [0, 1) (a fixed uniform, SPEC 2), else ValueError naming it."""
    if isinstance(coin, torch.Tensor):
        if coin.numel() != 1:
            raise ValueError(f"coin must be one number in [0, 1), got a tensor of shape {tuple(coin.shape)}")
        coin = coin.item()
    if isinstance(coin, bool) or not isinstance(coin, (int, float)):
        raise ValueError(f"coin must be a number in [0, 1), got {type(coin).__name__}")
    coin = float(coin)
    if not 0.0 <= coin < 1.0:   # NaN fails both comparisons
        raise ValueError(f"coin must lie in [0, 1) (a uniform: 0 is torch.rand's smallest value), got {coin!r}")
    return coin


class Backend:
    """Base class: validation and capability checks, then ``_sample``, which subclasses implement.

    A backend that declares ``capabilities.cuda_graphs`` also implements ``sample_into`` (below): the
    graph-capturable entry the ``cuda_graphs`` check captures and replays.
    """

    name: str = "backend"
    capabilities: Capabilities = Capabilities()

    def __call__(self, batch: SpecBatch, *, method: str = "standard", noise: Noise | None = None, seed=None,
                 synthetic_acceptance_rate: float | None = None,
                 num_speculative_steps: int | None = None, coin: float | None = None) -> SpecOutput:
        validate_call(batch, method, synthetic_acceptance_rate, num_speculative_steps)
        if coin is not None:
            coin = validate_coin(coin)
            if noise is not None:
                raise ValueError("give either noise or coin, not both: coin fixes the backend's own uniforms")
        require_supported(self.name, self.capabilities, batch, method, noise, seed, coin)
        if noise is not None:
            if seed is not None:
                raise ValueError("give either noise or seed, not both")
            noise.validate_for(batch)
        rule = dict(method=method, synthetic_acceptance_rate=synthetic_acceptance_rate,
                    num_speculative_steps=num_speculative_steps)
        if coin is not None:
            return self._sample_at_coin(batch, coin, seed=seed, **rule)
        return self._sample(batch, noise=noise, seed=seed, **rule)

    def _sample(self, batch: SpecBatch, *, method: str, noise: Noise | None, seed,
                synthetic_acceptance_rate: float | None, num_speculative_steps: int | None) -> SpecOutput:
        raise NotImplementedError

    def _sample_at_coin(self, batch: SpecBatch, coin: float, *, seed, method: str,
                        synthetic_acceptance_rate: float | None, num_speculative_steps: int | None) -> SpecOutput:
        """The backend's own rule with every uniform it draws equal to ``coin`` (float, 0 <= coin < 1) and
        any other noise (an exponential race) from its seeded stream under ``seed``: for backends that
        declare the noise path "coins"."""
        raise NotImplementedError

    def sample_into(self, out: SpecOutput, batch: SpecBatch, *, method: str = "standard", noise: Noise | None = None,
                    seed_tensor=None, rates=None) -> None:
        """Graph-capturable call: write ``out.token_ids`` [B, K + 1] and ``out.num_accepted`` [B] in place.

        No validation, no host sync, no data-dependent allocation (it runs under CUDA-graph capture;
        replays read whatever the caller copied into ``batch``'s tensors). Noise: ``noise`` (injected),
        or ``seed_tensor`` [B] int64 per-request Philox keys (``reference.philox.request_seeds``) on the
        device. ``rates``: float32 [n >= K] synthetic conditional rates c_j on the device (method
        "synthetic"). Backends that declare ``capabilities.cuda_graphs`` override this.
        """
        raise UnsupportedError(self.name, "sample_into (CUDA-graph capture)", [])

    def __repr__(self) -> str:
        return f"<backend {self.name}>"


class ReferenceBackend(Backend):
    """The reference itself, through the backend convention (float64, one request at a time)."""

    name = "reference"
    capabilities = Capabilities(methods=frozenset(reference.METHODS), devices=frozenset({"cpu", "cuda"}),
                                logit_dtypes=ALL_LOGIT_DTYPES | {torch.float64}, ambiguity_margin=0.0,
                                target_filters=True, placeholders=True)

    def _sample(self, batch, **kwargs) -> SpecOutput:
        return reference.sample(batch, **kwargs)
