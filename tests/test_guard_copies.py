"""The guard's private copies kept from call to call (specverify.checks.integrity.Copies): a statistical
draw launches the same V-wide rows thousands of times, and the guard hands a copy it found unchanged
over again. The reuse must never let a write through: a write on any call is caught on that call, and
an original the caller changed is copied afresh."""

import os
from dataclasses import replace

import pytest
import torch

from reference import SpecBatch, SpecOutput
from specverify.checks.runner import CheckFailure, GuardedBackend
from specverify.kernels.cpu import CpuBackend

V = 600_000     # two rows: 1.2 M logits, over the size whose copies are kept


class WritesOnCall(CpuBackend):
    """Correct, but on call ``n`` (1-based) writes one logit of its input; records each call's logits."""

    name = "writes_on_call"

    def __init__(self, n: int) -> None:
        self.n, self.calls, self.seen = n, 0, []

    def _sample(self, batch, **kwargs):
        self.calls += 1
        self.seen.append(batch.target_logits)
        out = super()._sample(batch, **kwargs)
        if self.calls == self.n:
            batch.target_logits[0, 7] += 1.0
        return out


def _batch() -> SpecBatch:
    g = torch.Generator().manual_seed(0)
    return SpecBatch(torch.tensor([1]), torch.tensor([3]), torch.randn(2, V, generator=g),
                     None, torch.tensor([1.0]))


def test_a_kept_copy_is_handed_over_again_and_a_later_write_is_caught_on_its_call():
    """Calls 1 and 2 pass and the second gets the very copy the first was found unchanged in; the write
    on call 3 fails call 3, naming the input."""
    batch, backend = _batch(), WritesOnCall(3)
    guard = GuardedBackend(backend)
    seeds = torch.tensor([11])
    guard(batch, seed=seeds)
    guard(batch, seed=seeds)
    assert backend.seen[0] is backend.seen[1] and backend.seen[0] is not batch.target_logits
    with pytest.raises(CheckFailure, match=r"wrote into its inputs: target_logits \(1 of 1200000"):
        guard(batch, seed=seeds)


def test_an_original_changed_by_its_caller_is_copied_afresh():
    """The caller's own in-place write bumps the original's version: the next call gets a fresh copy
    holding the new values, not the kept one."""
    batch, backend = _batch(), WritesOnCall(0)
    guard = GuardedBackend(backend)
    guard(batch, seed=torch.tensor([11]))
    batch.target_logits[1, 5] = 9.0
    guard(batch, seed=torch.tensor([11]))
    assert float(backend.seen[1][1, 5]) == 9.0


def test_a_batch_unchanged_since_validation_is_not_scanned_again_on_each_call(monkeypatch):
    """A statistical draw calls thousands of times with rows validated once: the backend's call validates
    a batch again only once a tensor of it was written through torch, and the guard's copies count as
    validated while the caller's batch is unchanged."""
    import reference.batch as batch_module  # noqa: PLC0415

    scans = []
    real = batch_module._range
    monkeypatch.setattr(batch_module, "_range", lambda values, rows=False: scans.append(values.shape) or
                        real(values, rows))
    batch, backend = _batch(), CpuBackend()
    guard = GuardedBackend(backend)
    scans.clear()
    for _ in range(3):
        guard(batch, seed=torch.tensor([11]))
        backend(batch, seed=torch.tensor([11]))
    assert scans == []
    batch.target_logits[0, 5] = 2.0
    backend(batch, seed=torch.tensor([11]))
    assert (2, V) in scans


def test_a_nan_written_by_the_caller_after_construction_is_refused_by_the_guarded_call():
    """Skipping validation must not let a bad input through: the caller's in-place NaN makes the batch
    unvalidated, its copy with it, and the backend's call names the NaN."""
    batch = _batch()
    batch.target_logits[1, 9] = float("nan")
    with pytest.raises(ValueError, match="target_logits contains NaN"):
        GuardedBackend(CpuBackend())(batch, seed=torch.tensor([11]))


_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"


class WritesOnDevice(WritesOnCall):
    """WritesOnCall for a batch on any device: the CPU backend samples a CPU copy of it, and the write
    goes into the input the guard handed over, where it lives."""

    capabilities = replace(CpuBackend.capabilities, devices=frozenset({"cpu", "cuda"}))

    def _sample(self, batch, **kwargs):
        self.calls += 1
        self.seen.append(batch.target_logits)
        out = CpuBackend._sample(self, batch.to("cpu"), **kwargs)
        if self.calls == self.n:
            batch.target_logits[0, 7] += 1.0
        return SpecOutput(out.token_ids.to(batch.device), out.num_accepted.to(batch.device))


def test_a_write_into_a_fingerprinted_copy_is_caught_on_its_call(monkeypatch):
    """On a GPU the guard checks a large copy by its fingerprint, taken when the copy was made, instead of
    comparing it with the original. The kept copy is handed over again after a clean call, and the
    write on call 3 still fails call 3, with the message the comparison gives. Without a GPU the CPU
    stands in (the kernel runs under the Triton interpreter)."""
    from specverify.checks import integrity  # noqa: PLC0415

    device = "cuda" if _GPU else "cpu"
    monkeypatch.setattr(integrity, "FINGERPRINTED", (device,))
    batch, backend = _batch().to(device), WritesOnDevice(3)
    guard = GuardedBackend(backend)
    seeds = torch.tensor([11], device=device)
    guard(batch, seed=seeds)
    assert guard._copies.fingerprint_of(backend.seen[0]) is not None
    guard(batch, seed=seeds)
    assert backend.seen[0] is backend.seen[1]
    with pytest.raises(CheckFailure, match=r"wrote into its inputs: target_logits \(1 of 1200000"):
        guard(batch, seed=seeds)
