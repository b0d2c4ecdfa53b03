"""The fused Triton sampler against reference.sample, token for token.

Without CUDA the kernels run under the Triton interpreter on CPU tensors (tests/triton_sampler_cases.py
sets it up). With CUDA the same cases run compiled on cuda tensors; the parameter id says which
("cpu-interpreter" or "cuda"), so a run never passes a device it did not test.

CUDA graphs are tested in tests/test_triton_graphs.py, the launch path in tests/test_triton_launch.py.

Small vocabularies with a forced 16-wide tile and forced vocabulary splits exercise what large V
exercises on the GPU: several tiles per program, a ragged last tile, and the cross-program merges of
both passes (pass 1 partials, pass 2 atomic race keys).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
import torch

import reference
from reference import Noise, SpecBatch, SpecOutput, philox, select_requests
from reference.sample import filtered_target
from specverify import UnsupportedError, get_backend
from triton_sampler_cases import (_CUDA, DEVICES, TritonBackend, _batch, _same, triton_kernels, triton_math,
                                  triton_sampler)

# Several tiles, a ragged last tile, several splits in both passes.
TILED = dict(block_v=16, splits=(3, 2))


def _batch_from(k: list[int], logits: torch.Tensor, temperature: list[float], device: str,
                drafts: list[int] | None = None, q: torch.Tensor | None = None) -> SpecBatch:
    T = sum(k)
    drafts = drafts if drafts is not None else [0] * T
    return SpecBatch(torch.tensor(k, dtype=torch.int64, device=device),
                     torch.tensor(drafts, dtype=torch.int64, device=device), logits.to(device),
                     None if q is None else q.to(device), torch.tensor(temperature, dtype=torch.float32, device=device))


SYNTH = dict(method="synthetic", synthetic_acceptance_rate=0.55, num_speculative_steps=4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vocab,drafter,dtype", [
    (1, "dense", torch.float32),
    (7, "none", torch.float16),
    (33, "dense", torch.bfloat16),
    (130, "dense", torch.float32),
    (130, "none", torch.bfloat16),
    (45, "disjoint", torch.float16),
])
def test_triton_matches_reference_under_injected_noise(device, vocab, drafter, dtype):
    """Shared noise makes the kernel a deterministic function: every token must equal the reference's.
    V = 1 (a one-entry row: nothing to race), V = 7 (one ragged tile), 33 and 130 (several tiles, a
    ragged last one, splits in both passes); dense q, one-hot q (None) and q disjoint from p (every
    random draft rejected, the residual is p itself); all three logit dtypes."""
    backend = TritonBackend(**TILED)
    for seed in range(2):
        batch = _batch(100 * vocab + seed, device, num_requests=6, vocab_size=vocab, max_draft=4,
                       drafter=drafter, logit_dtype=dtype)
        noise = Noise.draw(batch, torch.Generator().manual_seed(seed))
        _same(reference.sample(batch, noise=noise), backend(batch, noise=noise))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vocab,drafter", [(33, "dense"), (130, "none"), (66, "disjoint")])
def test_triton_matches_reference_under_seeds(device, vocab, drafter):
    """The seeded path draws its noise in-kernel (Philox, reference.philox's stream): with the same
    seed the reference reproduces it, so the comparison is exact, not statistical."""
    backend = TritonBackend(**TILED)
    for seed in range(2):
        batch = _batch(7 * vocab + seed, device, num_requests=6, vocab_size=vocab, max_draft=3, drafter=drafter)
        _same(reference.sample(batch, seed=1234 + seed), backend(batch, seed=1234 + seed))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("noise_path", ["injected", "seeded"])
def test_triton_synthetic_matches_reference(device, noise_path):
    """Synthetic: accept iff u_j < c_j (float32 rates), and at a rejection the target's own sample
    (race on p, argmax for greedy requests), never the residual."""
    backend = TritonBackend(**TILED)
    batch = _batch(5, device, num_requests=7, vocab_size=50, max_draft=4, greedy_fraction=0.3)
    kwargs = dict(noise=Noise.draw(batch, torch.Generator().manual_seed(9))) if noise_path == "injected" else \
        dict(seed=77)
    _same(reference.sample(batch, **kwargs, **SYNTH), backend(batch, **kwargs, **SYNTH))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vocab,drafter,max_draft", [(33, "dense", 5), (130, "none", 4), (45, "disjoint", 3),
                                                     (40, "dense", 1)])
def test_triton_block_rule_matches_reference(device, vocab, drafter, max_draft):
    """The block rule (SPEC 3.7) under the tiled plan: the residual-mass launch sums S_i over three
    splits of 16-wide tiles, pass 2 merges them, finds tau from the end and races over w_tau p - q.
    Dense, one-hot and disjoint q (w drops to 0 at the first draft); blocks of one draft (no mass
    launch: h_1 = w_1); injected noise, then the seeded stream, token for token."""
    backend = TritonBackend(**TILED)
    for seed, path in enumerate(("injected", "seeded")):
        batch = _batch(11 * vocab + seed, device, num_requests=7, vocab_size=vocab, max_draft=max_draft,
                       drafter=drafter, greedy_fraction=0.15, zero_draft_fraction=0.15, logit_scale=1.0)
        kwargs = dict(noise=Noise.draw(batch, torch.Generator().manual_seed(seed))) if path == "injected" else \
            dict(seed=99 + seed)
        _same(reference.sample(batch, method="block", **kwargs), backend(batch, method="block", **kwargs))


@pytest.mark.parametrize("device", DEVICES)
def test_zero_draft_requests_first_middle_last(device):
    """k = [0, 3, 0, 1, 0]: a zero-draft request emits only its bonus token, wherever it sits; the
    row offsets that pass 1 and pass 2 compute in-kernel must skip over it correctly."""
    g = torch.Generator().manual_seed(3)
    k, V = [0, 3, 0, 1, 0], 40
    T, B = sum(k), len(k)
    logits = torch.randn(T + B, V, generator=g) * 2
    q = torch.softmax(torch.randn(T, V, generator=g) * 2, dim=-1)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1).tolist()
    batch = _batch_from(k, logits, [0.8, 1.0, 0.0, 0.5, 1.3], device, drafts, q)
    backend = TritonBackend(**TILED)
    for seed in range(3):
        noise = Noise.draw(batch, torch.Generator().manual_seed(seed))
        _same(reference.sample(batch, noise=noise), backend(batch, noise=noise))
    _same(reference.sample(batch, seed=5), backend(batch, seed=5))


@pytest.mark.parametrize("device", DEVICES)
def test_many_request_launch_reads_appended_offsets_bit_for_bit(device, monkeypatch):
    """A launch of more than PREFIX_B requests reads each request's first draft from offsets appended to
    the counts instead of summing the counts before it (O(B^2) over a statistical check's launches of
    65,536 copies). With the threshold at 2, ragged batches (zero-draft requests among them) give the
    summing launch's outputs exactly, for every kernel that locates rows that way: the chain (standard;
    block, with its mass launch), the tree walk and race, and the filter cut and mask."""
    from tree_cases import random_tree_batch  # noqa: PLC0415 - the tree tests' batches
    g = torch.Generator().manual_seed(41)
    chain = _batch(41, device, num_requests=7, vocab_size=40, max_draft=4, zero_draft_fraction=0.3)
    B = chain.num_requests
    filtered = dataclasses.replace(chain, top_k=torch.tensor([0, 3, 5, 0, 2, 7, 1], device=device),
                                   top_p=torch.full((B,), 0.8, device=device),
                                   min_p=torch.full((B,), 0.05, device=device))
    trees = random_tree_batch(g, B=7, V=37, max_nodes=5).to(device)
    calls = [(chain, "standard"), (chain, "block"), (filtered, "standard"), (filtered, "block"), (trees, "tree")]
    # the default plan: a program finds its request's rows from program_id(0) alone, whatever tile or split
    # it reads, so the tiled plan's extra programs only repeated the same lookups (at twice the run time)
    backend = TritonBackend()
    for batch, method in calls:
        noise = Noise.draw(batch, torch.Generator().manual_seed(7)).to(device)
        summed = backend(batch, method=method, noise=noise)
        monkeypatch.setattr(triton_math, "PREFIX_B", 2)
        appended = backend(batch, method=method, noise=noise)
        monkeypatch.undo()
        _same(summed, appended)
        if method == "tree":
            assert appended.accepted_nodes.tolist() == summed.accepted_nodes.tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_all_zero_draft_batch_and_empty_batch(device):
    """An all-zero batch (K = 0: output width 1, only bonus tokens) and an empty batch (B = 0: no
    launch at all, outputs of shape [0, 1] and [0])."""
    g = torch.Generator().manual_seed(4)
    batch = _batch_from([0, 0, 0], torch.randn(3, 20, generator=g), [1.0, 0.0, 0.7], device)
    backend = TritonBackend(**TILED)
    _same(reference.sample(batch, seed=11), backend(batch, seed=11))
    noise = Noise.draw(batch, g)
    _same(reference.sample(batch, noise=noise), backend(batch, noise=noise))

    empty = _batch_from([], torch.zeros(0, 20), [], device)
    out = backend(empty, seed=1)
    assert tuple(out.token_ids.shape) == (0, 1) and tuple(out.num_accepted.shape) == (0,)


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_ties_resolve_to_lowest_index_across_tiles(device):
    """Exact ties in the logits at indices 100 (tile 6), 21 (tile 1) and 129 (the ragged last tile):
    the argmax is 21, though the tiles and the splits holding the other copies are visited by other
    lanes and other programs. A greedy draft of 100 (a tied but not lowest index) is rejected and 21
    emitted; the bonus row ties at 5 and 64 and emits 5."""
    V = 130
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(6)).clamp(-2, 2)
    logits[0, [100, 21, 129]] = 4.0
    logits[1, 55] = 4.0        # accepted draft
    logits[2, [64, 5]] = 3.0
    backend = TritonBackend(**TILED)
    for dtype in (torch.float32, torch.bfloat16):
        batch = _batch_from([1], logits[[0, 2]].to(dtype), [0.0], device, [100])
        out = backend(batch, seed=0)
        assert out.token_ids.cpu().tolist() == [[21, -1]] and out.num_accepted.tolist() == [0]
        batch = _batch_from([1], logits[[1, 2]].to(dtype), [0.0], device, [55])
        out = backend(batch, seed=0)
        assert out.token_ids.cpu().tolist() == [[55, 5]] and out.num_accepted.tolist() == [1]
        _same(reference.sample(batch, seed=0), out)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vocab", [129, 130, 144 + 3])
def test_last_tile_of_negative_infinity_never_emits_padded_id(device, vocab):
    """GHSA-8wr5-jm2h-8r4f: every real entry of the last tile has zero probability (-inf logits), so
    the tile's real lanes tie with its padded lanes at -inf. No padded lane may win the argmax or the
    race (an id >= V); with splits (3, 3) one split holds nothing but -inf entries."""
    g = torch.Generator().manual_seed(vocab)
    k = [2, 0, 1]
    T, B = sum(k), len(k)
    last_tile = (vocab - 1) // 16 * 16
    logits = torch.randn(T + B, vocab, generator=g)
    logits[:, last_tile - 40:] = float("-inf")
    q = torch.softmax(torch.randn(T, vocab, generator=g), dim=-1)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1).tolist()
    backend = TritonBackend(block_v=16, splits=(3, 3))
    for temperature in ([0.0, 0.0, 0.0], [1.0, 0.6, 2.0]):
        batch = _batch_from(k, logits, temperature, device, drafts, q)
        for seed in range(2):
            out = backend(batch, seed=seed)
            assert int(out.token_ids.max()) < vocab
            _same(reference.sample(batch, seed=seed), out)


@pytest.mark.parametrize("device", DEVICES)
def test_every_output_element_is_written(device):
    """The kernels write every element of token_ids and num_accepted (the -1 padding too): two runs
    into outputs poisoned with different garbage must give identical results."""
    batch = _batch(12, device, num_requests=5, vocab_size=40, max_draft=3)
    seeds = philox.request_seeds(3, 5).to(device)
    outs = []
    for poison in (-7, 2**40):
        token_ids = torch.full((5, batch.max_draft + 1), poison, dtype=torch.int64, device=device)
        num_accepted = torch.full((5,), poison, dtype=torch.int64, device=device)
        triton_kernels.triton_sample_into(token_ids, num_accepted, batch.num_draft_tokens, batch.draft_token_ids,
                                          batch.target_logits, batch.draft_probs, batch.temperature, seeds=seeds,
                                          block_v=16, splits=(2, 2))
        outs.append((token_ids.cpu(), num_accepted.cpu()))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    _same(reference.sample(batch, seed=3), SpecOutput(*outs[0]))


@pytest.mark.parametrize("device", DEVICES)
def test_seeded_output_is_batch_invariant(device):
    """A request's seeded noise depends only on its seed and positions: a request gives the same
    tokens alone, reordered, or beside other requests (and under another launch plan)."""
    batch = _batch(21, device, num_requests=6, vocab_size=40, max_draft=3)
    seeds = torch.tensor([5, -3, 2**40 + 1, 0, 2**62, 17], dtype=torch.int64)
    full = TritonBackend(**TILED)(batch, seed=seeds)
    order = torch.tensor([4, 1, 5])
    sub = TritonBackend(block_v=16, splits=(1, 1))(select_requests(batch, order), seed=seeds[order])
    assert sub.emitted() == [full.emitted()[i] for i in order.tolist()]


@pytest.mark.parametrize("device", DEVICES)
def test_unsupported_logit_dtype_raises_unsupported_error(device):
    """float64 logits are the reference's privilege: the backend says so through the one capability
    check, naming itself and the dtype, before any kernel is compiled."""
    batch = _batch(1, device, num_requests=2, vocab_size=8, logit_dtype=torch.float64)
    with pytest.raises(UnsupportedError, match="triton.*float64"):
        get_backend("triton")(batch, seed=0)


def test_cpu_batch_without_interpreter_raises_unsupported_error():
    """Compiled (no TRITON_INTERPRET), the backend declares only cuda: a CPU batch is refused by the
    capability check, never a crash inside Triton. Run in a fresh interpreter: this process has the
    interpreter switched on (or is the cuda run)."""
    code = ("import torch\n"
            "from specverify import get_backend, UnsupportedError\n"
            "from specverify.generate import random_batch\n"
            "b = random_batch(torch.Generator().manual_seed(0), num_requests=2, vocab_size=8)\n"
            "be = get_backend('triton')\n"
            "assert 'cpu' not in be.capabilities.devices, be.capabilities.devices\n"
            "try:\n    be(b, seed=0)\nexcept UnsupportedError as e:\n    print('REFUSED', e)\n")
    env = dict(os.environ, TRITON_INTERPRET="0", CUDA_VISIBLE_DEVICES="")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "REFUSED" in run.stdout and "device 'cpu'" in run.stdout


@pytest.mark.skipif(not _CUDA, reason="production vocabulary sizes are too slow for the interpreter")
@pytest.mark.parametrize("vocab", [151_936, 262_144])
def test_production_vocabulary_default_plan_matches_reference(vocab):
    """The default launch plan at production V (2048-wide tiles, splits chosen for the GPU), both
    noise paths; the advisory's V = 151,936 with the whole last tile at -inf."""
    batch = _batch(vocab, "cuda", num_requests=4, vocab_size=vocab, max_draft=4)
    backend = TritonBackend()
    noise = Noise.draw(batch, torch.Generator().manual_seed(1))
    _same(reference.sample(batch, noise=noise), backend(batch, noise=noise))
    _same(reference.sample(batch, seed=2), backend(batch, seed=2))
    logits = batch.target_logits.clone()
    logits[:, (vocab - 1) // 2048 * 2048:] = float("-inf")
    masked = SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, logits, None, torch.zeros_like(batch.temperature))
    out = backend(masked, seed=3)
    assert int(out.token_ids.max()) < vocab
    _same(reference.sample(masked, seed=3), out)


