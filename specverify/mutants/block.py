"""Mutants of block verification (SPEC 3.7): the CPU backend with one block step replaced."""

from __future__ import annotations

import torch

from specverify.kernels.cpu import CpuBackend


class TokenwiseAsBlock(CpuBackend):
    """Token-wise acceptance (the standard rule) run when method="block" is asked for."""

    name = "tokenwise_as_block"

    def _block_sample(self, batch, noise, sample_standard):
        return sample_standard(batch, noise)


class BlockRatioUnclamped(CpuBackend):
    """The running ratio w_i = w_{i-1} p(x_i) / q(x_i) not clamped at 1."""

    name = "block_ratio_unclamped"

    def block_weights(self, p_x, q_x, in_block):
        ratio = torch.where(q_x > 0, p_x / q_x.clamp(min=1e-300), 0.0)
        w = [torch.ones_like(p_x[:, 0])]
        for i in range(p_x.shape[1]):
            w.append(torch.where(in_block[:, i], w[-1] * ratio[:, i], 0.0))
        return torch.stack(w, dim=1)


class BlockStopFromStart(CpuBackend):
    """The acceptance point searched from the start of the block: tau = the position before the first
    eta_i > h_i (the whole block when there is none), instead of the last eta_i <= h_i."""

    name = "block_stop_from_start"

    def block_stopping_point(self, eta, h, in_block):
        K = h.shape[1]
        miss = ~(eta <= h) & in_block
        i = torch.arange(K, device=h.device)[None, :]
        return torch.where(miss, i, K).amin(dim=1).minimum(in_block.sum(dim=1))


class BlockResidualWrongPosition(CpuBackend):
    """The extra token after a stop at tau drawn from the residual of the next position, tau + 1."""

    name = "block_residual_wrong_position"

    def block_extra_weights(self, tau, k, w, p, q):
        return super().block_extra_weights(torch.minimum(tau + 1, k - 1).clamp(min=0).where(tau < k, tau), k, w, p, q)


class BlockResidualWithoutFallback(CpuBackend):
    """A stop whose residual max(w_tau p_tau - q_tau, 0) is zero everywhere raced as it is, not p_tau: every score
    ties at 0 and token 0 is emitted, whatever its probability."""

    name = "block_residual_without_fallback"

    def block_empty_residual(self, p_tau):
        return torch.zeros_like(p_tau)
