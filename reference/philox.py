"""A PyTorch port of the Philox4x32-10 counter-based generator, bit-exact with the Triton kernels.

Seeded backends draw their noise in-kernel; so that the reference can reproduce that stream
bit for bit, the stream is defined here, once:

    key     = request seed (64 bits: k0 = low 32, k1 = high 32)
    counter = (index, stream, 0, 0)   stream 0: acceptance uniform at draft position ``index``
                                      stream 1: exponential for vocabulary entry ``index``
    bits    = word 0 of Philox4x32-10(counter, key)
    u       = ((bits >> 9) + 0.5) * 2**-23      exact in float32, in the open interval (0, 1)
    E       = -log(u)                           float32, > 0

A request's noise depends only on its own seed and positions, never on the batch around it.
uint32 arithmetic is carried in int64 tensors; products are split into 16-bit halves so that
nothing overflows.
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
ROUND_A, ROUND_B = 0xD2511F53, 0xCD9E8D57
KEY_A, KEY_B = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10
STREAM_UNIFORM, STREAM_EXPONENTIAL = 0, 1


def _mulhilo(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32 bits of the 64-bit product of the constant ``a`` and uint32 values ``b``."""
    a_hi, a_lo = a >> 16, a & 0xFFFF
    lo_part, hi_part = a_lo * b, a_hi * b  # each < 2**48
    hi = (hi_part + (lo_part >> 16)) >> 16
    lo = (((hi_part & 0xFFFF) << 16) + lo_part) & MASK32
    return hi, lo


def philox4x32(c0, c1, c2, c3, k0, k1, rounds: int = ROUNDS):
    """Philox4x32 on int64 tensors holding uint32 values; returns the four output words."""
    k0, k1 = k0 & MASK32, k1 & MASK32
    for _ in range(rounds):
        hi_b, lo_b = _mulhilo(ROUND_B, c2)
        hi_a, lo_a = _mulhilo(ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + KEY_A) & MASK32, (k1 + KEY_B) & MASK32
    return c0, c1, c2, c3


def bits_to_uniform(bits: torch.Tensor) -> torch.Tensor:
    """uint32 bits (in int64) -> float32 in (0, 1), the same 23-bit grid the kernels use."""
    return ((bits >> 9).to(torch.float32) + 0.5) * (2.0 ** -23)


def _stream(seeds: torch.Tensor, index: torch.Tensor, stream: int) -> torch.Tensor:
    seeds = seeds.to(torch.int64)
    k0, k1 = seeds & MASK32, (seeds >> 32) & MASK32
    zero = torch.zeros_like(index)
    bits, _, _, _ = philox4x32(index & MASK32, zero + stream, zero, zero, k0, k1)
    return bits_to_uniform(bits)


def request_seeds(seed, num_requests: int) -> torch.Tensor:
    """[B] int64 per-request seeds: an int ``s`` gives requests s, s+1, ...; a [B] tensor is taken as is."""
    if isinstance(seed, torch.Tensor):
        if seed.dim() != 1 or seed.shape[0] != num_requests or seed.dtype != torch.int64:
            raise ValueError(f"seed must be an int or a [B] = [{num_requests}] int64 tensor, got "
                             f"{seed.dtype} of shape {tuple(seed.shape)}")
        return seed.cpu()
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int or a [B] int64 tensor, got {type(seed).__name__}")
    return torch.arange(num_requests, dtype=torch.int64) + seed


def seeded_noise(seeds: torch.Tensor, num_draft_tokens: torch.Tensor, vocab_size: int):
    """Noise (uniform [T], exponential [B, V]) of the seeded stream, on the CPU."""
    from reference.batch import Noise  # noqa: PLC0415 (batch imports this module)

    seeds, k = seeds.cpu().to(torch.int64), num_draft_tokens.cpu()
    B = seeds.shape[0]
    req = torch.repeat_interleave(torch.arange(B), k)
    start = torch.cumsum(k, 0) - k
    pos = torch.arange(req.shape[0]) - start[req]
    uniform = _stream(seeds[req], pos, STREAM_UNIFORM)
    vocab = torch.arange(vocab_size, dtype=torch.int64).expand(B, vocab_size)
    exponential = -torch.log(_stream(seeds[:, None].expand(B, vocab_size), vocab, STREAM_EXPONENTIAL))
    return Noise(uniform, exponential)


def uniform_grid(shape, generator: torch.Generator | None = None) -> torch.Tensor:
    """float32 uniforms on the seeded stream's grid, drawn from a torch.Generator."""
    bits = torch.randint(0, 2 ** 32, shape, generator=generator, dtype=torch.int64)
    return bits_to_uniform(bits)
