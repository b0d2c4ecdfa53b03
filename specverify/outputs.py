"""Where the faces write what a run finds (reports, JUnit XML): checked before the run, since they are written only
at its end and a nightly run takes an hour. No torch import: the pytest plugin checks its path at configure time."""

from __future__ import annotations

import os


def unwritable(path: str) -> str | None:
    """Why a file could not be written at ``path`` (a directory, no parent directory, no permission), as the end of
    a sentence that starts with the path; None where it can be."""
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "is a directory"
    if not os.path.isdir(parent):
        return f"cannot be written: there is no directory {parent!r}"
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return "is not writable"
    return None
