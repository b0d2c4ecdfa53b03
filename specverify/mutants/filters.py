"""Mutants of the server rules: target filters (SPEC 3.4) and placeholder drafts (SPEC 3.5); each is
the correct CpuBackend with one bug."""

from __future__ import annotations

import torch

from reference import filters
from specverify.kernels.cpu import CpuBackend


class FilterMissingFromRecovered(CpuBackend):
    """The recovered token at a rejection is drawn from the residual of the unfiltered target."""

    name = "filter_missing_from_recovered"
    recover_while_deciding = False      # the recovered token is drawn after deciding, where the bug lives

    def filter_weights(self, batch, requests, w, total, use):
        return (w, total) if use == "recovered" else super().filter_weights(batch, requests, w, total, use)


class FilterMissingFromBonus(CpuBackend):
    """The bonus token (every draft accepted) is drawn from the unfiltered target."""

    name = "filter_missing_from_bonus"

    def filter_weights(self, batch, requests, w, total, use):
        return (w, total) if use == "bonus" else super().filter_weights(batch, requests, w, total, use)


class TopKWithoutTies(CpuBackend):
    """top-k keeps exactly k tokens, the lowest indices among ties at the k-th value, instead of all ties."""

    name = "top_k_without_ties"

    def filter_weights(self, batch, requests, w, total, use):
        k, mass, ratio = batch.filters_of(requests)
        p = w.double() / total.double()[:, None]
        if k is not None:
            V = p.shape[1]
            order = torch.sort(-p, dim=1, stable=True).indices
            rank = torch.empty_like(order).scatter_(1, order, torch.arange(V).expand_as(order).contiguous())
            cut = (k > 0)[:, None] & (rank >= k[:, None])
            p = torch.where(cut, torch.zeros_like(p), p)
            p = p / p.sum(dim=1, keepdim=True)
        p = filters.apply(p, None, mass, ratio).to(torch.float32)
        return p, p.sum(dim=1)


class TopPUnsorted(CpuBackend):
    """top-p keeps the shortest prefix in vocabulary order (probabilities never sorted)."""

    name = "top_p_unsorted"

    def filter_weights(self, batch, requests, w, total, use):
        k, mass, ratio = batch.filters_of(requests)
        p = filters.apply(w.double() / total.double()[:, None], k, None, None)
        if mass is not None:
            before = torch.cumsum(p, dim=1) - p
            p = torch.where((mass < 1)[:, None] & (before >= mass[:, None].double()), torch.zeros_like(p), p)
            p = p / p.sum(dim=1, keepdim=True)
        p = filters.apply(p, None, None, ratio).to(torch.float32)
        return p, p.sum(dim=1)


class FiltersAppliedToQ(CpuBackend):
    """The draft distribution q is filtered with the target's settings as well (q must be used as given)."""

    name = "filters_applied_to_q"

    def draft_probs_for(self, batch):
        q = super().draft_probs_for(batch)
        if q is None or not batch.has_filters:
            return q
        request = torch.repeat_interleave(torch.arange(batch.num_requests), batch.num_draft_tokens.cpu())
        return filters.apply(q.double(), *batch.filters_of(request)).to(torch.float32)


class PlaceholderReadAsZero(CpuBackend):
    """A placeholder draft (-1) is read as token 0: a real draft that can be accepted."""

    name = "placeholder_read_as_zero"

    def placeholders(self, x, q, V):
        return x.clamp(min=0), q, None


class PlaceholderReadAsLast(CpuBackend):
    """A placeholder draft (-1) indexes from the end: read as token V - 1."""

    name = "placeholder_read_as_last"

    def placeholders(self, x, q, V):
        return torch.where(x < 0, V - 1, x), q, None


class PlaceholderAccepted(CpuBackend):
    """The acceptance test passes where q(x) = 0, so a placeholder (q = 0 there) is accepted."""

    name = "placeholder_accepted"

    def accept_mask(self, u, p_x, q_x):
        return super().accept_mask(u, p_x, q_x) | (q_x == 0)
