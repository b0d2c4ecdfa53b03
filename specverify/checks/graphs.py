"""CUDA-graph property (SPEC 4.7, the seed 004 bug class: draft state not written during replay).

cuda_graphs  capture the backend's graph-capturable entry ``sample_into`` once per batch shape, then
             several times copy FRESH inputs (logits, draft ids, draft probabilities, temperatures,
             draft counts permuted at equal T and max, noise or per-request seeds, synthetic rates)
             into the static buffers, poison the static outputs, replay, and require the replayed
             outputs to equal the backend's eager call on the same inputs and to agree with the
             reference (real divergences fail, ambiguous ones are bounded as in the differential
             checks). A backend declaring "tree" also replays token trees (new tree_parents each
             time, the accepted paths compared too).

The protocol (documented on ``specverify.backends.Backend.sample_into``): a backend that declares
``capabilities.cuda_graphs`` implements

    sample_into(out: SpecOutput, batch: SpecBatch, *, method="standard", noise=None,
                seed_tensor=None, rates=None) -> None

writing ``out.token_ids`` [B, K + 1] and ``out.num_accepted`` [B] in place (and for method "tree"
``out.accepted_nodes`` [B, K], reading ``batch.tree_parents``), with no validation, no
host sync and no data-dependent allocation. ``seed_tensor`` holds the per-request Philox keys
(``reference.philox.request_seeds``) on the device; ``rates`` the synthetic conditional rates c_j
(float32 [n >= K]) on the device. The check is n/a on a CPU profile and for backends that do not
declare cuda_graphs: it never claims GPU coverage it did not run.
"""

from __future__ import annotations

import torch

from reference import Noise, SpecBatch, SpecOutput
from reference.sample import synthetic_rates_f32
from specverify.checks.runner import CheckFailure, Context, Needs, output_problems
from specverify.tree_strategies import tree_shape

GRAPH_CASES = ("shapes",)
REPLAYS = 4            # fresh input sets per captured graph
POISON = -7            # written into the static outputs before each replay


# (draft counts, V, logit dtype, drafter, method): V not a multiple of any block, zero-draft requests
# first / middle / last, a batch of one zero-draft request, bf16 and fp16 logits, a large vocabulary
# (split-V launch plan), the one-hot drafter, the synthetic rule, the block rule (its third launch) and
# token trees (SPEC 3.8: random and EAGLE-style shapes, a zero-node tree among them).
SHAPES = (
    ((3, 0, 2, 1), 1_000, torch.float32, "dense", "standard"),
    ((0,), 257, torch.bfloat16, "dense", "standard"),
    ((0, 4, 4, 1, 0, 2, 3, 0), 4_099, torch.float16, "none", "standard"),
    ((2, 0, 5, 1), 151_936, torch.bfloat16, "dense", "standard"),
    ((1, 3, 0, 2, 2), 3_001, torch.float32, "dense", "synthetic"),
    ((4, 0, 1, 3, 2), 2_053, torch.float32, "dense", "block"),
    ((6, 0, 3, 7, 1), 1_031, torch.float32, "dense", "tree"),
    ((5, 8, 0, 2), 4_099, torch.bfloat16, "none", "tree"),
)
SYNTHETIC_RATES = (0.8, 0.3, 0.55, 1.0, 0.05)


