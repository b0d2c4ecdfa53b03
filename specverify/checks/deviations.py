"""Declared deviations: known failures a backend (``Capabilities.deviations``) or a run
(``--deviations FILE``) accepts. A failure that matches one is reported as a known deviation, not
as a pass and not as a new failure; a declared deviation that no longer occurs is reported so that
it gets removed.

The file is TOML, one table per deviation:

    [[deviation]]
    check = "differential_injected"
    case = "synthetic"                       # or "*" for every case of the check
    reason = "forced rejection emits the recovered token (vLLM); SPEC 3 samples p"
    match = "expected \\[1\\], got \\[0\\]"    # regular expression the failure text matches
    method = "synthetic"                     # optional: only divergences of calls under this method
    intermittent = true                      # optional: shows in some runs only (uninitialised memory, a race)

A deviation scoped to a method (``MethodDeviation``) excuses only divergences that the check reports
with that method: in a case that runs several rules (``replicated``), a declared synthetic-rule
behaviour never excuses a standard-rule divergence of the same shape. Where the caller does not say
which method a failure came from, a scoped deviation excuses nothing.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass

import reference
from specverify.backends import Deviation

FIELDS = ("check", "case", "reason", "match")
OPTIONAL = ("method", "intermittent")


@dataclass(frozen=True)
class MethodDeviation(Deviation):
    """A Deviation that excuses only divergences of calls under ``method`` (one of reference.METHODS)."""

    method: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.method is not None and self.method not in reference.METHODS:
            raise ValueError(f"deviation {self.check!r}: method must be one of {reference.METHODS}, "
                             f"got {self.method!r}")


def applies_to(deviation: Deviation, method: str | None) -> bool:
    """Whether ``deviation`` may excuse a failure of a call under ``method`` (None: not known). An unscoped
    deviation applies to every call; a scoped one only to calls known to be under its method."""
    scope = getattr(deviation, "method", None)
    return scope is None or scope == method


def load_deviations(path: str, known_checks=None) -> tuple[Deviation, ...]:
    """The deviations of a TOML file; ValueError naming the entry and the problem."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read deviations file {path!r}: {exc}") from None
    entries = data.get("deviation")
    if not isinstance(entries, list) or set(data) - {"deviation"}:
        raise ValueError(f"{path}: expected only [[deviation]] tables with {', '.join(FIELDS)}")
    found = []
    for i, entry in enumerate(entries):
        extra, missing = set(entry) - set(FIELDS) - set(OPTIONAL), [f for f in FIELDS if f not in entry]
        if extra or missing:
            raise ValueError(f"{path}: deviation {i + 1}: unknown keys {sorted(extra)}, missing {missing}")
        try:
            deviation = MethodDeviation(**entry) if "method" in entry else Deviation(**entry)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: deviation {i + 1}: {exc}") from None
        if known_checks is not None and deviation.check not in known_checks:
            raise ValueError(f"{path}: deviation {i + 1}: unknown check {deviation.check!r}")
        try:
            re.compile(deviation.match)
        except re.error as exc:
            raise ValueError(f"{path}: deviation {i + 1}: match is not a regular expression: {exc}") from None
        found.append(deviation)
    return tuple(found)


def matching(text: str, deviations, method: str | None = None) -> Deviation | None:
    """The first deviation whose ``match`` occurs in ``text`` and that applies to ``method``, the method of
    the call that failed (None: not known, so no method-scoped deviation applies)."""
    return next((d for d in deviations if applies_to(d, method) and re.search(d.match, text)), None)


def note_unmet(result, deviations) -> None:
    """A passed check's declared ``deviations``, none of which it met: a lasting one is named in ``deviation``
    for removal, an intermittent one in ``intermittent`` and kept; the message says which."""
    lasting = [d.reason for d in deviations if not d.intermittent]
    unseen = [d.reason for d in deviations if d.intermittent]
    notes = []
    if lasting:
        result.deviation = "; ".join(lasting)
        notes.append("declared deviation did not occur: remove it")
    if unseen:
        result.intermittent = "; ".join(unseen)
        notes.append("declared intermittent deviation did not show in this run (kept)")
    result.message = "; ".join(([result.message] if result.message else []) + notes)


__all__ = ["MethodDeviation", "applies_to", "load_deviations", "matching", "note_unmet"]
