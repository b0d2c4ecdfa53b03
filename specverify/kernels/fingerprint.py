"""A 64-bit fingerprint of a tensor's bits, one read of it on the GPU: the guard checks its large private
copies with it after each call, where comparing with the original reads twice as much and writes a mask.

    fingerprint(t) -> [1] int64 on t's device, or None where t's bytes are not whole 32-bit words in one
                      contiguous block
        the sum over t's 32-bit words w_i (sign-extended) of w_i * c_i, mod 2**64, with c_i an odd mix
        of the word's index i

A write that changes one word always changes the fingerprint: c_i is odd, so a unit mod 2**64, and the
word's change is nonzero and under 2**32 in size. Writes to several words collide with chance about
2**-64 unless chosen for it. The sum's order does not matter (integer addition wraps), so the value is
the same whatever the launch plan.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK, TILES = 1024, 16     # words a tile, tiles a program


@triton.jit
def _fingerprint_kernel(words_ptr, n, out_ptr, BLOCK: tl.constexpr, TILES: tl.constexpr):
    """Program p adds sum of w_i c_i over words [p BLOCK TILES, (p + 1) BLOCK TILES) to out_ptr[0]."""
    start = tl.program_id(0).to(tl.int64) * (BLOCK * TILES)
    acc = tl.zeros([BLOCK], tl.int64)
    for t in range(TILES):
        i = start + t * BLOCK + tl.arange(0, BLOCK)
        w = tl.load(words_ptr + i, mask=i < n, other=0).to(tl.int64)
        c = i * 6364136223846793005 + 1442695040888963407
        acc += w * ((c ^ (c >> 29)) | 1)
    tl.atomic_add(out_ptr, tl.sum(acc, axis=0), sem="relaxed")


def fingerprint(t: torch.Tensor) -> torch.Tensor | None:
    """[1] int64: the fingerprint of ``t``'s bits (see the module docstring), or None."""
    if not t.is_contiguous() or (t.numel() * t.element_size()) % 4:
        return None
    words = t.reshape(-1).view(torch.uint8).view(torch.int32)
    out = torch.zeros(1, dtype=torch.int64, device=t.device)
    n = words.numel()
    if n:
        _fingerprint_kernel[(triton.cdiv(n, BLOCK * TILES),)](words, n, out, BLOCK=BLOCK, TILES=TILES)
    return out


__all__ = ["fingerprint"]
