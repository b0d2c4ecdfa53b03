"""Support under boundary coins (SPEC 4.3): with every uniform a rule draws at one of float32's boundaries,
every emitted token lies in the support it was drawn from, whatever the backend's noise path.

A uniform at a boundary is too rare for the statistical checks (torch.rand draws 0 once in 2^24), and a
backend whose rule takes coins of its own (a coin per tree node and a final one, drawn by its engine) cannot
be given the reference's injected noise, so the differential ``boundary`` case never reaches it. Here the
uniforms are placed on both paths:

    injected   noise.uniform [T] filled with the coin (2^-150 for 0: injected uniforms lie in (0, 1), and
               2^-150 rounds to 0 in float32), the exponentials drawn as usual
    coins      ``coin=c`` for a backend that declares the noise path "coins" (SPEC 2, fixed coins)

Coins: 0 (torch.rand's smallest value), 2^-24 (its smallest positive one) and 1 - 2^-24 (its largest).

Cases, V = 32, one batch a case and coin from a seeded generator:

    zero_mass_drafts          chains (standard rule) with drafts of target probability 0 (-inf logits),
                              some after a draft that every coin accepts: u q(x) <= p(x) holds at u = 0, so a
                              rule that does not also require p(x) > 0 (or u > 0) accepts them
    tree_zero_mass_siblings   one-hot trees whose siblings include tokens of probability 0 before and after
                              supported ones
    tree_covered_support      one-hot trees in which a node's children are the whole support of its row: at
                              any coin below 1 exact arithmetic accepts one of them (the last sibling's test
                              reads r(x) / m = 1), where a running float32 sum of their probabilities that
                              stops below 1 - 2^-24 accepts none and leaves a residual of zero
    coins_decide              one-hot chains whose every draft has p(x) = 1/2: coins 0 and 2^-24 accept every
    tree_coins_decide         draft and 1 - 2^-24 none, on any rule that tests its coin against p(x) / q(x);
                              the same chains as single-path trees. A backend that declares fixed coins and
                              draws its own instead fails here, where the cases above could pass it vacuously
"""

from __future__ import annotations

import torch

from reference import Noise, SpecBatch, tree
from specverify.checks.common import on_device
from specverify.checks.runner import CheckFailure, Context, Needs
from specverify.checks.structural import support_problems
from specverify.checks.tree_cases import one_hot_trees

COINS = (0.0, 2.0 ** -24, 1.0 - 2.0 ** -24)
INJECTED_ZERO = 2.0 ** -150     # an injected uniform in (0, 1) that float32 reads as 0
COIN_CASES = ("zero_mass_drafts", "tree_zero_mass_siblings", "tree_covered_support", "coins_decide",
              "tree_coins_decide")
V = 32
COVER = 8                       # children covering their parent's support in tree_covered_support


def coin_needs(case: str) -> Needs:
    return Needs(method="tree" if case.startswith("tree") else "standard", noise="placeable")


def covered_row(g: torch.Generator, support: torch.Tensor) -> torch.Tensor:
    """[V] float32 logits whose support is ``support`` (the other ids -inf), the first of seeded draws whose
    float32 probabilities on it (softmax in float64 then rounded, and softmax in float32), summed in the order
    of ``support`` in float32, stay at or below 1 - 2^-23: a running sum a coin of 1 - 2^-24 lies above."""
    for _ in range(100):
        rows = torch.full((256, V), float("-inf"))
        rows[:, support] = torch.randn(256, support.numel(), generator=g) * 2
        ok = torch.ones(256, dtype=torch.bool)
        for p in (torch.softmax(rows.double(), 1).float(), torch.softmax(rows, 1)):
            mass = torch.zeros(256, dtype=torch.float32)
            for x in support.tolist():      # float32, one addition at a time, as a running sum rounds
                mass = mass + p[:, x]
            ok &= mass <= 1.0 - 2.0 ** -23
        if bool(ok.any()):
            return rows[int(ok.nonzero()[0])].clone()
    raise RuntimeError("no row found whose float32 running sum stays below 1 - 2^-23")


