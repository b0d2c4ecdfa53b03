"""Pass 1 and pass 2 of the fused Triton sampler, and their launch step: the standard (Leviathan), greedy
and synthetic rules in these two launches; the block rule (SPEC 3.7) runs ``triton_block``'s mass pass
between them. ``triton_kernels`` plans the launches and calls ``chain_launches``.

Shapes and dtypes (SPEC section 1; B requests, request b proposing k_b drafts at rows row0 = d_off + b
onwards, T = sum k_b, K1 = K + 1 output columns; the scratch layout is ``triton_math.scratch_views``):

    _row_stats_kernel    grid (B, K1, S1)
        logits_ptr      [T + B, V]  float32 / bfloat16 / float16, row stride stride_logits (last dim contiguous)
        temperature_ptr [B]         float32, 0 = greedy request
        num_draft_ptr   [B]         int64
        scratch_ptr     [words]     int64: writes the split partials [B K1 S1] (float32 max and sum of
                                    exp(l / T), float32 argmax value, int32 argmax index), zeroes the race
                                    keys [B, 2] int64 and tickets [B] int32
    _row_stats_cut_kernel  grid (B, K1, S1), the target filter's pass 1 (``triton_filter``)
        as _row_stats_kernel, and work_ptr [words] int64, the cut's work space (S1 its splits), region,
        draft_ids_ptr [T] int64: with GATHER (the PRE plan) gathers each row the cut's stage 4 marked, in
                                    chunk split's region; with LAZY (``triton_lazy``) writes each draft
                                    row's mass before its draft token as the split partials part_mass
    _decide_race_kernel  grid (B, S2)
        logits_ptr, temperature_ptr, num_draft_ptr as pass 1
        draft_ids_ptr   [T]         int64, -1 = placeholder
        q_ptr           [T, V]      float32, row stride stride_q; with HAS_Q off the logits (never read)
        uniform_ptr     [T]         float32 in (0, 1), and
        exp_ptr         [B, V]      float32 Exp(1), row stride stride_exp (both unread when SEEDED)
        seeds_ptr       [B]         int64 Philox keys (read when SEEDED)
        rates_ptr       [n >= K]    float32 synthetic conditional rates (read when SYNTHETIC)
        cut_ptr         [6, B K1]   float32 target-filter records of ``triton_filter`` (read when FILTERED):
                                    p' replaces p, its kept mass the row sum
        scratch_ptr     [words]     int64: reads pass 1's partials (and part_mass when BLOCK), merges the race
        token_ids_ptr   [B, K1]     int64 (out), num_accepted_ptr [B] int64 (out)
    Integers: V, K1, S1 (pass 1's splits per row), n_part = B K1 S1, ints_at and stats_at (scratch offsets
    in int64 words), S2 (pass 2's splits per request, pass 2 only), chunk (entries per split, whole BLOCK_V
    tiles). Constexprs: BLOCK_V (the tile), BLOCK_B (request_offset's block), BLOCK_K >= K1, BLOCK_S >= S1.
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_block import block_weights
from specverify.kernels.triton_cut import KMAX, kept, order_key, row_settings, work_gathered, work_parts, work_tokens
from specverify.kernels.triton_gather import count_word, gather, logit_tile
from specverify.kernels.triton_lazy import ACCEPTED, UNREACHED, top_p_alone
from specverify.kernels.triton_math import (NO_INDEX, at_drafts, neg_log, no_race, philox_uniform, publish_races,
                                            race_tile, request_offset, row_norms, scratch_views)


@triton.jit
def _row_stats_kernel(
    logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr,
    V, K1, S1, n_part, ints_at, stats_at, chunk,
    BLOCK_V: tl.constexpr, BLOCK_B: tl.constexpr,
):
    plain_pass1(logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr, V, K1, S1, n_part, ints_at,
                stats_at, chunk, tl.program_id(2), BLOCK_V, BLOCK_B)


@triton.jit
def plain_pass1(logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr, V, K1, S1, n_part, ints_at,
                stats_at, chunk, split, BLOCK_V: tl.constexpr, BLOCK_B: tl.constexpr, AHEAD: tl.constexpr = False):
    """``_pass1`` on split ``split`` of row (b, j) without the filter's gather or lazy sums: pass 1's own
    program, and the one launch's (``triton_handoff``; AHEAD as ``_split_stats`` takes it)."""
    _pass1(logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr, V, K1, S1, n_part, ints_at,
           stats_at, chunk, split, scratch_ptr, 0, False, 1, BLOCK_V, BLOCK_B, num_draft_ptr, num_draft_ptr,
           num_draft_ptr, num_draft_ptr, False, False, False, False, AHEAD)


