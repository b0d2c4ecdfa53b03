"""The int64_offsets cases shrunk for the CPU (tests/test_int64_offsets.py and the adapters' tests): V = 64, so that
14-bit offsets wrap where 32-bit ones do on the GPU. rows_past_2_31 passes 2^13 elements from request 22 (its draft
rows alone from request 26) and stays under 2^14 at 40 requests, as the real case stays under 2^32; rows_past_2_32
passes 2^14 from request 43 (its draft rows from 52) at 60 requests."""

from dataclasses import replace

import torch

from specverify.checks import offsets
from specverify.mutants.samplers import RowOffsetsInInt32
from specverify.strategies import get_profile

SIZES = {"rows_past_2_31": (2 ** 13, 40), "rows_past_2_32": (2 ** 14, 60)}


def shrink(monkeypatch, profile=None):
    """Patch the cases to SIZES on the CPU, with a GPU that has room and a 3 GiB peak; the profile on "cuda"."""
    monkeypatch.setattr(offsets, "VOCAB", 64)
    for case, (past, requests) in SIZES.items():
        monkeypatch.setitem(offsets.PAST, case, past)
        monkeypatch.setitem(offsets.REQUESTS, case, requests)
    monkeypatch.setattr(offsets, "FIRST", 4)
    monkeypatch.setattr(offsets, "LAST", 6)
    monkeypatch.setattr(offsets, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (1 << 40, 1 << 40))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 3 << 30)
    monkeypatch.setattr(RowOffsetsInInt32, "offset_bits", 14)
    return replace(profile or get_profile("ci"), device="cuda")
