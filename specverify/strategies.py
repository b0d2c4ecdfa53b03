"""Hypothesis strategies for spec-decode batches, and the ci / dev / nightly profiles.

``spec_examples`` draws a batch plus its noise: ragged draft counts with zeros anywhere, mixed
greedy and random requests, temperatures from tiny to huge, V from 1 up and not a multiple of any
block, peaked / flat / tied / near-tied / -inf-masked logits, drafters None, dense, equal to p and
disjoint from p, every logit dtype. Tensor contents come from a torch.Generator seeded by a drawn
integer, so Hypothesis shrinks the structure (sizes, styles) and replays contents exactly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

import torch
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from reference import Noise, SpecBatch
from specverify.generate import DRAFTERS, draft_distribution

LOGIT_STYLES = ("normal", "peaked", "flat", "tied", "near_tied", "masked")
TEMPERATURES = (1e-3, 0.1, 0.7, 1.0, 2.5, 100.0)
PROFILE_ENV = "SPECVERIFY_PROFILE"


@dataclass(frozen=True)
class Profile:
    """How hard a run looks: example counts, sizes, the statistical target and error budget.

    The statistical sample size is declared by what it guarantees, not as a count: ``detect_tv`` is the
    total-variation distance at position 0 that every token_distribution check detects with probability
    0.99 at its per-position alpha. ``specverify.checks.statistical.stat_copies`` turns it into the
    number of replicated requests per statistical case (the checks own the cases and the tests, and this
    module may not import them). ``stat_copies`` set here overrides that, for a run of a fixed size.
    ``detect_tv_later`` sets a target for every later position too: each case's copies are then planned
    per position (specverify.checks.sampling), the way the nightly spends the device's speed.
    """

    name: str
    examples: int                 # Hypothesis examples per differential / structural case
    max_requests: int
    max_vocab: int
    max_draft: int
    detect_tv: float              # TV distance at position 0 each token_distribution check detects (power 0.99)
    family_alpha: float           # family-wise false-alarm budget over all statistical checks of a run
    device: str = "cpu"
    logit_dtypes: tuple = (torch.float32, torch.bfloat16, torch.float16)
    dense_drafts: bool = True     # draw dense drafters (q rows) as well as one-hot ones
    bulk_requests: int = 384      # the "bulk" differential case: many decisions per example
    bulk_examples: int = 4
    large_vocabs: tuple = ()      # extra differential sizes (V) for the nightly GPU run
    production_vocabs: tuple = (151_936, 262_144)  # sizes of the structural large-vocabulary checks, any device
    large_requests: int = 0
    replicated_copies: int = 8_000  # copies of each statistical case in the replicated differential case
    check_timeout: float = 600.0  # seconds one check may take in the CLI's workers; a correct backend stays far below
    call_timeout: float = 120.0   # seconds one backend call may take before the backend is declared hung
    deadline: float = 900.0       # seconds the whole CLI run may take; then the rest is reported not run
    # seconds a production-vocabulary statistical case may take, projected from a measured first launch
    # (over it the case is n/a with the measurement; with detect_tv_later, it draws what the budget buys
    # and says so); None: always run it
    large_case_budget: float | None = 30.0
    large_case_copies: int | None = 1_000   # at most this many copies of such a case; None: the case's own cap
    notes: tuple = field(default_factory=tuple)
    shrink: bool = True           # False: a failing example is reported as found, not shrunk (runs that
                                  # ask only whether a check fails; the reproducer still reduces it)
    stat_copies: int | None = None  # replicated requests per statistical case; None: sized from detect_tv
    # TV distance every later position detects (power 0.99): each case's copies are planned so that every
    # position reaches its target, and the cases' caps are lifted; None: position 0 plans the copies
    detect_tv_later: float | None = None

    def within(self, caps) -> "Profile":
        """This profile narrowed to what a backend declares (``Capabilities``), so that generated batches
        stay inside it: at most its ``max_draft`` drafts, only its logit dtypes, and no dense drafter where
        it takes one-hot drafts only."""
        dtypes = tuple(d for d in self.logit_dtypes if d in caps.logit_dtypes) or self.logit_dtypes
        limit = min(self.max_draft, getattr(caps, "max_draft", None) or self.max_draft)
        return replace(self, max_draft=limit, logit_dtypes=dtypes,
                       dense_drafts=self.dense_drafts and getattr(caps, "dense_draft_probs", True))


PROFILES = {
    "ci": Profile("ci", examples=20, max_requests=10, max_vocab=300, max_draft=4, detect_tv=0.045,
                  family_alpha=1e-3),
    # for slow backends (the Triton interpreter on CPU): the ci plan with fewer samples
    "smoke": Profile("smoke", examples=10, max_requests=8, max_vocab=200, max_draft=4, detect_tv=0.3,
                     family_alpha=1e-3, bulk_requests=96, bulk_examples=2, replicated_copies=16,
                     check_timeout=1800.0, call_timeout=300.0, deadline=1800.0),
    "dev": Profile("dev", examples=100, max_requests=24, max_vocab=2_000, max_draft=6, detect_tv=0.018,
                   family_alpha=1e-3, replicated_copies=20_000, check_timeout=1800.0, call_timeout=300.0,
                   deadline=3600.0),
    # CUDA. Batches up to 1,024 requests come from the bulk case (V <= 64); the large-vocabulary case
    # goes up to V = 262,144 with at most 8 requests: inputs are generated in float64 on the CPU, so
    # B * V is capped.
    "nightly": Profile("nightly", examples=60, max_requests=64, max_vocab=4_096, max_draft=6,
                       detect_tv=0.001, detect_tv_later=0.002, family_alpha=1e-3, device="cuda",
                       check_timeout=1800.0,
                       call_timeout=300.0, deadline=3600.0, large_case_budget=270.0, large_case_copies=None,
                       replicated_copies=20_000,
                       bulk_requests=1_024, bulk_examples=6,
                       large_vocabs=(32_000, 151_936, 262_144), large_requests=8),
}


def get_profile(name: str | None = None) -> Profile:
    """The named profile, else $SPECVERIFY_PROFILE, else "ci"."""
    name = name or os.environ.get(PROFILE_ENV, "ci")
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}: use one of {sorted(PROFILES)}")
    return PROFILES[name]


def hypothesis_settings(profile: Profile, examples: int | None = None, shrink: bool = True) -> settings:
    """Derandomized, no example database, no deadline: a run is reproducible bit for bit. Without
    ``shrink`` a failure is reported as found (for big batches, where each replay is expensive)."""
    # The explain phase re-runs a failing test about a hundred times to annotate which inputs matter; the
    # report does not use it, and it would make a failing check many times slower than a passing one.
    shrink = shrink and profile.shrink
    phases = [p for p in Phase if p != Phase.explain and (shrink or p != Phase.shrink)]
    return settings(max_examples=examples or profile.examples, derandomize=True, database=None, deadline=None,
                    print_blob=False, suppress_health_check=list(HealthCheck), phases=phases)


@dataclass(frozen=True)
class Example:
    """One drawn case: a batch, injected noise for it, and per-request seeds for the seeded path."""

    batch: SpecBatch
    noise: Noise
    seeds: torch.Tensor   # [B] int64
    description: str

    def __repr__(self) -> str:
        return self.description


def _styled_logits(g: torch.Generator, counts: list[int], V: int, styles: list[str]) -> torch.Tensor:
    """[T + B, V] float64: request b's k_b + 1 rows in its own style."""
    blocks = [_logits(g, k + 1, V, style) for k, style in zip(counts, styles)]
    return torch.cat(blocks) if blocks else torch.zeros(0, V, dtype=torch.float64)


