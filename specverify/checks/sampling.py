"""Sampling for the statistical checks (SPEC 5) at the backend's speed.

A statistical case is one request replicated many times. ``plan`` decides how many copies each
position needs; ``draw`` launches them in chunks whose inputs are built on the backend's device and
counts the outputs there (``Tally``): only the counts reach the host, so memory stays flat however
many samples are drawn, and the harness's share of the time stays small. A chain case's V-wide rows
are built once per launch size; each launch draws fresh drafts (a tree with fixed drafts keeps them)
and fresh noise (or seeds).

    plan(case, profile, alpha) -> Plan      copies, and per position: reach, det99 target, samples
    Tally(depth, V, device, sequences)      running counts: the token at each position j among the
                                            requests that reached j, the num_accepted histogram,
                                            and (where a check needs it) the emitted sequences
    draw(backend, case, profile, seed, plan) -> (Tally, Timing)

The plan: position j is reached with probability ``reach_j = P(num_accepted >= j)`` (from the case's
exact law), and its chi-square needs ``stats.min_num_samples_for_chi2_tv_test(target_j, dof_j,
alpha / (depth + 1))`` samples, so the case needs the largest ``need_j / reach_j`` copies. Position 0's
target is ``profile.detect_tv``; later positions' is ``profile.detect_tv_later`` where the profile sets
it (the nightly), else they get what position 0's copies give them, and the cases' own caps apply.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass

import torch

from reference import Noise, SpecOutput
from specverify.checks import stats
from specverify.strategies import Profile

LAUNCH_BYTES = 4 << 30     # a device launch's inputs at most this large (logits, q, injected noise)
LAUNCH_COPIES = 1 << 18    # and at most this many copies: each launch costs the harness about 10 ms of
                           # host work, and a kernel that finds its request offsets by summing the draft
                           # counts before it costs O(B^2) in one launch (ours reads appended offsets)
_clock = time.perf_counter   # the sampling's clock (tests stand in for it)
PROBE_COPIES = 4   # copies of the first launch of a case with a cost budget: it measures the backend's speed
PROBE_SLACK = 4.0  # a probe projecting over this many budgets ends the case before a full launch


class OverBudget(Exception):
    """A production-vocabulary case projected over the profile's budget: the message says by how much."""


@dataclass(frozen=True)
class Plan:
    """How many copies a case is sampled with, and what each position gets from them."""

    copies: int
    reach: tuple            # [depth + 1] P(the request reaches position j)
    target: tuple           # [depth + 1] det99 TV target per position, None where none is planned
    fixed: bool = False     # the profile fixed the count (``stat_copies``) or a cap cut it

    def samples(self) -> list[int]:
        """Expected samples per position: copies times reach."""
        return [int(self.copies * r) for r in self.reach]

    def to_json(self) -> dict:
        return {"planned_copies": self.copies, "fixed": self.fixed, "reach": [round(r, 6) for r in self.reach],
                "target_tv": list(self.target), "expected_samples": self.samples()}


