"""The lazy cut of top-p alone (specverify/kernels/triton_lazy.py, SPEC 3.4): the Triton backend cuts only
the rows that its call's verification needs, and must emit what cutting every row emits.

Without CUDA the kernels run under the Triton interpreter; the parameter id says which device ran.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from filter_settings import DEVICES, small_gather, three_launches_from_nine_rows  # noqa: F401
from reference import Noise, SpecBatch
from reference.sample import filtered_target
from specverify.kernels import triton_filter, triton_sampler


def _chains(seed: int, B: int, K: int, V: int, device: str, top_p: list, top_k: list | None = None,
            draft_probs: bool = True) -> SpecBatch:
    """B requests of K drafts each, drawn from draft probabilities close to the target (a few placeholders),
    normal logits at mixed temperatures (request 2 greedy), the given top-p, and top-k and min-p passed as
    tensors (top-k off unless given, min-p off), as a server passes them."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B * (K + 1), V, generator=g) * 3
    draft_rows = torch.arange(B * (K + 1)).view(B, K + 1)[:, :K].reshape(-1)
    q = torch.softmax(logits[draft_rows] + torch.randn(B * K, V, generator=g), dim=1)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1)
    drafts[[K + 1, 3 * K]] = -1
    temperature = torch.tensor([1.0, 0.7, 0.0, 1.0, 2.0, 1.0, 1.3, 0.9][:B])
    return SpecBatch(torch.full((B,), K), drafts, logits, q if draft_probs else None, temperature,
                     torch.tensor(top_k or [0] * B), torch.tensor(top_p), torch.zeros(B)).to(device)


def _calls_and_tags(batch: SpecBatch, draws: list, monkeypatch) -> tuple[list, torch.Tensor]:
    """([(token_ids, num_accepted)] of one call a draw (a Noise, or an int seed), the records' "how" field of
    the last call [B, K + 1]) of the Triton backend."""
    records = []
    real_cut_launches = triton_sampler.cut_launches

    def cut_launches(*args):
        steps, record = real_cut_launches(*args)
        records.append(record)
        return steps, record
    monkeypatch.setattr(triton_sampler, "cut_launches", cut_launches)
    outs = []
    for draw in draws:
        kw = dict(seed=draw) if isinstance(draw, int) else dict(noise=draw)
        out = triton_sampler.TritonBackend()(batch, **kw)
        outs.append((out.token_ids.cpu(), out.num_accepted.cpu()))
    return outs, records[-1].view(6, -1)[5].cpu().clone().view(batch.num_requests, -1)


def _lazy_emits_what_every_cut_emits(batch: SpecBatch, draws: list, monkeypatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Assert that the calls of ``draws`` (``_calls_and_tags``) emit the same tokens and counts with the lazy cut
    as with every row cut (LAZY_CUT = 0); returns the records' "how" fields [B, K + 1] of both, every row's
    first."""
    monkeypatch.setattr(triton_filter, "LAZY_CUT", 0)
    every, tags_every = _calls_and_tags(batch, draws, monkeypatch)
    monkeypatch.setattr(triton_filter, "LAZY_CUT", 1)
    lazy, tags = _calls_and_tags(batch, draws, monkeypatch)
    for (t0, n0), (t1, n1) in zip(every, lazy):
        assert torch.equal(t0, t1) and torch.equal(n0, n1), (t0, t1, n0, n1)
    return tags_every, tags


# the interpreter's numpy warns as it computes with the non-finite rows, as the GPU does silently
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seeded", [False, True], ids=["injected-q", "seeded-no-q"])
def test_lazy_cut_emits_what_cutting_every_row_emits(device, seeded, small_gather, monkeypatch):
    """With top-p alone, the cut searches only the rows pass 2 needs: the row where the chain stops, and a row
    whose test pass 1's sums leave open. Every other row is tagged accepted (its draft passes whatever the cut)
    or unreached. The tokens must be those of cutting every row, under injected noise with draft
    probabilities and the seeded stream without them (q = 1 at the draft), on rows over the shrunk capacity
    (the three launches, a sample bracket), with placeholders, a greedy request, a request without top-p and
    one with top-k on (both cut as before), and rows with a NaN, a +inf or nothing but -inf (SPEC 3.6: sums
    that decide nothing, or a draft of probability 0); and the tags must show rows left uncut both ways."""
    B, K, V = 8, 3, 300
    batch = _chains(3, B, K, V, device, [0.9, 0.5, 0.9, 1.0, 0.99, 0.3, 0.8, 0.95],
                    [0] * 7 + [20], draft_probs=not seeded)
    logits = batch.target_logits.clone()
    logits[4 * (K + 1), 7] = float("nan")
    logits[5 * (K + 1), 9] = float("inf")
    logits[6 * (K + 1) + 1] = float("-inf")
    batch = dataclasses.replace(batch, target_logits=logits, allow_nonfinite=True)
    # one draw a noise path: which rows a lazy call leaves uncut follows from where each request's chain stops,
    # and the eight requests of one draw stop at different rows (the tags show both kinds of uncut row)
    draws = [12] if seeded else [Noise.draw(batch, torch.Generator().manual_seed(4))]
    tags_every, tags = _lazy_emits_what_every_cut_emits(batch, draws, monkeypatch)
    assert set(tags_every.flatten().tolist()) <= {0.0, 1.0, 2.0}
    assert {3.0, 4.0} <= set(tags.flatten().tolist()), tags
    # the greedy request, the unfiltered one and the top-k one are cut (or not) as before
    assert torch.equal(tags[[2, 3, 7]], tags_every[[2, 3, 7]])


@pytest.mark.parametrize("device", DEVICES)
def test_lazy_cut_searches_every_row_from_a_test_its_bounds_leave_open(device, small_gather, monkeypatch):
    """Request 0's first draft has q(x) = 2 p'(x) and the uniform 1/2, so its test u q(x) <= p'(x) lies on the
    boundary, which pass 1's bounds on Z' cannot decide: that row is cut, and so is every row after it (the
    chain may go on). The tokens must be those of cutting every row; the other requests still leave rows
    uncut."""
    B, K, V = 4, 3, 300
    batch = _chains(5, B, K, V, device, [0.9, 0.9, 0.9, 0.9])
    batch = dataclasses.replace(batch, temperature=torch.ones(B, device=device))
    logits, q, drafts = batch.target_logits.cpu(), batch.draft_probs.cpu().double(), batch.draft_token_ids.cpu()
    p = filtered_target(batch.to("cpu"), torch.zeros(1, dtype=torch.int64), logits[:1], torch.ones(1, 1,
                                                                                               dtype=torch.float64))[0]
    x = int(torch.argmax(torch.where(p < 0.25, p, 0.0)))
    q[0] *= (1 - 2 * p[x]) / (1 - q[0, x])
    q[0, x] = 2 * p[x]
    drafts[0] = x
    batch = dataclasses.replace(batch, draft_token_ids=drafts.to(device), draft_probs=q.float().to(device))
    g = torch.Generator().manual_seed(6)
    draws = [Noise.draw(batch, g)]
    draws[0].uniform[0] = 0.5
    _, tags = _lazy_emits_what_every_cut_emits(batch, draws, monkeypatch)
    assert set(tags[0].tolist()) <= {1.0, 2.0}, tags
    assert {3.0, 4.0} & set(tags[1:].flatten().tolist()), tags
