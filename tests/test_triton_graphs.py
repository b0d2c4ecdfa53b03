"""CUDA graphs of the fused Triton sampler (SPEC 4.7): capture once, replay fresh inputs.

The graph is captured once on one batch. Each round then copies fresh inputs into its static buffers
(logits, drafts, draft probs, temperatures, draft counts at equal T and K, injected noise or request
seeds), poisons the outputs and replays; the replay must equal the backend's eager call on the same
inputs and the reference. A companion test shows that this catches a graph that keeps any one input
stale. Needs CUDA: without it every test here is skipped.
"""

from __future__ import annotations

import os

import pytest
import torch

import reference
from reference import Noise, SpecBatch, SpecOutput
from specverify.kernels.triton_kernels import triton_sample_into
from specverify.kernels.triton_sampler import TritonBackend

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET", "0") == "1",
                                reason="CUDA graphs need a GPU (and compiled kernels)")
DEVICE = "cuda"

# The CUDA-graph tests: B = 8, T = 19, K = 4, zero-draft request included. Each round rotates the counts:
# a fresh layout at equal T and K, so a graph that kept the captured counts would read the wrong rows.
GRAPH_COUNTS = [4, 1, 3, 0, 2, 4, 2, 3]
GRAPH_V = 1000
GRAPH_ROUNDS = 4
# triton_sample_into's inputs, by argument name: what a replay must read fresh from the static buffers.
GRAPH_INPUTS = ("num_draft_tokens", "draft_token_ids", "target_logits", "draft_probs", "temperature",
                "uniform", "exponential", "seeds")


def _graph_round(r: int) -> tuple[SpecBatch, Noise, torch.Tensor]:
    """Round r's inputs on the CPU: counts rotated by r, new logits, drafts drawn from a new q near p, new
    temperatures (two requests greedy, others in [0.4, 1.4)), new injected noise and new request seeds."""
    k = GRAPH_COUNTS[r % len(GRAPH_COUNTS):] + GRAPH_COUNTS[:r % len(GRAPH_COUNTS)]
    g = torch.Generator().manual_seed(600 + r)
    B, T = len(k), sum(k)
    logits = torch.randn(T + B, GRAPH_V, generator=g) * 2
    rows = [sum(k[:b]) + b + j for b in range(B) for j in range(k[b])]
    q = torch.softmax(logits[rows] + torch.randn(T, GRAPH_V, generator=g), dim=-1)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1)
    temperature = torch.rand(B, generator=g) + 0.4
    temperature[[r % B, (r + 3) % B]] = 0.0
    batch = SpecBatch(torch.tensor(k), drafts, logits, q, temperature)
    return batch, Noise.draw(batch, g), torch.randint(0, 2**62, (B,), generator=g)


def _graph_inputs(batch: SpecBatch, noise: Noise | None, seeds: torch.Tensor | None) -> dict:
    """GRAPH_INPUTS by name: the batch's five (SpecBatch's field names), then the noise and seeds given."""
    inputs = {name: getattr(batch, name) for name in GRAPH_INPUTS[:5]}
    if noise is not None:
        inputs.update(uniform=noise.uniform, exponential=noise.exponential)
    if seeds is not None:
        inputs["seeds"] = seeds
    return inputs


