"""The fused Triton rejection sampler's kernels and their launch wrappers: standard (Leviathan), greedy
and synthetic rules in two launches, the block rule (SPEC 3.7) in three. ``triton_sample_into`` is the entry point; ``launches`` lists its
launches (for the benchmark's host profile); ``plan`` and ``launch_recipe`` are the cached launch plan.
The device functions they share live in ``triton_math``, the fast relaunch and scratch reuse in
``triton_launch``, the Backend in ``triton_sampler``.

Shapes and dtypes (SPEC section 1; B requests, request b proposing k_b drafts, T = sum k_b):

    num_draft_tokens  [B]        int64
    draft_token_ids   [T]        int64, -1 = placeholder (never accepted; the extra token there is from p)
    target_logits     [T + B, V] float32 / bfloat16 / float16 (last dim contiguous); math in float32
    draft_probs       [T, V]     float32 (float64 is read and rounded to float32), or None = one-hot q
    temperature       [B]        float32, 0 = greedy request
    uniform           [T]        float32 in (0, 1)          injected noise, or
    exponential       [B, V]     float32 Exp(1)              (both None with seeds)
    seeds             [B]        int64                       per-request Philox keys (reference.philox)
    rates             [n >= K]   float32                     synthetic conditional rates c_j, or None
    token_ids (out)   [B, K + 1] int64, K >= max k_b         emitted tokens left-aligned, rest -1
    num_accepted (out)[B]        int64
    block             bool                       the block rule (rates must then be None)
    scratch           [words]    int64, one allocation per call: [B, 2] int64 race keys, then
                                 [n_part] int32 argmax index, [B] int32 tickets, [4, n_part] float32
                                 split partials (max, sum, argmax value, residual mass); n_part = B (K + 1) S1

Launch plan (why two launches: at B = 1 the call is launch-bound, at B = 128 it is memory-bound):

    pass 1  grid (B, K + 1, S1)   one program per (request, row, vocabulary split): online max and
                                   sum of exp(l / T), lowest-index argmax of the raw logits. It reads
                                   every target row once and needs no noise and no draft_probs.
    pass 2  grid (B, S2)           every program recombines pass 1's split partials, decides the
                                   request (first rejection, acceptance count) -- redundantly, it is a
                                   few scalar loads -- then runs the exponential race over its split of
                                   the ONE row that emits the extra token (the rejected row: residual
                                   max(p - q, 0), or p for synthetic; the bonus row: p). Split winners
                                   meet in a 64-bit atomic max (score bits, then lowest index); the last
                                   program of the request (an atomic ticket) writes the whole output row.
    mass    grid (B, K - 1, S1)    block rule only, between the two: partial sums over each split of
                                   S_i = sum_v max(w_i p_i(v) - q_i(v), 0), 1 <= i < k_b; w_i needs every
                                   earlier row's normaliser, hence a launch after pass 1. Pass 2 then
                                   finds tau from the end of the block instead of the first rejection,
                                   and races over max(w_tau p_tau - q_tau, 0).

draft_probs are read only at the draft token (the acceptance test) and along the one rejected row:
an accepted position never needs q(v) for v != x, so the kernel moves fewer bytes than "read every
input once". Pass 1 zeroes pass 2's atomic slots, so no memset launch and no state between calls;
nothing in the launch path syncs with the host (graph-capturable via ``triton_sample_into``).

Under ``TRITON_INTERPRET=1`` (set before this module is imported) the same kernels run on CPU tensors.
"""

from __future__ import annotations

import functools
import itertools

import torch
import triton
import triton.language as tl

from specverify.kernels.triton_launch import launch, launch_key, patch_language_once_per_launch, scratch
from specverify.kernels.triton_math import NO_INDEX, neg_log, philox_uniform, request_offset

DEFAULT_BLOCK_V = 1024  # for 4-byte logits; 2048 for 2-byte ones
# Programs per SM worth of work that the split heuristic aims for; more only adds partials.
_WAVES = 4