def _logits(g: torch.Generator, rows: int, V: int, style: str) -> torch.Tensor:
    if style == "normal":
        return torch.randn(rows, V, generator=g, dtype=torch.float64) * 3
    if style == "peaked":
        x = torch.randn(rows, V, generator=g, dtype=torch.float64)
        x[torch.arange(rows), torch.randint(0, V, (rows,), generator=g)] += 20
        return x
    if style == "flat":
        return torch.zeros(rows, V, dtype=torch.float64)
    if style == "tied":
        return torch.randint(0, 3, (rows, V), generator=g).to(torch.float64)
    if style == "near_tied":
        # three contenders 2^-8 apart near 0.5 (exact in every logit dtype) above a low floor: far
        # above float32 rounding of the probabilities, within bf16 resolution of them
        x = torch.randn(rows, V, generator=g, dtype=torch.float64) - 4.0
        for r in range(rows):
            top = torch.randperm(V, generator=g)[:3]
            x[r, top] = 0.5 + torch.arange(top.numel(), dtype=torch.float64) * 2.0 ** -8
        return x
    # masked: -inf on a random subset, never a whole row; the last tile's real entries often all masked
    x = torch.randn(rows, V, generator=g, dtype=torch.float64) * 2
    mask = torch.rand(rows, V, generator=g) < 0.5
    if V > 8:
        mask[:, -(V % 8 or 8):] = True
    mask[torch.arange(rows), torch.randint(0, V, (rows,), generator=g)] = False
    return x.masked_fill(mask, float("-inf"))