def _capture(step):
    """Warm step up on a side stream (compilation, launch caches), capture it once in a CUDA graph, and
    return the graph's replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def _replay_fresh_inputs(backend, path: str) -> list[tuple[SpecOutput, SpecOutput, SpecOutput]]:
    """Capture backend.sample_into once on round 0's inputs; then, each round, copy round r's fresh inputs
    into the static buffers, poison the outputs and replay. Returns (replayed, eager, reference) per round:
    the eager call and the reference are run on the same fresh inputs."""
    static = {name: t.to(DEVICE, copy=True) for name, t in _graph_inputs(*_graph_round(0)).items()}
    static_batch = SpecBatch(*(static[name] for name in GRAPH_INPUTS[:5]))
    noise_kw = (dict(noise=Noise(static["uniform"], static["exponential"])) if path == "injected"
                else dict(seed_tensor=static["seeds"]))
    B, K = static_batch.num_requests, max(GRAPH_COUNTS)
    out = SpecOutput(torch.empty((B, K + 1), dtype=torch.int64, device=DEVICE),
                     torch.empty(B, dtype=torch.int64, device=DEVICE))
    replay = _capture(lambda: backend.sample_into(out, static_batch, **noise_kw))
    results = []
    for r in range(1, GRAPH_ROUNDS + 1):
        batch, noise, seeds = _graph_round(r)
        for name, fresh in _graph_inputs(batch, noise, seeds).items():
            static[name].copy_(fresh)
        out.token_ids.fill_(-7)
        out.num_accepted.fill_(-7)
        replay()
        replayed = SpecOutput(out.token_ids.to("cpu", copy=True), out.num_accepted.to("cpu", copy=True))
        call = dict(noise=noise) if path == "injected" else dict(seed=seeds)
        eager_call = dict(noise=Noise(noise.uniform.to(DEVICE), noise.exponential.to(DEVICE))) if path == "injected" \
            else call
        eager = backend(batch.to(DEVICE), **eager_call)
        results.append((replayed, SpecOutput(eager.token_ids.cpu(), eager.num_accepted.cpu()),
                        reference.sample(batch, **call)))
    return results


def _identical(a: SpecOutput, b: SpecOutput) -> bool:
    """Every slot equal, the -1 padding included."""
    return torch.equal(a.token_ids, b.token_ids) and torch.equal(a.num_accepted, b.num_accepted)


@pytest.mark.parametrize("path", ["injected", "seeded"])
def test_cuda_graph_replay_of_fresh_inputs_equals_eager(path):
    """triton_sample_into has no host sync and no data-dependent size: captured once, it must compute each
    round's fresh inputs (logits, drafts, draft probs, temperatures, draft counts, noise or seeds) copied
    into the static buffers, exactly as an eager call on those inputs does, and as the reference does."""
    for replayed, eager, want in _replay_fresh_inputs(TritonBackend(), path):
        assert _identical(replayed, eager)
        assert _identical(replayed, want)


class _StaleInputGraph(TritonBackend):
    """Correct eager calls, but sample_into reads one input (a GRAPH_INPUTS name) from a private copy that
    is refreshed only outside graph capture: a replay sees that input as it was when the graph was captured."""

    def __init__(self, stale: str) -> None:
        super().__init__()
        self.stale, self._copy = stale, None

    def sample_into(self, out, batch, *, method="standard", noise=None, seed_tensor=None, rates=None) -> None:
        inputs = _graph_inputs(batch, noise, seed_tensor)
        if self._copy is None:
            self._copy = inputs[self.stale].clone()
        if not torch.cuda.is_current_stream_capturing():
            self._copy.copy_(inputs[self.stale])
        inputs[self.stale] = self._copy
        triton_sample_into(out.token_ids, out.num_accepted, rates=rates, **inputs)


def _stale_draft_probs_graph():
    from specverify.mutants.graphs import StaleDraftProbsGraph  # noqa: PLC0415 (imports the Triton backend)
    return StaleDraftProbsGraph()


def _stale_graph_cases():
    cases = [pytest.param(_stale_draft_probs_graph, "injected", id="mutant-stale_draft_probs_graph")]
    for name in GRAPH_INPUTS:
        path = "seeded" if name == "seeds" else "injected"
        cases.append(pytest.param(lambda name=name: _StaleInputGraph(name), path, id=f"stale-{name}"))
    return cases


@pytest.mark.parametrize("make, path", _stale_graph_cases())
def test_cuda_graph_replay_test_catches_a_graph_with_stale_inputs(make, path):
    """The replay test above has teeth: a backend whose captured graph keeps any one input stale (the
    mutant zoo's stale_draft_probs_graph, and each of triton_sample_into's inputs in turn) gives a replay
    that differs from its own eager call on the fresh inputs in at least one round."""
    rounds = _replay_fresh_inputs(make(), path)
    assert any(not _identical(replayed, eager) for replayed, eager, _ in rounds)