@triton.jit
def _row_stats_cut_kernel(
    logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr,
    V, K1, S1, n_part, ints_at, stats_at, chunk, work_ptr, region, draft_ids_ptr, top_k_ptr, top_p_ptr, min_p_ptr,
    GATHER: tl.constexpr, LAZY: tl.constexpr, HAS_K: tl.constexpr, HAS_P: tl.constexpr, HAS_M: tl.constexpr,
    CAP: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_B: tl.constexpr,
):
    _pass1(logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr, V, K1, S1, n_part, ints_at,
           stats_at, chunk, tl.program_id(2), work_ptr, region, GATHER, CAP, BLOCK_V, BLOCK_B, draft_ids_ptr,
           top_k_ptr, top_p_ptr, min_p_ptr, LAZY, HAS_K, HAS_P, HAS_M)


@triton.jit
def _pass1(logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr, V, K1, S1, n_part, ints_at,
           stats_at, chunk, split, work_ptr, region, GATHER: tl.constexpr, CAP: tl.constexpr, BLOCK_V: tl.constexpr,
           BLOCK_B: tl.constexpr, draft_ids_ptr, top_k_ptr, top_p_ptr, min_p_ptr, LAZY: tl.constexpr,
           HAS_K: tl.constexpr, HAS_P: tl.constexpr, HAS_M: tl.constexpr, AHEAD: tl.constexpr = False):
    """Pass 1's work on split ``split`` of row (b, j) = (program_id(0), program_id(1)) (another program's split
    where the one-launch cut takes one over: ``triton_handoff``). With GATHER, the target filter's pass 1
    (``triton_filter``): a row that the cut's stage 4 found unweighed also has the tokens of its bracket
    [lo, KMAX) gathered to the cut's work space (the cut's splits are pass 1's), so that the cut reads only the
    other rows. With LAZY, the lazy cut's pass 1 (``triton_lazy``): a draft row of top-p alone (the filter
    settings, HAS_K/P/M as the cut's) also sums the mass before its draft token in the cut's order (logit
    descending, lower index first), to part_mass; the other rows run the loop without that sum."""
    slots_ptr, part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, ticket_ptr, part_mass_ptr = \
        scratch_views(scratch_ptr, n_part, ints_at, stats_at)
    b = tl.program_id(0)
    j = tl.program_id(1)
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
        rid = b * K1 + j
        NR = tl.num_programs(0) * K1
        x_logit = tl.full([], float("inf"), tl.float32)
        x_idx = tl.full([], -1, tl.int32)
        lazy_row = False
        if LAZY:        # a placeholder's slot and the bonus row have no draft: triton_lazy tests none there
            on, k, k_on, top_p, p_on, floor, _ = row_settings(b, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, V,
                                                              HAS_K, HAS_P, HAS_M)
            if top_p_alone(on, k_on, p_on, floor) & (j < k_b):
                x_idx = tl.load(draft_ids_ptr + request_offset(num_draft_ptr, b, BLOCK_B) + j).to(tl.int32)
                lazy_row = x_idx >= 0
                if lazy_row:
                    x_logit = tl.load(row_ptr + x_idx).to(tl.float32)
        gathers = False
        if GATHER:      # the rows the cut's stage 4 marked
            gathers = tl.load(work_gathered(work_ptr, NR, rid)) != 0
        if gathers:
            key_lo = tl.minimum(tl.load(work_ptr + 2 * rid), KMAX - 1).to(tl.int32)
            buf_ptr = work_tokens(work_ptr, NR, rid, S1, CAP) + split * region
            count_ptr = count_word(work_parts(work_ptr, NR, rid, S1, split))
            split_max, split_sum, amax_val, amax_idx, split_a = _split_stats(
                row_ptr, lo, hi, inv_t, key_lo, buf_ptr, region, count_ptr, x_logit, x_idx, True, False, BLOCK_V)
        elif lazy_row:
            split_max, split_sum, amax_val, amax_idx, split_a = _split_stats(
                row_ptr, lo, hi, inv_t, 0, work_ptr, region, work_ptr, x_logit, x_idx, False, LAZY, BLOCK_V)
        else:
            split_max, split_sum, amax_val, amax_idx, split_a = _split_stats(
                row_ptr, lo, hi, inv_t, 0, work_ptr, region, work_ptr, x_logit, x_idx, False, False, BLOCK_V, AHEAD)
        out = (b * K1 + j) * S1 + split
        tl.store(part_max_ptr + out, split_max)
        tl.store(part_sum_ptr + out, split_sum)
        tl.store(part_amax_val_ptr + out, amax_val)
        tl.store(part_amax_idx_ptr + out, amax_idx)
        if LAZY:
            tl.store(part_mass_ptr + out, split_a)


