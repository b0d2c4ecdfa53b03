"""The lazy cut of top-p alone (SPEC 3.4 in ``triton_filter``): the rows of a request whose exact cut its
verification needs. Pass 2 reads one row's whole filtered target, the row n where the chain stops, and of the
draft rows before it only the test of their draft token x. Top-p keeps x exactly where the mass before x in
the cut's order (logit descending, lower index first) is below its target top_p Z, and then its kept mass
Z' lies in [target, target + w(x)): the crossing token weighs no more than x. So from pass 1's float32 sums
(``triton_chain``'s LAZY pass 1: Z and the mass A before each draft) a row's test is often decided without
its cut, and the cut launches search only the rows left open:

    top_p_alone(...) -> whether a request's rows are cut lazily (pass 1 and stage 0 ask the same)
    cut_needed(...) -> whether stage 0 brackets the row; else the tag is in the cut's work space
    lazy_tags(...)  -> the row's tag: NEEDED (0, its cut is searched), ACCEPTED (3, its draft is accepted
                      whatever the cut), UNREACHED (4, the chain stops before it)

Row n gets its cut, and so does every row after it where n's test is left open (a uniform within the
margins of its bound). Sums are float32 against the record's fixed-point ones, so each bound is widened by
a relative MARGIN and an absolute ABS_MARGIN, far above float32 error over a row of 2**18 tokens. The tags
go to the records' "how" field, where pass 2 takes an ACCEPTED row as accepted and an UNREACHED one as
rejected; neither ever decides the chain's stop, which stays an exactly tested row.
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_math import at_drafts, philox_uniform, request_offset, row_norms, scratch_views

NEEDED, ACCEPTED, UNREACHED = tl.constexpr(0), tl.constexpr(3), tl.constexpr(4)
MARGIN = tl.constexpr(1e-4)
ABS_MARGIN = tl.constexpr(1e-6)     # a mass of 2**18 tokens truncated to 2**-44 each, with room
SKIP = tl.constexpr(2147483650)     # stage 0's hi of a row it leaves uncut (its lo holds the tag)


@triton.jit
def top_p_alone(on, k_on, p_on, floor):
    """Whether a request's rows are cut lazily: random, top-p on, top-k and min-p off (``row_settings``)."""
    return on & p_on & ~k_on & (floor <= 0.0)


@triton.jit
def lazy_tags(logits_ptr, stride_logits, draft_ids_ptr, q_ptr, stride_q, uniform_ptr, seeds_ptr, part_max_ptr,
              part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, part_a_ptr, b, j, k_b, d_off, K1, S1, top_p, inv_t,
              HAS_Q: tl.constexpr, SEEDED: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_S: tl.constexpr):
    """The tag of row j of random request b, filtered by top-p alone, from pass 1's partials (part_a: the
    masses before each draft). Every program of the request finds the same tags."""
    jj = tl.arange(0, BLOCK_K)
    ss = tl.arange(0, BLOCK_S)
    row0 = d_off + b
    row_max, z, _ = row_norms(part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, b, k_b, K1, S1,
                              BLOCK_K, BLOCK_S)
    pmask = (jj < k_b)[:, None] & (ss < S1)[None, :]
    pidx = (b * K1 + jj)[:, None] * S1 + ss[None, :]
    pmax = tl.load(part_max_ptr + pidx, mask=pmask, other=float("-inf"))
    part_a = tl.load(part_a_ptr + pidx, mask=pmask, other=0.0)
    a = tl.sum(tl.where(pmask, part_a * tl.exp(pmax - row_max[:, None]), 0.0), axis=1)
    # over a sum of 1, at_drafts' p(x) is e_x = exp(l(x) / T - max), as pass 2 computes it
    x, hole, e_x, q_x = at_drafts(logits_ptr, stride_logits, draft_ids_ptr, q_ptr, stride_q, d_off, row0, k_b, inv_t,
                                  row_max, 1.0, HAS_Q, BLOCK_K)
    is_draft = jj < k_b
    if SEEDED:
        u = philox_uniform(tl.load(seeds_ptr + b), jj, 0)
    else:
        u = tl.load(uniform_ptr + d_off + jj, mask=is_draft, other=0.5).to(tl.float32)
    # a non-finite sum decides nothing (NaN compares false)
    finite = (z < float("inf")) & (a < float("inf"))
    target = top_p.to(tl.float32) * z
    t_lo = target * (1.0 - MARGIN) - ABS_MARGIN
    t_hi = target * (1.0 + MARGIN) + ABS_MARGIN
    kept = finite & (a * (1.0 + MARGIN) + ABS_MARGIN < t_lo)
    cut = finite & (a * (1.0 - MARGIN) - ABS_MARGIN >= t_hi)
    uq = u * q_x
    # p'(x) = e_x / Z' with Z' in [target, target + w(x)) where x is kept
    p_lo = e_x / (t_hi + e_x * (1.0 + MARGIN))
    p_hi = e_x / tl.where(t_lo > 0.0, t_lo, 1.0)
    accepted = is_draft & ~hole & (q_x > 0.0) & (e_x > 0.0) & kept & (uq <= p_lo * (1.0 - MARGIN))
    rejected = hole | ~(q_x > 0.0) | (e_x == 0.0) | cut | (kept & (t_lo > 0.0) & (uq > p_hi * (1.0 + MARGIN)))
    n = tl.min(tl.where(is_draft & ~accepted, jj, k_b), axis=0)
    # the stop is sure where the chain reaches the bonus row or row n's draft is surely rejected
    sure = (n == k_b) | (tl.sum(tl.where((jj == n) & rejected, 1, 0), axis=0) > 0)
    return tl.where(j < n, ACCEPTED, tl.where((j > n) & sure, UNREACHED, NEEDED))


@triton.jit
def cut_needed(logits_ptr, stride_logits, draft_ids_ptr, q_ptr, stride_q, uniform_ptr, seeds_ptr, num_draft_ptr,
               scratch_ptr, work_ptr, rid, k_b, K1, S1, n_part, ints_at, stats_at, top_p, inv_t, HAS_Q: tl.constexpr,
               SEEDED: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_B: tl.constexpr):
    """Stage 0 of the lazy cut on program (b, j)'s row of top-p alone (``triton_cut_kernel``'s arguments, rid = b
    K1 + j): whether its cut is needed. Where it is not, the row's bracket words (work[2 rid], work[2 rid + 1])
    get (its tag, SKIP), which stages 1 and 2 read."""
    _, part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, _, part_a_ptr = \
        scratch_views(scratch_ptr, n_part, ints_at, stats_at)
    b = tl.program_id(0)
    tag = lazy_tags(logits_ptr, stride_logits, draft_ids_ptr, q_ptr, stride_q, uniform_ptr, seeds_ptr, part_max_ptr,
                    part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, part_a_ptr, b, tl.program_id(1), k_b,
                    request_offset(num_draft_ptr, b, BLOCK_B), K1, S1, top_p, inv_t, HAS_Q, SEEDED, BLOCK_K, BLOCK_S)
    if tag != NEEDED:
        tl.store(work_ptr + 2 * rid, tag.to(tl.int64))
        tl.store(work_ptr + 2 * rid + 1, tl.full([], SKIP, tl.int64))
    return tag == NEEDED
