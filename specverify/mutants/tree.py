"""Mutants of token-tree verification (SPEC 3.8): the CPU backend with one tree step replaced.

The linked lists are those of ``TreeSteps.tree_links``: first_child [T + B] and next_sibling [T] hold
flat slots (-1: none), row [T + B] each key's target row (keys: node slots, then T + b for roots).
"""

from __future__ import annotations

import torch

from specverify.kernels.cpu import CpuBackend


def _previous_sibling(next_sibling: torch.Tensor) -> torch.Tensor:
    """[T] the slot of each node's previous sibling, -1 for a first child."""
    previous = torch.full_like(next_sibling, -1)
    linked = torch.nonzero(next_sibling >= 0).flatten()
    previous[next_sibling[linked]] = linked
    return previous


def _follow(start: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """Each slot of ``start`` moved along ``step`` (a [T] slot map, -1: stop) as far as it goes."""
    at = start.clone()
    while step.numel():
        ahead = torch.where(at >= 0, step[at.clamp(min=0)], -1)
        if not bool((ahead >= 0).any()):
            return at
        at = torch.where(ahead >= 0, ahead, at)
    return at


class TreeResidualNotUpdated(CpuBackend):
    """After a rejected sibling the residual is left as it was: the next sibling and the final token use r,
    not max(r - m q, 0)."""

    name = "tree_residual_not_updated"

    def tree_residual(self, r, m, q):
        return r, m


class TreeEmptyResidualNotKept(CpuBackend):
    """Where max(r - m q, 0) is zero everywhere (r == m q up to rounding) the residual is updated to it anyway,
    not kept as it was: the final token is raced over zeros, and token 0 is emitted whatever its probability."""

    name = "tree_empty_residual_not_kept"

    def tree_residual(self, r, m, q):
        res = torch.clamp(r - m[:, None] * q, min=0)
        return res, torch.cumsum(res, dim=1)[:, -1]


class TreeParentProposal(CpuBackend):
    """Every sibling's proposal read as its parent's (the q the first child was drawn from), where the
    node's own q_i was given: the test and the residual update use the wrong q after the first sibling."""

    name = "tree_parent_proposal"

    def tree_proposals(self, batch, slots, x):
        first_child, next_sibling, _ = self.tree_links(batch)
        first = _follow(slots, _previous_sibling(next_sibling))
        return super().tree_proposals(batch, first, batch.draft_token_ids[first].clamp(min=0))


class TreeSiblingsReversed(CpuBackend):
    """Siblings tried from the last to the first (decreasing node index) instead of in increasing order."""

    name = "tree_siblings_reversed"

    def tree_links(self, batch):
        first_child, next_sibling, row = super().tree_links(batch)
        return _follow(first_child, next_sibling), _previous_sibling(next_sibling), row


class TreeWrongChild(CpuBackend):
    """After accepting a later sibling the walk goes on in its first sibling's subtree (that node's row and
    children), while the accepted node is recorded."""

    name = "tree_wrong_child"

    def tree_links(self, batch):
        first_child, next_sibling, row = super().tree_links(batch)
        T = next_sibling.shape[0]
        first = _follow(torch.arange(T), _previous_sibling(next_sibling))
        first_child, row = first_child.clone(), row.clone()
        first_child[:T], row[:T] = first_child[first], row[first]
        return first_child, next_sibling, row


class TreeFinalFromWrongResidual(CpuBackend):
    """The final token drawn from the residual row of another stopping request's node (the residual rows
    read one row off), not from its own node's residual."""

    name = "tree_final_from_wrong_residual"

    def tree_race(self, w, exponential):
        return super().tree_race(w.roll(1, dims=0), exponential)


class TreeLastSiblingSkipped(CpuBackend):
    """The linked-list walk stops one sibling early: the last of two or more siblings is never tried."""

    name = "tree_last_sibling_skipped"

    def tree_links(self, batch):
        first_child, next_sibling, row = super().tree_links(batch)
        previous = _previous_sibling(next_sibling)
        last = (next_sibling < 0) & (previous >= 0)
        next_sibling = next_sibling.clone()
        next_sibling[previous[last]] = -1
        return first_child, next_sibling, row


class TreeGreedyHighestIndexTie(CpuBackend):
    """Greedy tree requests take the highest index among tied maxima of a node's row (chains unchanged)."""

    name = "tree_greedy_highest_index_tie"
    _in_tree = False

    def _tree_sample(self, batch, noise):
        self._in_tree = True
        try:
            return super()._tree_sample(batch, noise)
        finally:
            self._in_tree = False

    def greedy_argmax(self, logits):
        if not self._in_tree:
            return super().greedy_argmax(logits)
        return logits.shape[1] - 1 - logits.flip(dims=(1,)).max(dim=1).indices


TREE_MUTANTS = (
    (TreeResidualNotUpdated, "tree: the residual not updated between siblings"),
    (TreeParentProposal, "tree: the parent's q used where the node's q_i was given"),
    (TreeSiblingsReversed, "tree: siblings tried in the wrong (decreasing) order"),
    (TreeWrongChild, "tree: descended into the wrong child's subtree"),
    (TreeFinalFromWrongResidual, "tree: the final token drawn from the wrong node's residual"),
    (TreeLastSiblingSkipped, "tree: the last sibling skipped in the linked-list traversal"),
    (TreeGreedyHighestIndexTie, "tree: greedy ties broken at the highest index"),
)

__all__ = ["TREE_MUTANTS", "TreeEmptyResidualNotKept"] + [cls.__name__ for cls, _ in TREE_MUTANTS]
