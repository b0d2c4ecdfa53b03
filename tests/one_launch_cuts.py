"""What the one-launch cut's tests share (tests/test_triton_one_launch.py, test_triton_one_launch_brackets.py,
test_triton_one_launch_record.py): a cut run with its launches and pass 1's scratch seen, the brackets and work space
it leaves, one setting's two cuts compared on a work space poisoned between them, the bracketed rows and top-p rows
the bracket and record tests cut, and the CUDA-only case whose splits take every share over.
"""

from __future__ import annotations

import dataclasses
import os
import threading

import pytest
import torch

from filter_settings import DEVICE, _rows
from reference import SpecBatch
from specverify.kernels import triton_filter, triton_sampler


def cut_and_partials(batch: SpecBatch, poison: int, **plan) -> tuple:
    """(the cut's launches as (kernel, STAGE, PASS1, SHARED), records [6, B K1], pass 1's scratch words) of a cut of
    ``batch``, the scratch filled with ``poison`` before its first launch."""
    seen = []
    real_launch, real_cut_launches = triton_sampler.launch, triton_sampler.cut_launches

    def launch(kernel, grid, args, meta, *rest):
        seen.append((kernel.fn.__name__, meta.get("STAGE"), meta.get("PASS1"), meta.get("SHARED")))
        return real_launch(kernel, grid, args, meta, *rest)

    def cut_launches(pass1, *rest):
        pass1[2][4].fill_(poison)
        return real_cut_launches(pass1, *rest)

    triton_sampler.launch, triton_sampler.cut_launches = launch, cut_launches
    try:
        B = batch.num_requests
        token_ids = torch.empty((B, batch.max_draft + 1), dtype=torch.int64, device=batch.device)
        options = dict(seeds=torch.zeros(B, dtype=torch.int64, device=batch.device), **plan)
        _, pass1, record = triton_sampler._cut(batch, token_ids, torch.empty(B, dtype=torch.int64, device=batch.device),
                                               options)
    finally:
        triton_sampler.launch, triton_sampler.cut_launches = real_launch, real_cut_launches
    n_part, stats_at = pass1[2][8], pass1[2][10]
    return seen, record.view(6, -1).cpu().clone(), pass1[2][4][:stats_at + 2 * n_part].cpu().clone()


def work_space() -> torch.Tensor:
    """The cut's work space of this thread (one, as the tests that read it set up)."""
    works = [work for (thread, _, _), (work, *_) in triton_filter._buffers.items() if thread == threading.get_ident()]
    assert len(works) == 1, len(works)
    return works[0]


def last_brackets(rows: int) -> torch.Tensor:
    """[rows, 2] the bracket keys (lo, hi) that the last cut of this thread left in its work space."""
    return work_space()[:2 * rows].view(rows, 2).cpu().clone()


def bracketed_rows(device: str, monkeypatch) -> SpecBatch:
    """8 rows of 3,000 logits, each filtered by top-k or top-p (one with min-p too), behind a sample of 64 chunks
    of 8 and a capacity of 256 gathered tokens, which sends some rows down the slow path: the sample bracket's
    cases. The work spaces start empty, so that ``last_brackets`` finds this test's alone (a test before it in the
    process may have planned a cut on another device or stream, which holds a work space of its own). The count
    bracket's round, and the mass bracket's two, are the splits' shared ones unless a test turns the whole sample
    on."""
    monkeypatch.setattr(triton_filter, "_buffers", {})
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_WHOLE_SAMPLE", 0)
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_MASS_CELLS", 0)
    monkeypatch.setattr(triton_filter, "CAP", 256)
    monkeypatch.setattr(triton_filter, "NS", 512)
    monkeypatch.setattr(triton_filter, "CH", 8)
    return dataclasses.replace(_rows(5, 8, 3000, device),
                               top_k=torch.tensor([50, 0, 300, 0, 20, 0, 120, 0], device=device),
                               top_p=torch.tensor([1.0, 0.9, 0.8, 0.5, 0.95, 0.99, 1.0, 0.7], device=device),
                               min_p=torch.tensor([0.0, 0.0, 0.0, 0.01, 0.0, 0.0, 0.0, 0.0], device=device))