def round_up_to_one_significant_digit(n: int) -> int:
    unit = 10 ** (len(str(n)) - 1)
    return -(-n // unit) * unit


def reach(case) -> list[float]:
    """[depth + 1] P(num_accepted >= j) under the case's exact law."""
    by_length = Counter()
    for tokens, w in case.sequences.items():
        by_length[len(tokens) - 1] += w
    return [sum(w for n, w in by_length.items() if n >= j) for j in range(case.depth + 1)]


def position_dof(case, j: int) -> int:
    """Degrees of freedom of the chi-square at position j with no bin merged: its support less one."""
    return max(1, int((case.position_distributions[j] > 0).sum()) - 1)


def plan(case, profile: Profile, alpha: float, position0_copies: int | None = None) -> Plan:
    """The copies of ``case`` under ``profile``. ``position0_copies``: the count that gives position 0 its
    target in every case (``statistical.stat_copies``), used where later positions are not planned. A
    count the profile fixes (``stat_copies``) keeps the cases' caps on such a profile too."""
    reached = reach(case)
    if profile.stat_copies is not None:
        copies = profile.stat_copies if profile.detect_tv_later is not None else _capped(case, profile,
                                                                                         profile.stat_copies)
        return Plan(copies, tuple(reached), (None,) * len(reached), fixed=True)
    if profile.detect_tv_later is None:
        copies = _capped(case, profile, position0_copies)
        return Plan(copies, tuple(reached), (profile.detect_tv,) + (None,) * (len(reached) - 1),
                    copies < position0_copies)
    targets = (profile.detect_tv,) + (profile.detect_tv_later,) * case.depth
    need = 1
    for j, (r, tv) in enumerate(zip(reached, targets)):
        if r > 0:
            samples = stats.min_num_samples_for_chi2_tv_test(tv, position_dof(case, j), alpha / (case.depth + 1))
            need = max(need, copies_reaching(samples, r))
    return Plan(round_up_to_one_significant_digit(need), tuple(reached), targets)


def _capped(case, profile: Profile, copies: int) -> int:
    """``copies`` under the case's own cap and, for a production-vocabulary case, the profile's: a
    profile without a target for later positions keeps them (memory and time at large V)."""
    caps = [c for c in (case.max_copies, case.launch_copies and profile.large_case_copies) if c]
    return min([copies] + caps)


REACH_Z = 4.0   # the plan's margin on a position's random reach: short with probability about 3e-5


def copies_reaching(samples: int, r: float) -> int:
    """The fewest copies c whose reach of a position (Binomial(c, r)) falls under ``samples`` only
    ``REACH_Z`` standard deviations below its mean: c r - z sqrt(c r (1 - r)) >= samples, a quadratic in
    sqrt(c). Planning on the mean alone leaves a late position short about half the time."""
    spread = REACH_Z * math.sqrt(max(0.0, r * (1 - r)))   # r may exceed 1 by rounding
    root = (spread + math.sqrt(spread ** 2 + 4 * r * samples)) / (2 * r)
    return math.ceil(root ** 2)


class Tally:
    """Running counts of a replicated case's outputs, on the device the outputs come from.

    tokens [depth + 1, V]: the token emitted at j among requests with num_accepted >= j; stops [depth + 1,
    V]: the token emitted at j among requests with num_accepted == j (the token after a rejection, or the
    bonus); lengths [depth + 3]: histogram of num_accepted clamped to [-1, depth + 1] (the ends hold invalid
    counts); outside: per position, the first ids outside [0, V) seen; sequences: emitted sequence -> count."""

    def __init__(self, depth: int, vocab_size: int, device="cpu", sequences: bool = False) -> None:
        self.width, self.vocab_size = depth + 1, vocab_size
        self._tokens = torch.zeros(self.width * vocab_size, dtype=torch.int64, device=device)
        self._stops = torch.zeros(self.width * vocab_size, dtype=torch.int64, device=device)
        self._lengths = torch.zeros(self.width + 2, dtype=torch.int64, device=device)
        self._accepted_sum = torch.zeros((), dtype=torch.int64, device=device)
        self.samples = 0
        self.outside: dict = {}
        self.sequences = Counter() if sequences else None

    @classmethod
    def of(cls, case, out: SpecOutput, sequences: bool = True) -> "Tally":
        """The tally of one output (every check's evaluation takes a tally; calibration passes outputs)."""
        tally = cls(case.depth, case.vocab_size, out.token_ids.device, sequences)
        tally.add(out)
        return tally

    def add(self, out: SpecOutput) -> None:
        ids, n = out.padded(max(self.width, out.token_ids.shape[1])).token_ids, out.num_accepted
        V, j = self.vocab_size, torch.arange(self.width, device=ids.device)
        head = ids[:, : self.width]
        reached = j[None, :] <= n[:, None]
        valid = (head >= 0) & (head < V)
        bad = reached & ~valid
        if bool(bad.any()):
            for pos in torch.nonzero(bad.any(0)).flatten().tolist():
                seen = self.outside.setdefault(pos, [])
                seen += head[bad[:, pos], pos][: 5 - len(seen)].tolist()
        keep = reached & valid
        cells = j[None, :] * V + head
        self._tokens += torch.bincount(cells[keep], minlength=self.width * V)
        self._stops += torch.bincount(cells[keep & (j[None, :] == n[:, None])], minlength=self.width * V)
        self._lengths += torch.bincount(n.clamp(-1, self.width) + 1, minlength=self.width + 2)
        self._accepted_sum += n.sum()
        self.samples += n.numel()
        if self.sequences is not None:
            self.sequences.update(_sequence_counts(ids, n, V))

    def cpu(self) -> "Tally":
        """The same counts on the CPU (to cross a process boundary)."""
        copy = object.__new__(Tally)
        copy.__dict__.update(self.__dict__)
        copy._tokens, copy._stops, copy._lengths, copy._accepted_sum = (
            t.cpu() for t in (self._tokens, self._stops, self._lengths, self._accepted_sum))
        return copy

    @classmethod
    def summed(cls, tallies: list["Tally"]) -> "Tally":
        """One tally of every sample of ``tallies`` (the parts of one split draw, on the CPU)."""
        first = tallies[0]
        total = cls(first.width - 1, first.vocab_size, "cpu", first.sequences is not None)
        for t in tallies:
            total._tokens += t._tokens.cpu()
            total._stops += t._stops.cpu()
            total._lengths += t._lengths.cpu()
            total._accepted_sum += t._accepted_sum.cpu()
            total.samples += t.samples
            for pos, seen in t.outside.items():
                kept = total.outside.setdefault(pos, [])
                kept += seen[: 5 - len(kept)]
            if total.sequences is not None:
                total.sequences.update(t.sequences)
        return total

    def tokens(self) -> torch.Tensor:
        """[depth + 1, V] int64 on the CPU."""
        return self._tokens.view(self.width, self.vocab_size).cpu()

    def stops(self) -> torch.Tensor:
        """[depth + 1, V] int64 on the CPU."""
        return self._stops.view(self.width, self.vocab_size).cpu()

    def reached(self, j: int) -> int:
        """Requests with num_accepted >= j."""
        return int(self._lengths[j + 1:].sum())

    def accepted_sum(self) -> int:
        return int(self._accepted_sum)


def _sequence_counts(ids: torch.Tensor, n: torch.Tensor, V: int) -> dict:
    """{emitted tokens: count} of a chunk: each row's tokens up to num_accepted, as one key per sequence."""
    emitted = torch.where(torch.arange(ids.shape[1], device=ids.device)[None, :] <= n[:, None], ids, -1)
    base = V + 1
    if base ** ids.shape[1] < 2 ** 62 and bool(((emitted >= -1) & (emitted < V)).all()):
        # one integer per sequence (its ids + 1 as digits in base V + 1): a 1-D unique, far cheaper than
        # a unique over rows
        digits = base ** torch.arange(ids.shape[1], device=ids.device)
        keys, times = torch.unique(((emitted + 1) * digits).sum(1), return_counts=True)
        unique = keys[:, None] // digits % base - 1
    else:
        unique, times = torch.unique(emitted, dim=0, return_counts=True)
    return {tuple(t for t in row if t != -1): int(c) for row, c in zip(unique.tolist(), times.tolist())}


@dataclass
class Timing:
    """Where a case's sampling time went: in the backend's calls, and in all (inputs, counting)."""

    copies: int = 0
    launches: int = 0
    backend_seconds: float = 0.0
    total_seconds: float = 0.0
    budget_cut: str | None = None   # why fewer copies than planned were drawn
    first_copies: int = 0           # the first launch's copies and wall time: it compiles the backend's
    first_seconds: float = 0.0      # kernels for the case's shapes in a fresh process

    def to_json(self) -> dict:
        rate = self.copies / self.total_seconds if self.total_seconds > 0 else None
        share = self.backend_seconds / self.total_seconds if self.total_seconds > 0 else None
        later = self.total_seconds - self.first_seconds
        steady = (self.copies - self.first_copies) / later if self.launches > 1 and later > 0 else None
        return {"copies": self.copies, "launches": self.launches, "budget_cut": self.budget_cut,
                "samples_per_second": rate, "steady_samples_per_second": steady,
                "backend_share": share, "backend_seconds": round(self.backend_seconds, 4),
                "seconds": round(self.total_seconds, 4)}


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def launch_size(case, copies: int, device) -> int:
    """Copies per launch: the case's own launch size on the CPU (all at once without one); on a device,
    as many as fit ``LAUNCH_BYTES`` of inputs."""
    if torch.device(device).type == "cpu":
        return min(copies, case.launch_copies or copies)
    rows = case.k + 1
    per_copy = case.vocab_size * (4 * rows + 4 * case.k + 8)
    return max(1, min(copies, LAUNCH_COPIES, LAUNCH_BYTES // per_copy))


def draw(backend, case, profile: Profile, seed: int, chosen: Plan, sequences: bool = False):
    """Sample ``chosen.copies`` copies of ``case`` from ``backend``; returns (Tally, Timing). Inputs are
    built on the profile's device (drafts, noise and seeds drawn there); the
    backend's seeded path is used where declared, except for a production-vocabulary case on the CPU,
    where drawing the seeded stream costs more than the case (injected noise, where declared)."""
    device = torch.device(profile.device)
    on_cpu = device.type == "cpu"
    g = torch.Generator(device="cpu" if on_cpu else device).manual_seed(seed)
    declared = backend.capabilities.noise
    seeded = "seeded" in declared and not (on_cpu and case.launch_copies and "injected" in declared)
    tally, timing = Tally(case.depth, case.vocab_size, device, sequences), Timing()
    start = _clock()
    # the rows, built once per launch size: a chain draws fresh drafts each launch, a tree with fixed
    # drafts is the same batch every launch, a tree drawing its drafts per copy is built every launch
    built = None
    per_copy_tree = case.parents is not None and case.drafts is None

    def launch(n: int) -> None:
        nonlocal built
        if per_copy_tree or built is None or built.num_requests != n:
            batch = built = case.batch(n, g, g.device).to(device)
        elif case.parents is not None:
            batch = built
        else:
            batch = built.with_drafts(case.fresh_drafts(n, g).to(device))
        if seeded:
            kwargs = dict(seed=torch.randint(0, 2 ** 62, (n,), generator=g, dtype=torch.int64,
                                             device=g.device).to(device))
        else:
            kwargs = dict(noise=Noise.draw(batch, g))
        _sync(device)
        called = _clock()
        out = backend(batch, **kwargs, **case.call_kwargs())
        _sync(device)
        timing.backend_seconds += _clock() - called
        tally.add(SpecOutput(out.token_ids.to(device), out.num_accepted.to(device)))
        timing.copies += n
        timing.launches += 1

    copies, budget = chosen.copies, profile.large_case_budget
    full = launch_size(case, copies, device)
    probing = bool(case.launch_copies and budget is not None)
    # a planned profile draws until the plan or the budget's time is spent (a projection from one launch
    # misjudges a GPU shared with other workers), and says which
    timed = probing and profile.detect_tv_later is not None
    while timing.copies < copies:
        if timed and _clock() - start >= budget:
            timing.budget_cut = (f"{timing.copies:,} of {chosen.copies:,} planned copies: the profile's budget is "
                                 f"{budget:g} s at V = {case.vocab_size:,}, and it ran out")
            break
        n = min(PROBE_COPIES if probing and timing.launches == 0 else full, copies - timing.copies)
        began = _clock()
        if timing.launches == 1:    # the first launch and its counting are over
            timing.first_copies, timing.first_seconds = timing.copies, began - start
        launch(n)
        if timed or not probing or timing.launches > 2 or timing.copies >= copies:
            continue
        seconds = _clock() - began
        projected = seconds / n * copies
        # The probe's fixed costs make its projection pessimistic: far over the budget ends the case at
        # once; otherwise the first full launch decides.
        if projected > (PROBE_SLACK if timing.launches == 1 else 1) * budget:
            raise OverBudget(
                f"measured {seconds:.2f} s for {n} copies at V = {case.vocab_size:,}: {copies:,} copies "
                f"would take about {projected:.0f} s, over the profile's budget of {budget:g} s for a "
                "production-vocabulary case (the nightly profile runs it)")
    _sync(device)
    timing.total_seconds = _clock() - start
    return tally, timing


__all__ = ["LAUNCH_BYTES", "OverBudget", "Plan", "Tally", "Timing", "draw", "launch_size", "plan", "position_dof", "reach",
           "round_up_to_one_significant_digit"]
