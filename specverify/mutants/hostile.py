"""Hostile backends: each tries to get a PASS it has not earned, one way each. The harness must give
every one of them a failing verdict and a report naming what happened.

    specverify check specverify.mutants.hostile:Hang --timeout 60 --json report.json

They exist to prove the verdict's guarantees (isolation, input integrity, output checks, coverage,
tolerance ownership); never use them.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch

from specverify.backends import Backend, Capabilities
from specverify.kernels.cpu import CpuBackend
from specverify.mutants.samplers import DraftProbsBf16, TemperatureIgnored


class DeclaresNothing(Backend):
    """Declares no method, no noise path and no device, so every check is n/a."""

    name = "declares_nothing"
    capabilities = Capabilities(methods=frozenset(), noise=frozenset(), devices=frozenset())


class WideMarginBf16(DraftProbsBf16):
    """bf16 draft probabilities, hidden behind a self-declared ambiguity margin of 1e-2."""

    name = "wide_margin_bf16"
    capabilities = Capabilities(devices=frozenset({"cpu"}), ambiguity_margin=1e-2)


class Hang(CpuBackend):
    """Never returns."""

    name = "hang"

    def _sample(self, batch, **kwargs):
        while True:
            time.sleep(1)


class Segfault(CpuBackend):
    """Dies of SIGSEGV inside a call, as a kernel with a wild pointer does."""

    name = "segfault"

    def _sample(self, batch, **kwargs):
        os.kill(os.getpid(), signal.SIGSEGV)


class SysExit(CpuBackend):
    """Calls sys.exit(0) inside a call, hoping the run ends with status 0."""

    name = "sys_exit"

    def _sample(self, batch, **kwargs):
        sys.exit(0)


class OsExit(CpuBackend):
    """Calls os._exit(0) inside a call: no exception, no cleanup, status 0."""

    name = "os_exit"

    def _sample(self, batch, **kwargs):
        os._exit(0)


class MutatingCover(TemperatureIgnored):
    """Samples random requests at temperature 1, then writes 1.0 into the caller's temperatures so a
    reference computed afterwards from the same tensors agrees."""

    name = "mutating_cover"

    def _sample(self, batch, **kwargs):
        out = super()._sample(batch, **kwargs)
        batch.temperature.masked_fill_(batch.temperature > 0, 1.0)
        return out


class WritesLogitsAfter(CpuBackend):
    """Correct tokens, then scribbles over its input logits (a kernel reusing an input as scratch)."""

    name = "writes_logits_after"

    def _sample(self, batch, **kwargs):
        out = super()._sample(batch, **kwargs)
        batch.target_logits.mul_(0.5)
        return out


class Int32Outputs(CpuBackend):
    """Correct tokens returned as int32."""

    name = "int32_outputs"

    def _sample(self, batch, **kwargs):
        out = super()._sample(batch, **kwargs)
        return type(out)(out.token_ids.to(torch.int32), out.num_accepted.to(torch.int32))


HOSTILE = (DeclaresNothing, WideMarginBf16, Hang, Segfault, SysExit, OsExit, MutatingCover, WritesLogitsAfter,
           Int32Outputs)

__all__ = [cls.__name__ for cls in HOSTILE] + ["HOSTILE"]


class EmptyBatchCrashAndIdPastV(CpuBackend):
    """Crashes on an empty batch, and at V = 1 emits id 1 (>= V): one edge case must not mask the other."""

    name = "empty_batch_crash_and_id_past_v"

    def _sample(self, batch, **kwargs):
        if batch.num_requests == 0:
            raise IndexError("index 0 is out of bounds for an empty batch")
        out = super()._sample(batch, **kwargs)
        if batch.vocab_size == 1:
            ids = out.token_ids.clone()
            ids[torch.arange(ids.shape[0]), out.num_accepted] = 1
            return type(out)(ids, out.num_accepted)
        return out
