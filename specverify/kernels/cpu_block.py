"""Block verification (SPEC 3.7) for the CPU backend: every random request with drafts at once, one
draft position at a time, in float64 (the block rule compares eta with stop probabilities built from
sums over V, and no float32 ambiguity bound is defined for it).

Shapes (R block requests, K their longest block, V vocabulary):

    p   [R, K + 1, V]  filtered targets p' of each request's rows (rows past its block unused)
    q   [R, K, V]      drafter rows (one-hot at the draft when draft_probs is None)
    x   [R, K], eta [R, K], k [R]   drafts, uniforms and block lengths (a placeholder ends a block)

The steps are methods (``block_weights``, ``block_stop_probabilities``, ``block_stopping_point``,
``block_extra_weights`` and its ``block_empty_residual``) so that a mutant can replace exactly one. Greedy and
zero-draft requests take the standard path, as the rule says.
"""

from __future__ import annotations

import torch

from reference import Noise, SpecBatch, SpecOutput, filters, select_requests
from reference.batch import PLACEHOLDER


class BlockSteps:
    """Mixed into CpuBackend: ``_block_sample`` and its steps."""

    def _block_sample(self, batch: SpecBatch, noise: Noise, sample_standard) -> SpecOutput:
        B, device = batch.num_requests, batch.device
        k_all = self._block_lengths(batch)
        block = torch.nonzero((batch.temperature > 0) & (k_all > 0)).flatten()
        rest = torch.nonzero(~((batch.temperature > 0) & (k_all > 0))).flatten()
        token_ids = torch.full((B, batch.max_draft + 1), -1, dtype=torch.int64, device=device)
        num_accepted = torch.zeros(B, dtype=torch.int64, device=device)
        if rest.numel():
            out = sample_standard(select_requests(batch, rest), noise.select(batch, rest))
            token_ids[rest, : out.token_ids.shape[1]] = out.token_ids
            num_accepted[rest] = out.num_accepted
        if block.numel():
            ids, n = self._decide_blocks(batch, noise, block, k_all[block])
            token_ids[block, : ids.shape[1]] = ids
            num_accepted[block] = n
        return SpecOutput(token_ids, num_accepted)

    @staticmethod
    def _block_lengths(batch: SpecBatch) -> torch.Tensor:
        """[B] drafts before each request's first placeholder (all of them when it has none)."""
        k = batch.num_draft_tokens.clone()
        holes = torch.nonzero(batch.draft_token_ids == PLACEHOLDER).flatten()
        if holes.numel():
            request = torch.repeat_interleave(torch.arange(batch.num_requests, device=k.device), batch.num_draft_tokens)
            position = holes - batch.draft_offsets()[request[holes]]
            k.scatter_reduce_(0, request[holes], position, "amin")
        return k

    def _decide_blocks(self, batch: SpecBatch, noise: Noise, requests: torch.Tensor, k: torch.Tensor):
        R, K, V = requests.shape[0], int(k.max()), batch.vocab_size
        steps = torch.arange(K + 1, device=k.device)
        rows = (batch.logit_offsets()[requests][:, None] + steps).clamp(max=batch.target_logits.shape[0] - 1)
        slots = (batch.draft_offsets()[requests][:, None] + steps[:K]).clamp(max=max(batch.num_drafts - 1, 0))
        in_block = steps[None, :K] < k[:, None]                                     # [R, K]
        request_of_row = requests[:, None].expand(R, K + 1).reshape(-1)
        temperature = self.temperatures(batch)[request_of_row].double()
        p = torch.softmax(batch.target_logits[rows.reshape(-1)].double() / temperature[:, None], dim=1)
        if batch.has_filters:
            p = filters.apply(p, *batch.filters_of(request_of_row))
        p = p.view(R, K + 1, V)
        x = torch.where(in_block, batch.draft_token_ids[slots], 0)
        if batch.draft_probs is None:
            q = torch.nn.functional.one_hot(x, V).double()
        else:
            q = batch.draft_probs[slots].double()
        eta = noise.uniform.to(batch.device)[slots].double()
        p_x = p[:, :K].gather(2, x[..., None]).squeeze(2)
        q_x = q.gather(2, x[..., None]).squeeze(2)
        w = self.block_weights(p_x, q_x, in_block)                                 # [R, K + 1]
        h = self.block_stop_probabilities(w, p, q, k)                              # [R, K]
        tau = self.block_stopping_point(eta, h, in_block)                          # [R]
        weights = self.block_extra_weights(tau, k, w, p, q)
        exponential = self.exponential_for(noise).to(batch.device)[requests].double()
        extra = torch.where(weights > 0, weights / exponential, -1.0).argmax(dim=1)   # the race, in float64
        ids = torch.where(steps[None, :] < tau[:, None], torch.cat([x, x[:, :1]], 1), -1)
        ids[torch.arange(R), tau] = extra
        return ids, tau

    def block_weights(self, p_x: torch.Tensor, q_x: torch.Tensor, in_block: torch.Tensor) -> torch.Tensor:
        """[R, K + 1] w_0 = 1, w_i = min(w_{i-1} p(x_i) / q(x_i), 1); 0 where q(x_i) = 0."""
        ratio = torch.where(q_x > 0, p_x / q_x.clamp(min=1e-300), 0.0)
        w = [torch.ones_like(p_x[:, 0])]
        for i in range(p_x.shape[1]):
            w.append(torch.where(in_block[:, i], torch.clamp(w[-1] * ratio[:, i], max=1.0), 0.0))
        return torch.stack(w, dim=1)

    def block_stop_probabilities(self, w, p, q, k) -> torch.Tensor:
        """[R, K] h_1..h_K: S_i / (S_i + 1 - w_i) before the block's last draft (0 where S_i = 0),
        w_k at it, 0 past it."""
        K = q.shape[1]
        s = torch.clamp(w[:, 1:K, None] * p[:, 1:K] - q[:, 1:K], min=0).sum(2)   # [R, K - 1]: S_1..S_{K-1}
        h_mid = torch.where(s > 0, s / (s + 1 - w[:, 1:K]), 0.0)
        h = torch.cat([h_mid, torch.zeros_like(w[:, :1])], 1)                       # [R, K]
        i = torch.arange(1, K + 1, device=w.device)[None, :]
        h = torch.where(i == k[:, None], w[:, 1:], h)
        return torch.where(i <= k[:, None], h, 0.0)

    def block_stopping_point(self, eta, h, in_block) -> torch.Tensor:
        """[R] tau: the last i with eta_i <= h_i inside the block, 0 where none."""
        K = h.shape[1]
        hit = (eta <= h) & in_block & (h > 0)
        i = torch.arange(1, K + 1, device=h.device)[None, :]
        return torch.where(hit, i, 0).amax(dim=1)

    def block_extra_weights(self, tau, k, w, p, q) -> torch.Tensor:
        """[R, V] the extra token's weights: p_k at tau = k, else max(w_tau p_tau - q_tau, 0) (p_tau if 0)."""
        R, K = q.shape[0], q.shape[1]
        r = torch.arange(R, device=tau.device)
        p_tau = p[r, tau]
        q_tau = q[r, tau.clamp(max=K - 1)]
        res = torch.clamp(w[r, tau][:, None] * p_tau - q_tau, min=0)
        res = torch.where(res.sum(1, keepdim=True) > 0, res, self.block_empty_residual(p_tau))
        return torch.where((tau == k)[:, None], p[r, k], res)

    def block_empty_residual(self, p_tau: torch.Tensor) -> torch.Tensor:
        """[R, V] the weights raced where the residual at the stop is zero everywhere: p_tau (SPEC 3.7)."""
        return p_tau
