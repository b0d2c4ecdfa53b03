"""The one-launch cut's shared phases (``triton_filter``, STAGE 3 for a batch of few rows): a row's SF splits
share its sample bracket and then narrow the bracket's gathered tokens together, where each split would
otherwise tally the whole sample alone and the last split would search every gathered token alone. On the
GPU the phases run in one launch, split from each other by a barrier of the row's splits (``row_barrier``;
the launch is cooperative, so that every program is resident); under the interpreter, which runs one
program after another, each phase is a launch of its own. ``@triton.jit`` functions on one program
(row rid, split ``split`` of SF), in ``triton_filter``'s work-space layout, whose row rid owns COOP words
from ``coop_ptr``:

    [SF, 2, 3, NG] float32 (in the first SF * 3 * NG words)   each split's tallies of its share of the sample
                                     at the two grids' drops (count, sum of e, sum of e^2; ``triton_cut.bracket``)
    [ROUNDS, SF, 2 NR_C + 4] int64   each narrowing round's tallies of a split's gathered tokens at NR_C
                                     candidate keys (count, mass), then the split's read: count and mass at
                                     or above the bracket, tokens gathered, the whole mass (round 0's)

Phases: 0 and 1, the two grids of the sample (``bracket_share``); 2, the bracket (``shared_bracket``) and
the read; 3 to 2 + ROUNDS, the narrowing rounds (``narrow_round``); 3 + ROUNDS, each split keeps its tokens
in the narrowed bracket and moves those above it to its sums above (``narrow_keep``), and the row's last split
writes the record. Narrowing takes top-k's count as its target where top-k is on, else top-p's mass; with
both on it only raises the bracket's bottom, since top-p's crossing lies at or above top-k's. The record is
the same integers whatever the bracket: a narrower one only lets the record rank its tokens where it would
search them.
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_cut import (KMAX, KMIN, NONE, bracket_keys, decode, first_drops, key_value,
                                           sample_run, second_drops, unweighed, weight, work_parts, work_tokens)
from specverify.kernels.triton_gather import GROUPS, NPART

NR_C = tl.constexpr(32)     # candidate keys a narrowing round
TILE_C = tl.constexpr(64)   # gathered tokens a step of a round's tally ([TILE_C, NR_C] sums a thread block)


def coop_words(SF: int, NG: int, rounds: int) -> int:
    """Words of the work space a row's shared phases take (the layout above)."""
    return SF * 3 * NG + rounds * SF * (2 * NR_C.value + 4)


@triton.jit
def row_barrier(ticket_ptr, goal):
    """Wait until the row's splits have all arrived here: each adds one to the row's ticket, which reaches
    goal (SF times the barriers passed) once the last has. Every thread's stores are issued before the
    release, and the loads after the acquire see every split's."""
    tl.debug_barrier()
    seen = tl.atomic_add(ticket_ptr, 1, sem="acq_rel") + 1
    while seen < goal:
        seen = tl.atomic_add(ticket_ptr, 0, sem="acquire")
    tl.debug_barrier()


@triton.jit
def _sums_ptr(coop_ptr, split, grid, NG: tl.constexpr):
    """Split ``split``'s [3, NG] float32 tallies of grid ``grid`` (0 or 1)."""
    return coop_ptr.to(tl.pointer_type(tl.float32), bitcast=True) + (split * 2 + grid) * 3 * NG


@triton.jit
def _row_sums(coop_ptr, SF, grid, NG: tl.constexpr, BLOCK_F: tl.constexpr):
    """(count, sum of e, sum of e^2) [NG] at grid ``grid``'s drops over the whole sample: every split's
    share added, in one order every split follows, so that all find the same bracket."""
    ff = tl.arange(0, BLOCK_F)
    g = tl.arange(0, NG)
    at = _sums_ptr(coop_ptr, ff, grid, NG)[:, None] + g[None, :]
    live = (ff < SF)[:, None]
    # ".cg": from L2, where the other splits' stores are, past this SM's L1
    cnt = tl.sum(tl.load(at, mask=live, other=0.0, cache_modifier=".cg"), axis=0)
    s1 = tl.sum(tl.load(at + NG, mask=live, other=0.0, cache_modifier=".cg"), axis=0)
    s2 = tl.sum(tl.load(at + 2 * NG, mask=live, other=0.0, cache_modifier=".cg"), axis=0)
    return cnt, s1, s2