@triton.jit
def _split_stats(row_ptr, lo, hi, inv_t, key_lo, buf_ptr, region, count_ptr, x_logit, x_idx, GATHER: tl.constexpr,
                 LAZY: tl.constexpr, BLOCK_V: tl.constexpr, AHEAD: tl.constexpr = False):
    """(max of l / T, sum of exp(l / T - max), largest logit, its lowest index, the sum's part before the
    draft) over [lo, hi); with GATHER, the entries whose order key is at least key_lo also go to buf_ptr
    (``triton_gather.gather``, by its atomic count: stage 4 zeroed it; the ballot's instructions made this
    loop no faster). With LAZY, the last is the sum over entries before (x_logit, x_idx) in the cut's order,
    else 0. AHEAD: the loads run three tiles ahead of the sums, where a program alone on its SM (the one launch)
    would otherwise wait on each tile's load in turn; each lane sums the same logits in the same order either
    way, so the partials are the same bits."""
    # Per-lane accumulators: no cross-warp reduction inside the loop, one at the end.
    run_max = tl.full([BLOCK_V], float("-inf"), tl.float32)
    run_sum = tl.zeros([BLOCK_V], dtype=tl.float32)
    run_a = tl.zeros([BLOCK_V], dtype=tl.float32)
    best_val = tl.full([BLOCK_V], float("-inf"), tl.float32)
    best_idx = tl.full([BLOCK_V], NO_INDEX, tl.int32)
    if AHEAD:
        ahead1 = logit_tile(row_ptr, lo, hi, BLOCK_V)
        ahead2 = logit_tile(row_ptr, lo + BLOCK_V, hi, BLOCK_V)
        ahead3 = logit_tile(row_ptr, lo + 2 * BLOCK_V, hi, BLOCK_V)
    for start in range(lo, hi, BLOCK_V):
        offs = start + tl.arange(0, BLOCK_V)
        mask = offs < hi
        if AHEAD:
            logit = ahead1
            ahead1, ahead2 = ahead2, ahead3
            ahead3 = logit_tile(row_ptr, start + 3 * BLOCK_V, hi, BLOCK_V)
        else:
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
        if LAZY:
            before = (logit > x_logit) | ((logit == x_logit) & (offs < x_idx))
            run_a = tl.where(x > run_max, run_a * e + tl.where(before, 1.0, 0.0), run_a + tl.where(before, e, 0.0))
        run_max = new_max
        if GATHER:
            key = order_key(logit)
            gather(key, offs, mask & (key >= key_lo), buf_ptr, 0, region, count_ptr, BLOCK_V, 0)
    split_max = tl.max(run_max, axis=0)
    safe = tl.where(split_max == float("-inf"), 0.0, split_max)
    split_sum = tl.sum(run_sum * tl.exp(run_max - safe), axis=0)
    split_a = tl.zeros([], tl.float32)
    if LAZY:
        split_a = tl.sum(run_a * tl.exp(run_max - safe), axis=0)
    amax_val = tl.max(best_val, axis=0)
    amax_idx = tl.min(tl.where(best_val == amax_val, best_idx, NO_INDEX), axis=0)
    # A split whose real entries are all -inf: its lowest real index is its representative
    # (it ties at -inf); never the sentinel.
    amax_idx = tl.where(amax_idx == NO_INDEX, lo, amax_idx)
    return split_max, split_sum, amax_val, amax_idx, split_a