# ----------------------------------------------------------------------------- scratch layout
@triton.jit
def _scratch_views(scratch_ptr, n_part, ints_at, stats_at):
    """The typed views of the one int64 scratch allocation (a host allocation costs as much as a launch
    at B = 1): [B, 2] int64 race keys (residual race, race on p) at 0; at ints_at [n_part] int32 argmax
    index, then [B] int32 tickets; at stats_at [4, n_part] float32 (max, sum, argmax value, and the block
    rule's residual-mass partials).

    Returns (slots, part_max, part_sum, part_amax_val, part_amax_idx, ticket, part_mass) pointers."""
    ints_ptr = (scratch_ptr + ints_at).to(tl.pointer_type(tl.int32), bitcast=True)
    stats_ptr = (scratch_ptr + stats_at).to(tl.pointer_type(tl.float32), bitcast=True)
    return (scratch_ptr, stats_ptr, stats_ptr + n_part, stats_ptr + 2 * n_part, ints_ptr, ints_ptr + n_part,
            stats_ptr + 3 * n_part)


@triton.jit
def _row_norms(part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, b, k_b, K1, S1,
               BLOCK_K: tl.constexpr, BLOCK_S: tl.constexpr):
    """[BLOCK_K] (max of l / T, sum of exp(l / T - max), lowest argmax of l) of request b's rows 0..k_b,
    recombined from pass 1's split partials."""
    jj = tl.arange(0, BLOCK_K)
    ss = tl.arange(0, BLOCK_S)
    pmask = (jj <= k_b)[:, None] & (ss < S1)[None, :]
    pidx = (b * K1 + jj)[:, None] * S1 + ss[None, :]
    pmax = tl.load(part_max_ptr + pidx, mask=pmask, other=float("-inf"))
    row_max = tl.max(pmax, axis=1)
    row_max = tl.where(row_max == float("-inf"), 0.0, row_max)
    psum = tl.load(part_sum_ptr + pidx, mask=pmask, other=0.0)
    row_sum = tl.sum(psum * tl.exp(pmax - row_max[:, None]), axis=1)
    row_sum = tl.where(row_sum > 0.0, row_sum, 1.0)
    pval = tl.load(part_amax_val_ptr + pidx, mask=pmask, other=float("-inf"))
    pidx_best = tl.load(part_amax_idx_ptr + pidx, mask=pmask, other=NO_INDEX)
    row_amax_val = tl.max(pval, axis=1)
    row_amax = tl.min(tl.where(pval == row_amax_val[:, None], pidx_best, NO_INDEX), axis=1)
    return row_max, row_sum, row_amax


@triton.jit
def _at_drafts(logits_ptr, stride_logits, draft_ids_ptr, q_ptr, stride_q, d_off, row0, k_b, inv_t, row_max,
               row_sum, HAS_Q: tl.constexpr, BLOCK_K: tl.constexpr):
    """[BLOCK_K] per draft slot j < k_b: (x, hole, p_j(x), q_j(x)) -- the draft, whether it is a placeholder
    (SPEC 3.5: never accepted, q 0), and the target and drafter probabilities of the draft at its row."""
    jj = tl.arange(0, BLOCK_K)
    is_draft = jj < k_b
    x = tl.load(draft_ids_ptr + d_off + jj, mask=is_draft, other=0)
    hole = is_draft & (x < 0)
    x_at = tl.where(hole, 0, x)
    x_logit = tl.load(logits_ptr + (row0 + jj) * stride_logits + x_at, mask=is_draft, other=0.0).to(tl.float32)
    p_x = tl.exp(x_logit * inv_t - row_max) / row_sum
    if HAS_Q:
        q_x = tl.load(q_ptr + (d_off + jj) * stride_q + x_at, mask=is_draft, other=0.0).to(tl.float32)
    else:
        q_x = tl.full([BLOCK_K], 1.0, tl.float32)
    q_x = tl.where(hole, 0.0, q_x)
    return x, hole, p_x, q_x


