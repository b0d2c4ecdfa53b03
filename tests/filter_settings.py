"""What the Triton filter cut's kernel tests share (tests/test_triton_filters.py, test_triton_lazy_cut.py,
test_triton_one_launch*.py): the device the kernels run on, fixtures that pin or shrink the cut's tuning
settings so that small batches reach every path, rows of every logit style and filter mix, the records
a cut writes, the order keys of float32 values (``order_keys``), and the keys that the one launch's buckets start
at (``tally_keys_of``).

Without CUDA the kernels run under the Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1 before
anything imports Triton); the parameter id says which device ran.
"""

from __future__ import annotations

import os

import pytest
import torch
import triton
import triton.language as tl

from reference import SpecBatch
from specverify.kernels import triton_filter, triton_sampler
from specverify.kernels.triton_tally import tally_keys
from specverify.strategies import _logits

_CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"
DEVICE = "cuda" if _CUDA else "cpu"
DEVICES = [pytest.param(DEVICE, id="cuda" if _CUDA else "cpu-interpreter")]


@pytest.fixture(autouse=True)
def three_launches_from_nine_rows(monkeypatch):
    """The cases are built around a one-launch limit of 8 rows: a batch of 9 or more rows reaches the
    three launches (the sample bracket, the slow path, the PRE plan, the lazy cut). The limit is a tuning
    setting of the GPU's, so a module that imports this fixture pins it; the tests of the one-launch plan
    set their own."""
    monkeypatch.setattr(triton_filter, "ONE_LAUNCH_ROWS", 8)


@pytest.fixture
def small_gather(monkeypatch):
    """A gather capacity of 64 tokens and a sample of 32: rows of a few hundred tokens reach the sample
    bracket, and brackets overflow or miss, which sends rows down the slow path."""
    monkeypatch.setattr(triton_filter, "CAP", 64)
    monkeypatch.setattr(triton_filter, "NS", 32)
    monkeypatch.setattr(triton_filter, "CH", 4)


STYLES = ("normal", "peaked", "flat", "tied", "near_tied", "masked")


def _rows(seed: int, B: int, V: int, device: str) -> SpecBatch:
    """B zero-draft requests, one row each, every logit style in turn, every filter and their mixes."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.cat([_logits(g, 1, V, STYLES[b % len(STYLES)]) for b in range(B)]).float()
    pick = lambda options: torch.tensor([options[int(i)] for i in torch.randint(0, len(options), (B,), generator=g)])  # noqa: E731
    top_k, top_p = pick((0, 1, 3, 50, V - 1)), pick((1.0, 1e-3, 0.3, 0.9, 1.0 - 2.0 ** -20)).float()
    min_p, temperature = pick((0.0, 0.05, 0.5)).float(), pick((0.1, 0.7, 1.0, 2.5)).float()
    return SpecBatch(torch.zeros(B, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), logits, None, temperature,
                     top_k, top_p, min_p).to(device)


def _records(batch: SpecBatch, **plan) -> torch.Tensor:
    """[6, B K1] the cut records of ``batch`` (triton_filter's layout)."""
    B = batch.num_requests
    token_ids = torch.empty((B, batch.max_draft + 1), dtype=torch.int64, device=batch.device)
    _, _, record = triton_sampler._cut(batch, token_ids, torch.empty(B, dtype=torch.int64, device=batch.device),
                                      dict(seeds=torch.zeros(B, dtype=torch.int64, device=batch.device), **plan))
    return record.view(6, -1).cpu().clone()


@triton.jit
def _tally_keys_of(ends_ptr, keys_ptr, NT: tl.constexpr):
    """Row r's ``tally_keys`` [NT] int64 of its ends [R, 2] int64 (lo, hi), to keys [R, NT]."""
    r = tl.program_id(0)
    tl.store(keys_ptr + r * NT + tl.arange(0, NT), tally_keys(tl.load(ends_ptr + 2 * r), tl.load(ends_ptr + 2 * r + 1),
                                                             NT))


def tally_keys_of(ends: torch.Tensor, nt: int) -> torch.Tensor:
    """[R, nt] int64 the kernels' own ``tally_keys`` of each row's ends [R, 2] int64 (lo, hi), on ends' device."""
    keys = torch.empty(len(ends), nt, dtype=torch.int64, device=ends.device)
    _tally_keys_of[(len(ends),)](ends.contiguous(), keys, NT=nt)
    return keys


def order_keys(values) -> torch.Tensor:
    """The int64 order keys of float32 values, a tensor or a float (``triton_gather.order_key``: -0.0 that of +0.0)."""
    values = torch.as_tensor(values, dtype=torch.float32)
    bits = torch.where(values == 0, torch.zeros_like(values), values).view(torch.int32).long()
    return torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