@triton.jit
def _share_on(row_ptr, coop_ptr, V, SF, split, GRID: tl.constexpr, k, k_on, top_p, p_on, z, m, inv_t,
              BY_MASS: tl.constexpr, CAP: tl.constexpr, NS: tl.constexpr, CH: tl.constexpr, NG: tl.constexpr,
              BLOCK_R: tl.constexpr, BLOCK_F: tl.constexpr):
    share = tl.cdiv(tl.cdiv(NS, SF), BLOCK_R) * BLOCK_R
    s_from = split * share
    if GRID == 0:
        drop = first_drops(NG)
    else:
        cnt, s1, s2 = _row_sums(coop_ptr, SF, 0, NG, BLOCK_F)
        drop = second_drops(cnt, s1, s2, V, k, k_on, top_p, p_on, z, CAP, NS, NG)
    cnt, s1, s2 = sample_run(row_ptr, V, m - drop, inv_t, m, s_from, tl.minimum(s_from + share, NS), BY_MASS, NS,
                             CH, NG, BLOCK_R)
    g = tl.arange(0, NG)
    mine = _sums_ptr(coop_ptr, split, GRID, NG)
    tl.store(mine + g, cnt)
    tl.store(mine + NG + g, s1)
    tl.store(mine + 2 * NG + g, s2)


@triton.jit
def bracket_share(row_ptr, coop_ptr, V, SF, split, GRID: tl.constexpr, k, k_on, top_p, p_on, z, m, inv_t,
                  CAP: tl.constexpr, NS: tl.constexpr, CH: tl.constexpr, NG: tl.constexpr, NG_COUNT: tl.constexpr,
                  BLOCK_R: tl.constexpr, BLOCK_MASS: tl.constexpr, BLOCK_F: tl.constexpr):
    """Phase GRID (0 or 1): this split's share of the row's sample tallied at the grid's drops (the second
    grid's from every split's tallies at the first), as ``triton_cut.bracket`` tallies the whole sample."""
    if (V > CAP) & (k_on | p_on):
        if p_on & ~k_on:
            _share_on(row_ptr, coop_ptr, V, SF, split, GRID, k, k_on, top_p, p_on, z, m, inv_t, True, CAP, NS, CH,
                      NG, BLOCK_MASS, BLOCK_F)
        else:
            _share_on(row_ptr, coop_ptr, V, SF, split, GRID, k, k_on, top_p, p_on, z, m, inv_t, False, CAP, NS, CH,
                      NG_COUNT, BLOCK_R, BLOCK_F)


@triton.jit
def _keys_on(coop_ptr, SF, V, k, k_on, top_p, p_on, z, m, inv_t, CAP: tl.constexpr, NS: tl.constexpr,
             NG: tl.constexpr, BLOCK_F: tl.constexpr):
    cnt, s1, s2 = _row_sums(coop_ptr, SF, 0, NG, BLOCK_F)
    drop2 = second_drops(cnt, s1, s2, V, k, k_on, top_p, p_on, z, CAP, NS, NG)
    cnt2, s1_2, s2_2 = _row_sums(coop_ptr, SF, 1, NG, BLOCK_F)
    return bracket_keys(cnt, s1, s2, cnt2, s1_2, s2_2, drop2, V, k, k_on, top_p, p_on, z, m, inv_t, CAP, NS, NG)


@triton.jit
def shared_bracket(coop_ptr, SF, V, k, k_on, top_p, p_on, z, m, inv_t, CAP: tl.constexpr, NS: tl.constexpr,
                   NG: tl.constexpr, NG_COUNT: tl.constexpr, BLOCK_F: tl.constexpr):
    """``triton_cut.bracket`` from the splits' shared tallies (after phases 0 and 1)."""
    lo = tl.full([], KMAX, tl.int64)
    hi = tl.full([], KMAX, tl.int64)
    if V <= CAP:
        lo = tl.full([], KMIN, tl.int64)
    elif k_on | p_on:
        if p_on & ~k_on:
            lo, hi = _keys_on(coop_ptr, SF, V, k, k_on, top_p, p_on, z, m, inv_t, CAP, NS, NG, BLOCK_F)
        else:
            lo, hi = _keys_on(coop_ptr, SF, V, k, k_on, top_p, p_on, z, m, inv_t, CAP, NS, NG_COUNT, BLOCK_F)
    return lo, hi


