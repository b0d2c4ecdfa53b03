"""Token-tree batches that the tree tests share (tests/test_tree_reference.py, test_tree_cpu.py,
test_triton_tree.py, test_triton_kernel.py): random trees of every shape with the drafts a real drafter makes,
noise off the float32 grid, a residual that rounds to zero, and the one-thread fixture the tree rule's many
tiny ops run under. A module that imports ``one_thread`` runs on one intra-op thread."""

import pytest
import torch

from reference import Noise, SpecBatch

SHAPES = ("random", "star", "chain", "narrow", "eagle", "empty")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One intra-op thread, as every xdist worker runs (tests/conftest.py): the tree rule is many tiny
    ops, and a tiny op that wakes a thread pool on a loaded machine costs milliseconds instead of us."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tree_shape(g: torch.Generator, n: int, shape: str) -> list[int]:
    """Parents of n nodes: "star" (all children of the root), "chain", "narrow" (deep: parent one or two
    nodes back), "eagle" (levels of up to 3 siblings under one node of the level before), "random"."""
    def pick(hi: int) -> int:
        return int(torch.randint(0, hi, (1,), generator=g))
    if shape == "star":
        return [-1] * n
    if shape == "chain":
        return list(range(-1, n - 1))
    if shape == "narrow":
        return [max(i - 1 - pick(2), -1) for i in range(n)]
    if shape == "eagle":
        parents, level, i = [], [-1], 0
        while i < n:
            width, parent = min(1 + pick(3), n - i), level[pick(len(level))]
            parents += [parent] * width
            level, i = list(range(i, i + width)), i + width
        return parents
    return [pick(i + 1) - 1 for i in range(n)]


def random_tree_batch(g: torch.Generator, *, B: int = 6, V: int = 6, max_nodes: int = 6, shapes=SHAPES,
                      drafter: str = "dense", greedy_fraction: float = 0.25, filters: bool = False,
                      placeholders: bool = False, duplicates: bool = False, nonfinite: bool = False,
                      q_zero: bool = False, ties: bool = False, distinct: bool = False) -> SpecBatch:
    """A random batch of token trees with drafts a real drafter would make: tokens drawn from q (dense), or
    from the parent row's target (drafter "none": one-hot q), or the argmax of the parent row (greedy
    requests, often). drafter "equal": q_i is the parent row's unfiltered target (residuals hit zero).
    Options add duplicate sibling tokens, placeholders, q_i(x) = 0, filters, non-finite rows, ties
    (logits on a coarse grid, so rows often have several argmax entries) and distinct siblings (EAGLE's
    top-k children: the most likely tokens of a noisy copy of the parent's row, no two alike)."""
    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64)
    parents, counts = [], []
    for _ in range(B):
        shape = shapes[int(torch.randint(0, len(shapes), (1,), generator=g))]
        n = 0 if shape == "empty" else int(torch.randint(0, max_nodes + 1, (1,), generator=g))
        parents.append(tree_shape(g, n, shape))
        counts.append(n)
    k = torch.tensor(counts, dtype=torch.int64)
    T = int(k.sum())
    temperature = torch.exp(rand(B) * 2 - 1).float()
    temperature[rand(B) < greedy_fraction] = 0.0
    logits = (torch.randn(T + B, V, generator=g, dtype=torch.float64) * 2).float()
    if ties:
        logits = logits.round()
    logits[(rand(T + B, V) < 0.15) & (logits < logits.amax(1, keepdim=True))] = float("-inf")
    l_off = (torch.cumsum(k + 1, 0) - (k + 1)).tolist()
    d_off = (torch.cumsum(k, 0) - k).tolist()
    tokens = torch.zeros(T, dtype=torch.int64)
    q = torch.zeros(T, V, dtype=torch.float64)
    for b in range(B):
        t_b = float(temperature[b]) or 1.0
        taken: dict[int, list[int]] = {}          # tokens already given to each parent's children
        for i, parent in enumerate(parents[b]):
            t, row = d_off[b] + i, l_off[b] + parent + 1
            p_parent = torch.softmax(logits[row].double() / t_b, -1)
            if drafter == "dense":
                q[t] = torch.softmax(torch.randn(V, generator=g, dtype=torch.float64) * 2, -1)
            elif drafter == "equal":
                q[t] = p_parent
            source = q[t] if drafter != "none" else p_parent
            tokens[t] = int(torch.multinomial(source, 1, generator=g))
            used = taken.setdefault(parent, [])
            if distinct and len(used) < V:
                score = p_parent + 0.05 * rand(V)
                score[used] = -1.0
                tokens[t] = int(score.argmax())
            used.append(int(tokens[t]))
            if float(temperature[b]) == 0 and rand(1) < 0.6:
                tokens[t] = int(logits[row].argmax())
            if duplicates and i and parents[b][i - 1] == parent and rand(1) < 0.5:
                tokens[t] = tokens[t - 1]
            if q_zero and drafter != "none" and rand(1) < 0.3 and float(q[t].sum() - q[t, tokens[t]]) > 0:
                q[t, tokens[t]] = 0.0          # a token its proposal could not have drawn: never accepted
                q[t] = q[t] / q[t].sum()
    if placeholders:
        tokens[rand(T) < 0.2] = -1
    extra = {}
    if filters:
        extra = dict(top_k=torch.randint(0, V + 1, (B,), generator=g), top_p=(0.3 + 0.7 * rand(B)).float(),
                     min_p=(0.3 * rand(B)).float())
        extra["top_p"][rand(B) < 0.3] = 1.0
    if nonfinite:
        for row in torch.nonzero(rand(T + B) < 0.1).flatten().tolist():
            kind = int(torch.randint(0, 3, (1,), generator=g))
            col = int(torch.randint(0, V, (1,), generator=g))
            if kind == 0:
                logits[row, col] = float("nan")
            elif kind == 1:
                logits[row, col] = float("inf")
            else:
                logits[row] = float("-inf")
    flat_parents = torch.tensor([p for ps in parents for p in ps], dtype=torch.int64)
    return SpecBatch(k, tokens, logits, None if drafter == "none" else q, temperature, **extra,
                     allow_nonfinite=nonfinite, tree_parents=flat_parents)


