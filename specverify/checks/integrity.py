"""Input integrity of a guarded call (SPEC 7): the private copy a backend is handed, and what it wrote.

    private_batch(batch) -> a SpecBatch sharing no memory with ``batch``
    written_inputs(pairs) -> ["name (how it changed)", ...] for pairs (name, the copy handed over, the
                             caller's original); [] when none changed
"""

from __future__ import annotations

import torch

from reference import SpecBatch
from reference.batch import FIELDS


def private_batch(batch: SpecBatch) -> SpecBatch:
    """A copy of ``batch`` sharing no memory with it. Built without re-validating: the caller's batch
    was validated at construction, and a copy of valid tensors is valid."""
    copy = object.__new__(SpecBatch)
    for name in FIELDS:
        value = getattr(batch, name)
        object.__setattr__(copy, name, None if value is None else value.clone())
    object.__setattr__(copy, "allow_nonfinite", batch.allow_nonfinite)
    return copy


def _replaced(given, original) -> bool:
    """The input handed over is no longer a tensor of the original's shape and dtype."""
    return not isinstance(given, torch.Tensor) or original is None \
        or given.shape != original.shape or given.dtype != original.dtype


def _differs(given: torch.Tensor, original: torch.Tensor) -> torch.Tensor:
    """[same shape] bool: the entries written; a NaN left as NaN (SPEC 3.6) is not one."""
    differ = given != original
    if given.is_floating_point():
        differ &= ~(given.isnan() & original.isnan())
    return differ


def _changed(name: str, given, original) -> str | None:
    """How input ``name`` differs from its original, or None."""
    if original is None and given is None:
        return None
    if _replaced(given, original):
        return f"{name} (replaced)"
    if torch.equal(given, original):
        return None
    diff = int(_differs(given, original).sum())
    return f"{name} ({diff} of {original.numel()} elements changed)" if diff else None


def _maybe_changed(pairs) -> bool:
    """False when no input of ``pairs`` (name, given copy, original) changed: one host sync for them all, as
    a statistical check makes thousands of calls. True sends every pair to ``_changed`` for the message."""
    flags = []
    for _, given, original in pairs:
        if original is None and given is None:
            continue
        if _replaced(given, original) or given.device != original.device:
            return True
        if given.device.type == "cpu":      # no sync to save there, and torch.equal is the fastest compare
            if torch.equal(given, original):
                continue
            return True
        flag = _differs(given, original).any().reshape(1)
        flags.append(flag.to(flags[0].device) if flags else flag)
    return bool(torch.cat(flags).any()) if flags else False


def written_inputs(pairs) -> list[str]:
    """What the backend wrote into its inputs: one host sync when nothing changed (the common case, and a
    statistical check makes thousands of calls), a message per changed input otherwise."""
    return [c for c in (_changed(*pair) for pair in pairs) if c] if _maybe_changed(pairs) else []


__all__ = ["private_batch", "written_inputs"]