def cut_before_and_after(batch: SpecBatch, name, before, after, monkeypatch) -> tuple:
    """((records [6, 8], brackets [8, 2]) with triton_filter's setting ``name`` at ``before``, the same at ``after``,
    the one launch's meta then) of one-launch cuts of ``batch``'s 8 rows (a tuple of names: each at its value of
    the tuples before and after). The work space is filled with NaN bits between the two cuts, so that a share or
    sum the second reads but did not write reads as NaN."""
    plan = dict(block_v=256)
    names = name if isinstance(name, tuple) else (name,)
    set_all = lambda values: [monkeypatch.setattr(triton_filter, n, v)  # noqa: E731
                              for n, v in zip(names, values if isinstance(name, tuple) else (values,))]
    set_all(before)
    first_launches, first, _ = cut_and_partials(batch, 0, **plan)
    first_brackets = last_brackets(8)
    set_all(after)
    for work, *_ in triton_filter._buffers.values():
        work.fill_(0x7FC00000)
    second_launches, second, _ = cut_and_partials(batch, 0, **plan)
    second_brackets = last_brackets(8)
    assert second_launches == first_launches == [("_cut_kernel", 3, True, True)]
    metas = [meta for plan_ in triton_filter._plans.values() for _, _, meta in plan_[7]]
    assert len(metas) == 1, metas
    return (first, first_brackets), (second, second_brackets), metas[0]


def records_unchanged(batch: SpecBatch, name, before, after, monkeypatch) -> tuple:
    """(records [6, 8], meta) of ``cut_before_and_after``'s second cut, whose records and brackets must be the
    first's: a setting that changes only how the one launch finds the cut."""
    (first, first_brackets), (second, second_brackets), meta = cut_before_and_after(batch, name, before, after,
                                                                                      monkeypatch)
    assert torch.equal(second, first), (second != first).nonzero().tolist()
    assert torch.equal(second_brackets, first_brackets)
    return second, meta


def sample_at(V: int) -> torch.Tensor:
    """[NS] the row positions of the bracket's strided sample (``triton_sample.sample_at``) at the plan's NS and CH."""
    ns, ch = triton_filter.NS, triton_filter.CH
    i = torch.arange(ns)
    return (i // ch) * (V - ch) // (ns // ch - 1) + i % ch


def sample_of(logits: torch.Tensor) -> torch.Tensor:
    """[rows, NS] the bracket's strided sample of each row."""
    return logits[:, sample_at(logits.shape[1])]


def top_p_rows(device: str, monkeypatch) -> SpecBatch:
    """``bracketed_rows``' plan with a sample of 2,048 (16 tiles of the cells' 128 over the rows' 12 splits, so
    that some splits count two) and room for 1,024 gathered tokens, and 8 rows of top-p alone (one with min-p too)
    whose brackets all fit it: N(0, s^2) logits at several widths, top-p 0.3 to 0.99, temperatures 0.5 to 2.5. Row
    0's largest logit is not in its sample, and row 7's sample is all -inf (its mass lies between the sample's
    chunks), so that its bracket has no finite origin there."""
    base = bracketed_rows(device, monkeypatch)
    monkeypatch.setattr(triton_filter, "CAP", 1024)
    monkeypatch.setattr(triton_filter, "NS", 2048)
    widths = (1.0, 2.0, 3.0, 4.0, 2.0, 3.0, 1.5, 3.0)
    logits = torch.stack([torch.randn(3000, generator=torch.Generator().manual_seed(r)) * s
                          for r, s in enumerate(widths)])
    logits[7, sample_at(logits.shape[1])] = float("-inf")
    # row 0's largest logit lies between the sample's first two chunks: its drops start below the row's max
    logits[0, triton_filter.CH + 1] = logits[0].max() + 2.0
    return dataclasses.replace(base, target_logits=logits.float().to(device),
                               top_k=torch.zeros(8, dtype=torch.int64, device=device),
                               top_p=torch.tensor([0.9, 0.9, 0.5, 0.99, 0.5, 0.4, 0.3, 0.9], device=device),
                               min_p=torch.tensor([0.0] * 6 + [0.01, 0.0], device=device),
                               temperature=torch.tensor([1.0, 0.5, 2.0, 1.0, 2.5, 2.5, 0.5, 1.0], device=device))


# The interpreter runs each program in Python, 2-5 s a cut of these tests: where a test compares several non-default
# plans, it runs one of them there and the rest on CUDA (the nightly's filter-kernels step), or everywhere with
# SPECVERIFY_ALL_VARIANTS=1.
ALL_VARIANTS = os.environ.get("SPECVERIFY_ALL_VARIANTS") == "1"


def variant(*values, id: str):
    """A case parameter of another non-default plan of the one launch: CUDA only unless SPECVERIFY_ALL_VARIANTS=1."""
    return pytest.param(*values, id=id, marks=pytest.mark.skipif(
        DEVICE == "cpu" and not ALL_VARIANTS,
        reason="another non-default plan: CUDA runs it (the nightly), the interpreter with SPECVERIFY_ALL_VARIANTS=1"))


def take_over(*values):
    """The case parameter (HANDOFF_SPIN 0, then ``values``) where every split takes over whatever share is unpublished
    at its first look: CUDA only, since the interpreter runs programs one by one and takes splits over at any spin."""
    return pytest.param(0, *values, id="take-over", marks=pytest.mark.skipif(
        DEVICE == "cpu", reason="the interpreter takes splits over at any spin"))
