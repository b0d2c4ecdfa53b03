"""What the Triton sampler's kernel tests share (tests/test_triton_kernel.py, test_triton_launch.py): the
kernel modules, decorated for the Triton interpreter where there is no GPU, the device they run on, a random
batch, and the token-for-token comparison with the reference.

Without CUDA the kernels run under the interpreter on CPU tensors (TRITON_INTERPRET=1 is set here, before the
kernel modules are imported, because triton.jit reads it at decoration time); with CUDA the same cases run
compiled on cuda tensors, and the parameter id says which ("cpu-interpreter" or "cuda").
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch

_CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"
if not _CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

from reference import SpecBatch  # noqa: E402
from specverify.generate import random_batch  # noqa: E402
from specverify.kernels import (triton_block, triton_chain, triton_kernels, triton_launch, triton_math,  # noqa: E402
                                triton_sampler)

if not _CUDA and not triton_kernels.interpreted():
    # Another module imported the kernels before the interpreter was switched on: decorate them again,
    # each module after the ones it imports from.
    triton_math = importlib.reload(triton_math)
    triton_block = importlib.reload(triton_block)
    triton_chain = importlib.reload(triton_chain)
    triton_kernels = importlib.reload(triton_kernels)
    triton_sampler = importlib.reload(triton_sampler)

TritonBackend = triton_sampler.TritonBackend
DEVICE = "cuda" if _CUDA else "cpu"
DEVICES = [pytest.param(DEVICE, id="cuda" if _CUDA else "cpu-interpreter")]
__all__ = ["_CUDA", "DEVICE", "DEVICES", "TritonBackend", "_batch", "_same", "triton_kernels", "triton_launch",
           "triton_math", "triton_sampler"]


def _same(ref, out) -> None:
    """out's token ids and accepted counts are ref's, int64."""
    assert out.token_ids.dtype == torch.int64 and out.num_accepted.dtype == torch.int64
    assert out.token_ids.cpu().tolist() == ref.token_ids.cpu().tolist()
    assert out.num_accepted.cpu().tolist() == ref.num_accepted.cpu().tolist()


def _batch(seed: int, device: str, **kwargs) -> SpecBatch:
    """``generate.random_batch`` from a generator seeded with ``seed``, on ``device``."""
    return random_batch(torch.Generator().manual_seed(seed), device=device, **kwargs)
