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
"""

from __future__ import annotations

import re
import tomllib

from specverify.backends import Deviation

FIELDS = ("check", "case", "reason", "match")


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
        extra, missing = set(entry) - set(FIELDS), [f for f in FIELDS if f not in entry]
        if extra or missing:
            raise ValueError(f"{path}: deviation {i + 1}: unknown keys {sorted(extra)}, missing {missing}")
        deviation = Deviation(**entry)
        if known_checks is not None and deviation.check not in known_checks:
            raise ValueError(f"{path}: deviation {i + 1}: unknown check {deviation.check!r}")
        try:
            re.compile(deviation.match)
        except re.error as exc:
            raise ValueError(f"{path}: deviation {i + 1}: match is not a regular expression: {exc}") from None
        found.append(deviation)
    return tuple(found)


def matching(text: str, deviations) -> Deviation | None:
    """The first deviation whose ``match`` occurs in ``text``."""
    return next((d for d in deviations if re.search(d.match, text)), None)


__all__ = ["load_deviations", "matching"]
