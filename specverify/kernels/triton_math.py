"""Triton device functions shared by the sampler's kernels (and by the test probes in tests/).

Each is a ``@triton.jit`` function called inside a kernel, on scalars or blocks:

    philox_uniform(seed, index, STREAM)  seed: int64 scalar, index: int32/int64 block  -> float32 block in (0, 1)
                                         reference.philox's stream: key (seed lo, seed hi),
                                         counter (index, STREAM, 0, 0), word 0
    neg_log(u)                           u: float32 block in (0, 1)                    -> float32 block, -log(u)
    request_offset(num_draft_ptr, b)     num_draft_ptr: [B] int64 (or [2B], offsets appended), b: program id
                                         -> int64 scalar, sum k[:b]
    NO_INDEX                             int32 constexpr: an index no vocabulary entry has

and, for the kernels of ``triton_chain`` and ``triton_block`` (B requests, request b proposing k_b drafts
at rows row0 = d_off + b onwards of the [T + B, V] logits, K1 = K + 1, S1 pass 1's splits per row):

    scratch_views(scratch_ptr, n_part, ints_at, stats_at)   scratch: [words] int64 -> the typed pointers
                                         into it (race keys, split partials, tickets, residual masses)
    row_norms(..., b, k_b, K1, S1)       pass 1's [B K1 S1] split partials -> [BLOCK_K] float32 row max,
                                         float32 row sum, int32 row argmax of request b's rows 0..k_b
    at_drafts(..., d_off, row0, k_b, inv_t, row_max, row_sum)   logits [T + B, V], draft ids [T] int64,
                                         q [T, V] -> [BLOCK_K] draft (int64), placeholder (bool),
                                         p(draft) and q(draft) (float32) per draft slot
    no_race(BLOCK_V), race_tile(...), publish_races(slots_ptr, b, ...)   a split's two exponential races
                                         (pass 2's, the tree's): its lanes' start, one tile, its winners merged
                                         into request b's two race slots
"""

from __future__ import annotations

import triton
import triton.language as tl

# An index no real vocabulary entry has: it loses every lowest-index tie-break, so a padded lane can
# never be reported as a winner (the GHSA-8wr5-jm2h-8r4f class: id >= V emitted).
NO_INDEX = tl.constexpr(2**31 - 1)
# row_norms' fixed point: 2**-38 a unit, so a row of up to 2**25 entries (each term at most its split's
# length) sums below 2**63, and S1 truncated terms lose under 2**-30 of a sum that is at least 1
SUM_ONE = tl.constexpr(274877906944.0)


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


PREFIX_B = 8192   # above this many requests a launch appends each request's draft offset to the counts


def offset_block(B: int, prefix: bool) -> int:
    """request_offset's BLOCK_B for a launch of B requests: 0 where the launch appended the offsets."""
    return 0 if prefix else (1024 if B > 256 else max(16, triton.next_power_of_2(B)))


@triton.jit
def request_offset(num_draft_ptr, b, BLOCK_B: tl.constexpr):
    """sum of k over requests before b. BLOCK_B > 0: summed in-kernel, so the launch path has no cumsum
    launch; BLOCK_B == 0: read from num_draft_ptr[B + b], where a launch of more than PREFIX_B requests put
    it (summing is O(B^2) over such a launch). Every grid that calls this has B programs on axis 0."""
    if BLOCK_B == 0:
        off = tl.load(num_draft_ptr + tl.num_programs(0) + b)
    else:
        acc = tl.zeros([BLOCK_B], dtype=tl.int64)
        for start in range(0, b, BLOCK_B):
            offs = start + tl.arange(0, BLOCK_B)
            acc += tl.load(num_draft_ptr + offs, mask=offs < b, other=0)
        off = tl.sum(acc)
    return off