def float64_noise(batch: SpecBatch, g: torch.Generator) -> Noise:
    """Noise off the float32 grid: the rule decides with the values it is given (SPEC 2)."""
    u = torch.rand(batch.num_drafts, generator=g, dtype=torch.float64).clamp(1e-300, 1 - 2 ** -53)
    e = -torch.log(torch.rand(batch.num_requests, batch.vocab_size, generator=g, dtype=torch.float64).clamp(min=1e-300))
    return Noise(u, e)


def zero_residual_case(copies: int = 1) -> tuple[SpecBatch, Noise]:
    """Two children of the root: node 0 proposes q_0 = p_root with q_0(x) two ulps above p_root(x), so
    max(p_root - q_0, 0) is zero everywhere, and its uniform 1 - 2^-53 rejects it (rounding only: the
    rejection has probability 0 in exact arithmetic); node 1 (one-hot q through a dense row) follows."""
    logits = torch.tensor([[0.2, -0.4, 1.1, 0.0], [0.0, 0.0, 0.0, 0.0], [0.5, 0.1, 0.0, -0.3]])
    p_root = torch.softmax(logits[0].double(), -1)
    q = torch.stack([p_root.clone(), torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64)])
    for _ in range(2):
        q[0, 2] = torch.nextafter(q[0, 2], torch.tensor(2.0, dtype=torch.float64))
    batch = SpecBatch(torch.full((copies,), 2), torch.tensor([2, 3]).repeat(copies), logits.repeat(copies, 1),
                      q.repeat(copies, 1), torch.ones(copies), tree_parents=torch.tensor([-1, -1]).repeat(copies))
    u = torch.tensor([1 - 2 ** -53, 1e-3], dtype=torch.float64).repeat(copies)
    return batch, Noise(u, torch.ones(copies, 4, dtype=torch.float64))
