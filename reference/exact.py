"""Exact distributions of one request's output, in float64, for small V and k.

A request's output is the tuple of emitted tokens (y_0, ..., y_m): m = num_accepted accepted drafts,
then the one extra token. These functions give P(output) for every possible output, as a dict.

With drafts drawn x_j ~ q_j independently and fixed target rows p_j (the harness's setting):

    P(y_0..y_m) = prod_{i<m} min(p_i, q_i)(y_i) * (max(p_m - q_m, 0)(y_m)  if m < k
                                                    p_k(y_m)                if m = k)

(where the residual is zero everywhere, p_m itself times the chance of rejecting: standard_sequences)

so the token emitted at position j, given the request reached j, is distributed exactly as p_j,
and position j accepts with probability alpha_j = sum_v min(p_j(v), q_j(v)).
"""

from __future__ import annotations

import itertools

import torch

from reference import block, greedy, leviathan
from reference.batch import PLACEHOLDER


def _normalise(w: torch.Tensor) -> torch.Tensor:
    return w / w.sum()


def _token_weights(pairs, vocab_size: int) -> torch.Tensor:
    """[V] float64: each token's probabilities summed, in the order given ((token, probability) pairs)."""
    w = [0.0] * vocab_size
    for token, prob in pairs:
        w[token] += prob
    return torch.tensor(w, dtype=torch.float64)


def standard_sequences(p: torch.Tensor, q: torch.Tensor) -> dict[tuple[int, ...], float]:
    """Drafts x_j ~ q_j: p [k+1, V] target rows (bonus last), q [k, V] drafter rows, float64.

    A q row may sum to Z_j > 1 (within the batch's tolerance): the drafts are drawn from q_j / Z_j, the
    test still reads q_j itself, so position j rejects with probability 1 - alpha_j / Z_j even where the
    residual max(p_j - q_j, 0) is zero everywhere, and then emits a sample of p_j (SPEC 3's fallback).
    """
    k, V = q.shape[0], p.shape[1]
    overlap = torch.minimum(p[:k], q) / q.sum(dim=1, keepdim=True)   # [k, V]: draft v, accept it at j
    out: dict[tuple[int, ...], float] = {}
    for m in range(k + 1):
        if m < k:
            reject = torch.clamp(1 - overlap[m].sum(), min=0)
            last = reject * _normalise(leviathan.residual(p[m], q[m]))
        else:
            last = p[k]
        for prefix in itertools.product(range(V), repeat=m):
            head = float(torch.prod(overlap[torch.arange(m), torch.tensor(prefix, dtype=torch.int64)])) if m else 1.0
            if head == 0.0:
                continue
            for y in range(V):
                prob = head * float(last[y])
                if prob > 0:
                    out[prefix + (y,)] = prob
    return out


def standard_given_drafts(p: torch.Tensor, q: torch.Tensor | None, drafts: list[int]) -> dict[tuple[int, ...], float]:
    """Fixed drafts: p [k+1, V], q [k, V] or None (one-hot at the drafts)."""
    k, V = len(drafts), p.shape[1]
    out: dict[tuple[int, ...], float] = {}
    reach = 1.0
    for j in range(k + 1):
        if j == k:
            for y in range(V):
                if reach * p[k, y] > 0:
                    out[tuple(drafts) + (y,)] = reach * float(p[k, y])
            break
        qj = leviathan.one_hot(drafts[j], V) if q is None else q[j]
        x = drafts[j]
        accept = min(1.0, float(p[j, x] / qj[x])) if qj[x] > 0 else 0.0
        residual = _normalise(leviathan.residual(p[j], qj)) * (1 - accept)
        for y in range(V):
            if reach * residual[y] > 0:
                out[tuple(drafts[:j]) + (y,)] = reach * float(residual[y])
        reach *= accept
        if reach == 0:
            break
    return out


def greedy_output(logits: torch.Tensor, drafts: list[int]) -> tuple[int, ...]:
    """The one output of a greedy request: logits [k+1, V]."""
    out = []
    for j, x in enumerate(drafts):
        top = greedy.argmax(logits[j])
        if x != top:
            return tuple(out + [top])
        out.append(x)
    return tuple(out + [greedy.argmax(logits[len(drafts)])])


def synthetic_num_accepted(conditional_rates: torch.Tensor, k: int) -> torch.Tensor:
    """[k+1] float64: P(num_accepted = m) when position j accepts with probability c_j."""
    c = conditional_rates.to(torch.float64)[:k]
    through = torch.cumprod(torch.cat([torch.ones(1, dtype=torch.float64), c]), 0)  # P(accept all < m)
    stop = torch.cat([1 - c, torch.ones(1, dtype=torch.float64)])
    return through * stop


def synthetic_sequences(p: torch.Tensor, conditional_rates: torch.Tensor, drafts: list[int]) -> dict[tuple[int, ...], float]:
    """Fixed drafts, synthetic rule: p [k+1, V] (the target's own sample is emitted at the stop)."""
    k = len(drafts)
    stop = synthetic_num_accepted(conditional_rates, k)
    out: dict[tuple[int, ...], float] = {}
    for m in range(k + 1):
        for y in range(p.shape[1]):
            prob = float(stop[m] * p[m, y])
            if prob > 0:
                out[tuple(drafts[:m]) + (y,)] = prob
    return out


def position_token_distribution(sequences: dict[tuple[int, ...], float], j: int, vocab_size: int) -> torch.Tensor:
    """[V] float64: distribution of the token emitted at position j, given the request reached j."""
    reached = ((seq[j], prob) for seq, prob in sequences.items() if len(seq) > j)
    return _normalise(_token_weights(reached, vocab_size))


