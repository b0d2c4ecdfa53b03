"""The sample bracket of the target-filter cut (SPEC 3.4), which ``triton_cut_kernel``'s launches call: from a strided
sample of a row, the interval of order keys that should hold its crossing, so that one read gathers the
tokens to search. ``@triton.jit`` functions on one row (request b's row j at ``row_ptr``, V entries; ``m`` the
row's max of l / T, ``inv_t`` = 1 / T; the sample and its tallies are ``triton_sample``'s):

    bracket(...)      -> int64 keys [lo, hi): gather the tokens in it, sum those at or above hi
    pre_bracket(...)  stage 4's bracket of a top-k row before pass 1 (``triton_filter``'s PRE plan)

With SHARED (the one launch, grid (B, K1, SF)), the row's SF programs tally the sample's tiles between them, each
split the tiles split, split + SF, ..., and hand their shares over (``triton_handoff``): the shares, at share_ptr
[2 rounds, SF, 3, NG] float32 bits in int64 words (count, sum of e, sum of e^2 a candidate), published at the
round's word (word_ptr, then word_ptr + word_step). Counts are exact in any order; the sums of e may differ from
one program's sums in their last bits, which moves the bracket only where a test lies within rounding of its
bound, and the bracket only chooses what is gathered, not the cut.
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_cut import (DEFER, KMAX, KMIN, join4, order_key, pick, split4, stamp, unweighed,
                                           work_parts)
from specverify.kernels.triton_gather import NPART
from specverify.kernels.triton_handoff import publish
from specverify.kernels.triton_sample import (MASS_SPAN, drop_grid, floats, grid_drop, mass_grid, sample_max,
                                              sample_run, store_share, summed_cells)



@triton.jit
def _tally(row_ptr, V, cand, inv_t, m, MASS: tl.constexpr, NS: tl.constexpr, CH: tl.constexpr, NG: tl.constexpr,
           BLOCK_R: tl.constexpr, share_ptr, word_ptr, SF, SPIN, SHARED: tl.constexpr, BLOCK_F: tl.constexpr,
           stamps=None, STAMPS: tl.constexpr = False, PHASE: tl.constexpr = 0):
    """``triton_sample.sample_run`` of the whole sample: by this program alone, or with SHARED by the row's SF
    programs, each tallying its share to share_ptr [SF, 3, NG] and publishing it at word_ptr
    (``triton_handoff.publish``), then summing the shares in split order. STAMPS (SHARED): stamps PHASE once its
    own share is stored, and PHASE + 1 once every share is in (``triton_cut.stamp``)."""
    if SHARED:
        own = tl.program_id(2)
        full = (tl.full([], 1, tl.int64) << SF.to(tl.int64)) - 1
        split = own
        # its own share first, then those it takes over, one a turn
        for turn in range(0, SF):
            if split >= 0:
                store_share(row_ptr, V, cand, inv_t, m, MASS, NS, CH, NG, BLOCK_R, share_ptr, split, SF)
                if STAMPS:
                    if turn == 0:
                        stamp(stamps, PHASE, split)
                split = publish(word_ptr, split, full, own, tl.where(turn == 0, SPIN, 0))
        # the acquire that saw every bit, passed on to the program's other threads
        tl.debug_barrier()
        if STAMPS:
            stamp(stamps, PHASE + 1, split)
        cnt, s1, s2 = _sum_shares(share_ptr, SF, NG, BLOCK_F)
    else:
        cnt, s1, s2 = sample_run(row_ptr, V, cand, inv_t, m, MASS, NS, CH, NG, BLOCK_R, 0, 1)
    return cnt, s1, s2


@triton.jit
def _sum_shares(share_ptr, SF, NG: tl.constexpr, BLOCK_F: tl.constexpr):
    """(count, sum of e, sum of e^2) [NG]: the SF shares at share_ptr ([SF, 3, NG] words), summed in split order."""
    ff = tl.arange(0, BLOCK_F)[:, None]
    at = share_ptr + ff * (3 * NG) + tl.arange(0, NG)[None, :]
    cnt = tl.sum(floats(tl.load(at, mask=ff < SF, other=0)), axis=0)
    s1 = tl.sum(floats(tl.load(at + NG, mask=ff < SF, other=0)), axis=0)
    s2 = tl.sum(floats(tl.load(at + 2 * NG, mask=ff < SF, other=0)), axis=0)
    return cnt, s1, s2


@triton.jit
def _holds(cnt, s1, s2, s1_all, s2_all, drop, r_lo, r_hi, tail, rho, by_mass, NS: tl.constexpr,
           SIGMAS: tl.constexpr):
    """Per candidate drop: (lo test, hi test) of the bracket; the lo test holds at deep drops, the hi test
    at shallow ones. s1_all, s2_all: the sample's whole sums of e and e^2; SIGMAS: the standard deviations of
    the sample's mass that each side of the bracket keeps."""
    below = s1_all - s1
    spread = SIGMAS * rho * tl.sqrt(tl.maximum((s2_all - s2) - below * below / NS, 0.0)) + 2.0 * rho * tl.exp(-drop)
    ok_lo = tl.where(by_mass, rho * below + spread <= tail, cnt >= r_lo)
    ok_hi = tl.where(by_mass, rho * below - spread > tail, cnt <= r_hi)
    return ok_lo, ok_hi


