"""The batch, noise and output types of SPEC sections 1 and 2, with validation.

Shapes (B requests, request b proposing k_b drafts, T = sum k_b, V vocabulary):

    num_draft_tokens  [B]        int64   k_b >= 0
    draft_token_ids   [T]        int64   request-major, ids in [0, V), or PLACEHOLDER (-1, SPEC 3.5)
    target_logits     [T + B, V] float32 / bfloat16 / float16 (float64 allowed for the reference)
    draft_probs       [T, V]     float32 (or float64), rows sum to 1; None = one-hot drafter
    temperature       [B]        float32, 0 = greedy request
    top_k             [B]        int64 >= 0, 0 = off; or None           (target filters, SPEC 3.4)
    top_p             [B]        float32/64 in (0, 1], 1 = off; or None
    min_p             [B]        float32/64 in [0, 1), 0 = off; or None
    allow_nonfinite   bool       False: NaN, +inf and all -inf rows in target_logits are refused (SPEC 3.6)
    tree_parents      [T]        int64, token trees (SPEC 3.8): each node's parent, local to its request,
                                 -1 = child of the root, parent < node; or None (chains)

    Noise.uniform     [T]        float32 in (0, 1)
    Noise.exponential [B, V]     float32, > 0

    SpecOutput.token_ids    [B, K + 1] int64, emitted tokens left-aligned, rest -1
    SpecOutput.num_accepted [B]        int64
    SpecOutput.accepted_nodes [B, K]   int64, trees only: local indices of the accepted path, rest -1

Every violation raises ``ValueError`` naming the field; nothing is clipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference import philox

LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
PROB_DTYPES = (torch.float32, torch.float64)
PROB_SUM_TOLERANCE = 1e-3
PLACEHOLDER = -1   # a draft slot with no draft: never accepted, it ends its request's chain (SPEC 3.5)


def _require(condition: bool, message) -> None:
    """ValueError(message) unless ``condition``; a callable message is built only then (a message that
    lists a [B] tensor would otherwise cost a host copy on every valid batch)."""
    if not condition:
        raise ValueError(message() if callable(message) else message)


def _require_tensor(name: str, value, ndim: int, dtypes: tuple) -> None:
    _require(isinstance(value, torch.Tensor), f"{name} must be a torch.Tensor, got {type(value).__name__}")
    _require(value.dim() == ndim, f"{name} must have {ndim} dimension(s), got shape {tuple(value.shape)}")
    names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
    _require(value.dtype in dtypes, f"{name} must have dtype {names}; got {str(value.dtype).replace('torch.', '')}")


def _range(values: torch.Tensor, rows: bool = False) -> tuple[float, float]:
    """(min, max) of a tensor as floats, NaN if it holds a NaN; (inf, -inf) if it is empty. With ``rows``
    (a 2-D tensor), a min of -inf reads 0.0 where every row's max is finite: masked (-inf) entries are
    allowed, settled without a named check."""
    if values.numel() == 0:
        return float("inf"), float("-inf")
    lo, hi = torch.stack(torch.aminmax(values)).double().tolist()   # one host copy for both
    # a row's max is finite exactly when it holds no NaN, no +inf and some finite entry (one amax per
    # row: on the CPU, aminmax along rows costs seven times the two whole-tensor reductions)
    if rows and lo == float("-inf") and hi < float("inf") and bool(torch.isfinite(values.amax(dim=1)).all()):
        lo = 0.0
    return lo, hi


@dataclass(frozen=True)
class SpecBatch:
    """One verification step: B requests with ragged draft counts (SPEC section 1)."""

    num_draft_tokens: torch.Tensor
    draft_token_ids: torch.Tensor
    target_logits: torch.Tensor
    draft_probs: torch.Tensor | None
    temperature: torch.Tensor
    top_k: torch.Tensor | None = None
    top_p: torch.Tensor | None = None
    min_p: torch.Tensor | None = None
    allow_nonfinite: bool = False
    tree_parents: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self.validate()
        self._mark_valid()

    # ---- what has been validated -----------------------------------------------
    def _versions(self) -> tuple:
        """Each tensor's (version, address): torch bumps the version on every in-place write through it."""
        return tuple(None if t is None else (t._version, t.data_ptr()) for t in (getattr(self, f) for f in FIELDS))

    def _mark_valid(self) -> None:
        object.__setattr__(self, "_valid_at", self._versions())

    def validate_again(self) -> None:
        """``validate`` once more, unless the batch is unchanged since it was last validated."""
        if not self.unchanged_since_validated():
            self.validate()
            self._mark_valid()

    def unchanged_since_validated(self) -> bool:
        """True when no tensor of the batch has been written through torch, or replaced, since the batch
        was validated (a write by a kernel through a raw pointer is not seen: the harness's guard compares
        the inputs after every call)."""
        return getattr(self, "_valid_at", None) == self._versions()

    # ---- derived sizes -------------------------------------------------------
    @property
    def num_requests(self) -> int:
        return self.num_draft_tokens.shape[0]

    @property
    def num_drafts(self) -> int:
        return self.draft_token_ids.shape[0]

    @property
    def vocab_size(self) -> int:
        return self.target_logits.shape[1]

    @property
    def max_draft(self) -> int:
        return int(self.num_draft_tokens.max()) if self.num_requests else 0

    @property
    def device(self) -> torch.device:
        return self.target_logits.device

    @property
    def has_placeholders(self) -> bool:
        """True when some draft slot holds the placeholder (SPEC 3.5)."""
        return self.num_drafts > 0 and bool((self.draft_token_ids == PLACEHOLDER).any())

    @property
    def has_filters(self) -> bool:
        """True when some request has a target filter on (SPEC 3.4)."""
        return any(f is not None and bool((f != off).any()) for f, off in
                   ((self.top_k, 0), (self.top_p, 1), (self.min_p, 0)))

    def filters_of(self, requests: torch.Tensor) -> tuple:
        """(top_k, top_p, min_p) of ``requests`` [N], each [N] or None where the batch has none."""
        return tuple(None if f is None else f[requests.to(f.device)] for f in (self.top_k, self.top_p, self.min_p))

    def draft_offsets(self) -> torch.Tensor:
        """[B + 1] int64: request b's drafts are draft_token_ids[off[b]:off[b+1]]."""
        off = torch.zeros(self.num_requests + 1, dtype=torch.int64, device=self.num_draft_tokens.device)
        off[1:] = torch.cumsum(self.num_draft_tokens, 0)
        return off

    def logit_offsets(self) -> torch.Tensor:
        """[B + 1] int64: request b's k_b + 1 logit rows are target_logits[off[b]:off[b+1]]."""
        return self.draft_offsets() + torch.arange(self.num_requests + 1, device=self.num_draft_tokens.device)

    def to(self, device) -> "SpecBatch":
        """The batch on ``device``: itself when it is already there (a SpecBatch is immutable and valid)."""
        if self.device == torch.device(device):
            return self
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return SpecBatch(**{f: move(getattr(self, f)) for f in FIELDS}, allow_nonfinite=self.allow_nonfinite)

    def with_drafts(self, draft_token_ids: torch.Tensor) -> "SpecBatch":
        """The same requests with other drafts [T], ids in [0, V). Only the drafts are validated: the other
        tensors are this batch's, valid since its construction (a statistical case launches the same
        V-wide rows many times with fresh drafts). A batch with placeholders refuses: its zero q rows
        are valid only under a placeholder."""
        T, V = self.num_drafts, self.vocab_size
        _require_tensor("draft_token_ids", draft_token_ids, 1, (torch.int64,))
        _require(draft_token_ids.shape[0] == T and draft_token_ids.device == self.device,
                 f"draft_token_ids must have shape [T] = [{T}] on {self.device}, got "
                 f"{tuple(draft_token_ids.shape)} on {draft_token_ids.device}")
        if T:
            lo, hi = _range(draft_token_ids)
            _require(lo >= 0 and hi < V, f"draft_token_ids must lie in [0, V) = [0, {V}), got values in "
                                         f"[{int(lo)}, {int(hi)}]")
            _require(not self.has_placeholders, "with_drafts: the batch has placeholder drafts")
        return SpecBatch.assembled({**{f: getattr(self, f) for f in FIELDS}, "draft_token_ids": draft_token_ids},
                                   self.allow_nonfinite, valid=self.unchanged_since_validated())

    @staticmethod
    def assembled(tensors: dict, allow_nonfinite: bool = False, valid: bool = False) -> "SpecBatch":
        """A batch of ``tensors`` (every name of FIELDS) built without validation: only for tensors a
        validated batch already holds, or copies of them (the caller vouches for them). ``valid``: the
        batch counts as validated now (a call does not validate it again while it is unchanged); pass
        it only where the source batch is ``unchanged_since_validated``."""
        batch = object.__new__(SpecBatch)
        for name in FIELDS:
            object.__setattr__(batch, name, tensors[name])
        object.__setattr__(batch, "allow_nonfinite", allow_nonfinite)
        if valid:
            batch._mark_valid()
        return batch

    def nonfinite_requests(self) -> torch.Tensor:
        """[B] bool: requests with a row holding NaN or +inf, or no finite entry (SPEC 3.6)."""
        logits = self.target_logits
        bad_row = torch.isnan(logits).any(dim=1) | torch.isposinf(logits).any(dim=1) | ~torch.isfinite(logits).any(dim=1)
        request = torch.repeat_interleave(torch.arange(self.num_requests, device=logits.device),
                                          self.num_draft_tokens + 1)
        count = torch.zeros(self.num_requests, dtype=torch.int64, device=logits.device)
        return count.index_add_(0, request, bad_row.to(torch.int64)) > 0

    # ---- validation ----------------------------------------------------------
    def validate(self) -> None:
        _require_tensor("num_draft_tokens", self.num_draft_tokens, 1, (torch.int64,))
        _require_tensor("draft_token_ids", self.draft_token_ids, 1, (torch.int64,))
        _require_tensor("target_logits", self.target_logits, 2, LOGIT_DTYPES)
        _require_tensor("temperature", self.temperature, 1, (torch.float32, torch.float64))
        B, T = self.num_draft_tokens.shape[0], self.draft_token_ids.shape[0]
        V = self.target_logits.shape[1]
        _require(V >= 1, f"target_logits must have at least one vocabulary column, got shape {tuple(self.target_logits.shape)}")
        k = self.num_draft_tokens
        least, total = torch.stack([k.min(), k.sum()]).tolist() if B else (0, 0)   # one host copy
        _require(least >= 0, lambda: f"num_draft_tokens must be >= 0, got {self.num_draft_tokens.tolist()}")
        _require(total == T, f"draft_token_ids has {T} entries but num_draft_tokens sums to {total}")
        _require(self.target_logits.shape[0] == T + B,
                 f"target_logits must have T + B = {T} + {B} = {T + B} rows (one per draft plus one bonus row per "
                 f"request), got {self.target_logits.shape[0]}")
        _require(self.temperature.shape[0] == B, f"temperature must have shape [B] = [{B}], got {tuple(self.temperature.shape)}")
        if T:
            lo, hi = (int(m) for m in _range(self.draft_token_ids))
            _require(lo >= PLACEHOLDER and hi < V, f"draft_token_ids must lie in [0, V) = [0, {V}) or be the placeholder "
                                                   f"{PLACEHOLDER}, got values in [{lo}, {hi}]")
        # [T + B, V] and [T, V] are the large ones: one pass of aminmax (NaN propagates through it) settles
        # the common valid case; the named checks below run only where it cannot.
        _require(isinstance(self.allow_nonfinite, bool),
                 f"allow_nonfinite must be a bool, got {type(self.allow_nonfinite).__name__}")
        lo, hi = _range(self.target_logits, rows=True)
        if self.allow_nonfinite:
            lo = hi = 0.0          # non-finite rows are allowed (SPEC 3.6): none of the checks below applies
        if not (lo > float("-inf") and hi < float("inf")):
            _require(not bool(torch.isnan(self.target_logits).any()),
                     "target_logits contains NaN (build the batch with allow_nonfinite=True to check SPEC 3.6)")
            _require(not bool(torch.isposinf(self.target_logits).any()), "target_logits contains +inf")
        if not bool(((self.temperature >= 0) & (self.temperature < float("inf"))).all()):   # NaN fails both
            _require(not bool(torch.isnan(self.temperature).any()), "temperature contains NaN")
            _require(bool((self.temperature >= 0).all()),
                     lambda: f"temperature must be >= 0 (0 = greedy), got {self.temperature.tolist()}")
            _require(bool(torch.isfinite(self.temperature).all()), "temperature must be finite")
        if B and not lo > float("-inf"):
            # A random request needs some finite logit in each row, or softmax is undefined.
            rows_ok = torch.isfinite(self.target_logits.float()).any(dim=1)
            _require(bool(rows_ok.all()), "target_logits has a row with no finite entry (all -inf)")
        if self.draft_probs is not None:
            _require_tensor("draft_probs", self.draft_probs, 2, PROB_DTYPES)
            _require(tuple(self.draft_probs.shape) == (T, V),
                     f"draft_probs must have shape [T, V] = [{T}, {V}], got {tuple(self.draft_probs.shape)}")
            lo, hi = _range(self.draft_probs)
            if not (lo >= 0 and hi < float("inf")):
                _require(not bool(torch.isnan(self.draft_probs).any()), "draft_probs contains NaN")
                _require(bool((self.draft_probs >= 0).all()), "draft_probs contains negative entries")
                _require(bool(torch.isfinite(self.draft_probs).all()), "draft_probs contains inf")
            if T:
                # a placeholder's row is never read: zeros (a fixed-width kernel's padding) are allowed there
                # float32 accumulation (float64 for float64 rows): its rounding is far below the tolerance,
                # and a float64 sum of float32 rows costs fourteen times as much on the CPU
                wide = torch.float64 if self.draft_probs.dtype == torch.float64 else torch.float32
                err = (self.draft_probs.sum(dim=1, dtype=wide).double() - 1).abs()
                if self.has_placeholders:
                    err = err.masked_fill(self.draft_token_ids.to(err.device) == PLACEHOLDER, 0.0)
                if float(err.max()) > PROB_SUM_TOLERANCE:
                    worst = int(err.argmax())
                    b, j = self._locate(worst)
                    slot = "node" if self.tree_parents is not None else "draft"
                    _require(False, f"draft_probs rows must sum to 1 within {PROB_SUM_TOLERANCE}: the row of request "
                                    f"{b}, {slot} {j} (row {worst}) is off by {float(err[worst]):.3g}")
        self._validate_filters(B)
        self._validate_tree(T)
        devices = {getattr(self, f).device for f in FIELDS if getattr(self, f) is not None}
        _require(len(devices) == 1, f"all batch tensors must be on one device, got {sorted(map(str, devices))}")


    def _locate(self, t: int) -> tuple[int, int]:
        """(request, local index) of draft slot ``t``."""
        off = self.draft_offsets()
        b = int(torch.searchsorted(off, torch.tensor(t, device=off.device), right=True)) - 1
        return b, t - int(off[b])

    def _validate_tree(self, T: int) -> None:
        """tree_parents (SPEC 3.8): [T] int64, each parent local to its request with -1 <= parent < node."""
        if self.tree_parents is None:
            return
        _require_tensor("tree_parents", self.tree_parents, 1, (torch.int64,))
        _require(self.tree_parents.shape[0] == T,
                 f"tree_parents must have shape [T] = [{T}] (one parent per draft node), "
                 f"got {tuple(self.tree_parents.shape)}")
        if T == 0:
            return
        off = self.draft_offsets()
        request = torch.repeat_interleave(torch.arange(self.num_requests, device=off.device), self.num_draft_tokens)
        node = torch.arange(T, device=off.device) - off[request]
        bad = torch.nonzero((self.tree_parents < -1) | (self.tree_parents >= node)).flatten()
        if bad.numel():
            t = int(bad[0])
            _require(False, f"tree_parents: request {int(request[t])}, node {int(node[t])} has parent "
                            f"{int(self.tree_parents[t])}; a parent must be -1 (the root) or an earlier node of "
                            f"the same request (-1 <= parent < node, topological order)")

    def _validate_filters(self, B: int) -> None:
        if self.top_k is not None:
            _require_tensor("top_k", self.top_k, 1, (torch.int64,))
            _require(self.top_k.shape[0] == B, f"top_k must have shape [B] = [{B}], got {tuple(self.top_k.shape)}")
            _require(bool((self.top_k >= 0).all()), lambda: f"top_k must be >= 0 (0 = off), got {self.top_k.tolist()}")
        if self.top_p is not None:
            _require_tensor("top_p", self.top_p, 1, (torch.float32, torch.float64))
            _require(self.top_p.shape[0] == B, f"top_p must have shape [B] = [{B}], got {tuple(self.top_p.shape)}")
            _require(bool(((self.top_p > 0) & (self.top_p <= 1)).all()),
                     lambda: f"top_p must lie in (0, 1] (1 = off), got {self.top_p.tolist()}")
        if self.min_p is not None:
            _require_tensor("min_p", self.min_p, 1, (torch.float32, torch.float64))
            _require(self.min_p.shape[0] == B, f"min_p must have shape [B] = [{B}], got {tuple(self.min_p.shape)}")
            _require(bool(((self.min_p >= 0) & (self.min_p < 1)).all()),
                     lambda: f"min_p must lie in [0, 1) (0 = off), got {self.min_p.tolist()}")


