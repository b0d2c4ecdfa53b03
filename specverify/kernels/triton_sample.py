"""The sample of a row that the target-filter cut's bracket tallies (``triton_bracket``), and the one launch's
shares of its tallies. ``@triton.jit`` functions on one row (request b's row j at ``row_ptr``, V entries; ``inv_t`` =
1 / T):

    sample_max(...)    the largest l / T of the row's strided sample
    whole_sample(...)  the whole sample at once, for a count bracket from it alone
    whole_counts(...)  its counts at or above each point of the drop grid from its max, by one program
    store_cells(...)   a split's share of how many entries lie in each cell of top-p's grid from the sample's max
    summed_cells(...)  the splits' shares summed, for a mass bracket's bounds (``triton_bracket``'s MASS_NG)
    whole_ends(...)    the grid points where those counts cross a count bracket's two bounds, by a search
    sample_run(...)    (count, sum of e, sum of e^2) of the sample's tiles at or above each candidate
    store_share(...)   a split's share of a round of the one launch's shared tally, stored
    bits / floats      float32 <-> its bits in an int64 word of the work space
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_cut import DROP

# the drops from the sample's max that top-p's cells cover (``mass_grid``): an entry deeper holds at most exp(-32) of
# the max's mass, which the bracket's bounds leave out (``triton_bracket._mass_from_cells``)
MASS_SPAN = tl.constexpr(32.0)


@triton.jit
def sample_max(row_ptr, V, inv_t, NS: tl.constexpr, CH: tl.constexpr, BLOCK_R: tl.constexpr):
    """The largest l / T of the row's strided sample (``sample_tile``)."""
    best = tl.full([BLOCK_R], float("-inf"), tl.float32)
    for start in range(0, NS, BLOCK_R):
        best = tl.maximum(best, sample_tile(row_ptr, V, start, inv_t, NS, CH, BLOCK_R))
    return tl.max(best, axis=0)


@triton.jit
def sample_tile(row_ptr, V, start, inv_t, NS: tl.constexpr, CH: tl.constexpr, BLOCK_R: tl.constexpr):
    """[BLOCK_R] l / T of sample entries start, start + 1, ... (-inf at and past NS): chunks of CH logits,
    NS / CH chunks spread evenly from the row's start to its end."""
    i = start + tl.arange(0, BLOCK_R)
    return tl.load(row_ptr + _sample_at(i, V, NS, CH), mask=i < NS, other=float("-inf")).to(tl.float32) * inv_t


@triton.jit
def whole_sample(row_ptr, V, inv_t, wanted, NS: tl.constexpr, CH: tl.constexpr):
    """[NS] l / T of the whole sample (``sample_tile``), or -inf where not ``wanted`` (a row past its request's
    drafts has no logits at row_ptr)."""
    i = tl.arange(0, NS)
    # a select, not an and: the interpreter refuses the mask that a scalar's and with a tensor gives
    live = tl.where(wanted, i < NS, False)
    return tl.load(row_ptr + _sample_at(i, V, NS, CH), mask=live, other=float("-inf")).to(tl.float32) * inv_t


@triton.jit
def whole_counts(sample, NG: tl.constexpr):
    """(o, [NG] float32): the sample's max o of l / T and, where o is finite, how many of ``sample``'s entries are
    at or above o - drop_grid(NG)[g], each g (else zeros): the running sum of ``_first_points``' histogram."""
    o = tl.max(sample, axis=0)
    cnt = tl.zeros([NG], tl.float32)
    if (o > float("-inf")) & (o < float("inf")):     # else no count bracket is taken from it
        first = _first_points(sample, o, NG)
        cnt = tl.cumsum(tl.histogram(first, NG, mask=first < NG), 0).to(tl.float32)
    return o, cnt


