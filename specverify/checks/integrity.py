"""Input integrity of a guarded call (SPEC 7): the private copy a backend is handed, and what it wrote.

    private_batch(batch) -> a SpecBatch sharing no memory with ``batch``
    Copies                -> private copies of large float inputs, kept from call to call
    strided_copy(t)       -> a copy of ``t`` as a strided view into a poisoned buffer (SPEC 4.11)
    outside_view(t)       -> the elements of ``t``'s buffer that the view does not cover
    strided_inputs()      -> while active, every guarded call hands its inputs over as strided copies
    written_inputs(pairs, fingerprint_of)
                          -> ["name (how it changed)", ...] for pairs (name, the copy handed over, the
                             caller's original); [] when none changed
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from reference import SpecBatch
from reference.batch import FIELDS
from specverify.kernels.fingerprint import fingerprint


REUSED_ELEMENTS = 1 << 20    # private copies of float tensors this large reuse their memory
# and, on these devices, are checked after a call by their fingerprint: one read of the copy, where the
# comparison with the original reads both and writes a mask (half the GPU time of a V = 262,144 draw)
FINGERPRINTED = ("cuda",)


class Copies:
    """Private copies of large float inputs, kept from call to call. A statistical check makes thousands
    of calls with the same V-wide rows: a copy found equal to its original after a call is handed over
    again while the original is the same tensor, unchanged since (its version counter: the caller's
    in-place writes bump it, and the backend never holds the original); otherwise a kept buffer of the
    same layout is overwritten (on the CPU a fresh allocation costs its page faults again). A backend's
    outputs (int64) cannot be views of these float copies. On a FINGERPRINTED device each copy's
    fingerprint is taken as it is made (``fingerprint_of``), for the check after the call."""

    def __init__(self) -> None:
        self._free: dict = {}       # layout -> a buffer no call holds
        self._verified: dict = {}   # id(original) -> (original, its version, the copy found equal to it)
        self._fingerprints: dict = {}   # id(copy) -> (copy, its fingerprint when made)

    @staticmethod
    def _key(t: torch.Tensor):
        return tuple(t.shape), t.stride(), t.dtype, t.device

    @staticmethod
    def _kept(t) -> bool:
        return isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() >= REUSED_ELEMENTS

    def of(self, t: torch.Tensor | None) -> torch.Tensor | None:
        """A copy of ``t`` sharing no memory with it (None for None)."""
        if not self._kept(t):
            return None if t is None else t.clone()
        original, version, copy = self._verified.pop(id(t), (None, None, None))
        if original is t and version == t._version:
            return copy
        buffer = self._free.pop(self._key(t), None)
        copy = t.clone() if buffer is None else buffer.copy_(t)
        if copy.device.type in FINGERPRINTED:
            made = fingerprint(copy)
            if made is not None:
                self._fingerprints[id(copy)] = (copy, made)
        return copy

    def fingerprint_of(self, copy) -> torch.Tensor | None:
        """The fingerprint ``copy`` had when this object made it, or None."""
        kept = self._fingerprints.get(id(copy))
        return kept[1] if kept is not None and kept[0] is copy else None

    def give_back(self, pairs) -> None:
        """(name, copy, original) of a call whose copies were all found equal to their originals."""
        for previous in self._verified.values():
            self._free[self._key(previous[2])] = previous[2]
        self._verified = {id(original): (original, original._version, copy)
                          for _, copy, original in pairs if self._kept(copy) and self._kept(original)}
        live = {id(v[2]) for v in self._verified.values()} | {id(b) for b in self._free.values()}
        self._fingerprints = {k: v for k, v in self._fingerprints.items() if k in live}


# Poison around and between the elements of a strided copy: values that change any decision they reach (a logit,
# probability, uniform or exponential of 1e4; an id, count or seed no batch holds), so that a backend that reads
# the buffer as if it were contiguous reads them. The pad keeps each view 16-byte aligned and a row stride's
# divisibility by 16 that of the width: the layout, not a misaligned address, is what the check changes (a CUDA
# backend compiled for aligned pointers would otherwise compile every kernel again, minutes on a GPU).
STRIDE_PAD = 8
FLOAT_POISON = 1.0e4
INT_POISON = (1 << 40) + 3
_strided = [False]


def strided_copy(t: torch.Tensor | None) -> torch.Tensor | None:
    """A copy of ``t`` sharing no memory with it, handed over as a view that is not contiguous: a 1-D tensor
    every other element of a buffer (stride 2), a 2-D one the middle columns of a wider buffer (row stride
    ``V + 2 * STRIDE_PAD``), as an engine's vocabulary-padded logits are; each starts ``STRIDE_PAD`` elements
    into its buffer, whose other elements hold poison. Empty and other tensors are cloned."""
    if t is None or t.numel() == 0 or t.dim() not in (1, 2):
        return None if t is None else t.clone()
    poison = FLOAT_POISON if t.is_floating_point() else INT_POISON
    if t.dim() == 1:
        n = t.shape[0]
        buffer = torch.full((2 * n + 2 * STRIDE_PAD,), poison, dtype=t.dtype, device=t.device)
        view = buffer[STRIDE_PAD:STRIDE_PAD + 2 * n:2]
    else:
        rows, width = t.shape
        buffer = torch.full((rows, width + 2 * STRIDE_PAD), poison, dtype=t.dtype, device=t.device)
        view = buffer[:, STRIDE_PAD:STRIDE_PAD + width]
    return view.copy_(t)


def outside_view(t: torch.Tensor) -> torch.Tensor:
    """[n] the elements of ``t``'s storage that ``t`` (a view) does not cover: a ``strided_copy``'s poison, as long
    as nothing wrote there."""
    everything = torch.as_strided(t, (t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
    inside = torch.zeros(everything.shape, dtype=torch.bool, device=t.device)
    inside[torch.as_strided(torch.arange(everything.numel(), device=t.device), t.shape, t.stride(),
                            t.storage_offset()).flatten()] = True
    return everything[~inside]


@contextmanager
def strided_inputs():
    """While active, every guarded call hands the backend its inputs (batch, noise, seeds) as ``strided_copy``
    views: the condition of the ``strided_inputs`` check, which its pair reproducer names."""
    previous, _strided[0] = _strided[0], True
    try:
        yield
    finally:
        _strided[0] = previous


def handing_over_strided() -> bool:
    """Whether ``strided_inputs`` is active."""
    return _strided[0]


def private_batch(batch: SpecBatch, copy_of=None) -> SpecBatch:
    """A copy of ``batch`` sharing no memory with it (``copy_of``: how to copy a tensor, ``clone`` by
    default). Built without re-validating: the caller's batch was validated at construction, and a copy
    of valid tensors is valid (validated already, for a call, where the caller's is unchanged since)."""
    copy_of = copy_of or (lambda t: None if t is None else t.clone())
    return SpecBatch.assembled({name: copy_of(getattr(batch, name)) for name in FIELDS}, batch.allow_nonfinite,
                               valid=batch.unchanged_since_validated())


def _replaced(given, original) -> bool:
    """The input handed over is no longer a tensor of the original's shape and dtype."""
    return not isinstance(given, torch.Tensor) or original is None \
        or given.shape != original.shape or given.dtype != original.dtype


_SAME_WIDTH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as integers of its width: a NaN left in place (SPEC 3.6) compares equal, and one
    comparison pass settles a float tensor (no NaN masks)."""
    return t.view(_SAME_WIDTH_INT[t.element_size()]) if t.is_floating_point() else t


def _differs(given: torch.Tensor, original: torch.Tensor) -> torch.Tensor:
    """[same shape] bool: the entries written (whose bits changed)."""
    return _bits(given) != _bits(original)


def _changed(name: str, given, original) -> str | None:
    """How input ``name`` differs from its original, or None."""
    if original is None and given is None:
        return None
    if _replaced(given, original):
        return f"{name} (replaced)"
    if torch.equal(_bits(given), _bits(original)):
        return None
    diff = int(_differs(given, original).sum())
    return f"{name} ({diff} of {original.numel()} elements changed)" if diff else None


def _maybe_changed(pairs, fingerprint_of) -> bool:
    """False when no input of ``pairs`` (name, given copy, original) changed: one host sync for them all, as
    a statistical check makes thousands of calls. True sends every pair to ``_changed`` for the message.
    A copy with a fingerprint from when it was made is checked by its fingerprint now."""
    flags = []
    for _, given, original in pairs:
        if original is None and given is None:
            continue
        if _replaced(given, original) or given.device != original.device:
            return True
        made = fingerprint_of(given)
        now = None if made is None else fingerprint(given)
        if now is not None:
            flag = (now != made).reshape(1)
        elif given.device.type == "cpu":      # no sync to save there, and torch.equal is the fastest compare
            if torch.equal(_bits(given), _bits(original)):
                continue
            return True
        else:
            flag = _differs(given, original).any().reshape(1)
        flags.append(flag.to(flags[0].device) if flags else flag)
    return bool(torch.cat(flags).any()) if flags else False


def written_inputs(pairs, fingerprint_of=lambda copy: None) -> list[str]:
    """What the backend wrote into its inputs: one host sync when nothing changed (the common case, and a
    statistical check makes thousands of calls), a message per changed input otherwise. ``fingerprint_of``:
    a copy's fingerprint when it was made (``Copies.fingerprint_of``), or None."""
    return [c for c in (_changed(*pair) for pair in pairs) if c] if _maybe_changed(pairs, fingerprint_of) else []


__all__ = ["Copies", "private_batch", "written_inputs"]
