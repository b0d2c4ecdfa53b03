"""Mutants with their own noise stream: there is no shared noise to compare under, so their bugs show in the
output distribution, under fixed coins, or in all-greedy batches, which use no noise."""

from __future__ import annotations

import torch

from reference import Noise, SpecBatch
from specverify.backends import Capabilities
from specverify.kernels.cpu import CpuBackend
from specverify.mutants.samplers import DraftProbsBf16, GreedyHighestIndexTie, ResidualWithoutFallback


class OwnStreamCpuBackend(CpuBackend):
    """A correct sampler with its own seeded stream (a torch.Generator keyed by the seeds): the control."""

    name = "cpu_own_stream"
    capabilities = Capabilities(noise=frozenset({"seeded", "coins"}), seeded_stream="own",
                                devices=CpuBackend.capabilities.devices)

    def _own_noise(self, batch, seed) -> Noise:
        if seed is None:    # the convention's "no seed": a fresh one
            seed = int(torch.randint(0, 2 ** 62, (1,)))
        seeds = seed if isinstance(seed, torch.Tensor) else torch.tensor([seed])
        return Noise.draw(batch, torch.Generator().manual_seed(int(seeds.sum()) % (2 ** 63)))

    def _sample(self, batch, *, seed, noise, **kwargs):
        return super()._sample(batch, noise=self._own_noise(batch, seed), seed=None, **kwargs)

    def _sample_at_coin(self, batch, coin, *, seed, **kwargs):
        drawn = self._own_noise(batch, seed)
        return super()._sample(batch, noise=Noise(torch.full_like(drawn.uniform, coin), drawn.exponential), seed=None,
                               **kwargs)


class DraftProbsBf16OwnStream(DraftProbsBf16, OwnStreamCpuBackend):
    """Draft probabilities stored in bf16 (seed 004) in a backend with its own noise stream: only the
    acceptance-rate test sees it, and only with millions of samples (about +0.0016 acceptance)."""

    name = "draft_probs_bf16_own_stream"


class ZeroCoinAcceptsOwnStream(OwnStreamCpuBackend):
    """A draft accepted when u q(x) <= p(x) alone, in a backend with its own stream (SGLang's coin <= running
    sum): a coin of 0, which torch.rand draws once in 2^24, accepts a draft of probability 0; only fixed
    coins reach it."""

    name = "zero_coin_accepts_own_stream"

    def accept_mask(self, u, p_x, q_x):
        return (q_x > 0) & (u * q_x <= p_x)


class GreedySampledOwnStream(OwnStreamCpuBackend):
    """Greedy requests sampled at temperature 1 instead of taking the argmax, in a backend with its own
    noise stream: only a statistical case that mixes greedy and random requests sees it."""

    name = "greedy_sampled_own_stream"

    def temperatures(self, batch):
        t = super().temperatures(batch)
        return torch.where(t == 0, torch.ones_like(t), t)


class GreedyHighestIndexTieOwnStream(GreedyHighestIndexTie, OwnStreamCpuBackend):
    """Greedy ties broken at the highest index (seed 001) in a backend with its own stream: no differential check
    reaches it, and random logits tie with probability 0, so the statistics cannot see it either."""

    name = "greedy_highest_index_tie_own_stream"


class PaddedTileOwnStream(OwnStreamCpuBackend):
    """The vocabulary padded to whole 1024-wide tiles with logit 0 and the pad read as valid (the bug of
    GHSA-8wr5-jm2h-8r4f), in a backend with only its own seeded stream: no differential check reaches it,
    and only a vocabulary with a partial last tile shows it."""

    name = "padded_tile_own_stream"

    def _sample(self, batch, *, seed, noise, **kwargs):
        V = batch.vocab_size
        pad = -V % 1024
        if pad:
            rows = batch.target_logits.shape[0]
            logits = torch.cat([batch.target_logits, batch.target_logits.new_zeros(rows, pad)], dim=1)
            q = None if batch.draft_probs is None else torch.cat(
                [batch.draft_probs, batch.draft_probs.new_zeros(batch.num_drafts, pad)], dim=1)
            batch = SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, logits, q, batch.temperature,
                              batch.top_k, batch.top_p, batch.min_p)
        return super()._sample(batch, seed=seed, noise=noise, **kwargs)


class SplitVocabOutOfRangeOwnStream(OwnStreamCpuBackend):
    """A kernel whose code path changes above V = 100,000 (split-V, multi-block reductions) and emits
    the id V there for its extra token, in a backend with only its own seeded stream: correct at every
    vocabulary a CPU profile used to reach, wrong at production vocabularies."""

    name = "split_vocab_out_of_range_own_stream"
    SPLIT_ABOVE = 100_000

    def _sample(self, batch, *, seed, noise, **kwargs):
        out = super()._sample(batch, seed=seed, noise=noise, **kwargs)
        V = batch.vocab_size
        if V > self.SPLIT_ABOVE and out.token_ids.numel():
            rows = torch.arange(out.token_ids.shape[0], device=out.token_ids.device)
            out.token_ids[rows, out.num_accepted] = V
        return out


class ResidualFallbackToLastIdOwnStream(OwnStreamCpuBackend):
    """A residual max(p - q, 0) that is zero everywhere gives the row's last id, V - 1 (a search for the
    residual's sample that finds no entry and keeps its last index), in a backend with only its own seeded
    stream: only the statistical case whose drafter is the target up to rounding reaches it."""

    name = "residual_fallback_to_last_id_own_stream"

    def empty_residual(self, w):
        last = torch.zeros_like(w)
        last[:, -1] = 1.0
        return last


class ResidualFallbackToArgmaxOwnStream(OwnStreamCpuBackend):
    """A residual max(p - q, 0) that is zero everywhere gives p's most likely token, not a sample of p, in a
    backend with only its own seeded stream: a valid token, so only the token after a rejection, tested among
    the rejections alone, shows it (the token at each position dilutes it by the acceptances)."""

    name = "residual_fallback_to_argmax_own_stream"

    def empty_residual(self, w):
        return torch.nn.functional.one_hot(w.argmax(dim=1), w.shape[1]).to(w.dtype)


class ResidualWithoutFallbackOwnStream(ResidualWithoutFallback, OwnStreamCpuBackend):
    """ResidualWithoutFallback (token 0 at a residual zero everywhere) with only its own seeded stream."""

    name = "residual_without_fallback_own_stream"


class ResidualAgainstScaledQOwnStream(OwnStreamCpuBackend):
    """The residual taken against 0.8 q (the drafter's probabilities at another scale in that one code path), in
    a backend with only its own seeded stream: after a rejection, tokens where 0.8 q < p <= q come out, though
    the residual max(p - q, 0) is 0 there; the token at each position dilutes them by the acceptances."""

    name = "residual_against_scaled_q_own_stream"

    def residual(self, w, total, q):
        return super().residual(w, total, q * 0.8)
