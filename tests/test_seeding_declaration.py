"""Declared seeding semantics (SPEC 4.4): a backend whose own seeded stream is keyed by batch slot, as
FlashInfer's is, declares ``seeded_batch_invariant = False``. Batch invariance is then checked on its
injected path, or is n/a with that reason; it never passes unchecked and never fails for the
declared behaviour, and an undeclared or broken backend still fails."""

from dataclasses import replace

import torch

from reference import Noise, SpecBatch
from specverify.checks import FAIL, NOT_APPLICABLE, PASS, run_check
from specverify.kernels.cpu import CpuBackend
from specverify.strategies import get_profile
from specverify.verdict import describe

PROFILE = replace(get_profile("ci"), examples=6)


def _slot_keyed_noise(batch: SpecBatch, seed) -> Noise:
    """Each request's noise keyed by its seed and its slot in the launch (like a Philox subsequence = row)."""
    seeds = seed if isinstance(seed, torch.Tensor) else torch.full((batch.num_requests,), int(seed))
    u, e = [torch.zeros(0)], [torch.zeros(0, batch.vocab_size)]
    for slot in range(batch.num_requests):
        g = torch.Generator().manual_seed((int(seeds[slot]) * 1009 + slot) % (2 ** 63))
        u.append(torch.rand(int(batch.num_draft_tokens[slot]), generator=g).clamp(min=2.0 ** -24))
        e.append(-torch.log(torch.rand(1, batch.vocab_size, generator=g).clamp(min=2.0 ** -24)))
    return Noise(torch.cat(u), torch.cat(e))


class SlotKeyed(CpuBackend):
    """Correct sampling with a slot-keyed own stream, declared."""

    name = "slot_keyed"
    capabilities = replace(CpuBackend.capabilities, noise=frozenset({"seeded"}), seeded_stream="own",
                           seeded_batch_invariant=False)

    def _sample(self, batch, *, seed, noise, **kwargs):
        if noise is None:
            noise = _slot_keyed_noise(batch, seed)
        return super()._sample(batch, noise=noise, seed=None, **kwargs)


class SlotKeyedUndeclared(SlotKeyed):
    name = "slot_keyed_undeclared"
    capabilities = replace(SlotKeyed.capabilities, seeded_batch_invariant=True)


class SlotKeyedWithInjected(SlotKeyed):
    name = "slot_keyed_with_injected"
    capabilities = replace(SlotKeyed.capabilities, noise=frozenset({"seeded", "injected"}))


class SlotKeyedBrokenInjected(SlotKeyedWithInjected):
    """Its injected path reads request b's exponential row from slot (b + 1) mod B: not batch invariant."""

    name = "slot_keyed_broken_injected"

    def _sample(self, batch, *, seed, noise, **kwargs):
        if noise is not None and batch.num_requests > 1:
            noise = Noise(noise.uniform, noise.exponential.roll(-1, dims=0))
        return super()._sample(batch, seed=seed, noise=noise, **kwargs)


def test_declared_slot_keyed_stream_without_injected_noise_is_not_applicable():
    """Seeded-only and declared: nothing can be checked, and the result says why (n/a is never a pass)."""
    result = run_check(SlotKeyed(), "batch_invariance", "random", PROFILE)
    assert result.status == NOT_APPLICABLE, result.line()
    assert "seeded_batch_invariant=False" in result.message


def test_undeclared_slot_keyed_stream_fails_batch_invariance():
    """The same stream without the declaration is a batch-invariance failure, as it would be in a server."""
    result = run_check(SlotKeyedUndeclared(), "batch_invariance", "random", PROFILE)
    assert result.status == FAIL, result.line()
    assert "seeded noise" in result.message


def test_declared_backend_is_checked_on_its_injected_path():
    """With injected noise the check runs there and passes; the seeded path is not compared."""
    result = run_check(SlotKeyedWithInjected(), "batch_invariance", "random", PROFILE)
    assert result.status == PASS, result.line()


def test_declaration_does_not_excuse_a_broken_injected_path():
    """The declaration covers the seeded stream only: an injected path that depends on the batch fails."""
    result = run_check(SlotKeyedBrokenInjected(), "batch_invariance", "random", PROFILE)
    assert result.status == FAIL, result.line()
    assert "injected noise" in result.message


def test_report_lists_the_declaration():
    assert "seeded stream depends on batch position" in describe(SlotKeyed.capabilities)
    assert "batch position" not in describe(CpuBackend.capabilities)