@triton.jit
def whole_rows(k_on, p_on, WHOLE: tl.constexpr, MASS_NG: tl.constexpr):
    """(counts, by_mass): whether a row's bracket is a count bracket's round from the whole sample (top-k on, with
    WHOLE), and whether it is top-p's one round of its cells (top-p alone, with MASS_NG)."""
    counts = k_on
    if WHOLE == 0:
        counts = k_on & False
    by_mass = p_on & ~k_on
    if MASS_NG == 0:
        by_mass = by_mass & False
    return counts, by_mass


@triton.jit
def count_bounds(k, V, NS: tl.constexpr, SIGMAS: tl.constexpr):
    """(rho, r_lo, r_hi) of a count bracket: V / NS tokens a sample entry, and the sample counts SIGMAS standard
    deviations (and SIGMAS more) above and below k / rho, between which its crossing lies."""
    rho = (tl.zeros([], tl.float32) + V) / NS     # V == 1 arrives as a Python int
    lam = k.to(tl.float32) / rho
    return rho, lam + SIGMAS * tl.sqrt(lam) + SIGMAS, lam - SIGMAS * tl.sqrt(lam) - SIGMAS


@triton.jit
def _ends(cnt, s1, s2, drop, r_lo, r_hi, tail, rho, by_mass, NS: tl.constexpr, NG: tl.constexpr,
          SIGMAS: tl.constexpr):
    """(j_lo, j_hi): the first grid point whose lo test holds (NG if none) and the last whose hi test does (-1)."""
    g = tl.arange(0, NG)
    s1_all, s2_all = pick(s1, NG - 1, g), pick(s2, NG - 1, g)
    ok_lo, ok_hi = _holds(cnt, s1, s2, s1_all, s2_all, drop, r_lo, r_hi, tail, rho, by_mass, NS, SIGMAS)
    return tl.min(tl.where(ok_lo, g, NG), axis=0), tl.max(tl.where(ok_hi, g, -1), axis=0)