@triton.jit
def _decide_race_kernel(
    logits_ptr, stride_logits, draft_ids_ptr, q_ptr, stride_q, temperature_ptr, num_draft_ptr,
    uniform_ptr, exp_ptr, stride_exp, seeds_ptr, rates_ptr, cut_ptr,
    scratch_ptr, token_ids_ptr, num_accepted_ptr,
    V, K1, S1, n_part, ints_at, stats_at, S2, chunk,
    HAS_Q: tl.constexpr, SEEDED: tl.constexpr, SYNTHETIC: tl.constexpr, BLOCK: tl.constexpr, FILTERED: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_B: tl.constexpr,
):
    slots_ptr, part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, ticket_ptr, part_mass_ptr = \
        scratch_views(scratch_ptr, n_part, ints_at, stats_at)
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
    row_max, row_sum, row_amax = row_norms(part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr,
                                           b, k_b, K1, S1, BLOCK_K, BLOCK_S)
    if FILTERED:
        n_rows = tl.num_programs(0) * K1
        row_sum = tl.load(cut_ptr + 3 * n_rows + b * K1 + jj, mask=jj <= k_b, other=1.0)

    # ---- the acceptance test at every draft position, vectorised
    x, hole, p_x, q_x = at_drafts(logits_ptr, stride_logits, draft_ids_ptr, q_ptr, stride_q, d_off, row0, k_b,
                                  inv_t, row_max, row_sum, HAS_Q, BLOCK_K)
    if FILTERED:
        x_at = tl.where(hole, 0, x)
        rec = cut_ptr + b * K1 + jj
        x_logit = tl.load(logits_ptr + (row0 + jj) * stride_logits + x_at, mask=is_draft, other=0.0).to(tl.float32)
        keep_x, e_x = kept(x_logit, x_at, tl.load(rec, mask=is_draft, other=0.0),
                           tl.load(rec + n_rows, mask=is_draft, other=0.0).to(tl.int32),
                           tl.load(rec + 2 * n_rows, mask=is_draft, other=0.0), inv_t, row_max)
        p_x = tl.where(keep_x, p_x, 0.0)
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
    if FILTERED:    # a lazy cut's tags (``triton_lazy``): accepted without the row's cut, or never reached
        how = tl.load(rec + 5 * n_rows, mask=is_draft, other=0.0)
        accept = tl.where(how == ACCEPTED, True, tl.where(how == UNREACHED, False, accept))
    n_acc = tl.min(tl.where(is_draft & (accept == 0), jj, k_b), axis=0)
    # the race's row: the residual where n_acc < k_end, else p (the bonus row, or a placeholder's)
    k_end = k_b
    w_n = tl.full([], 1.0, tl.float32)
    if BLOCK:
        # SPEC 3.7: tau = the last i with eta_i <= h_i (eta_i is slot i - 1's uniform), h_i from the
        # residual masses S_i of the mass pass; the residual at tau is scaled by w_tau
        k_blk, w_next = block_weights(hole, p_x, q_x, k_b, BLOCK_K)
        ss = tl.arange(0, BLOCK_S)
        # a greedy request has no block and the mass pass wrote nothing for it: nothing to read
        mmask = (jj + 1 < tl.where(greedy, 0, k_blk))[:, None] & (ss < S1)[None, :]
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
        best_w, best_w_idx, best_p, best_p_idx = no_race(BLOCK_V)
        if FILTERED:
            rec_n = cut_ptr + b * K1 + n_acc
            cut_val, cut_idx, floor = tl.load(rec_n), tl.load(rec_n + n_rows).to(tl.int32), tl.load(rec_n + 2 * n_rows)
        for start in range(lo, hi, BLOCK_V):
            offs = start + tl.arange(0, BLOCK_V)
            mask = offs < hi
            logit = tl.load(row_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
            if FILTERED:
                keep, e = kept(logit, offs, cut_val, cut_idx, floor, inv_t, n_max)
                p = tl.where(keep, e * inv_sum, 0.0)
            else:
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
            best_w, best_w_idx, best_p, best_p_idx = race_tile(best_w, best_w_idx, best_p, best_p_idx, w, p, expo,
                                                               mask, offs)
        publish_races(slots_ptr, b, best_w, best_w_idx, best_p, best_p_idx, V)

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


_filtered_metas: dict = {}


def with_cut(pass2: tuple, record) -> tuple:
    """Pass 2's launch step reading the target-filter records ``record`` (``triton_filter.cut_launch``)."""
    kernel, grid, args, meta, key, stream = pass2
    # pass 2's meta is its recipe's (cached), so its FILTERED copy is made once; the entry holds the meta
    # itself, so that its id is not reused while the entry lives
    seen = _filtered_metas.get(id(meta))
    if seen is None or seen[0] is not meta:
        seen = _filtered_metas[id(meta)] = (meta, dict(meta, FILTERED=True))
    return kernel, grid, args[:12] + (record,) + args[13:], seen[1], key and key + ("cut",), stream


def chain_launches(rows: tuple, noise: tuple, outs: tuple, buf, grids: tuple, ints: tuple, metas: tuple, key,
                   stream) -> tuple[tuple, tuple]:
    """Pass 1 and pass 2 as launch steps (kernel, grid, args, meta, fast-launch key, stream) for
    ``triton_launch.launch``. rows = (logits, stride_logits, draft_ids, q, stride_q, temperature, num_draft),
    noise = (uniform, exp, stride_exp, seeds, rates), outs = (token_ids, num_accepted); buf the call's
    scratch; grids, ints and metas the (pass 1, pass 2) pairs of ``triton_kernels.launch_recipe``; key the
    call's fast-launch key, or None."""
    logits, stride, temperature, num_draft = rows[0], rows[1], rows[5], rows[6]
    pass1 = (_row_stats_kernel, grids[0], (logits, stride, temperature, num_draft, buf) + ints[0], metas[0],
             key and key + (1,), stream)
    # the filter-record slot (12th argument) holds a stand-in, never read, until ``with_cut`` fills it
    pass2 = (_decide_race_kernel, grids[1], rows + noise + (temperature, buf) + outs + ints[1], metas[1],
             key and key + (2,), stream)
    return pass1, pass2
