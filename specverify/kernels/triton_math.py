"""Triton device functions shared by the sampler's kernels (and by the test probes in tests/).

Each is a ``@triton.jit`` function called inside a kernel, on scalars or blocks:

    philox_uniform(seed, index, STREAM)  seed: int64 scalar, index: int32/int64 block  -> float32 block in (0, 1)
                                         reference.philox's stream: key (seed lo, seed hi),
                                         counter (index, STREAM, 0, 0), word 0
    neg_log(u)                           u: float32 block in (0, 1)                    -> float32 block, -log(u)
    request_offset(num_draft_ptr, b)     num_draft_ptr: [B] int64, b: program id       -> int64 scalar, sum k[:b]
    NO_INDEX                             int32 constexpr: an index no vocabulary entry has
"""

from __future__ import annotations

import triton
import triton.language as tl

# An index no real vocabulary entry has: it loses every lowest-index tie-break, so a padded lane can
# never be reported as a winner (the GHSA-8wr5-jm2h-8r4f class: id >= V emitted).
NO_INDEX = tl.constexpr(2**31 - 1)


@triton.jit
def philox_uniform(seed, index, STREAM: tl.constexpr):
    """reference.philox: key (seed lo, seed hi), counter (index, STREAM, 0, 0), word 0 -> (0, 1)."""
    k0 = (seed & 0xFFFFFFFF).to(tl.uint32)
    k1 = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c0 = index.to(tl.uint32)
    c1 = tl.zeros_like(c0) + STREAM
    c2 = tl.zeros_like(c0)
    c3 = tl.zeros_like(c0)
    for _ in tl.static_range(10):
        prev_c0 = c0
        prev_c2 = c2
        c0 = tl.umulhi(0xCD9E8D57, prev_c2) ^ c1 ^ k0
        c2 = tl.umulhi(0xD2511F53, prev_c0) ^ c3 ^ k1
        c1 = prev_c2 * 0xCD9E8D57
        c3 = prev_c0 * 0xD2511F53
        k0 = k0 + 0x9E3779B9
        k1 = k1 + 0xBB67AE85
    # 23 bits plus a half step: exactly representable, strictly inside (0, 1).
    return ((c0 >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07


@triton.jit
def neg_log(u):
    """-log(u) to a few ulps for u in (0, 1).

    tl.log lowers to lg2.approx, whose error is absolute: for u close to 1 (the tiny exponentials
    that win races) it would be wrong in the first digit. This is the fdlibm reduction instead:
    u = 2**e * f with f in [sqrt(1/2), sqrt(2)), log f = 2 atanh(s), s = (f - 1) / (f + 1).
    """
    bits = u.to(tl.int32, bitcast=True)
    e = (bits >> 23) - 127
    f = ((bits & 0x7FFFFF) | 0x3F800000).to(tl.float32, bitcast=True)
    big = f > 1.4142135623730951
    f = tl.where(big, f * 0.5, f)
    e = tl.where(big, e + 1, e)
    s = (f - 1.0) / (f + 1.0)
    z = s * s
    poly = 0.3333333333333333 + z * (0.2 + z * (0.14285714285714285 + z * (0.1111111111111111
                                                                             + z * (0.09090909090909091 + z * 0.07692307692307693))))
    log_f = 2.0 * s + (2.0 * s) * z * poly
    ef = e.to(tl.float32)
    # ln 2 split so that e * LN2_HI is exact.
    return -(ef * 0.693145751953125 + (log_f + ef * 1.428606765330187e-06))


@triton.jit
def request_offset(num_draft_ptr, b, BLOCK_B: tl.constexpr):
    """sum of k over requests before b: computed in-kernel, so the launch path has no cumsum launch."""
    acc = tl.zeros([BLOCK_B], dtype=tl.int64)
    for start in range(0, b, BLOCK_B):
        offs = start + tl.arange(0, BLOCK_B)
        acc += tl.load(num_draft_ptr + offs, mask=offs < b, other=0)
    return tl.sum(acc)