@triton.jit
def bracket(row_ptr, V, k, k_on, top_p, p_on, z, m, inv_t, CAP: tl.constexpr, NS: tl.constexpr,
            CH: tl.constexpr, NG: tl.constexpr, NG_COUNT: tl.constexpr, BLOCK_R: tl.constexpr,
            BLOCK_MASS: tl.constexpr, share_ptr, word_ptr, word_step, SF, SPIN, SHARED: tl.constexpr,
            BLOCK_F: tl.constexpr, stamps=None, STAMPS: tl.constexpr = False, SIGMAS: tl.constexpr = 4.0,
            ROUND_NG: tl.constexpr = 0, BLOCK_ROUND: tl.constexpr = 2, whole=None, WHOLE: tl.constexpr = 0,
            mass=None, MASS_NG: tl.constexpr = 0, words=None):
    """[lo, hi) order keys expected to hold the crossing (lo = KMIN: everything below hi; hi = KMAX: nothing
    above). Top-k: sample counts SIGMAS standard deviations (and SIGMAS more) either side of k; top-p: the
    sample's mass below a drop from the max, +- SIGMAS standard deviations, against (1 - top_p) z. Two grids of drops
    from the max, NG points each for top-p's masses and NG_COUNT for top-k's counts (a count needs no
    finer grid, and the tally's cost is its points): the second splits the cells the first found, half
    its points for each end. Samples a step: BLOCK_R for counts, BLOCK_MASS for masses (three sums a
    point, so fewer samples a step keep them in registers). share_ptr ... BLOCK_F: the module's SHARED tally (every
    program of the row calls this alike, or none does); STAMPS: its rounds stamped at ``stamps`` (``_tally``).
    ROUND_NG (the one launch's): a bracket by count in one round alone, of ROUND_NG points, BLOCK_ROUND samples a
    step, whose cells at each end are the bracket: with SHARED, one rendezvous of the row's splits fewer. (A mass
    bracket's cells of one such round are too wide for top-p's crossing, where the mass is thick: their tokens
    overflow the gather.) WHOLE (with ROUND_NG): that round is the whole sample's, with its drops from the sample's
    max o, by each program alone: no rendezvous and no row max needed, where o is finite; the shared round otherwise. 1:
    ``whole`` is (o, [ROUND_NG] counts) of ``triton_sample.whole_counts``; 2: (o, j_lo, j_hi), the round's two end
    points, of ``triton_sample.whole_ends``. MASS_NG (the one launch's): top-p's bracket in one round of MASS_NG
    points from the whole sample's cells, where ``mass`` = (o, cells_ptr) has o, the sample's max, finite: the
    splits' shares at cells_ptr (``triton_sample.store_cells``), stored before the splits published pass 1,
    summed (``_mass_from_cells``); the two shared rounds otherwise. ``words``: the shares as
    ``triton_sample.cell_words`` loaded them, where the caller has them (None: loaded here)."""
    share = (share_ptr, word_ptr, word_step, SF, SPIN)
    lo = tl.full([], KMAX, tl.int64)
    hi = tl.full([], KMAX, tl.int64)
    if V <= CAP:
        lo = tl.full([], KMIN, tl.int64)
    elif k_on | p_on:
        # top-p's crossing lies inside what top-k keeps: with top-k on, its bracket holds both
        if p_on & ~k_on:
            # the two rounds' call stands in both branches: Triton 3.6 compiles the cells' branch under a flag bound to
            # False outside the constexpr branch, where MASS_NG is 0 and the cells' names are unbound
            if MASS_NG > 0:
                o, cells_ptr = mass
                # every program of the row takes the same branch: the same sample, the same code
                if (o > float("-inf")) & (o < float("inf")):
                    lo, hi = _mass_from_cells(o, summed_cells(cells_ptr, SF, MASS_NG, BLOCK_F, words), V, top_p, z, m,
                                              inv_t, CAP, NS, MASS_NG, SIGMAS)
                else:
                    lo, hi = _bracket_on(row_ptr, V, k, k_on, top_p, p_on, z, m, inv_t, True, CAP, NS, CH, NG,
                                         BLOCK_MASS, share, SHARED, BLOCK_F, stamps, STAMPS, SIGMAS)
            else:
                lo, hi = _bracket_on(row_ptr, V, k, k_on, top_p, p_on, z, m, inv_t, True, CAP, NS, CH, NG, BLOCK_MASS,
                                     share, SHARED, BLOCK_F, stamps, STAMPS, SIGMAS)
        elif ROUND_NG > 0:
            lo, hi = _bracket_on(row_ptr, V, k, k_on, top_p, p_on, z, m, inv_t, False, CAP, NS, CH, ROUND_NG,
                                 BLOCK_ROUND, share, SHARED, BLOCK_F, stamps, STAMPS, SIGMAS, True, whole, WHOLE)
        else:
            lo, hi = _bracket_on(row_ptr, V, k, k_on, top_p, p_on, z, m, inv_t, False, CAP, NS, CH, NG_COUNT,
                                 BLOCK_R, share, SHARED, BLOCK_F, stamps, STAMPS, SIGMAS)
    return lo, hi


