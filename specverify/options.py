"""Checks of the options the faces (the CLI, the pytest plugin) share, run before a run starts so that a typo does not
cost a whole run: a report is written only at a run's end, and a nightly run takes an hour. Nothing here imports
torch at module level: the plugin runs these at configure time, before any test."""

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


def parse_device(text: str) -> str:
    """``text`` where torch parses it as a device; ValueError otherwise. Whether the run can reach the device is the
    run's to find (a backend that does not run there is not applicable, and a run where nothing applies fails);
    CUDA stays uninitialised, since the CLI forks its workers after this."""
    import torch  # noqa: PLC0415 - parsing only

    try:
        torch.device(text)
    except RuntimeError:
        raise ValueError(f"{text!r} is not a torch device (cpu, cuda, cuda:N)") from None
    return text