FIELDS = ("num_draft_tokens", "draft_token_ids", "target_logits", "draft_probs", "temperature", "top_k", "top_p",
          "min_p", "tree_parents")


@dataclass(frozen=True)
class Noise:
    """Shared randomness (SPEC section 2): the same noise gives the same tokens on every backend."""

    uniform: torch.Tensor       # [T] float32 in (0, 1): acceptance draw per draft position
    exponential: torch.Tensor   # [B, V] float32 Exp(1) > 0: exponential race for the one extra token

    def validate_for(self, batch: SpecBatch) -> None:
        B, T, V = batch.num_requests, batch.num_drafts, batch.vocab_size
        _require_tensor("noise.uniform", self.uniform, 1, (torch.float32, torch.float64))
        _require_tensor("noise.exponential", self.exponential, 2, (torch.float32, torch.float64))
        _require(self.uniform.shape[0] == T, f"noise.uniform must have shape [T] = [{T}], got {tuple(self.uniform.shape)}")
        _require(tuple(self.exponential.shape) == (B, V),
                 f"noise.exponential must have shape [B, V] = [{B}, {V}], got {tuple(self.exponential.shape)}")
        _require(not bool(torch.isnan(self.uniform).any()), "noise.uniform contains NaN")
        _require(bool(((self.uniform > 0) & (self.uniform < 1)).all()), "noise.uniform must lie in the open interval (0, 1)")
        # [B, V] is the large one: one pass of aminmax (NaN propagates through it, failing the test) settles
        # the valid case without elementwise temporaries; only an invalid tensor pays for the named checks.
        E = self.exponential
        if E.numel():
            lo, hi = torch.aminmax(E)
            if float(lo) > 0 and float(hi) < float("inf"):
                return
        _require(not bool(torch.isnan(E).any()), "noise.exponential contains NaN")
        _require(bool(((E > 0) & torch.isfinite(E)).all()), "noise.exponential must be finite and > 0")

    @staticmethod
    def draw(batch: SpecBatch, generator: torch.Generator | None = None) -> "Noise":
        """Fresh noise for ``batch`` from a torch.Generator, drawn on its device, moved to the batch's."""
        B, T, V = batch.num_requests, batch.num_drafts, batch.vocab_size
        u = philox.uniform_grid((T,), generator)
        e = philox.uniform_grid((B, V), generator).log_().neg_()
        return Noise(u.to(batch.device), e.to(batch.device))

    @staticmethod
    def from_seeds(request_seeds: torch.Tensor, num_draft_tokens: torch.Tensor, vocab_size: int) -> "Noise":
        """The in-kernel Philox stream keyed by (request seed, position in request); see reference.philox."""
        uniform, exponential = philox.seeded_stream(request_seeds, num_draft_tokens, vocab_size)
        return Noise(uniform, exponential)

    def to(self, device) -> "Noise":
        return Noise(self.uniform.to(device), self.exponential.to(device))

    def select(self, batch: SpecBatch, requests: torch.Tensor) -> "Noise":
        """The noise of a sub-batch made of ``requests`` (in that order)."""
        off = batch.draft_offsets().tolist()
        idx = [i for b in requests.tolist() for i in range(off[b], off[b + 1])]
        return Noise(self.uniform[torch.tensor(idx, dtype=torch.int64, device=self.uniform.device)],
                     self.exponential[requests.to(self.exponential.device)])


