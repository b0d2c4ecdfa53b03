"""The block rule's residual-mass pass (SPEC 3.7) and its launch step: the middle launch of the block rule,
between ``triton_chain``'s pass 1 and pass 2, and ``block_weights``, the running ratios w_i that it and
pass 2 both need. ``triton_kernels`` plans the launches (when K >= 2) and calls ``mass_launch``.

Shapes and dtypes (SPEC section 1; B requests, request b proposing k_b drafts at rows row0 = d_off + b
onwards, T = sum k_b, K1 = K + 1; the scratch layout is ``triton_math.scratch_views``):

    _residual_mass_kernel  grid (B, K1 - 2, S1): program (b, i - 1, split) for 1 <= i < k_b
        logits_ptr    [T + B, V]  float32 / bfloat16 / float16, row stride stride_logits (last dim contiguous)
        draft_ids_ptr [T]         int64, -1 = placeholder (the block ends before the first one)
        q_ptr         [T, V]      float32, row stride stride_q; with HAS_Q off the logits (never read: q is
                                  one-hot at the next draft)
        temperature_ptr [B] float32 (0 = greedy: no block, nothing to sum), num_draft_ptr [B] int64
        scratch_ptr   [words]     int64: reads pass 1's split partials, writes part_mass [B K1 S1] float32,
                                  the sum over the split of max(w_i p_i(v) - q_i(v), 0) at (b, i, split)
        V, K1, S1, n_part = B K1 S1, ints_at, stats_at (scratch offsets in int64 words), chunk (entries
        per split, whole BLOCK_V tiles): pass 1's integer arguments; BLOCK_K >= K1, BLOCK_S >= S1
    block_weights(hole, p_x, q_x, k_b)   [BLOCK_K] bool, float32, float32 (``triton_math.at_drafts``)
        -> (k int32, [BLOCK_K] float32 w_{j+1})
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_math import at_drafts, request_offset, row_norms, scratch_views


@triton.jit
def block_weights(hole, p_x, q_x, k_b, BLOCK_K: tl.constexpr):
    """(k, [BLOCK_K] w_next) of the block rule (SPEC 3.7): k the drafts before the first placeholder, and
    per slot j the running ratio after accepting its draft, w_{j+1} = min(w_j p_j(x) / q_j(x), 1) (0 where
    q_j(x) = 0, and past the block)."""
    jj = tl.arange(0, BLOCK_K)
    k = tl.min(tl.where(hole, jj, k_b), axis=0)
    ratio = tl.where(q_x > 0.0, p_x / tl.where(q_x > 0.0, q_x, 1.0), 0.0)
    run = tl.full([], 1.0, tl.float32)
    w_next = tl.zeros([BLOCK_K], dtype=tl.float32)
    for j in tl.static_range(BLOCK_K):
        # sequential in j: the clamp at 1 makes the running ratio no plain product
        run = tl.minimum(run * tl.sum(tl.where(jj == j, ratio, 0.0), axis=0), 1.0)
        w_next = tl.where(jj == j, run, w_next)
    return k, tl.where(jj < k, w_next, 0.0)


@triton.jit
def _residual_mass_kernel(
    logits_ptr, stride_logits, draft_ids_ptr, q_ptr, stride_q, temperature_ptr, num_draft_ptr, scratch_ptr,
    V, K1, S1, n_part, ints_at, stats_at, chunk,
    HAS_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_V: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    """Block rule only, between pass 1 and pass 2: program (b, i - 1, split) sums
    max(w_i p_i(v) - q_i(v), 0) over its split of row i, for 1 <= i < k (SPEC 3.7's S_i)."""
    # (compiled Triton refuses a name rebound to another type inside an if: no "_" placeholders here)
    slots_ptr, part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, ticket_ptr, part_mass_ptr = \
        scratch_views(scratch_ptr, n_part, ints_at, stats_at)
    b = tl.program_id(0)
    i = tl.program_id(1) + 1
    split = tl.program_id(2)
    k_b = tl.load(num_draft_ptr + b).to(tl.int32)
    temperature = tl.load(temperature_ptr + b).to(tl.float32)
    if (i < k_b) & (temperature != 0.0):
        inv_t = 1.0 / temperature
        d_off = request_offset(num_draft_ptr, b, BLOCK_B)
        row0 = d_off + b
        row_max, row_sum, row_amax = row_norms(part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr,
                                               b, k_b, K1, S1, BLOCK_K, BLOCK_S)
        x, hole, p_x, q_x = at_drafts(logits_ptr, stride_logits, draft_ids_ptr, q_ptr, stride_q, d_off, row0,
                                      k_b, inv_t, row_max, row_sum, HAS_Q, BLOCK_K)
        k, w_next = block_weights(hole, p_x, q_x, k_b, BLOCK_K)
        if i < k:
            jj = tl.arange(0, BLOCK_K)
            w_i = tl.sum(tl.where(jj == i - 1, w_next, 0.0), axis=0)
            m_i = tl.sum(tl.where(jj == i, row_max, 0.0), axis=0)
            inv_sum = 1.0 / tl.sum(tl.where(jj == i, row_sum, 0.0), axis=0)
            x_next = tl.sum(tl.where(jj == i, x, 0), axis=0)       # q_i is one-hot at x_{i+1} without q
            row_ptr = logits_ptr + (row0 + i) * stride_logits
            q_row_ptr = q_ptr + (d_off + i) * stride_q
            lo = split * chunk
            hi = tl.minimum(lo + chunk, V)
            acc = tl.zeros([BLOCK_V], dtype=tl.float32)
            for start in range(lo, hi, BLOCK_V):
                offs = start + tl.arange(0, BLOCK_V)
                mask = offs < hi
                logit = tl.load(row_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
                wp = w_i * tl.exp(logit * inv_t - m_i) * inv_sum
                if HAS_Q:
                    q = tl.load(q_row_ptr + offs, mask=mask, other=0.0).to(tl.float32)
                    acc += tl.maximum(wp - q, 0.0)
                else:
                    acc += tl.where(offs == x_next, 0.0, wp)
            tl.store(part_mass_ptr + (b * K1 + i) * S1 + split, tl.sum(acc, axis=0))


def mass_launch(rows: tuple, buf, grid: tuple, ints: tuple, meta: dict, key, stream) -> tuple:
    """The mass pass as a launch step (kernel, grid, args, meta, fast-launch key, stream) for
    ``triton_launch.launch``. rows = (logits, stride_logits, draft_ids, q, stride_q, temperature, num_draft),
    the arguments it shares with pass 2; buf the call's scratch; grid, ints and meta from
    ``triton_kernels.launch_recipe``; key the call's fast-launch key, or None."""
    return _residual_mass_kernel, grid, rows + (buf,) + ints, meta, key and key + (3,), stream