@triton.jit
def _block_weights(hole, p_x, q_x, k_b, BLOCK_K: tl.constexpr):
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


# ----------------------------------------------------------------------------- pass 1: row stats
@triton.jit
def _row_stats_kernel(
    logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr,
    V, K1, S1, n_part, ints_at, stats_at, chunk,
    BLOCK_V: tl.constexpr, BLOCK_B: tl.constexpr,
):
    slots_ptr, part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, ticket_ptr, part_mass_ptr = \
        _scratch_views(scratch_ptr, n_part, ints_at, stats_at)
    b = tl.program_id(0)
    j = tl.program_id(1)
    split = tl.program_id(2)
    if (j == 0) & (split == 0):
        # Pass 2's rendezvous state, reset here so that it needs no memset launch of its own.
        tl.store(slots_ptr + 2 * b, tl.zeros([], tl.int64))
        tl.store(slots_ptr + 2 * b + 1, tl.zeros([], tl.int64))
        tl.store(ticket_ptr + b, tl.zeros([], tl.int32))
    k_b = tl.load(num_draft_ptr + b)
    if j <= k_b:
        row = request_offset(num_draft_ptr, b, BLOCK_B) + b + j
        row_ptr = logits_ptr + row * stride_logits
        temperature = tl.load(temperature_ptr + b).to(tl.float32)
        inv_t = 1.0 / tl.where(temperature == 0.0, 1.0, temperature)
        lo = split * chunk
        hi = tl.minimum(lo + chunk, V)
        # Per-lane accumulators: no cross-warp reduction inside the loop, one at the end.
        run_max = tl.full([BLOCK_V], float("-inf"), tl.float32)
        run_sum = tl.zeros([BLOCK_V], dtype=tl.float32)
        best_val = tl.full([BLOCK_V], float("-inf"), tl.float32)
        best_idx = tl.full([BLOCK_V], NO_INDEX, tl.int32)
        for start in range(lo, hi, BLOCK_V):
            offs = start + tl.arange(0, BLOCK_V)
            mask = offs < hi
            logit = tl.load(row_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
            # Strict '>' while visiting tiles in increasing order keeps the lowest index per lane.
            better = logit > best_val
            best_val = tl.where(better, logit, best_val)
            best_idx = tl.where(better, offs, best_idx)
            x = logit * inv_t
            new_max = tl.maximum(run_max, x)
            # One exp per element: of exp(old - new) and exp(x - new) one is 1.
            safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
            e = tl.exp(tl.minimum(run_max, x) - safe_max)
            run_sum = tl.where(x > run_max, run_sum * e + 1.0, run_sum + e)
            run_max = new_max
        split_max = tl.max(run_max, axis=0)
        safe = tl.where(split_max == float("-inf"), 0.0, split_max)
        split_sum = tl.sum(run_sum * tl.exp(run_max - safe), axis=0)
        amax_val = tl.max(best_val, axis=0)
        amax_idx = tl.min(tl.where(best_val == amax_val, best_idx, NO_INDEX), axis=0)
        # A split whose real entries are all -inf: its lowest real index is its representative
        # (it ties at -inf); never the sentinel.
        amax_idx = tl.where(amax_idx == NO_INDEX, lo, amax_idx)
        out = (b * K1 + j) * S1 + split
        tl.store(part_max_ptr + out, split_max)
        tl.store(part_sum_ptr + out, split_sum)
        tl.store(part_amax_val_ptr + out, amax_val)
        tl.store(part_amax_idx_ptr + out, amax_idx)


# ----------------------------------------------------------------------------- block rule: residual masses
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
        _scratch_views(scratch_ptr, n_part, ints_at, stats_at)
    b = tl.program_id(0)
    i = tl.program_id(1) + 1
    split = tl.program_id(2)
    k_b = tl.load(num_draft_ptr + b).to(tl.int32)
    temperature = tl.load(temperature_ptr + b).to(tl.float32)
    if (i < k_b) & (temperature != 0.0):
        inv_t = 1.0 / temperature
        d_off = request_offset(num_draft_ptr, b, BLOCK_B)
        row0 = d_off + b
        row_max, row_sum, row_amax = _row_norms(part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr,
                                         b, k_b, K1, S1, BLOCK_K, BLOCK_S)
        x, hole, p_x, q_x = _at_drafts(logits_ptr, stride_logits, draft_ids_ptr, q_ptr, stride_q, d_off, row0,
                                       k_b, inv_t, row_max, row_sum, HAS_Q, BLOCK_K)
        k, w_next = _block_weights(hole, p_x, q_x, k_b, BLOCK_K)
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


# ----------------------------------------------------------------------------- pass 2: decide + race
@triton.jit
def _decide_race_kernel(
    logits_ptr, stride_logits, draft_ids_ptr, q_ptr, stride_q, temperature_ptr, num_draft_ptr,
    uniform_ptr, exp_ptr, stride_exp, seeds_ptr, rates_ptr,
    scratch_ptr, token_ids_ptr, num_accepted_ptr,
    V, K1, S1, n_part, ints_at, stats_at, S2, chunk,
    HAS_Q: tl.constexpr, SEEDED: tl.constexpr, SYNTHETIC: tl.constexpr, BLOCK: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_B: tl.constexpr,
):
    slots_ptr, part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, ticket_ptr, part_mass_ptr = \
        _scratch_views(scratch_ptr, n_part, ints_at, stats_at)
    b = tl.program_id(0)
    split = tl.program_id(1)
    k_b = tl.load(num_draft_ptr + b).to(tl.int32)
    d_off = request_offset(num_draft_ptr, b, BLOCK_B)
    row0 = d_off + b
    temperature = tl.load(temperature_ptr + b).to(tl.float32)
    greedy = temperature == 0.0
    inv_t = 1.0 / tl.where(greedy, 1.0, temperature)
    if SEEDED:
        seed = tl.load(seeds_ptr + b)

    # ---- recombine pass 1's split partials, one row per draft position (+ bonus row)
    jj = tl.arange(0, BLOCK_K)
    is_draft = jj < k_b
    row_max, row_sum, row_amax = _row_norms(part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr,
                                            b, k_b, K1, S1, BLOCK_K, BLOCK_S)

    # ---- the acceptance test at every draft position, vectorised
    x, hole, p_x, q_x = _at_drafts(logits_ptr, stride_logits, draft_ids_ptr, q_ptr, stride_q, d_off, row0, k_b,
                                   inv_t, row_max, row_sum, HAS_Q, BLOCK_K)
    if SEEDED:
        u = philox_uniform(seed, jj, 0)
    else:
        u = tl.load(uniform_ptr + d_off + jj, mask=is_draft, other=0.5).to(tl.float32)
    if SYNTHETIC:
        rate = tl.load(rates_ptr + jj, mask=is_draft, other=0.0).to(tl.float32)
        accept = u < rate
    else:
        # p_x > 0: u > 0, but a float64 uniform below float32's range loads as 0 (SPEC 2)
        accept = tl.where(greedy, x == row_amax, (q_x > 0.0) & (p_x > 0.0) & (u * q_x <= p_x))
    accept = accept & ~hole
    n_acc = tl.min(tl.where(is_draft & (accept == 0), jj, k_b), axis=0)
    # the race's row: the residual where n_acc < k_end, else p (the bonus row, or a placeholder's)
    k_end = k_b
    w_n = tl.full([], 1.0, tl.float32)
    if BLOCK:
        # SPEC 3.7: tau = the last i with eta_i <= h_i (eta_i is slot i - 1's uniform), h_i from the
        # residual masses S_i of the mass pass; the residual at tau is scaled by w_tau
        k_blk, w_next = _block_weights(hole, p_x, q_x, k_b, BLOCK_K)
        ss = tl.arange(0, BLOCK_S)
        mmask = (jj + 1 < k_blk)[:, None] & (ss < S1)[None, :]
        s_next = tl.sum(tl.load(part_mass_ptr + (b * K1 + jj + 1)[:, None] * S1 + ss[None, :], mask=mmask,
                                other=0.0), axis=1)
        h = tl.where(s_next > 0.0, s_next / tl.where(s_next > 0.0, s_next + (1.0 - w_next), 1.0), 0.0)
        h = tl.where(jj + 1 == k_blk, w_next, h)
        # h > 0: a float64 uniform below float32's range loads as 0, and must not stop where h_i = 0
        tau = tl.max(tl.where((jj < k_blk) & (h > 0.0) & (u <= h), jj + 1, 0), axis=0)
        n_acc = tl.where(greedy, n_acc, tau)
        k_end = tl.where(greedy, k_b, k_blk)
        w_n = tl.where(n_acc == 0, 1.0, tl.sum(tl.where(jj == n_acc - 1, w_next, 0.0), axis=0))
    at_n = jj == n_acc
    n_max = tl.sum(tl.where(at_n, row_max, 0.0), axis=0)
    n_sum = tl.sum(tl.where(at_n, row_sum, 0.0), axis=0)
    n_amax = tl.sum(tl.where(at_n, row_amax, 0), axis=0)
    x_rejected = tl.sum(tl.where(at_n & is_draft, x, 0), axis=0)
    hole_at_n = tl.sum(tl.where(at_n & hole, 1, 0), axis=0) > 0

    # ---- the exponential race over this program's split of the extra-token row
    if not greedy:
        residual = n_acc < k_end
        if SYNTHETIC:
            residual = n_acc < 0
        row_ptr = logits_ptr + (row0 + n_acc) * stride_logits
        q_row_ptr = q_ptr + (d_off + n_acc) * stride_q
        inv_sum = 1.0 / n_sum
        lo = split * chunk
        hi = tl.minimum(lo + chunk, V)
        # The q row is read only where a residual is formed (an empty range otherwise).
        q_hi = tl.where(residual & ~hole_at_n, hi, lo)
        best_w = tl.full([BLOCK_V], -1.0, tl.float32)
        best_w_idx = tl.full([BLOCK_V], NO_INDEX, tl.int32)
        best_p = tl.full([BLOCK_V], -1.0, tl.float32)
        best_p_idx = tl.full([BLOCK_V], NO_INDEX, tl.int32)
        for start in range(lo, hi, BLOCK_V):
            offs = start + tl.arange(0, BLOCK_V)
            mask = offs < hi
            logit = tl.load(row_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
            p = tl.exp(logit * inv_t - n_max) * inv_sum
            wp = w_n * p          # w_n = 1 but for the block rule
            if SEEDED:
                expo = neg_log(philox_uniform(seed, offs, 1))
            else:
                expo = tl.load(exp_ptr + b.to(tl.int64) * stride_exp + offs, mask=mask, other=1.0).to(tl.float32)
            if HAS_Q:
                q = tl.load(q_row_ptr + offs, mask=offs < q_hi, other=0.0).to(tl.float32)
                w = wp - q
            else:
                w = tl.where(residual & (offs == x_rejected), 0.0, wp)
            # Entries of zero weight (and padded lanes) score -1 and never win (reference.race).
            inv_expo = 1.0 / expo
            score_w = tl.where(mask & (w > 0.0), w * inv_expo, -1.0)
            score_p = tl.where(mask & (p > 0.0), p * inv_expo, -1.0)
            better_w = score_w > best_w
            best_w = tl.where(better_w, score_w, best_w)
            best_w_idx = tl.where(better_w, offs, best_w_idx)
            better_p = score_p > best_p
            best_p = tl.where(better_p, score_p, best_p)
            best_p_idx = tl.where(better_p, offs, best_p_idx)
        # Pack (score, lowest index) into one int64 so that an atomic max merges splits exactly:
        # non-negative float bits order like the floats; +1 keeps a zero score above "no candidate".
        top_w = tl.max(best_w, axis=0)
        top_w_idx = tl.min(tl.where(best_w == top_w, best_w_idx, NO_INDEX), axis=0)
        key_w = ((top_w.to(tl.int32, bitcast=True).to(tl.int64) + 1) << 32) | (4294967295 - top_w_idx.to(tl.int64))
        key_w = tl.where((top_w >= 0.0) & (top_w_idx < V), key_w, 0)
        top_p = tl.max(best_p, axis=0)
        top_p_idx = tl.min(tl.where(best_p == top_p, best_p_idx, NO_INDEX), axis=0)
        key_p = ((top_p.to(tl.int32, bitcast=True).to(tl.int64) + 1) << 32) | (4294967295 - top_p_idx.to(tl.int64))
        key_p = tl.where((top_p >= 0.0) & (top_p_idx < V), key_p, 0)
        tl.atomic_max(slots_ptr + 2 * b, key_w, sem="relaxed")
        tl.atomic_max(slots_ptr + 2 * b + 1, key_p, sem="relaxed")

    # ---- the last program of this request writes its whole output row
    ticket = tl.atomic_add(ticket_ptr + b, 1, sem="acq_rel")
    if ticket == S2 - 1:
        extra = n_amax
        if not greedy:
            key_w = tl.atomic_add(slots_ptr + 2 * b, 0, sem="acquire")
            key_p = tl.atomic_add(slots_ptr + 2 * b + 1, 0, sem="acquire")
            # A residual that is zero everywhere (p == q up to rounding) falls back to p.
            key = tl.where(key_w > 0, key_w, key_p)
            extra = (4294967295 - (key & 4294967295)).to(tl.int32)
            # no candidate at all (a NaN row, SPEC 3.6): a valid id, never the empty key's -1
            extra = tl.where(key > 0, extra, 0)
        cols = tl.arange(0, BLOCK_K)
        token = tl.where(cols < n_acc, x, tl.where(cols == n_acc, extra, -1).to(tl.int64))
        tl.store(token_ids_ptr + b * K1 + cols, token, mask=cols < K1)
        tl.store(num_accepted_ptr + b, n_acc.to(tl.int64))


# ----------------------------------------------------------------------------- launch wrappers
def _nonempty(t: torch.Tensor) -> torch.Tensor:
    """A zero-element tensor may have a null data pointer; kernels get a 1-element stand-in (never read)."""
    return t if t.numel() else torch.zeros(1, dtype=t.dtype, device=t.device)


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # the interpreter runs programs one by one; a few splits exercise the merge path


@functools.lru_cache(maxsize=4096)
def plan(B: int, K: int, V: int, device: torch.device, block_v: int | None = None,
         splits: tuple[int, int] | None = None, logit_bytes: int = 4,
         num_warps: int | None = None) -> tuple[int, int, int, int, int, int]:
    """(BLOCK_V, S1, chunk1, S2, chunk2, num_warps). Pass 1 splits each row into S1 chunks, pass 2
    each request's race row into S2, so that even B = 1 fills the GPU (one program streams a 150k-entry
    row at a small fraction of HBM bandwidth). Chunks are whole tiles and every split holds a real
    entry. A tile is 16 bytes of logits per thread of 8 warps (the launch-plan sweep of ci/bench_gpu.py
    ranks it first; docs/benchmarks.md). Cached: the host path of a small call is what it costs."""
    block_v = block_v or min(DEFAULT_BLOCK_V * 4 // logit_bytes, max(16, triton.next_power_of_2(V)))
    tiles = triton.cdiv(V, block_v)
    if splits is not None:
        want1, want2 = splits
    else:
        target = _WAVES * _sm_count(device)
        want1 = triton.cdiv(target, max(1, B * (K + 1)))
        want2 = triton.cdiv(target, max(1, B))
    chunk1 = triton.cdiv(tiles, min(tiles, max(1, want1))) * block_v
    chunk2 = triton.cdiv(tiles, min(tiles, max(1, want2))) * block_v
    warps = num_warps or (8 if block_v >= 1024 else 4)
    return block_v, triton.cdiv(V, chunk1), chunk1, triton.cdiv(V, chunk2), chunk2, warps


_recipe_ids = itertools.count()


@functools.lru_cache(maxsize=4096)
def launch_recipe(B: int, K1: int, V: int, device: torch.device, block_v: int | None,
                  splits: tuple[int, int] | None, num_warps: int | None, strides: tuple, dtypes: tuple,
                  has_q: bool, seeded: bool, synthetic: bool, block: bool = False):
    """Everything of a call's launches that depends only on shapes, strides, dtypes and options: (id, grid1,
    grid2, scratch words, pass 1 integer arguments, pass 2 integer arguments, pass 1 meta, pass 2 meta,
    mass-pass grid or None, mass-pass meta). Cached, with an id unique to this recipe: the host path is
    what a small call costs."""
    logit_bytes = torch.empty((), dtype=dtypes[0]).element_size()
    block_v, s1, chunk1, s2, chunk2, warps = plan(B, K1 - 1, V, device, block_v, splits, logit_bytes, num_warps)
    # One allocation, no views. Offsets in int64 words.
    n_part = B * K1 * s1
    ints_at = 2 * B
    stats_at = ints_at + (n_part + B + 1) // 2
    words = stats_at + (4 * n_part + 1) // 2
    block_b = 1024 if B > 256 else max(16, triton.next_power_of_2(B))
    ints1 = (V, K1, s1, n_part, ints_at, stats_at, chunk1)
    ints2 = (V, K1, s1, n_part, ints_at, stats_at, s2, chunk2)
    meta1 = dict(BLOCK_V=block_v, BLOCK_B=block_b, num_warps=warps)
    shared = dict(BLOCK_K=max(2, triton.next_power_of_2(K1)), BLOCK_S=max(2, triton.next_power_of_2(s1)),
                  BLOCK_V=block_v, BLOCK_B=block_b, num_warps=warps)
    meta2 = dict(HAS_Q=has_q, SEEDED=seeded, SYNTHETIC=synthetic, BLOCK=block, **shared)
    # the block rule's residual masses S_1..S_{K-1}: none to sum for blocks of one draft
    grid_mass = (B, K1 - 2, s1) if block and K1 > 2 else None
    meta_mass = dict(HAS_Q=has_q, **shared)
    return next(_recipe_ids), (B, K1, s1), (B, s2, 1), words, ints1, ints2, meta1, meta2, grid_mass, meta_mass


def launches(token_ids, num_accepted, num_draft_tokens, draft_token_ids, target_logits, draft_probs, temperature,
             *, uniform=None, exponential=None, seeds=None, rates=None, block=False, block_v=None, splits=None,
             num_warps=None) -> list:
    """The (kernel, grid, args, meta, fast-launch key, stream) of each launch of triton_sample_into (empty
    for B = 0): scratch allocated, plan chosen. Separate so that the host cost of each step can be measured."""
    B, K1 = token_ids.shape
    V = target_logits.shape[1]
    if B == 0:
        return []
    seeded = seeds is not None
    if seeded == (uniform is not None or exponential is not None):
        raise ValueError("give either (uniform, exponential) or seeds")
    if block and rates is not None:
        raise ValueError("block=True is the block rule, rates the synthetic rule: give one")
    if target_logits.stride(1) != 1:
        target_logits = target_logits.contiguous()
    if draft_probs is not None and draft_probs.stride(1) != 1:
        draft_probs = draft_probs.contiguous()
    if exponential is not None and exponential.stride(1) != 1:
        exponential = exponential.contiguous()
    dev = target_logits.device
    q = draft_probs if draft_probs is not None else target_logits
    drafts = _nonempty(draft_token_ids)
    uniform_arg = _nonempty(uniform) if uniform is not None else temperature
    exp_arg = exponential if exponential is not None else temperature
    seeds_arg = seeds if seeded else num_draft_tokens
    rates_arg = rates if rates is not None else temperature
    tensors = (target_logits, drafts, q, temperature, num_draft_tokens, uniform_arg, exp_arg, seeds_arg, rates_arg,
               token_ids, num_accepted)
    stride, q_stride, exp_stride = target_logits.stride(0), q.stride(0), exp_arg.stride(0) if exponential is not None else 0
    recipe_id, grid1, grid2, words, ints1, ints2, meta1, meta2, grid_mass, meta_mass = launch_recipe(
        B, K1, V, dev, block_v, splits, num_warps, (stride, q_stride, exp_stride), tuple([t.dtype for t in tensors]),
        draft_probs is not None, seeded, rates is not None, block)
    key, stream = (None, None) if _INTERPRETED else launch_key(recipe_id, tensors)
    buf = scratch(dev, stream, words)
    pass1 = (_row_stats_kernel, grid1, (target_logits, stride, temperature, num_draft_tokens, buf) + ints1, meta1,
             key and key + (1,), stream)
    pass2 = (_decide_race_kernel, grid2,
             (target_logits, stride, drafts, q, q_stride, temperature, num_draft_tokens, uniform_arg, exp_arg,
              exp_stride, seeds_arg, rates_arg, buf, token_ids, num_accepted) + ints2, meta2,
             key and key + (2,), stream)
    if grid_mass is None:
        return [pass1, pass2]
    mass = (_residual_mass_kernel, grid_mass,
            (target_logits, stride, drafts, q, q_stride, temperature, num_draft_tokens, buf) + ints1, meta_mass,
            key and key + (3,), stream)
    return [pass1, mass, pass2]


def triton_sample_into(token_ids: torch.Tensor, num_accepted: torch.Tensor, num_draft_tokens: torch.Tensor,
                       draft_token_ids: torch.Tensor, target_logits: torch.Tensor,
                       draft_probs: torch.Tensor | None, temperature: torch.Tensor, *,
                       uniform: torch.Tensor | None = None, exponential: torch.Tensor | None = None,
                       seeds: torch.Tensor | None = None, rates: torch.Tensor | None = None,
                       block: bool = False, block_v: int | None = None, splits: tuple[int, int] | None = None,
                       num_warps: int | None = None) -> None:
    """Write token_ids [B, K + 1] and num_accepted [B] in place; K is token_ids.shape[1] - 1 (static).

    Give (uniform, exponential) for injected noise, or seeds [B] int64 for the in-kernel Philox stream.
    rates (float32 [n >= K]) selects the synthetic rule, block=True the block rule (SPEC 3.7; one more
    launch, between the two, when K >= 2). No host sync, no data-dependent size: safe to
    capture in a CUDA graph. The caller guarantees K >= max k_b (rows past K would not be visited).
    """
    for step in launches(token_ids, num_accepted, num_draft_tokens, draft_token_ids, target_logits, draft_probs,
                         temperature, uniform=uniform, exponential=exponential, seeds=seeds, rates=rates,
                         block=block, block_v=block_v, splits=splits, num_warps=num_warps):
        launch(*step)


def interpreted() -> bool:
    """True when these kernels were decorated under TRITON_INTERPRET=1 (they then run on CPU tensors)."""
    return type(_row_stats_kernel).__name__ == "InterpretedFunction"


_INTERPRETED = interpreted()
if _INTERPRETED:
    patch_language_once_per_launch()
