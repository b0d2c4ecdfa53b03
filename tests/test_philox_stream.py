"""The in-kernel Philox stream of the Triton sampler (through tests/triton_probes.py) against reference.philox.

The seeded path is checked exactly only because the reference reproduces its noise; this pins that
reproduction: uniforms bit for bit, exponentials to a few ulps (the kernel's -log is its own
fdlibm-style logarithm, torch's may differ in the last place; the harness's ambiguity margin covers it).
Runs under the Triton interpreter without CUDA (see tests/test_triton_kernel.py), compiled with it.
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch

_CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"
if not _CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

from reference import Noise, philox  # noqa: E402
from specverify.kernels import triton_kernels, triton_math  # noqa: E402

if not _CUDA and not triton_kernels.interpreted():
    # Another module imported the kernels before the interpreter was switched on: decorate them again.
    triton_math = importlib.reload(triton_math)
import triton_probes  # noqa: E402  (tests/triton_probes.py)

if not _CUDA and type(triton_probes._negative_log_kernel).__name__ != "InterpretedFunction":
    triton_probes = importlib.reload(triton_probes)

DEVICE = "cuda" if _CUDA else "cpu"


@pytest.mark.parametrize("device", [pytest.param(DEVICE, id="cuda" if _CUDA else "cpu-interpreter")])
def test_kernel_philox_uniforms_equal_reference_bit_for_bit(device):
    """Seeds that exercise both key words (negative, >= 2**32, 2**62, 0), drafts at several positions,
    and a vocabulary long enough to cover many counter values."""
    seeds = torch.tensor([0, 1, -1, 2**32 + 7, 2**62, -(2**40) - 3], dtype=torch.int64)
    k = torch.tensor([3, 0, 5, 1, 2, 4], dtype=torch.int64)
    V = 1000
    want = Noise.from_seeds(seeds, k, V)
    got = triton_probes.seeded_noise(seeds.to(device), k.to(device), V)
    assert torch.equal(got.uniform.cpu().view(torch.int32), want.uniform.view(torch.int32))
    # Exponentials: E = -log(u) with the kernel's own logarithm, within 4 ulps of torch's.
    rel = ((got.exponential.cpu().double() - want.exponential.double()) / want.exponential.double()).abs()
    assert float(rel.max()) < 4 * 2.0**-23
    assert bool((got.exponential > 0).all())


@pytest.mark.parametrize("device", [pytest.param(DEVICE, id="cuda" if _CUDA else "cpu-interpreter")])
def test_kernel_negative_log_is_relatively_accurate_near_one(device):
    """The winners of an exponential race are the smallest E, from u next to 1, where a logarithm with
    absolute error (lg2.approx) would be wrong in the first digit. Every grid point near 1 and near 0."""
    m = torch.cat([torch.arange(0, 4096), torch.arange(2**23 - 4096, 2**23)]).to(torch.int64)
    bits = m << 9  # the uniform grid: u = (m + 0.5) * 2**-23
    u = philox.bits_to_uniform(bits)
    got = triton_probes.negative_log(u.to(device)).cpu().double()
    want = -torch.log(u.double())
    assert float(((got - want) / want).abs().max()) < 4 * 2.0**-23