def _zero_mass_drafts(g: torch.Generator, dense: bool) -> SpecBatch:
    """Six chains of 1-4 drafts at temperature 1 or 0.7. Each draft is either a token of probability 0 at its
    row (its logit -inf) or the row's dominant token (logit 30 above the rest, so p(x) > 1 - 2^-24 and every
    coin accepts it where q is one-hot); every request holds at least one of probability 0."""
    k = torch.tensor([1, 2, 3, 4, 2, 3])
    temperature = torch.tensor([1.0, 0.7, 1.0, 1.0, 0.7, 1.0])
    drafts, rows, qs = [], [], []
    for b, n in enumerate(k.tolist()):
        zero_at = int(torch.randint(0, n, (1,), generator=g))
        for j in range(n):
            row = torch.randn(V, generator=g) * 2
            x = int(torch.randint(0, V, (1,), generator=g))
            if j == zero_at or bool(torch.rand(1, generator=g) < 0.3):
                row[x] = float("-inf")
            else:
                row[x] = row.max() + 30.0
            drafts.append(x)
            rows.append(row)
            q = torch.softmax(torch.randn(V, generator=g), 0)
            qs.append(q if dense else torch.nn.functional.one_hot(torch.tensor(x), V).float())
        rows.append(torch.randn(V, generator=g) * 2)   # the bonus row
    q = torch.stack(qs) if dense else None
    return SpecBatch(k, torch.tensor(drafts), torch.stack(rows), q, temperature)


def _tree_zero_mass_siblings(g: torch.Generator) -> SpecBatch:
    """Four one-hot trees: the root's children are, in order, a token of probability 0, a supported one and
    another of probability 0, and the supported child has children of the same pattern."""
    trees = []
    for _ in range(4):
        root = torch.randn(V, generator=g) * 2
        ids = torch.randperm(V, generator=g)[:6].tolist()
        root[[ids[0], ids[2]]] = float("-inf")
        child = torch.randn(V, generator=g) * 2
        child[[ids[3], ids[5]]] = float("-inf")
        parents = [-1, -1, -1, 1, 1, 1]
        tokens = [ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]]
        rows = [root, torch.randn(V, generator=g) * 2, child, torch.randn(V, generator=g) * 2,
                *(torch.randn(V, generator=g) * 2 for _ in range(3))]
        trees.append((len(parents), parents, tokens, rows))
    return one_hot_trees(trees)


def _tree_covered_support(g: torch.Generator) -> SpecBatch:
    """Three one-hot trees: the root's COVER children are its whole support, in a random order, and its first
    and last child (the ones a coin of 0 and of 1 - 2^-24 accept) each have COVER children that are their
    own row's whole support. No support holds id 0 or V - 1, where a kernel's fallback lands."""
    trees = []
    for _ in range(3):
        support, first, last = (1 + torch.randperm(V - 2, generator=g)[:COVER] for _ in range(3))
        parents = [-1] * COVER + [0] * COVER + [COVER - 1] * COVER
        tokens = support.tolist() + first.tolist() + last.tolist()
        rows = [covered_row(g, support)]
        rows += [covered_row(g, first)] + [torch.randn(V, generator=g) * 2 for _ in range(COVER - 2)]
        rows += [covered_row(g, last)] + [torch.randn(V, generator=g) * 2 for _ in range(2 * COVER)]
        trees.append((len(parents), parents, tokens, rows))
    return one_hot_trees(trees)


