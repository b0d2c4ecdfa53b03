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


class _TopPVariant(CpuBackend):
    """Top-k as it should be, then ``kept(p, mass)`` in place of top-p's kept set, then min-p."""

    def kept(self, p: torch.Tensor, mass: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def filter_weights(self, batch, requests, w, total, use):
        k, mass, ratio = batch.filters_of(requests)
        p = filters.apply(w.double() / total.double()[:, None], k, None, None)
        if mass is not None:
            p = torch.where((mass < 1)[:, None] & ~self.kept(p, mass[:, None].double()), torch.zeros_like(p), p)
        p = filters.apply(p / p.sum(dim=1, keepdim=True), None, None, ratio).to(torch.float32)
        return p, p.sum(dim=1)


class TopPUnsorted(_TopPVariant):
    """top-p keeps the shortest prefix in vocabulary order (probabilities never sorted)."""

    name = "top_p_unsorted"

    def kept(self, p, mass):
        return torch.cumsum(p, dim=1) - p < mass


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


# ---- the cut itself (issue 29): bugs of a kernel that finds each row's threshold by a search over values


class TopPOneTokenLate(_TopPVariant):
    """top-p's cut one token late: the token after the one whose mass reaches top_p is kept too."""

    name = "top_p_one_token_late"

    def kept(self, p, mass):
        order = torch.sort(-p, dim=1, stable=True).indices
        sorted_p = p.gather(1, order)
        before = torch.cumsum(sorted_p, dim=1) - sorted_p
        # the test reads the mass before the previous sorted token, not before this one
        late = torch.cat([torch.zeros_like(before[:, :1]), before[:, :-1]], dim=1) < mass
        return torch.zeros_like(late).scatter(1, order, late)


class TopKTiesCountedTwice(CpuBackend):
    """top-k's count at a candidate value adds the tokens equal to it twice (above + 2 x equal), so the cut
    rises to the largest value whose doubled count reaches k: ties at the k-th value are dropped."""

    name = "top_k_ties_counted_twice"

    def filter_weights(self, batch, requests, w, total, use):
        k, mass, ratio = batch.filters_of(requests)
        p = w.double() / total.double()[:, None]
        if k is not None:
            on = (k > 0) & (k < p.shape[1])
            above = (p[:, None, :] > p[:, :, None]).sum(dim=2)          # [R, V]: tokens above each token
            equal = (p[:, None, :] == p[:, :, None]).sum(dim=2)
            cut = torch.where(above + 2 * equal >= k[:, None], p, -1.0).amax(dim=1, keepdim=True)
            p = torch.where(on[:, None] & (p < cut), torch.zeros_like(p), p)
            p = p / p.sum(dim=1, keepdim=True)
        p = filters.apply(p, None, mass, ratio).to(torch.float32)
        return p, p.sum(dim=1)


class MinPUnscaledMax(CpuBackend):
    """min-p's floor taken before temperature: a token is kept when exp(l - max l) >= min_p, the ratio to the
    unscaled maximum, instead of exp((l - max l) / T) >= min_p."""

    name = "min_p_unscaled_max"

    def filter_weights(self, batch, requests, w, total, use):
        k, mass, ratio = batch.filters_of(requests)
        p = filters.apply(w.double() / total.double()[:, None], k, mass, None)
        if ratio is not None:
            t = batch.temperature[requests].double()
            # p ** T is p at temperature 1 up to its normaliser, which the ratio to the maximum cancels
            unscaled = p ** t[:, None]
            low = unscaled < ratio[:, None].double() * unscaled.amax(dim=1, keepdim=True)
            p = torch.where((ratio > 0)[:, None] & low, torch.zeros_like(p), p)
        p = p / p.sum(dim=1, keepdim=True)
        return p.to(torch.float32), p.to(torch.float32).sum(dim=1)


class CutAppliedToQ(CpuBackend):
    """The target's kept set is applied to the draft distribution too: q restricted to p's filtered support
    and renormalised (q must be used as given)."""

    name = "cut_applied_to_q"

    def draft_probs_for(self, batch):
        q = super().draft_probs_for(batch)
        if q is None or not batch.has_filters:
            return q
        k = batch.num_draft_tokens.cpu()
        request = torch.repeat_interleave(torch.arange(batch.num_requests), k)
        rows = torch.arange(int(k.sum())) + request                   # each draft slot's target row
        t = batch.temperature.cpu().double()[request]
        p = filters.apply(torch.softmax(batch.target_logits.cpu()[rows].double() / torch.where(t > 0, t, 1.0)[:, None],
                                        dim=1), *batch.filters_of(request))
        cut = torch.where((t > 0)[:, None] & (p == 0), torch.zeros_like(q.cpu()), q.cpu())
        mass = cut.sum(dim=1, keepdim=True)
        return torch.where(mass > 0, cut / mass.clamp(min=1e-30), q.cpu()).to(q.device)