def stop_token_distribution(sequences: dict[tuple[int, ...], float], j: int, vocab_size: int) -> torch.Tensor:
    """[V] float64: distribution of the token emitted at position j, given the request stopped there
    (num_accepted == j: the token after a rejection, or the bonus at the last position); zeros where the law
    never stops at j."""
    stopped = ((seq[j], prob) for seq, prob in sequences.items() if len(seq) == j + 1)
    w = _token_weights(stopped, vocab_size)
    return _normalise(w) if float(w.sum()) > 0 else w


def acceptance_by_position(sequences: dict[tuple[int, ...], float], k: int) -> torch.Tensor:
    """[k] float64: P(accept at j | reached j)."""
    reach = torch.zeros(k + 1, dtype=torch.float64)
    for seq, prob in sequences.items():
        reach[: len(seq)] += prob
    return reach[1:] / reach[:-1]


def synthetic_sequences_from_q(p: torch.Tensor, q: torch.Tensor, conditional_rates: torch.Tensor) -> dict[tuple[int, ...], float]:
    """Drafts x_j ~ q_j, synthetic rule: position j accepts with c_j whatever the tokens, and the stop
    position emits the target's own sample: P(y_0..y_m) = prod_{i<m} c_i q_i(y_i) * (1 - c_m) p_m(y_m),
    or prod_{i<k} c_i q_i(y_i) * p_k(y_k) when every draft is accepted."""
    k, V = q.shape[0], p.shape[1]
    stop = synthetic_num_accepted(conditional_rates, k)
    out: dict[tuple[int, ...], float] = {}
    for m in range(k + 1):
        for prefix in itertools.product(range(V), repeat=m):
            head = float(torch.prod(q[torch.arange(m), torch.tensor(prefix, dtype=torch.int64)])) if m else 1.0
            if head == 0.0:
                continue
            for y in range(V):
                prob = float(stop[m]) * head * float(p[m, y])
                if prob > 0:
                    out[prefix + (y,)] = prob
    return out


def block_sequences(p: torch.Tensor, q: torch.Tensor) -> dict[tuple[int, ...], float]:
    """Block verification (SPEC 3.7) with drafts x_j ~ q_j: p [k+1, V], q [k, V], every draft sequence
    enumerated (V ** k of them). Given the drafts, tau = i >= 1 with probability h_i prod_{j>i} (1 - h_j)
    (the last eta_i <= h_i), tau = 0 with prod_j (1 - h_j); the extra token follows the weights at tau."""
    k, V = q.shape[0], p.shape[1]
    out: dict[tuple[int, ...], float] = {}
    for drafts in itertools.product(range(V), repeat=k):
        x = torch.tensor(drafts, dtype=torch.int64)
        reach = float(torch.prod(q[torch.arange(k), x])) if k else 1.0
        if reach == 0.0:
            continue
        w = block.weights(p[torch.arange(k), x], q[torch.arange(k), x])
        h = block.stop_probabilities(w, p, q).tolist() if k else []
        for tau in range(k + 1):
            chance = (h[tau - 1] if tau else 1.0) * float(torch.prod(1 - torch.tensor(h[tau:], dtype=torch.float64)))
            if chance == 0.0:
                continue
            law = _normalise(block.extra_weights(tau, w, p, q))
            for y in range(V):
                prob = reach * chance * float(law[y])
                if prob > 0:
                    key = drafts[:tau] + (y,)
                    out[key] = out.get(key, 0.0) + prob
    return out


def tree_paths(p: torch.Tensor, q: torch.Tensor | None, parents: list[int],
               tokens: list[int]) -> dict[tuple[tuple[int, ...], int], float]:
    """Token trees (SPEC 3.8), one random request with fixed drafts: {(accepted path as local node indices,
    final token): probability}. p [N + 1, V] float64 target rows (root first), q [N, V] or None (one-hot at
    the tokens), parents and tokens [N] (placeholders -1 allowed).

    The rule's recursion with each test replaced by its probability: at a node with residual r (a
    distribution), child c with token x is accepted with probability min(1, r(x) / q_c(x)), and the
    request goes on at c with r = p_c; otherwise r becomes norm(max(r - q_c, 0)) for the next sibling;
    past the last sibling the final token follows r."""
    V, N = p.shape[1], len(tokens)
    kids = [[c for c in range(N) if parents[c] == node] for node in range(-1, N)]   # [node + 1]: siblings in order
    out: dict[tuple[tuple[int, ...], int], float] = {}

    def visit(node: int, path: tuple[int, ...], reach: float) -> None:
        r = _normalise(p[node + 1])
        for c in kids[node + 1]:
            x = tokens[c]
            if x == PLACEHOLDER:
                continue
            q_c = leviathan.one_hot(x, V) if q is None else q[c].to(torch.float64)
            accept = min(1.0, float(r[x] / q_c[x])) if q_c[x] > 0 else 0.0
            if accept > 0:
                visit(c, path + (c,), reach * accept)
            reach *= 1 - accept
            if reach == 0:
                return
            r = _normalise(leviathan.residual(r, q_c))
        for y in range(V):
            if r[y] > 0:
                out[(path, y)] = out.get((path, y), 0.0) + reach * float(r[y])

    visit(-1, (), 1.0)
    return out


def tree_sequences(p: torch.Tensor, q: torch.Tensor | None, parents: list[int],
                   tokens: list[int]) -> dict[tuple[int, ...], float]:
    """``tree_paths`` as emitted sequences: {(accepted path's tokens..., final token): probability}. Two
    paths with the same tokens (duplicate siblings under dense q) add up."""
    out: dict[tuple[int, ...], float] = {}
    for (path, y), prob in tree_paths(p, q, parents, tokens).items():
        key = tuple(tokens[c] for c in path) + (y,)
        out[key] = out.get(key, 0.0) + prob
    return out