@triton.jit
def _mass_from_cells(o, cells, V, top_p, z, m, inv_t, CAP: tl.constexpr, NS: tl.constexpr, NG: tl.constexpr,
                     SIGMAS: tl.constexpr):
    """``bracket`` of a top-p row from its whole sample's cells ([NG] int32, ``triton_sample.summed_cells``: how many
    entries have grid point g of ``mass_grid`` from the sample's max o as their first at or below them): one round
    of NG points, its drops from o. Each entry's e lies between exp(-drop) of its point and of the point before,
    which bound the sample's mass below each point, and each test takes the bound that holds it back: the lo test
    the upper bound of the mass and of its variance, the hi test the lower bound of the mass and the upper bound of
    its variance. The top is gathered too where few tokens lie at or above the hi end. An entry past the grid holds
    at most exp(-MASS_SPAN) of the max's mass, and V of them less than float32's least tail, 2**-24 z (z >= 1),
    below V = 10**6: the bounds leave them out. One running sum from the deep end, of the bounds and the counts at
    once, so that a point's mass below is no difference of two large sums; one reduction for both ends."""
    g = tl.arange(0, NG)
    drop = mass_grid(NG)
    before = tl.where(g > 0, grid_drop(g - 1, NG, MASS_SPAN), 0.0)
    n = cells.to(tl.float32)
    hi_w = n * tl.exp(-before)
    lo_w = n * tl.exp(-drop)
    sq_w = hi_w * tl.exp(-before)
    # at g: the sums over the points at and below it
    hi_r, lo_r, sq_r, n_r = split4(tl.cumsum(join4(hi_w, lo_w, sq_w, n), 0, reverse=True))
    # an e relative to the row's max m: exp(o - m) exp(-drop)
    scale = tl.exp(o - m)
    below_hi = scale * (hi_r - hi_w)
    below_lo = scale * (lo_r - lo_w)
    below_sq = scale * scale * (sq_r - sq_w)
    rho = (tl.zeros([], tl.float32) + V) / NS
    tail = (1.0 - top_p.to(tl.float32)) * z
    spread = SIGMAS * rho * tl.sqrt(tl.maximum(below_sq - below_lo * below_lo / NS, 0.0)) \
        + 2.0 * rho * scale * tl.exp(-drop)
    ok_hi = rho * below_lo - spread > tail
    # the count at or above each point rises with it: the last hi point's is the largest among them, the whole
    # count (point 0's running sum, in the same reduction) less the least count below a hi point (integers, exact)
    j_lo, j_hi, below_at_hi, total = tl.reduce((tl.where(rho * below_hi + spread <= tail, g, NG),
                                                tl.where(ok_hi, g, -1), tl.where(ok_hi, n_r - n, float("inf")),
                                                tl.where(g == 0, n_r, 0.0)), 0, _ends_of)
    at_hi = total - below_at_hi
    temperature = 1.0 / inv_t
    lo = tl.where(j_lo < NG, order_key((o - grid_drop(j_lo, NG, MASS_SPAN)) * temperature).to(tl.int64), KMIN)
    hi = tl.where((j_hi >= 0) & (rho * at_hi >= CAP / 8),
                  order_key((o - grid_drop(j_hi, NG, MASS_SPAN)) * temperature).to(tl.int64), KMAX)
    return lo, hi


@triton.jit
def _ends_of(lo1, hi1, below1, n1, lo2, hi2, below2, n2):
    """``_mass_from_cells``' ends: the first lo point, the last hi point, the least count below a hi point, and the
    whole count, which adds."""
    return tl.minimum(lo1, lo2), tl.maximum(hi1, hi2), tl.minimum(below1, below2), n1 + n2