@triton.jit
def _round_ptr(coop_ptr, SF, split, r, BR_NG: tl.constexpr):
    """Split ``split``'s [2 NR_C + 4] words of narrowing round r (BR_NG: the larger grid's points)."""
    return coop_ptr + SF * 3 * BR_NG + (r * SF + split) * (2 * NR_C + 4)


@triton.jit
def _gathered(parts_ptr, region):
    """(groups, slots a group, [GROUPS] tokens in each) of one split's gather (``triton_gather``: the number of
    lane groups at word 3, their counts from word 7), and the split's tokens in all: region + 1 where a group
    overflowed its slots."""
    gg = tl.arange(0, GROUPS)
    groups = tl.load(parts_ptr + 3, cache_modifier=".cg")
    sub = region // groups
    counts = tl.load(parts_ptr + 7 + gg, mask=gg < groups, other=0, cache_modifier=".cg")
    total = tl.where(tl.max(counts, axis=0) > sub, region + 1, tl.sum(counts, axis=0))
    return groups, sub, counts, total


@triton.jit
def _narrow_start(coop_ptr, work_ptr, NR, rid, SF, region, lo, hi, above, k, k_on, top_p, p_on, floor,
                  FROZEN: tl.constexpr, BR_NG: tl.constexpr, BLOCK_F: tl.constexpr):
    """The search before round 0: (on, a, b, count and mass at or above b, target, whether b may move), the
    read's sums from the splits' partial sums, or (FROZEN) from round 0's copy of them, which later phases
    read since ``narrow_keep`` changes the partial sums while other splits may still be reading."""
    ff = tl.arange(0, BLOCK_F)
    live = ff < SF
    if FROZEN:
        at = _round_ptr(coop_ptr, SF, ff, 0, BR_NG) + 2 * NR_C
        c_hi = tl.load(at, mask=live, other=0, cache_modifier=".cg")
        w_hi = tl.load(at + 1, mask=live, other=0, cache_modifier=".cg")
        n = tl.load(at + 2, mask=live, other=0, cache_modifier=".cg")
        w_all = tl.load(at + 3, mask=live, other=0, cache_modifier=".cg")
    else:
        at = work_parts(work_ptr, NR, rid, SF, 0) + ff * NPART
        c_hi = tl.load(at, mask=live, other=0, cache_modifier=".cg")
        w_hi = tl.load(at + 1, mask=live, other=0, cache_modifier=".cg")
        w_all = tl.load(at + 4, mask=live, other=0, cache_modifier=".cg")
        gg = tl.arange(0, GROUPS)
        groups = tl.load(at + 3, mask=live, other=1, cache_modifier=".cg")
        counts = tl.load(at[:, None] + 7 + gg[None, :], mask=live[:, None] & (gg[None, :] < groups[:, None]), other=0,
                         cache_modifier=".cg")
        n = tl.where(tl.max(counts, axis=1) > region // groups, region + 1, tl.sum(counts, axis=1))
    w_all = tl.sum(w_all, axis=0)
    target = tl.where(k_on, k, tl.maximum((top_p.to(tl.float64) * w_all.to(tl.float64)).to(tl.int64), 1))
    # a bracket to narrow, and every split's tokens in its region
    on = (k_on | p_on) & (lo < hi) & (tl.max(n, axis=0) <= region)
    # top-k's count is the target where top-k is on. b stays where the read weighed nothing (top-k, nothing
    # above the bracket: no masses to move above it), and where top-p follows top-k, whose crossing lies
    # above top-k's, maybe above b
    return (on, lo, tl.minimum(hi, above), tl.sum(c_hi, axis=0), tl.sum(w_hi, axis=0), target,
            ~unweighed(k_on, hi, floor) & ~(k_on & p_on))


@triton.jit
def _candidates(a, b):
    """[NR_C] ascending keys: a, then NR_C - 1 spread evenly over (a, b)."""
    j = tl.arange(0, NR_C)
    return tl.where(j == 0, a, a + ((b - a) * j) // NR_C)


@triton.jit
def _narrowed(coop_ptr, work_ptr, NR, rid, SF, region, lo, hi, above, k, k_on, top_p, p_on, floor, ROUNDS,
              FROZEN: tl.constexpr, BR_NG: tl.constexpr, BLOCK_F: tl.constexpr):
    """(on, a, b): the bracket [a, b) after ROUNDS rounds, replayed from their tallies (every split replays
    the same integers): each round keeps the piece between the last candidate at or above the target and
    the first below it. Round 0 also checks that the bracket holds the crossing (else nothing narrows)."""
    on, a, b, c_b, w_b, target, b_moves = _narrow_start(coop_ptr, work_ptr, NR, rid, SF, region, lo, hi, above, k,
                                                        k_on, top_p, p_on, floor, FROZEN, BR_NG, BLOCK_F)
    ff = tl.arange(0, BLOCK_F)
    j = tl.arange(0, NR_C)
    for r in range(ROUNDS):
        if on:
            at = _round_ptr(coop_ptr, SF, ff, r, BR_NG)[:, None] + j[None, :]
            live = (ff < SF)[:, None]
            f = tl.where(k_on, c_b + tl.sum(tl.load(at, mask=live, other=0, cache_modifier=".cg"), axis=0),
                         w_b + tl.sum(tl.load(at + NR_C, mask=live, other=0, cache_modifier=".cg"), axis=0))
            if r == 0:
                on = (tl.sum(tl.where(j == 0, f, 0), axis=0) >= target) & (tl.where(k_on, c_b, w_b) < target)
            cand = _candidates(a, b)
            n_ge = tl.sum(((f >= target) & (j > 0)).to(tl.int32), axis=0)
            new_a = tl.sum(tl.where(j == n_ge, cand, 0), axis=0)
            new_b = tl.where(n_ge + 1 < NR_C, tl.sum(tl.where(j == n_ge + 1, cand, 0), axis=0), b)
            a = tl.where(on, new_a, a)
            b = tl.where(on & b_moves, new_b, b)
    return on, a, b


@triton.jit
def narrow_round(coop_ptr, work_ptr, NR, rid, SF, split, region, lo, hi, above, k, k_on, top_p, p_on, floor,
                 inv_t, m, r: tl.constexpr, CAP: tl.constexpr, BR_NG: tl.constexpr, BLOCK_F: tl.constexpr):
    """Phase 3 + r: this split's gathered tokens tallied at the candidates of round r (count and mass at or
    above each); round 0 also copies the split's read sums for the later phases."""
    on, a, b = _narrowed(coop_ptr, work_ptr, NR, rid, SF, region, lo, hi, above, k, k_on, top_p, p_on, floor, r,
                         r > 0, BR_NG, BLOCK_F)
    mine = _round_ptr(coop_ptr, SF, split, r, BR_NG)
    parts = work_parts(work_ptr, NR, rid, SF, split)
    groups, sub, counts, total = _gathered(parts, region)
    if r == 0:
        tl.store(mine + 2 * NR_C, tl.load(parts, cache_modifier=".cg"))
        tl.store(mine + 2 * NR_C + 1, tl.load(parts + 1, cache_modifier=".cg"))
        tl.store(mine + 2 * NR_C + 2, total)
        tl.store(mine + 2 * NR_C + 3, tl.load(parts + 4, cache_modifier=".cg"))
    if on:
        cand = _candidates(a, b)
        buf = work_tokens(work_ptr, NR, rid, SF, CAP) + split * region
        cnt = tl.zeros([TILE_C, NR_C], tl.int32)
        mass = tl.zeros([TILE_C, NR_C], tl.int64)
        gg = tl.arange(0, GROUPS)
        for g in range(groups):
            n = tl.sum(tl.where(gg == g, counts, 0), axis=0)
            for start in range(0, n, TILE_C):
                i = start + tl.arange(0, TILE_C)
                valid, key, idx, e = decode(tl.load(buf + g * sub + i, mask=i < n, other=NONE), inv_t, m)
                ge = valid[:, None] & (key.to(tl.int64)[:, None] >= cand[None, :])
                cnt += ge.to(tl.int32)
                mass += tl.where(ge, weight(e)[:, None], 0)
        j = tl.arange(0, NR_C)
        tl.store(mine + j, tl.sum(cnt, axis=0).to(tl.int64))
        tl.store(mine + NR_C + j, tl.sum(mass, axis=0))


@triton.jit
def narrow_keep(coop_ptr, work_ptr, NR, rid, SF, split, region, lo, hi, above, k, k_on, top_p, p_on, floor, inv_t,
                m, ROUNDS, CAP: tl.constexpr, BR_NG: tl.constexpr, BLOCK_F: tl.constexpr):
    """The last phase: this split keeps its gathered tokens in the narrowed bracket [a, b) and adds those at or
    above b to its sums above the bracket (count, mass, min-p mass), as the read would have with b its
    bracket's top. Returns the bracket the record is written from."""
    on, a, b = _narrowed(coop_ptr, work_ptr, NR, rid, SF, region, lo, hi, above, k, k_on, top_p, p_on, floor,
                         ROUNDS, True, BR_NG, BLOCK_F)
    if on:
        parts = work_parts(work_ptr, NR, rid, SF, split)
        buf = work_tokens(work_ptr, NR, rid, SF, CAP) + split * region
        groups, sub, counts, total = _gathered(parts, region)
        kept = tl.zeros([], tl.int64)
        c_up = tl.zeros([], tl.int64)
        w_up = tl.zeros([], tl.int64)
        w_up_mp = tl.zeros([], tl.int64)
        gg = tl.arange(0, GROUPS)
        # the kept tokens of every lane group move to the split's first slots, one group after another: a token
        # never moves up, and every slot it may land on was read before
        for g in range(groups):
            n = tl.sum(tl.where(gg == g, counts, 0), axis=0)
            for start in range(0, n, TILE_C):
                i = start + tl.arange(0, TILE_C)
                packed = tl.load(buf + g * sub + i, mask=i < n, other=NONE)
                valid, key, idx, e = decode(packed, inv_t, m)
                key = key.to(tl.int64)
                inside = valid & (key >= a) & (key < b)
                up = valid & (key >= b)
                w = weight(e)
                # min-p's test as pass 2 takes it (``triton_cut.kept``); off, the floor is 0, which every e passes
                mp = tl.exp(key_value(key.to(tl.int32)) * inv_t - m) >= floor
                c_up += tl.sum(up.to(tl.int64), axis=0)
                w_up += tl.sum(tl.where(up, w, 0), axis=0)
                w_up_mp += tl.sum(tl.where(up & mp, w, 0), axis=0)
                at = kept + tl.cumsum(inside.to(tl.int64), 0) - 1
                # a tile's destination can overlap its own source: every thread loads before any stores
                tl.debug_barrier()
                tl.store(buf + at, packed, mask=inside)
                kept += tl.sum(inside.to(tl.int64), axis=0)
        tl.debug_barrier()
        tl.store(parts, tl.load(parts) + c_up)
        tl.store(parts + 1, tl.load(parts + 1) + w_up)
        tl.store(parts + 2, tl.load(parts + 2) + w_up_mp)
        tl.store(parts + 3, tl.full([], 1, tl.int64))      # one group now, the split's first slots
        tl.store(parts + 7, kept)
        # an unmoved top stays the read's (KMAX where nothing lay above the bracket)
        lo, hi = a, tl.where(b < tl.minimum(hi, above), b, hi)
    return lo, hi


@triton.jit
def shares(V, k_on, p_on, CAP: tl.constexpr):
    """Whether a filtered row's splits share phases (and so wait at their barriers): where it has a bracket to
    find, top-k or top-p on past CAP tokens. A row of min-p alone, or gathered whole, has nothing to share."""
    return (V > CAP) & (k_on | p_on)


@triton.jit
def coop_row(work_ptr, NR, rid, SF, CAP: tl.constexpr, SCRATCH: tl.constexpr, BR_NG: tl.constexpr,
             ROUNDS: tl.constexpr):
    """Row rid's words of the shared phases: after the work space's search scratch, ``coop_words`` a row."""
    return work_ptr + NR * (3 + SF * NPART + CAP + SCRATCH) + rid * (SF * 3 * BR_NG + ROUNDS * SF * (2 * NR_C + 4))