@triton.jit
def store_cells(row_ptr, V, inv_t, o, split, SF, cells_ptr, NS: tl.constexpr, CH: tl.constexpr, NG: tl.constexpr,
                BLOCK_R: tl.constexpr, first=None):
    """Split ``split``'s share of the sample's cells, stored at cells_ptr + split NG / 4 as [NG / 4] int64 words of
    four 16-bit counts (cell g in word g // 4, bits 16 (g % 4) up): of the sample's tiles split, split + SF, ...
    (BLOCK_R entries a tile), how many entries have grid point g of ``mass_grid(NG)`` from o as their first at or
    below them (``_first_points``). o: the whole sample's max, finite. A tile's histogram costs its entries a
    thread times NG / 32, so a split's share of few entries a tile costs little where the whole sample's would
    not. first: the share's first tile, ``sample_tile`` from split BLOCK_R, where the caller loaded it before o was
    known (None: loaded here); past NS it is all -inf, which no point counts."""
    if first is None:
        first = sample_tile(row_ptr, V, split * BLOCK_R, inv_t, NS, CH, BLOCK_R)
    points = _first_points(first, o, NG, MASS_SPAN)
    cells = tl.histogram(points, NG, mask=points < NG)
    for start in range((split + SF) * BLOCK_R, NS, SF * BLOCK_R):
        points = _first_points(sample_tile(row_ptr, V, start, inv_t, NS, CH, BLOCK_R), o, NG, MASS_SPAN)
        cells += tl.histogram(points, NG, mask=points < NG)
    words = tl.sum(tl.reshape(cells, [NG // 4, 4]).to(tl.int64) << (16 * tl.arange(0, 4))[None, :].to(tl.int64),
                   axis=1)
    tl.store(cells_ptr + split * (NG // 4) + tl.arange(0, NG // 4), words)


@triton.jit
def summed_cells(cells_ptr, SF, NG: tl.constexpr, BLOCK_F: tl.constexpr, words=None):
    """[NG] int32: the SF splits' shares of ``store_cells`` summed, cell by cell; ``words``: the shares as
    ``cell_words`` loaded them, where a caller has them (None: loaded here). The 16-bit counts add within their words
    (the whole sample's count in any cell is at most NS < 2**16, so no count carries into the next), and the sum is
    exact in any order."""
    if words is None:
        words = cell_words(cells_ptr, SF, NG, BLOCK_F, True)
    summed = tl.sum(words, axis=0)
    counts = (summed[:, None] >> (16 * tl.arange(0, 4))[None, :].to(tl.int64)) & 65535
    return tl.reshape(counts, [NG]).to(tl.int32)


@triton.jit
def cell_words(cells_ptr, SF, NG: tl.constexpr, BLOCK_F: tl.constexpr, on):
    """[BLOCK_F, NG / 4] int64 the SF splits' shares of ``store_cells``, as stored (zero past SF, or where not on)."""
    ff = tl.arange(0, BLOCK_F)[:, None]
    # a select, not an and: the interpreter refuses the mask that a scalar's and with a tensor gives
    return tl.load(cells_ptr + ff * (NG // 4) + tl.arange(0, NG // 4)[None, :], mask=tl.where(on, ff < SF, False),
                   other=0)


@triton.jit
def mass_grid(NG: tl.constexpr):
    """[NG] drops from the sample's max of top-p's cells: MASS_SPAN (g / (NG - 1))^2, denser near the max."""
    return grid_drop(tl.arange(0, NG), NG, MASS_SPAN)


@triton.jit
def grid_drop(t, NG: tl.constexpr, SPAN: tl.constexpr = DROP):
    """The drop of grid point t (any shape of int32 t) of NG points over SPAN: SPAN (t / (NG - 1))^2, the same bits
    wherever a grid, a point's compare or a bracket's end asks."""
    return SPAN * (t / (NG - 1)) * (t / (NG - 1))


@triton.jit
def _first_points(sample, o, NG: tl.constexpr, SPAN: tl.constexpr = DROP):
    """Each entry's first grid point at or below it (the smallest g with l / T >= o - SPAN (g / (NG - 1))^2, the
    drop grid's at SPAN = DROP; NG if none), int32: the ceiling of the grid's inverse at o - l / T, moved by one
    where that rounds across a point (the grid's own compare decides). A NaN entry is at no point, as the tally's
    compare counts it."""
    d = o - sample
    # a NaN or negative drop starts from point 0; -inf's infinite drop from past the grid
    est = tl.sqrt(tl.where(d > 0, d, 0.0) / SPAN) * (NG - 1)
    t = tl.ceil(tl.minimum(est, NG)).to(tl.int32)
    return tl.where(_at_point(sample, o, t - 1, NG, SPAN), t - 1,
                    tl.where(_at_point(sample, o, t, NG, SPAN), t,
                             tl.where(sample == sample, tl.minimum(t + 1, NG), NG)))


@triton.jit
def whole_ends(sample, r_lo, r_hi, NG: tl.constexpr):
    """(o, j_lo, j_hi): the sample's max o of l / T and, where o is finite, the first grid point whose count (of
    ``sample``'s entries at or above o - drop_grid(NG)[g], as ``whole_counts`` counts) reaches r_lo (NG if none)
    and the last whose count is at most r_hi (-1 if none), which is what a count bracket takes from the counts;
    found by counting at 4 points a step instead of counting at every point (``_crossed``). The max alone is at
    point 0, so below r_hi = 1 no point is at most r_hi and that end takes no steps."""
    o = tl.max(sample, axis=0)
    j_lo = tl.full([], NG, tl.int32)
    j_hi = tl.full([], -1, tl.int32)
    if (o > float("-inf")) & (o < float("inf")):
        j_lo = _crossed(sample, o, r_lo, False, NG)
        if r_hi >= 1.0:
            j_hi = _crossed(sample, o, r_hi, True, NG) - 1
    return o, j_lo, j_hi


@triton.jit
def _crossed(sample, o, r, AT_MOST: tl.constexpr, NG: tl.constexpr):
    """How many grid points g < NG have count(g) < r (AT_MOST: count(g) <= r): the count rises with g, so those
    points are a prefix, found 2 bits a step by the count at 4 points past what is known (a point past the grid
    ends the prefix)."""
    w = 1
    while w * 4 < NG:       # unrolled: NG is a power of 2
        w = w * 4
    known = tl.zeros([], tl.int32)
    i = tl.arange(0, 4) + 1
    while w > 0:
        p = known + i * w - 1
        count = tl.sum(_at_point(sample[None, :], o, p[:, None], NG).to(tl.int32), axis=1)
        if AT_MOST:
            inside = (p < NG) & (count <= r)
        else:
            inside = (p < NG) & (count < r)
        known += w * tl.sum(inside.to(tl.int32), axis=0)
        w = w // 4
    return known


@triton.jit
def _at_point(x, o, t, NG: tl.constexpr, SPAN: tl.constexpr = DROP):
    """Whether x is at or above grid point t's o - drop (``drop_grid``'s, or at SPAN ``mass_grid``'s, bit for bit);
    no point outside [0, NG)."""
    return (t >= 0) & (t < NG) & (x >= o - grid_drop(t, NG, SPAN))


@triton.jit
def _sample_at(i, V, NS: tl.constexpr, CH: tl.constexpr):
    """The row positions of sample entries i: NS / CH chunks of CH logits spread evenly from its start to its end,
    chunk c at c (V - CH) // (NS / CH - 1)."""
    # in int32, with no product past V: c (V - CH) = c (q (NS / CH - 1) + r), q and r the division's quotient and
    # remainder (an int64 division an entry costs a whole sample hundreds of instructions)
    q = (V - CH) // (NS // CH - 1)
    r = (V - CH) % (NS // CH - 1)
    c = i // CH
    return c * q + (c * r) // (NS // CH - 1) + i % CH


@triton.jit
def sample_run(row_ptr, V, cand, inv_t, m, MASS: tl.constexpr, NS: tl.constexpr, CH: tl.constexpr,
                NG: tl.constexpr, BLOCK_R: tl.constexpr, first, every):
    """(count, sum of e, sum of e^2) of the sample's tiles first, first + every, ... (BLOCK_R entries a tile) with
    l / T >= cand; the sums are zero unless MASS (top-k's bracket counts alone). The tallies are [NG, BLOCK_R],
    candidates across each thread's registers and samples across threads: a sample's e and e^2 are computed once
    and stay in the thread that compares them (samples across registers would move each through shared memory
    and square it once a candidate)."""
    cnt = tl.zeros([NG, BLOCK_R], tl.float32)
    s1 = tl.zeros([NG, BLOCK_R], tl.float32)
    s2 = tl.zeros([NG, BLOCK_R], tl.float32)
    step = every * BLOCK_R
    # the loads run two tiles ahead of the tallies, as in ``sweep``
    ahead1 = sample_tile(row_ptr, V, first * BLOCK_R, inv_t, NS, CH, BLOCK_R)
    ahead2 = sample_tile(row_ptr, V, first * BLOCK_R + step, inv_t, NS, CH, BLOCK_R)
    for start in range(first * BLOCK_R, NS, step):
        x = ahead1
        ahead1 = ahead2
        ahead2 = sample_tile(row_ptr, V, start + 2 * step, inv_t, NS, CH, BLOCK_R)
        # a compare to 1.0 or 0.0 and a multiply-add a sum: the same sums as a select and an add, in fewer
        # instructions; a NaN logit compares false, and its e is 0 since 0 * NaN would be NaN
        ge = (x[None, :] >= cand[:, None]).to(tl.float32)
        cnt += ge
        if MASS:
            e = tl.where(x == x, tl.exp(x - m), 0.0)
            s1 += ge * e[None, :]
            s2 += ge * (e * e)[None, :]
    return tl.sum(cnt, axis=1), tl.sum(s1, axis=1), tl.sum(s2, axis=1)


@triton.jit
def bits(x):
    """float32 -> its bits in an int64 word of the work space."""
    return x.to(tl.int32, bitcast=True).to(tl.int64)


@triton.jit
def floats(w):
    """``bits``' int64 words -> float32."""
    return w.to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def drop_grid(NG: tl.constexpr):
    """[NG] drops from the row's max of the bracket's first round: DROP (g / (NG - 1))^2, denser near the max."""
    return grid_drop(tl.arange(0, NG), NG)


@triton.jit
def store_share(row_ptr, V, cand, inv_t, m, MASS: tl.constexpr, NS: tl.constexpr, CH: tl.constexpr, NG: tl.constexpr,
                BLOCK_R: tl.constexpr, share_ptr, split, SF):
    """``sample_run`` of split ``split``'s tiles of the sample, stored at share_ptr + split 3 NG as [3, NG] words."""
    c, t1, t2 = sample_run(row_ptr, V, cand, inv_t, m, MASS, NS, CH, NG, BLOCK_R, split, SF)
    mine = share_ptr + split * (3 * NG) + tl.arange(0, NG)
    tl.store(mine, bits(c))
    tl.store(mine + NG, bits(t1))
    tl.store(mine + 2 * NG, bits(t2))
