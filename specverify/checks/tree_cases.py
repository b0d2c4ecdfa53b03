"""Token-tree pieces of the statistical cases (SPEC 3.8): replicated tree batches and their exact laws.

A tree case fixes one request: parents [N], target rows p [N + 1, V] (root first) and either fixed
tokens (with q [N, V] or None: one-hot) or proposals drawn per copy: ``base`` [N, V] holds the
distribution node i's parent draws its children from, i.i.d. (SpecInfer) or without replacement
(each sibling's q_i is ``base`` with the earlier siblings' tokens removed, renormalised). With drafts
drawn per copy the exact law is the tree law averaged over every draft assignment (V ** N of them:
cases stay small).
"""

from __future__ import annotations

import itertools

import torch

from reference import SpecBatch, exact, tree
from specverify.generate import logits_for


def one_hot_trees(trees: list[tuple], temperature: float = 1.0) -> SpecBatch:
    """The trees, each (N, parents [N], tokens [N], rows [N + 1]: the root's first), as one batch of one-hot drafts,
    every request at ``temperature``."""
    k = torch.tensor([t[0] for t in trees])
    parents = torch.tensor([p for t in trees for p in t[1]], dtype=torch.int64)
    drafts = torch.tensor([x for t in trees for x in t[2]], dtype=torch.int64)
    logits = torch.stack([r for t in trees for r in t[3]])
    return SpecBatch(k, drafts, logits, None, torch.full((len(trees),), float(temperature)), tree_parents=parents)


def chains_as_trees(batch: SpecBatch) -> SpecBatch:
    """``batch`` with every request a chain tree (``tree_parents`` -1, 0, 1, ... local to each request), the same
    tensors otherwise: the tree rule's call of the chains a batch holds."""
    counts = batch.num_draft_tokens.cpu().tolist()
    parents = torch.cat([torch.arange(k, dtype=torch.int64) - 1 for k in counts]) if sum(counts) else \
        torch.zeros(0, dtype=torch.int64)
    return SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, batch.target_logits, batch.draft_probs,
                     batch.temperature, top_k=batch.top_k, top_p=batch.top_p, min_p=batch.min_p,
                     tree_parents=parents.to(batch.device))


def proposal_rows(base: torch.Tensor, parents: list[int], tokens: torch.Tensor,
                  without_replacement: bool) -> torch.Tensor:
    """q [C, N, V] float64 of C copies with tokens [C, N]: node i's base row, less the tokens of its
    earlier siblings when drawn ``without_replacement``."""
    C, (N, V) = tokens.shape[0], base.shape
    q = base.double().expand(C, N, V).clone()
    if without_replacement:
        for i, parent in enumerate(parents):
            earlier = [j for j in range(i) if parents[j] == parent]
            if earlier:
                q[:, i].scatter_(1, tokens[:, earlier], 0.0)
                q[:, i] /= q[:, i].sum(dim=1, keepdim=True)
    return q


def draw_tokens(g: torch.Generator, base: torch.Tensor, parents: list[int], copies: int,
                without_replacement: bool) -> torch.Tensor:
    """[copies, N] tokens, node by node, each from its q_i given the siblings drawn before it."""
    N, base = base.shape[0], base.to(g.device)
    tokens = torch.zeros(copies, N, dtype=torch.int64, device=g.device)
    for i in range(N):
        q_i = proposal_rows(base[: i + 1], parents[: i + 1], tokens[:, : i + 1], without_replacement)[:, i]
        tokens[:, i] = torch.multinomial(q_i, 1, generator=g).squeeze(1)
    return tokens


def replicated_tree_batch(g: torch.Generator, p: torch.Tensor, parents: list[int], temperature: float,
                          copies: int, *, tokens: list[int] | None, q: torch.Tensor | None,
                          without_replacement: bool = False) -> SpecBatch:
    """``copies`` requests of the tree: fixed ``tokens`` with q [N, V] or None (one-hot), or (tokens None)
    tokens drawn per copy from ``q`` as the base rows (see the module docstring). Built on the
    generator's device."""
    N, V, on = p.shape[0] - 1, p.shape[1], g.device
    if tokens is None:
        x = draw_tokens(g, q, parents, copies, without_replacement)
        probs = proposal_rows(q.to(on), parents, x, without_replacement).reshape(copies * N, V).float()
    else:
        x = torch.tensor(tokens, dtype=torch.int64, device=on).repeat(copies, 1)
        probs = None if q is None else q.float().to(on).repeat(copies, 1)
    logits = logits_for(p, temperature if temperature > 0 else 1.0).float().to(on).repeat(copies, 1)
    return SpecBatch(torch.full((copies,), N, dtype=torch.int64, device=on), x.flatten(), logits, probs,
                     torch.full((copies,), float(temperature), device=on),
                     tree_parents=torch.tensor(parents, dtype=torch.int64, device=on).repeat(copies))


def averaged_sequences(p: torch.Tensor, base: torch.Tensor, parents: list[int],
                       without_replacement: bool) -> dict[tuple[int, ...], float]:
    """The exact law of the emitted sequence with tokens drawn per copy: sum over every token assignment
    of its probability times ``exact.tree_sequences`` given it."""
    N, V = base.shape
    law: dict[tuple[int, ...], float] = {}
    for assignment in itertools.product(range(V), repeat=N):
        x = torch.tensor([assignment], dtype=torch.int64)
        q = proposal_rows(base, parents, x, without_replacement)[0]
        weight = float(q[torch.arange(N), x[0]].prod())
        if weight == 0.0:
            continue
        for seq, prob in exact.tree_sequences(p, q, parents, list(assignment)).items():
            law[seq] = law.get(seq, 0.0) + weight * prob
    return law


def first_child_chain(parents: list[int]) -> list[int]:
    """The tree's first-child chain: the root's first child, its first child, and so on."""
    kids, chain, node = tree.children(parents), [], tree.ROOT
    while kids[node + 1]:
        node = kids[node + 1][0]
        chain.append(node)
    return chain


__all__ = ["averaged_sequences", "draw_tokens", "first_child_chain", "proposal_rows", "replicated_tree_batch"]