def _filter_settings(draw, B: int, V: int) -> tuple:
    """Per-request (top_k [B] int64, top_p [B] float32, min_p [B] float32): off, k = 1, k at or past V,
    top_p near 0 and near 1, min_p small and large, mixed in one batch."""
    ks = draw(st.lists(st.sampled_from((0, 1, 2, 3, V, V + 1)), min_size=B, max_size=B))
    ps = draw(st.lists(st.sampled_from((1.0, 1e-3, 0.3, 0.9, 1.0 - 2.0 ** -20)), min_size=B, max_size=B))
    ms = draw(st.lists(st.sampled_from((0.0, 0.05, 0.5, 0.99)), min_size=B, max_size=B))
    return (torch.tensor(ks, dtype=torch.int64), torch.tensor(ps, dtype=torch.float32),
            torch.tensor(ms, dtype=torch.float32))


@st.composite
def spec_examples(draw, profile: Profile, *, max_vocab: int | None = None, min_requests: int = 1,
                  max_requests: int | None = None, device: str = "cpu", filters: bool = False,
                  placeholders: bool = False):
    """A batch with its noise and seeds (see the module docstring for what varies); every request
    draws its own logit style, temperature and draft count, and with ``filters`` its own top-k, top-p
    and min-p (SPEC 3.4), each off for some requests; with ``placeholders`` about a third of the draft
    slots hold the placeholder -1 (SPEC 3.5), first slots and trailing padding included."""
    max_vocab = max_vocab or profile.max_vocab
    B = draw(st.integers(min_requests, max(min_requests, max_requests or profile.max_requests)))
    V = draw(st.one_of(st.just(1), st.integers(2, 40), st.integers(2, max_vocab)))
    counts = draw(st.lists(st.integers(0, profile.max_draft), min_size=B, max_size=B))
    temps = draw(st.lists(st.sampled_from((0.0,) + TEMPERATURES), min_size=B, max_size=B))
    styles = draw(st.lists(st.sampled_from(LOGIT_STYLES), min_size=B, max_size=B))
    drafter = draw(st.sampled_from(DRAFTERS if profile.dense_drafts else ("none",)))
    dtype = draw(st.sampled_from(profile.logit_dtypes))
    seed = draw(st.integers(0, 2 ** 31 - 1))
    g = torch.Generator().manual_seed(seed)

    k = torch.tensor(counts, dtype=torch.int64)
    T = int(k.sum())
    temperature = torch.tensor(temps, dtype=torch.float32)
    logits = _styled_logits(g, counts, V, styles).to(dtype)
    # p as a kernel would see it, for drafters defined relative to p
    req_of_row = torch.repeat_interleave(torch.arange(B), k + 1)
    draft_row = torch.ones(T + B, dtype=torch.bool)
    if B:
        draft_row[torch.cumsum(k + 1, 0) - 1] = False
    row_t = temperature[req_of_row][draft_row].double()
    scaled = logits[draft_row].double() / torch.where(row_t > 0, row_t, torch.ones_like(row_t))[:, None]
    p = torch.softmax(scaled, dim=-1)
    q = draft_distribution(p, drafter, g, 2.0)
    if T:
        source = q if q is not None else torch.full((T, V), 1.0 / V, dtype=torch.float64)
        drafts = torch.multinomial(source, 1, generator=g).squeeze(1)
        # greedy requests: half of the drafts are the target argmax, so acceptance paths are exercised
        greedy_row = (row_t == 0) & (torch.rand(T, generator=g) < 0.5)
        drafts = torch.where(greedy_row, logits[draft_row].double().argmax(dim=1), drafts)
    else:
        drafts = torch.zeros(0, dtype=torch.int64)
    q32 = None if q is None else q.float()
    if q32 is not None and T:
        q32 = q32 / q32.sum(dim=1, keepdim=True)
    settings = _filter_settings(draw, B, V) if filters else (None, None, None)
    if placeholders and T:
        drafts = torch.where(torch.rand(T, generator=g) < 0.35, -1, drafts)
    batch = SpecBatch(k.to(device), drafts.to(device), logits.to(device),
                      None if q32 is None else q32.to(device), temperature.to(device),
                      *(None if f is None else f.to(device) for f in settings))
    noise = Noise.draw(batch, g)
    seeds = torch.randint(0, 2 ** 62, (B,), generator=g, dtype=torch.int64)
    def shown(values):
        return values if len(values) <= 16 else f"{values[:16]} ... ({len(values)} requests)"

    shown_filters = "" if not filters else (f"top_k={shown(settings[0].tolist())}, top_p={shown(settings[1].tolist())}, "
                                             f"min_p={shown(settings[2].tolist())}, ")
    desc = (f"Example(B={B}, V={V}, num_draft_tokens={shown(counts)}, temperature={shown(temps)}, {shown_filters}"
            f"logits={shown(styles)}, drafter={drafter}, dtype={str(dtype).replace('torch.', '')}, contents_seed={seed})")
    return Example(batch, noise, seeds, desc)