def _fresh_inputs(g: torch.Generator, counts: list[int], V: int, dtype: torch.dtype, drafter: str,
                  trees: bool = False, max_depth: int | None = None) -> SpecBatch:
    """A new batch of the given layout on the CPU: new logits (some rows -inf-masked), drafts drawn
    from a new q, new temperatures (a quarter greedy); with ``trees``, new tree shapes (random and
    EAGLE-style, no deeper than ``max_depth``) of the same node counts."""
    B, T = len(counts), sum(counts)
    k = torch.tensor(counts, dtype=torch.int64)
    logits = torch.randn(T + B, V, generator=g, dtype=torch.float64) * 3
    if V > 8:
        masked = torch.rand(T + B, V, generator=g) < 0.2
        masked[:, 0] = False
        logits = logits.masked_fill(masked, float("-inf"))
    temperature = torch.exp(torch.empty(B, dtype=torch.float64).uniform_(-1.0, 0.7, generator=g)).float()
    temperature[torch.rand(B, generator=g) < 0.25] = 0.0
    if drafter == "dense":
        q = torch.softmax(torch.randn(T, V, generator=g, dtype=torch.float64) * 2, dim=-1)
        drafts = torch.multinomial(q, 1, generator=g).squeeze(1) if T else torch.zeros(0, dtype=torch.int64)
        q32 = q.float()
        q32 = q32 / q32.sum(dim=1, keepdim=True) if T else q32
    else:
        drafts = torch.randint(0, V, (T,), generator=g)
        q32 = None
    parents = None
    if trees:
        parents = torch.tensor([p for i, n in enumerate(counts)
                                for p in tree_shape(g, n, ("random", "eagle")[i % 2], max_depth)], dtype=torch.int64)
    return SpecBatch(k, drafts, logits.to(dtype), q32, temperature, tree_parents=parents)


def _copy_into(static: SpecBatch, fresh: SpecBatch) -> None:
    for name in ("num_draft_tokens", "draft_token_ids", "target_logits", "draft_probs", "temperature", "tree_parents"):
        dst, src = getattr(static, name), getattr(fresh, name)
        if dst is not None:
            dst.copy_(src, non_blocking=False)


def _raw_outputs_equal(a: SpecOutput, b: SpecOutput) -> bool:
    """Every slot equal, -1 padding included: a replay must write exactly what the eager call writes
    (the accepted paths too, for trees)."""
    same = torch.equal(a.token_ids.cpu(), b.token_ids.cpu()) and torch.equal(a.num_accepted.cpu(), b.num_accepted.cpu())
    if a.accepted_nodes is None:
        return same
    return same and b.accepted_nodes is not None and torch.equal(a.accepted_nodes.cpu(), b.accepted_nodes.cpu())


