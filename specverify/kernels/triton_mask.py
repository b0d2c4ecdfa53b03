"""The -inf-masked copy of the logits that the block and tree rules run on when target filters are set (SPEC
3.4): every token the cut's record (``triton_filter``) does not keep becomes -inf, so those kernels need no
filter code of their own.

    _mask_kernel  grid (B, K1, S), pass 1's: out[row, v] = logits[row, v] where ``triton_cut.kept``, else -inf
        logits_ptr [T + B, V] (row stride stride_logits), out_ptr [T + B, V] (stride_out), the logits' dtype
        temperature_ptr [B], num_draft_ptr [B] int64, record_ptr [6, B K1] float32 (triton_filter's layout)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specverify.kernels.triton_cut import kept
from specverify.kernels.triton_math import request_offset


@triton.jit
def _mask_kernel(logits_ptr, stride_logits, out_ptr, stride_out, temperature_ptr, num_draft_ptr, record_ptr,
                 V, K1, chunk, BLOCK_V: tl.constexpr, BLOCK_B: tl.constexpr):
    """out = the logits with -inf where the record cuts (grid (B, K1, S)): the block and tree kernels run
    on it unchanged."""
    b = tl.program_id(0)
    j = tl.program_id(1)
    k_b = tl.load(num_draft_ptr + b)
    if j <= k_b:
        NR = tl.num_programs(0) * K1
        rec = record_ptr + b * K1 + j
        cut_val, cut_idx = tl.load(rec), tl.load(rec + NR).to(tl.int32)
        floor, m = tl.load(rec + 2 * NR), tl.load(rec + 4 * NR)
        temperature = tl.load(temperature_ptr + b).to(tl.float32)
        inv_t = 1.0 / tl.where(temperature == 0.0, 1.0, temperature)
        row = request_offset(num_draft_ptr, b, BLOCK_B) + b + j
        lo_v = tl.program_id(2) * chunk
        for start in range(lo_v, tl.minimum(lo_v + chunk, V), BLOCK_V):
            offs = start + tl.arange(0, BLOCK_V)
            mask = offs < V
            logit = tl.load(logits_ptr + row * stride_logits + offs, mask=mask, other=0.0)
            keep, e = kept(logit.to(tl.float32), offs, cut_val, cut_idx, floor, inv_t, m)
            tl.store(out_ptr + row * stride_out + offs, tl.where(keep, logit, float("-inf")).to(logit.dtype),
                     mask=mask)


def mask_launch(pass1: tuple, record: torch.Tensor) -> tuple:
    """(launch step, out): ``out`` [T + B, V] gets the logits with -inf wherever the record cuts."""
    _, grid1, args1, meta1, key1, stream = pass1
    logits, stride, temperature, num_draft, _, V, K1, S1, *_, chunk = args1
    out = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
    args = (logits, stride, out, out.stride(0), temperature, num_draft, record, V, K1, chunk)
    meta = dict(BLOCK_V=meta1["BLOCK_V"], BLOCK_B=meta1["BLOCK_B"], num_warps=meta1["num_warps"])
    return (_mask_kernel, grid1, args, meta, None, stream), out
