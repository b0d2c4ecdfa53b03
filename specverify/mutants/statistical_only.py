"""Mutants only a statistical check can see: the backend draws its own noise stream, so there is
no shared noise to compare under, and its bug shows only in the output distribution."""

from __future__ import annotations

import torch

from reference import Noise
from specverify.backends import Capabilities
from specverify.kernels.cpu import CpuBackend
from specverify.mutants.samplers import DraftProbsBf16


class OwnStreamCpuBackend(CpuBackend):
    """A correct sampler with its own seeded stream (a torch.Generator keyed by the seeds): the control."""

    name = "cpu_own_stream"
    capabilities = Capabilities(noise=frozenset({"seeded"}), seeded_stream="own",
                                devices=CpuBackend.capabilities.devices)

    def _sample(self, batch, *, seed, noise, **kwargs):
        seeds = seed if isinstance(seed, torch.Tensor) else torch.tensor([seed])
        g = torch.Generator().manual_seed(int(seeds.sum()) % (2 ** 63))
        return super()._sample(batch, noise=Noise.draw(batch, g), seed=None, **kwargs)


class DraftProbsBf16OwnStream(DraftProbsBf16, OwnStreamCpuBackend):
    """Draft probabilities stored in bf16 (seed 004) in a backend with its own noise stream: only the
    acceptance-rate test sees it, and only with millions of samples (about +0.0016 acceptance)."""

    name = "draft_probs_bf16_own_stream"


class GreedySampledOwnStream(OwnStreamCpuBackend):
    """Greedy requests sampled at temperature 1 instead of taking the argmax, in a backend with its own
    noise stream: only a statistical case that mixes greedy and random requests sees it."""

    name = "greedy_sampled_own_stream"

    def temperatures(self, batch):
        t = super().temperatures(batch)
        return torch.where(t == 0, torch.ones_like(t), t)