def _one_shape(ctx: Context, shape, path: str, g: torch.Generator, totals: dict) -> None:
    backend = ctx.backend
    counts, V, dtype, drafter, method = shape
    counts = list(counts)
    K = max(counts)
    B = len(counts)
    dev = torch.device("cuda")
    steps = max(K, 1)

    def call_kwargs(rate):
        if method == "synthetic":
            return dict(method="synthetic", synthetic_acceptance_rate=rate, num_speculative_steps=steps)
        return dict(method=method)

    def noise_for(batch, seeds):
        return Noise.from_seeds(seeds, batch.num_draft_tokens, V) if path == "seeded" else Noise.draw(batch, g)

    trees, depth = method == "tree", getattr(backend.capabilities, "max_tree_depth", None)
    first = _fresh_inputs(g, counts, V, dtype, drafter, trees, depth)
    seeds0 = torch.randint(0, 2 ** 62, (B,), generator=g, dtype=torch.int64)
    noise0 = noise_for(first, seeds0)
    static = first.to(dev)
    static_noise = Noise(noise0.uniform.to(dev), noise0.exponential.to(dev))
    static_seeds = seeds0.to(dev)
    static_rates = synthetic_rates_f32(SYNTHETIC_RATES[0], steps).to(dev) if method == "synthetic" else None
    out = SpecOutput(torch.full((B, K + 1), POISON, dtype=torch.int64, device=dev),
                     torch.full((B,), POISON, dtype=torch.int64, device=dev),
                     torch.full((B, K), POISON, dtype=torch.int64, device=dev) if trees else None)
    kwargs = dict(method=method, rates=static_rates)
    if path == "seeded":
        kwargs["seed_tensor"] = static_seeds
    else:
        kwargs["noise"] = static_noise

    # Warm up (compilation, caches) on a side stream, as torch.cuda.graph requires, then capture once.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            backend.sample_into(out, static, **kwargs)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        backend.sample_into(out, static, **kwargs)
    torch.cuda.synchronize()

    for replay in range(REPLAYS):
        # Same T and max draft count, a different layout: the captured kernels must read the counts.
        perm = torch.randperm(B, generator=g).tolist() if replay % 2 else list(range(B))
        layout = [counts[i] for i in perm]
        fresh = _fresh_inputs(g, layout, V, dtype, drafter, trees, depth)
        seeds = torch.randint(0, 2 ** 62, (B,), generator=g, dtype=torch.int64)
        noise = noise_for(fresh, seeds)
        rate = SYNTHETIC_RATES[(replay + 1) % len(SYNTHETIC_RATES)] if method == "synthetic" else None
        _copy_into(static, fresh)
        if path == "seeded":
            static_seeds.copy_(seeds)
        else:
            static_noise.uniform.copy_(noise.uniform)
            static_noise.exponential.copy_(noise.exponential)
        if static_rates is not None:
            static_rates.copy_(synthetic_rates_f32(rate, steps))
        out.token_ids.fill_(POISON)
        out.num_accepted.fill_(POISON)
        if trees:
            out.accepted_nodes.fill_(POISON)
        graph.replay()
        torch.cuda.synchronize()
        replayed = SpecOutput(out.token_ids.cpu(), out.num_accepted.cpu(), out.accepted_nodes.cpu() if trees else None)

        where = (f"shape counts={layout}, V={V}, {str(dtype).replace('torch.', '')}, drafter={drafter}, "
                 f"{method}, {path} noise, replay {replay + 1}")
        problems = output_problems(fresh, replayed)
        if problems:
            raise CheckFailure(f"{where}: replayed output: " + "; ".join(problems[:3]))
        dev_fresh = fresh.to(dev)
        if path == "seeded":
            eager = backend(dev_fresh, seed=seeds.to(dev), **call_kwargs(rate))
        else:
            eager = backend(dev_fresh, noise=Noise(noise.uniform.to(dev), noise.exponential.to(dev)),
                            **call_kwargs(rate))
        if not _raw_outputs_equal(replayed, eager):
            bad = (replayed.token_ids != eager.token_ids.cpu()).any(dim=1) | (replayed.num_accepted != eager.num_accepted.cpu())
            b = int(bad.nonzero()[0])
            raise CheckFailure(f"{where}: graph replay differs from the eager call in {int(bad.sum())} of {B} "
                               f"requests; first: request {b} replayed {replayed.emitted()[b]} vs eager "
                               f"{eager.emitted()[b]} (stale state captured in the graph?)")
        ctx.agree(fresh, replayed, noise, where=where, **call_kwargs(rate))
        totals["replays"] += 1
    del graph


def check_cuda_graphs(ctx: Context, case: str) -> None:
    """Capture once, copy fresh inputs into the static buffers, replay: equal to eager and to the reference."""
    caps = ctx.backend.capabilities
    if not torch.cuda.is_available():
        raise CheckFailure("profile device is cuda but torch.cuda.is_available() is False")
    paths = [p for p in ("injected", "seeded") if p in caps.noise]
    totals = {"replays": 0}
    g = torch.Generator().manual_seed(4004)
    shapes = [s for s in SHAPES if s[4] in caps.methods and s[2] in caps.logit_dtypes
              and (caps.max_vocab is None or s[1] <= caps.max_vocab)]
    for shape in shapes:
        for path in paths:
            _one_shape(ctx, shape, path, g, totals)
    ctx.result.message = (f"{len(shapes)} shapes x {len(paths)} noise paths, {totals['replays']} replays of fresh "
                          "inputs equal to eager")


GRAPH_NEEDS = Needs(method=None, noise="any", cuda_graphs=True)

__all__ = ["GRAPH_CASES", "GRAPH_NEEDS", "SHAPES", "check_cuda_graphs"]