@dataclass(frozen=True)
class SpecOutput:
    """token_ids [B, K + 1] int64 (emitted tokens left-aligned, rest -1), num_accepted [B] int64, and for
    token trees accepted_nodes [B, K] int64: the local node indices of the accepted path, rest -1."""

    token_ids: torch.Tensor
    num_accepted: torch.Tensor
    accepted_nodes: torch.Tensor | None = None

    def emitted(self) -> list[list[int]]:
        """Per request, the emitted tokens: the accepted drafts, then the one extra token."""
        ids, n = self.token_ids.cpu().tolist(), self.num_accepted.cpu().tolist()
        return [row[: a + 1] for row, a in zip(ids, n)]

    def padded(self, width: int) -> "SpecOutput":
        """Same output with token_ids widened (with -1) or narrowed to ``width`` columns."""
        B, W = self.token_ids.shape
        out = torch.full((B, width), -1, dtype=self.token_ids.dtype, device=self.token_ids.device)
        w = min(width, W)
        out[:, :w] = self.token_ids[:, :w]
        nodes = self.accepted_nodes
        if nodes is not None:
            nodes = torch.full((B, max(width - 1, 0)), -1, dtype=nodes.dtype, device=nodes.device)
            n = max(0, min(width - 1, self.accepted_nodes.shape[1]))
            nodes[:, :n] = self.accepted_nodes[:, :n]
        return SpecOutput(out, self.num_accepted, nodes)