def _coins_decide(g: torch.Generator, as_tree: bool) -> SpecBatch:
    """Four one-hot chains of 1-4 drafts at temperature 1, each draft's logit set to the log of its row's other
    mass, so that p(x) = 1/2; as single-path trees where ``as_tree``."""
    k = torch.tensor([1, 2, 3, 4])
    rows, drafts = [], []
    for n in k.tolist():
        for _ in range(n):
            row = torch.randn(V, generator=g)
            x = int(torch.randint(0, V, (1,), generator=g))
            row[x] = float("-inf")
            row[x] = torch.logsumexp(row, 0)
            rows.append(row)
            drafts.append(x)
        rows.append(torch.randn(V, generator=g))
    return SpecBatch(k, torch.tensor(drafts), torch.stack(rows), None, torch.ones(4),
                     tree_parents=tree.chain_parents(k) if as_tree else None)


def _decided(batch: SpecBatch, out, coin: float) -> list[str]:
    """Where a coins_decide call's acceptances are not what its coin decides: every draft below 1/2, none above."""
    k, n = batch.num_draft_tokens.cpu(), out.num_accepted.cpu()
    want = k if coin < 0.5 else torch.zeros_like(k)
    return [f"request {b}: {int(n[b])} of {int(k[b])} drafts of p(x) = 1/2 accepted; the coin decides "
            f"{'all' if coin < 0.5 else 'none'}" for b in range(k.shape[0]) if int(n[b]) != int(want[b])]


def coin_batch(case: str, g: torch.Generator, dense: bool = True) -> SpecBatch:
    """The case's batch (module docstring); ``dense``: the chains' drafts carry a dense q."""
    if case == "zero_mass_drafts":
        return _zero_mass_drafts(g, dense)
    if case == "tree_zero_mass_siblings":
        return _tree_zero_mass_siblings(g)
    if case == "tree_covered_support":
        return _tree_covered_support(g)
    if case in ("coins_decide", "tree_coins_decide"):
        return _coins_decide(g, case == "tree_coins_decide")
    raise ValueError(f"unknown boundary-coin case {case!r}")


def coin_name(coin: float) -> str:
    """How the check's messages write a coin: "0", "2^-24", "1 - 2^-24"."""
    return {0.0: "0", 2.0 ** -24: "2^-24", 1.0 - 2.0 ** -24: "1 - 2^-24"}.get(coin, repr(coin))


def check_boundary_coins(ctx: Context, case: str) -> None:
    """Every coin on every placeable path: emitted tokens in the support, and on the coins_decide cases the
    acceptances the coin decides. Each problem ("every uniform at C (PATH): request b: ...") is held against the
    declared deviations on its own, so that one declared symptom never excuses another."""
    method = coin_needs(case).method
    declared = ctx.backend.capabilities.noise
    real = []
    for path in [p for p in ("coins", "injected") if p in declared]:
        for i, coin in enumerate(COINS):
            g = torch.Generator().manual_seed(7_000 + 10 * COIN_CASES.index(case) + i)
            batch = coin_batch(case, g, ctx.profile.dense_drafts)
            if path == "coins":
                dev_batch, _ = on_device(batch, None, ctx.profile.device)
                seeds = torch.randint(0, 2 ** 62, (batch.num_requests,), generator=g)
                out = ctx.backend(dev_batch, method=method, seed=seeds, coin=coin)
            else:
                drawn = Noise.draw(batch, g)
                uniform = torch.full(drawn.uniform.shape, coin or INJECTED_ZERO, dtype=torch.float64)
                dev_batch, noise = on_device(batch, Noise(uniform, drawn.exponential), ctx.profile.device)
                out = ctx.backend(dev_batch, method=method, noise=noise)
            problems = support_problems(batch, out, method)
            if case.endswith("coins_decide"):
                problems += _decided(batch, out, coin)
            real += ctx.undeclared([f"every uniform at {coin_name(coin)} ({path}): {p}" for p in problems], method)
            ctx.result.samples += batch.num_requests
    if real:
        raise CheckFailure(f"{len(real)} problem(s) at boundary coins; " + "; ".join(real[:3]))