def _filtered(batch: SpecBatch) -> SpecBatch:
    """``batch`` with top-k 2 on request 0, top-p 0.5 on request 1 and min-p 0.3 on the rest."""
    B = batch.num_requests
    top_k = torch.zeros(B, dtype=torch.int64)
    top_p, min_p = torch.ones(B), torch.full((B,), 0.3)
    top_k[0], top_p[1], min_p[:2] = 2, 0.5, 0.0
    dev = batch.device
    return SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, batch.target_logits, batch.draft_probs,
                     batch.temperature, top_k.to(dev), top_p.to(dev), min_p.to(dev))


@pytest.mark.parametrize("device", DEVICES)
def test_filtered_logits_give_the_filtered_target(device):
    """The wrapper applies SPEC 3.4 by masking logits: softmax of the masked rows at the request's
    temperature must be the reference's p' (kept set and values), and greedy rows must be untouched."""
    batch = _filtered(_batch(5, device, num_requests=4, vocab_size=40, greedy_fraction=0.0))
    k = batch.num_draft_tokens.cpu()
    request = torch.repeat_interleave(torch.arange(4), k + 1)
    masked = triton_sampler.filtered_logits(batch).cpu().double()
    t = batch.temperature.cpu().double()[request, None]
    want = filtered_target(batch.to("cpu"), request, batch.target_logits.cpu(), t)
    got = torch.softmax(masked / t, dim=1)
    assert torch.equal(got > 0, want > 0)
    assert torch.allclose(got, want, rtol=1e-9, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_sample_into_refuses_target_filters(device):
    """The graph-capturable entry does not take filters (the cut's work space is cached per stream, which
    a captured graph would freeze): it says so instead of ignoring the filters."""
    batch = _filtered(_batch(6, device, num_requests=3, vocab_size=16))
    out = SpecOutput(torch.empty(3, batch.max_draft + 1, dtype=torch.int64, device=device),
                     torch.empty(3, dtype=torch.int64, device=device))
    with pytest.raises(UnsupportedError, match="target filters"):
        TritonBackend().sample_into(out, batch, seed_tensor=philox.request_seeds(0, 3).to(device))