def select_requests(batch: SpecBatch, requests: torch.Tensor) -> SpecBatch:
    """The sub-batch made of ``requests`` (a [R] int64 index tensor, any order, repeats allowed)."""
    d_off, l_off = batch.draft_offsets().tolist(), batch.logit_offsets().tolist()
    req = requests.tolist()
    d_idx = [i for b in req for i in range(d_off[b], d_off[b + 1])]
    l_idx = [i for b in req for i in range(l_off[b], l_off[b + 1])]
    dev = batch.device
    d_idx_t = torch.tensor(d_idx, dtype=torch.int64, device=dev)
    top_k, top_p, min_p = batch.filters_of(requests)
    return SpecBatch(
        num_draft_tokens=batch.num_draft_tokens[requests.to(dev)],
        draft_token_ids=batch.draft_token_ids[d_idx_t],
        target_logits=batch.target_logits[torch.tensor(l_idx, dtype=torch.int64, device=dev)],
        draft_probs=None if batch.draft_probs is None else batch.draft_probs[d_idx_t],
        temperature=batch.temperature[requests.to(dev)],
        top_k=top_k, top_p=top_p, min_p=min_p, allow_nonfinite=batch.allow_nonfinite,
        tree_parents=None if batch.tree_parents is None else batch.tree_parents[d_idx_t],
    )