@triton.jit
def scratch_views(scratch_ptr, n_part, ints_at, stats_at):
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
def row_norms(part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, b, k_b, K1, S1,
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
    # summed in fixed point: integer adds give each lane that holds a row the same total in any order. Summed
    # in float32, lanes that hold the same row can round differently, and which of their sums a layout
    # change keeps is a race (racecheck's write-after-write, docs/nightly/2026-11-27-nightly9)
    terms = psum * tl.exp(pmax - row_max[:, None])
    finite = terms < float("inf")       # a row with an inf or NaN logit has NaN partials: its sum is taken as 1
    row_sum = tl.sum((tl.where(finite, terms, 0.0) * SUM_ONE).to(tl.int64), axis=1).to(tl.float32) / SUM_ONE
    nonfinite = tl.sum(tl.where(finite | ~pmask, 0, 1), axis=1)
    row_sum = tl.where((row_sum > 0.0) & (nonfinite == 0), row_sum, 1.0)
    pval = tl.load(part_amax_val_ptr + pidx, mask=pmask, other=float("-inf"))
    pidx_best = tl.load(part_amax_idx_ptr + pidx, mask=pmask, other=NO_INDEX)
    row_amax_val = tl.max(pval, axis=1)
    row_amax = tl.min(tl.where(pval == row_amax_val[:, None], pidx_best, NO_INDEX), axis=1)
    return row_max, row_sum, row_amax


@triton.jit
def at_drafts(logits_ptr, stride_logits, draft_ids_ptr, q_ptr, stride_q, d_off, row0, k_b, inv_t, row_max,
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
def keep_best(best, best_idx, score, offs):
    """Each lane's running best of the exponential race: (score, id) where ``score`` [BLOCK_V] beats it."""
    better = score > best
    return tl.where(better, score, best), tl.where(better, offs, best_idx)


@triton.jit
def no_race(BLOCK_V: tl.constexpr):
    """The two races' lanes before a split's first tile: (best w score, its id, best p score, its id), [BLOCK_V]
    each, every score -1 (no candidate)."""
    return (tl.full([BLOCK_V], -1.0, tl.float32), tl.full([BLOCK_V], NO_INDEX, tl.int32),
            tl.full([BLOCK_V], -1.0, tl.float32), tl.full([BLOCK_V], NO_INDEX, tl.int32))


@triton.jit
def race_tile(best_w, best_w_idx, best_p, best_p_idx, w, p, expo, mask, offs):
    """One tile of a split's two exponential races (reference.race), w's (the residual's, or the bonus row's)
    and p's (the fallback where w is zero everywhere): each lane keeps its best w / E and p / E with the id. An
    entry of zero weight, or a padded lane, scores -1 and never wins."""
    inv_expo = 1.0 / expo
    score_w = tl.where(mask & (w > 0.0), w * inv_expo, -1.0)
    score_p = tl.where(mask & (p > 0.0), p * inv_expo, -1.0)
    best_w, best_w_idx = keep_best(best_w, best_w_idx, score_w, offs)
    best_p, best_p_idx = keep_best(best_p, best_p_idx, score_p, offs)
    return best_w, best_w_idx, best_p, best_p_idx


@triton.jit
def publish_races(slots_ptr, b, best_w, best_w_idx, best_p, best_p_idx, V):
    """A split's two race winners merged into request b's two race slots (``race_key``, an atomic max)."""
    tl.atomic_max(slots_ptr + 2 * b, race_key(best_w, best_w_idx, V), sem="relaxed")
    tl.atomic_max(slots_ptr + 2 * b + 1, race_key(best_p, best_p_idx, V), sem="relaxed")


@triton.jit
def race_key(best, best_idx, V):
    """A split's (score bits + 1, lowest index) packed in one int64, so that an atomic max merges splits
    exactly (non-negative float bits order like the floats; +1 keeps a zero score above "no candidate");
    0 = no candidate."""
    top = tl.max(best, axis=0)
    top_idx = tl.min(tl.where(best == top, best_idx, NO_INDEX), axis=0)
    key = ((top.to(tl.int32, bitcast=True).to(tl.int64) + 1) << 32) | (4294967295 - top_idx.to(tl.int64))
    return tl.where((top >= 0.0) & (top_idx < V), key, 0)

