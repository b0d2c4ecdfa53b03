"""Test probes for the Triton sampler's device functions: small kernels that materialise what the
sampler computes in-kernel, so tests and ci/sanitizer_driver.py can compare it with reference.philox.

    seeded_noise(seeds, num_draft_tokens, vocab_size) -> Noise
        seeds [B] int64, num_draft_tokens [B] int64 (on the kernels' device)
        -> uniform [T] float32 in (0, 1), exponential [B, V] float32 > 0, T = sum num_draft_tokens
    negative_log(u) -> [n] float32      u: [n] float32 in (0, 1), any device the kernels run on
    weighed_exp(x) -> (exp_normal, tl.exp, their weights)   x: [n] float32 -> [n] float32 x2, [n] int64 x2

Importing this module decorates its kernels: set TRITON_INTERPRET=1 first to run them on CPU tensors.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference import Noise
from specverify.kernels.triton_cut import exp_normal, weight
from specverify.kernels.triton_math import neg_log, philox_uniform, request_offset


@triton.jit
def _seeded_noise_kernel(seeds_ptr, num_draft_ptr, uniform_ptr, exp_ptr, V,
                         BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_B: tl.constexpr):
    b = tl.program_id(0)
    split = tl.program_id(1)
    seed = tl.load(seeds_ptr + b)
    if split == 0:
        k_b = tl.load(num_draft_ptr + b)
        d_off = request_offset(num_draft_ptr, b, BLOCK_B)
        jj = tl.arange(0, BLOCK_K)
        tl.store(uniform_ptr + d_off + jj, philox_uniform(seed, jj, 0), mask=jj < k_b)
    offs = split * BLOCK_V + tl.arange(0, BLOCK_V)
    tl.store(exp_ptr + b * V + offs, neg_log(philox_uniform(seed, offs, 1)), mask=offs < V)


def seeded_noise(seeds: torch.Tensor, num_draft_tokens: torch.Tensor, vocab_size: int) -> Noise:
    """The noise the sampler's seeded path draws in-kernel, materialised on the seeds' device. The
    reference stream is Noise.from_seeds (reference.philox)."""
    B, dev = seeds.shape[0], seeds.device
    T = int(num_draft_tokens.sum()) if B else 0
    uniform = torch.empty(T, dtype=torch.float32, device=dev)
    exponential = torch.empty((B, vocab_size), dtype=torch.float32, device=dev)
    if B:
        block_k = triton.next_power_of_2(max(int(num_draft_tokens.max()), 1))
        # A zero-element tensor may have a null data pointer: the kernel gets a stand-in it never writes.
        uniform_arg = uniform if T else torch.zeros(1, dtype=torch.float32, device=dev)
        _seeded_noise_kernel[(B, triton.cdiv(vocab_size, 256))](
            seeds, num_draft_tokens, uniform_arg, exponential, vocab_size,
            BLOCK_K=block_k, BLOCK_V=256, BLOCK_B=128)
    return Noise(uniform, exponential)


@triton.jit
def _negative_log_kernel(u_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    u = tl.load(u_ptr + offs, mask=offs < n, other=0.5)
    tl.store(out_ptr + offs, neg_log(u), mask=offs < n)


def negative_log(u: torch.Tensor) -> torch.Tensor:
    """The kernels' -log(u) on a float32 tensor of uniforms in (0, 1)."""
    u = u.contiguous().to(torch.float32)
    out = torch.empty_like(u)
    if u.numel():
        _negative_log_kernel[(triton.cdiv(u.numel(), 1024),)](u, out, u.numel(), BLOCK=1024)
    return out


@triton.jit
def _weighed_exp_kernel(x_ptr, fast_ptr, exact_ptr, w_fast_ptr, w_exact_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    fast, exact = exp_normal(x), tl.exp(x)
    tl.store(fast_ptr + offs, fast, mask=offs < n)
    tl.store(exact_ptr + offs, exact, mask=offs < n)
    tl.store(w_fast_ptr + offs, weight(fast), mask=offs < n)
    tl.store(w_exact_ptr + offs, weight(exact), mask=offs < n)


def weighed_exp(x: torch.Tensor) -> tuple:
    """(triton_cut.exp_normal(x), tl.exp(x), weight of each) as the cut computes them, x: [n] float32."""
    outs = tuple(torch.empty_like(x) for _ in range(2)) + tuple(torch.empty(x.shape, dtype=torch.int64,
                                                                           device=x.device) for _ in range(2))
    if x.numel():
        _weighed_exp_kernel[(triton.cdiv(x.numel(), 1024),)](x, *outs, x.numel(), BLOCK=1024)
    return outs
