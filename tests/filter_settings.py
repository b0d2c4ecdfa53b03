"""What the Triton filter cut's kernel tests share (tests/test_triton_filters.py, test_triton_lazy_cut.py):
the device the kernels run on, and fixtures that pin or shrink the cut's tuning settings so that small
batches reach every path.

Without CUDA the kernels run under the Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1 before
anything imports Triton); the parameter id says which device ran.
"""

from __future__ import annotations

import os

import pytest
import torch

from specverify.kernels import triton_filter

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