@triton.jit
def _bracket_on(row_ptr, V, k, k_on, top_p, p_on, z, m, inv_t, BY_MASS: tl.constexpr, CAP: tl.constexpr,
                NS: tl.constexpr, CH: tl.constexpr, NG: tl.constexpr, BLOCK_R: tl.constexpr, share,
                SHARED: tl.constexpr, BLOCK_F: tl.constexpr, stamps=None, STAMPS: tl.constexpr = False,
                SIGMAS: tl.constexpr = 4.0, ONE: tl.constexpr = False, whole=None, WHOLE: tl.constexpr = 0):
    """``bracket`` of a filtered row past CAP tokens: by the sample's masses (BY_MASS, top-p alone) or by its
    counts; ``share``: (share_ptr, word_ptr, word_step, SF, SPIN) of a SHARED tally, round 2 after round 1's;
    ONE: the first round's cells are the bracket, and no second round runs; WHOLE (ONE, by count): the round's
    counts (1) or end points (2) are ``whole``'s, with the drops from the sample's max (``bracket``)."""
    share_ptr, word_ptr, word_step, SF, SPIN = share
    g = tl.arange(0, NG)
    half: tl.constexpr = NG // 2
    rho, r_lo, r_hi = count_bounds(k, V, NS, SIGMAS)
    tail = (1.0 - top_p.to(tl.float32)) * z
    drop = drop_grid(NG)
    by_mass = p_on & ~k_on
    # the shared tally's call stands in both branches: with the flag bound on both sides of this constexpr branch and
    # one branch after it, Triton 3.6 no longer takes the flag as constant, and compiled the whole-sample path (on
    # counts of None) where WHOLE is off
    if WHOLE == 2:
        o, j_lo, j_hi = whole
        finite = (o > float("-inf")) & (o < float("inf"))
        origin = tl.where(finite, o, m)
        # the counts stand in for the few test alone, which a count bracket does not take
        cnt = tl.zeros([NG], tl.float32)
        s1 = cnt
        s2 = cnt
        if ~finite:
            cnt, s1, s2 = _tally(row_ptr, V, m - drop, inv_t, m, BY_MASS, NS, CH, NG, BLOCK_R, share_ptr, word_ptr, SF,
                                 SPIN, SHARED, BLOCK_F, stamps, STAMPS, 16)
            j_lo, j_hi = _ends(cnt, s1, s2, drop, r_lo, r_hi, tail, rho, by_mass, NS, NG, SIGMAS)
    elif WHOLE:
        o, counted = whole
        finite = (o > float("-inf")) & (o < float("inf"))
        origin = tl.where(finite, o, m)
        if finite:
            cnt = counted
            s1 = tl.zeros([NG], tl.float32)
            s2 = s1
        else:
            cnt, s1, s2 = _tally(row_ptr, V, m - drop, inv_t, m, BY_MASS, NS, CH, NG, BLOCK_R, share_ptr, word_ptr, SF,
                                 SPIN, SHARED, BLOCK_F, stamps, STAMPS, 16)
        j_lo, j_hi = _ends(cnt, s1, s2, drop, r_lo, r_hi, tail, rho, by_mass, NS, NG, SIGMAS)
    else:
        origin = m
        cnt, s1, s2 = _tally(row_ptr, V, m - drop, inv_t, m, BY_MASS, NS, CH, NG, BLOCK_R, share_ptr, word_ptr, SF,
                             SPIN, SHARED, BLOCK_F, stamps, STAMPS, 16)
        j_lo, j_hi = _ends(cnt, s1, s2, drop, r_lo, r_hi, tail, rho, by_mass, NS, NG, SIGMAS)
    if ONE:
        # a count round's cells are the bracket: their ends are grid points, computed as the grid computes them (the
        # same bits, where a pick of each would be a reduction), and a count bracket takes no mass test of the top
        few = False
        d_lo, d_hi = grid_drop(tl.minimum(j_lo, NG - 1), NG), grid_drop(tl.maximum(j_hi, 0), NG)
    else:
        s1_all, s2_all = pick(s1, NG - 1, g), pick(s2, NG - 1, g)
        few = rho * pick(cnt, tl.minimum(j_hi + 1, NG - 1), g) < CAP / 8     # then gather the top too
        lo_a, lo_b = pick(drop, j_lo - 1, g), pick(drop, tl.minimum(j_lo, NG - 1), g)
        hi_a, hi_b = pick(drop, j_hi, g), pick(drop, tl.minimum(j_hi + 1, NG - 1), g)
        h = (g % half + 1).to(tl.float32) / half
        drop2 = tl.where(g < half, lo_a + (lo_b - lo_a) * h, hi_a + (hi_b - hi_a) * (h - 1.0 / half))
        cnt, s1, s2 = _tally(row_ptr, V, m - drop2, inv_t, m, BY_MASS, NS, CH, NG, BLOCK_R, share_ptr + SF * (3 * NG),
                             word_ptr + word_step, SF, SPIN, SHARED, BLOCK_F, stamps, STAMPS, 18)
        ok_lo, ok_hi = _holds(cnt, s1, s2, s1_all, s2_all, drop2, r_lo, r_hi, tail, rho, by_mass, NS, SIGMAS)
        d_lo = tl.min(tl.where((g < half) & ok_lo, drop2, lo_b), axis=0)
        d_hi = tl.max(tl.where((g >= half) & ok_hi, drop2, hi_a), axis=0)
    temperature = 1.0 / inv_t
    lo = tl.where(j_lo < NG, order_key((origin - d_lo) * temperature).to(tl.int64), KMIN)
    # top-p's crossing lies among what top-k keeps, often above top-k's own: where the whole top-k set is
    # few, it is gathered whole (nothing above the bracket)
    whole_k = k_on & p_on & (rho * r_lo < CAP / 2)
    hi = tl.where((j_hi >= 0) & ~(k_on & (r_hi < 1.0)) & ~(by_mass & few) & ~whole_k,
                  order_key((origin - d_hi) * temperature).to(tl.int64), KMAX)
    return lo, hi


