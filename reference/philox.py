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

Two implementations of the same function. ``philox4x32`` is the definition: uint32 arithmetic
carried in int64 torch tensors, products split into 16-bit halves so that nothing overflows; it
is checked against the Random123 known answers. ``philox4x32_numpy`` computes it on numpy uint64
arrays, where the product of two uint32 values is exact, so mulhi and mullo are one multiply, a
shift and a mask; the streams below use it, and the tests hold the two equal bit for bit.

``seeded_stream`` returns the stream as plain tensors; ``reference.Noise.from_seeds`` wraps them, so
this module imports nothing else of the reference.
"""

from __future__ import annotations

import numpy as np
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


def philox4x32_numpy(c0, c1, c2, c3, k0, k1, rounds: int = ROUNDS):
    """``philox4x32`` on numpy uint64 arrays (broadcastable shapes) holding uint32 values.

    The two multiplications of a round are done as one on the pair (c0, c2), and the round's outputs
    are formed pairwise: with P = (c0 * A, c2 * B), exact in uint64, and R = (c2 * B, c0 * A) its reverse,

        (c0, c2) <- (hi(c2 * B) ^ c1 ^ k0, hi(c0 * A) ^ c3 ^ k1) = (R >> 32) ^ (c1, c3) ^ (k0, k1)
        (c1, c3) <- (lo(c2 * B),           lo(c0 * A))           =  R & MASK32

    which is the round of ``philox4x32`` word for word, in five array operations instead of ten.
    """
    u64 = np.uint64
    shape = np.broadcast_shapes(*(np.shape(w) for w in (c0, c1, c2, c3, k0, k1)))
    key_shape = np.broadcast_shapes(np.shape(k0), np.shape(k1))  # the key stays small: [R, 1] for a key per row

    def pair(a, b, to_shape):
        return np.stack([np.broadcast_to(u64(w) & u64(MASK32), to_shape) for w in (a, b)])

    even, odd = pair(c0, c2, shape), pair(c1, c3, shape)        # (c0, c2) and (c1, c3), [2, *shape]
    key = pair(k0, k1, key_shape).reshape((2,) + (1,) * (len(shape) - len(key_shape)) + key_shape)  # (k0, k1)
    key_step = np.array([KEY_A, KEY_B], dtype=u64).reshape((2,) + (1,) * len(shape))
    multiplier = np.array([ROUND_A, ROUND_B], dtype=u64).reshape(key_step.shape)
    product = np.empty_like(even)
    for _ in range(rounds):
        np.multiply(even, multiplier, out=product)              # (c0 * A, c2 * B)
        swapped = product[::-1]                                 # (c2 * B, c0 * A)
        np.right_shift(swapped, u64(32), out=even)
        even ^= odd
        even ^= key
        np.bitwise_and(swapped, u64(MASK32), out=odd)
        key = (key + key_step) & u64(MASK32)
    return even[0], odd[0], even[1], odd[1]


def bits_to_uniform(bits: torch.Tensor) -> torch.Tensor:
    """uint32 bits (in int64) -> float32 in (0, 1), the same 23-bit grid the kernels use. ``bits`` is
    shifted in place and should not be used after: [B, V] is large, and a shifted copy is one more
    int64 array to allocate."""
    return bits.bitwise_right_shift_(9).to(torch.float32).add_(0.5).mul_(2.0 ** -23)


# Elements per block of the stream: the arrays of one block stay in the CPU's cache.
STREAM_BLOCK = 1 << 14


def _stream(seeds: torch.Tensor, index: torch.Tensor, stream: int) -> torch.Tensor:
    """Uniforms of ``stream`` keyed by ``seeds`` [R] at counter word 0 ``index`` ([R], or [R, N] or [1, N]):
    word 0 of philox4x32((index, stream, 0, 0), (seed low 32 bits, seed high 32 bits)), block by block."""
    flat = index.dim() == 1
    seeds = seeds.to(torch.int64).numpy().view(np.uint64)[:, None]
    index = (index[:, None] if flat else index).to(torch.int64).numpy().view(np.uint64)
    R, N = seeds.shape[0], index.shape[1]
    index = np.broadcast_to(index, (R, N))
    bits = np.empty((R, N), dtype=np.uint64)
    rows = max(1, min(R, STREAM_BLOCK // max(N, 1)))
    cols = max(1, min(N, STREAM_BLOCK // rows))
    for r in range(0, R, rows):
        k0, k1 = seeds[r:r + rows], seeds[r:r + rows] >> np.uint64(32)
        for c in range(0, N, cols):
            bits[r:r + rows, c:c + cols], _, _, _ = philox4x32_numpy(index[r:r + rows, c:c + cols], stream, 0, 0,
                                                                    k0, k1)
    uniform = bits_to_uniform(torch.from_numpy(bits.view(np.int64)))
    return uniform[:, 0] if flat else uniform


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


def seeded_stream(seeds: torch.Tensor, num_draft_tokens: torch.Tensor,
                  vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(uniform [T] float32, exponential [B, V] float32) of the seeded stream, on the CPU.

    Draft t of request b, at position j within the request, gets the uniform of counter (j, 0) under
    b's seed; vocabulary entry v of request b gets E = -log(u) of counter (v, 1) under b's seed.
    ``reference.Noise.from_seeds`` wraps the pair as a Noise.
    """
    seeds, k = seeds.cpu().to(torch.int64), num_draft_tokens.cpu()
    B = seeds.shape[0]
    req = torch.repeat_interleave(torch.arange(B), k)
    start = torch.cumsum(k, 0) - k
    pos = torch.arange(req.shape[0]) - start[req]
    uniform = _stream(seeds[req], pos, STREAM_UNIFORM)
    vocab = torch.arange(vocab_size, dtype=torch.int64)[None, :]
    exponential = -torch.log(_stream(seeds, vocab, STREAM_EXPONENTIAL))
    return uniform, exponential


def uniform_grid(shape, generator: torch.Generator | None = None) -> torch.Tensor:
    """float32 uniforms on the seeded stream's grid, drawn from a torch.Generator, on its device."""
    device = None if generator is None else generator.device
    bits = torch.randint(0, 2 ** 32, shape, generator=generator, dtype=torch.int64, device=device)
    return bits_to_uniform(bits)
