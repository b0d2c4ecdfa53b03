"""The verdict of a run: what was checked (coverage), and whether that earns a PASS.

A run passes only when no check failed, at least one check of a core property (SPEC 4.1 agreement
with the reference, 4.2 distributions) actually ran, and everything the caller requires
(``--require standard,greedy,synthetic,block,tree,injected,seeded``) is declared by the backend and exercised
by a core check that ran. An n/a is never a pass: it is listed with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specverify.checks import CORE_KINDS, FAIL, KNOWN, NOT_APPLICABLE, NOT_RUN, PASS, CheckResult

REQUIREMENTS = ("standard", "greedy", "synthetic", "block", "tree", "injected", "seeded")
LOGIT_DTYPES = ("float32", "bfloat16", "float16", "float64")   # as the guard records them in ``covered``


def parse_requirements(text: str | None) -> tuple[str, ...]:
    """"standard,seeded" -> ("standard", "seeded"); an unknown name is a ValueError naming it."""
    names = tuple(n.strip() for n in (text or "").split(",") if n.strip())
    unknown = [n for n in names if n not in REQUIREMENTS]
    if unknown:
        raise ValueError(f"unknown requirement(s) {unknown}: use a comma-separated subset of {', '.join(REQUIREMENTS)}")
    return names


@dataclass(frozen=True)
class RecordedCapabilities:
    """What a report records of a backend's capabilities (``declared`` names and ``describe`` text): enough
    to judge a run again from its reports, as ``specverify merge`` does."""

    names: frozenset
    text: str


def declared(caps) -> set[str]:
    """The requirement names a backend's capabilities declare (greedy requests belong to every method)."""
    if isinstance(caps, RecordedCapabilities):
        return set(caps.names)
    names = {m for m in caps.methods if m in REQUIREMENTS} | {p for p in caps.noise if p in REQUIREMENTS}
    if caps.methods:
        names.add("greedy")
    return names


def describe(caps) -> str:
    if isinstance(caps, RecordedCapabilities):
        return caps.text
    def shown(values):
        return ", ".join(sorted(str(v).replace("torch.", "") for v in values)) or "none"
    return (f"methods: {shown(caps.methods)}; noise: {shown(caps.noise)}; devices: {shown(caps.devices)}; "
            f"logit dtypes: {shown(caps.logit_dtypes)}; seeded stream: {caps.seeded_stream}; "
            f"cuda graphs: {'yes' if getattr(caps, 'cuda_graphs', False) else 'no'}"
            + (f"; at most {caps.max_draft} drafts per request" if getattr(caps, "max_draft", None) else "")
            + (f"; token trees at most {caps.max_tree_depth} deep" if getattr(caps, "max_tree_depth", None) else "")
            + ("" if getattr(caps, "empty_batches", True) else "; no empty batches")
            + ("" if getattr(caps, "seeded_batch_invariant", True)
               else "; seeded stream depends on batch position (batch invariance: injected noise only)")
            + ("; bonus token sampled by the caller (its checks check the adapter)"
               if getattr(caps, "bonus_sampled_by_caller", False) else "")
            + (f"; {len(caps.deviations)} declared deviation(s)" if getattr(caps, "deviations", ()) else ""))


@dataclass
class Verdict:
    passed: bool
    reasons: list = field(default_factory=list)      # why the run did not pass, besides failed checks
    coverage: dict = field(default_factory=dict)     # requirement name -> ids of core checks exercising it
    not_applicable: dict = field(default_factory=dict)  # check id -> reason
    known: dict = field(default_factory=dict)           # check id -> reason of the declared deviation it showed
    stale: dict = field(default_factory=dict)           # check id -> declared deviation that did not occur
    unseen: dict = field(default_factory=dict)          # check id -> declared intermittent deviation not met
    dtypes: dict = field(default_factory=dict)          # logit dtype -> checks whose calls sent it

    def to_json(self) -> dict:
        return {"passed": self.passed, "reasons": self.reasons, "coverage": self.coverage,
                "not_applicable": self.not_applicable, "known_deviations": self.known,
                "deviations_not_seen": self.stale, "intermittent_not_seen": self.unseen,
                "logit_dtypes": self.dtypes}

    def lines(self) -> list[str]:
        out = ["coverage (core checks that ran, by what their calls exercised):"]
        for name in REQUIREMENTS:
            ids = self.coverage.get(name, [])
            out.append(f"  {name:<10} {len(ids):>3} core check(s)" + ("" if ids else "  <- not checked"))
        out.append("  logit dtypes sent: " + (", ".join(f"{d} ({n} checks)" for d, n in self.dtypes.items()) or "none"))
        if self.not_applicable:
            out.append(f"not applicable ({len(self.not_applicable)}; never counted as passed):")
            out += [f"  {cid}: {why}" for cid, why in self.not_applicable.items()]
        if self.known:
            out.append(f"known deviations ({len(self.known)}; declared, so not failures, and never counted as passed):")
            out += [f"  {cid}: {why}" for cid, why in self.known.items()]
        if self.stale:
            out.append(f"declared deviations that did not occur ({len(self.stale)}; remove them):")
            out += [f"  {cid}: {why}" for cid, why in self.stale.items()]
        if self.unseen:
            out.append(f"intermittent deviations this run did not meet ({len(self.unseen)}; kept: a run may not show "
                       "them; the checks passed):")
            out += [f"  {cid}: {why}" for cid, why in self.unseen.items()]
        out += [f"VERDICT: {reason}" for reason in self.reasons]
        return out


def verdict(results: list[CheckResult], caps, require: tuple = (), hang: str | None = None) -> Verdict:
    """``hang`` names the backend call that hung, when one did (the check pool declares it)."""
    ran = [r for r in results if r.status not in (NOT_APPLICABLE, KNOWN, NOT_RUN)]
    core = [r for r in ran if r.kind in CORE_KINDS]
    coverage = {name: [r.id for r in core if name in r.covered] for name in REQUIREMENTS}
    reasons = []
    not_run = [r for r in results if r.status == NOT_RUN]
    if not core and not_run:
        reasons.append("no check of a core property ran: the run stopped before one finished")
    elif not core:
        reasons.append("no check of a core property ran: the backend declares nothing checkable on this profile "
                       f"({describe(caps)})")
    have = declared(caps)
    for name in require:
        if name not in have:
            reasons.append(f"required {name!r} is not declared by the backend ({describe(caps)})")
        elif not coverage[name]:
            reasons.append(f"required {name!r} is declared but no core check exercised it")
    if hang:
        reasons.append(f"the backend hung: {hang}")
    if not_run:
        reasons.append(f"{len(not_run)} check(s) did not run ({not_run[0].message})")
    failed = any(r.status == FAIL for r in results)
    return Verdict(passed=not failed and not reasons, reasons=reasons, coverage=coverage,
                   not_applicable={r.id: r.message for r in results if r.status == NOT_APPLICABLE},
                   known={r.id: r.deviation for r in results if r.status == KNOWN},
                   stale={r.id: r.deviation for r in results if r.status == PASS and r.deviation},
                   unseen={r.id: r.intermittent for r in results if r.status == PASS and r.intermittent},
                   dtypes={d: n for d in LOGIT_DTYPES if (n := sum(d in r.covered for r in ran))})


__all__ = ["LOGIT_DTYPES", "REQUIREMENTS", "RecordedCapabilities", "Verdict", "declared", "describe", "parse_requirements", "verdict"]