@triton.jit
def pre_bracket(row_ptr, rid, NR, work_ptr, V, SF, chunk, k, k_on, top_p, p_on, floor, inv_t, CAP: tl.constexpr,
                NS: tl.constexpr, CH: tl.constexpr, NG: tl.constexpr, NG_COUNT: tl.constexpr,
                BLOCK_SAMPLE: tl.constexpr, BLOCK_MASS: tl.constexpr, SIGMAS: tl.constexpr = 4.0):
    """Stage 4, before pass 1: a top-k row's bracket by its sample's counts, with the sample's largest l / T as
    the origin of the drops (pass 1's max is not known yet, and a count bracket needs only an origin above
    its crossing). An unweighed row's partial sums are written here and its gather counters zeroed, so that
    pass 1 only gathers (one lane group a split: ``triton_gather.gather``'s atomic count). A row whose sample
    max is not finite is left to stage 0 (hi = DEFER). Returns 1 where pass 1 gathers the row, else 0 (int64)."""
    top = sample_max(row_ptr, V, inv_t, NS, CH, BLOCK_SAMPLE)
    lo = tl.full([], KMAX, tl.int64)
    hi = tl.full([], DEFER, tl.int64)
    if (top > float("-inf")) & (top < float("inf")):
        lo, hi = bracket(row_ptr, V, k, k_on, top_p, p_on, 1.0, top, inv_t, CAP, NS, CH, NG, NG_COUNT, BLOCK_SAMPLE,
                         BLOCK_MASS, work_ptr, work_ptr, 0, SF, 0, False, 2, None, False, SIGMAS)
    tl.store(work_ptr + 2 * rid, lo)
    tl.store(work_ptr + 2 * rid + 1, hi)
    gathers = unweighed(k_on, hi, floor)
    if gathers:
        # the unweighed read's sums: nothing above the bracket, no mass, every token passes min-p
        for split in range(SF):
            mine = work_parts(work_ptr, NR, rid, SF, split)
            for field in tl.static_range(NPART):
                tl.store(mine + field, tl.zeros([], tl.int64))
            tl.store(mine + 5, tl.minimum(chunk, V - split * chunk).to(tl.int64))
            tl.store(mine + 3, tl.full([], 1, tl.int64))      # pass 1 gathers by one atomic count a split
    return gathers.to(tl.int64)
