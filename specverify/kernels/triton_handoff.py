"""Rendezvous of a row's splits inside the one-launch cut (``triton_cut_kernel``'s STAGE 3), without a grid-wide
barrier. A call of a few rows costs its host more a launch than the work costs the GPU, so the one launch computes
in one program per split what a launch before it would, and hands the splits' results between them:

- with PASS1, pass 1: its splits are pass 1's (the same chunks), and each program computes its split's pass-1
  partials (``triton_chain.plain_pass1``) and waits for the row's other splits before the cut reads the row's
  norms (a live row's record holds them, filtered or not);
- with SHARED, the sample bracket's two rounds (``triton_bracket``): each split tallies its share of the sample,
  and the row's bracket is the shares' sum.

``@triton.jit`` functions on one program (b, j, split):

    handoff_word(tickets_ptr, NR, rid, which) -> row rid's int32 word ``which`` (0: pass 1, 1 and 2: the bracket's
                         rounds): bit s set once split s's part is published (at most 32 splits), 0 between calls
    publish(word_ptr, split, full, own, patience) -> publishes ``split``'s part, then the next split this program
                         computes: one still unpublished after the publishing atomic's answer and at most
                         ``patience`` polls, or -1 once every split is published
    pass1_handoff(...)   this split's pass-1 partials, published; on return, in a live row, every split's of
                         the row are stored and visible to the whole program
    (the row's last program, by the cut's ticket, sets the words back to 0)

The protocol, for any part: a program computes its own split's part, publishes it, and polls the row's word at
most SPIN times. A split still unpublished then (its program not placed on an SM yet, or the interpreter, which
runs programs one by one) it computes itself, by the same call, so the part is the same bits whoever writes it,
and the program that owns the split writes those bits again when it runs. So no program waits on one that is
not running, whatever order the GPU places them in: there is no grid-wide barrier to deadlock. Every program of a
row publishes before it takes the cut's ticket, so the last one's reset comes after every write of the call.

The word is read by scalar atomics, which one thread performs and the program shares: a tensor of flags loaded
by every warp on its own gives warps that disagree on what is published while it changes, and so on the split
to take over (the first form of this, which racecheck and a launch failure showed).
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_chain import plain_pass1
from specverify.kernels.triton_cut import stamp
from specverify.kernels.triton_sample import sample_tile, store_cells, whole_counts, whole_ends, whole_sample


@triton.jit
def handoff_word(tickets_ptr, NR, rid, which):
    """Row rid's published-splits word ``which`` in the one-launch plan's tickets ([2 NR] before the first;
    ``triton_filter``)."""
    return tickets_ptr + (2 + which) * NR + rid


@triton.jit
def publish(word_ptr, split, full, own, patience):
    """Publishes ``split``'s part of the row (its bit in the word at word_ptr; ``full``: every split's bits), then
    returns the next split for program ``own`` to compute: the first still unpublished after the publishing
    atomic's answer and at most ``patience`` polls, or -1 once all are published."""
    return _unpublished(word_ptr, full, own, patience, _announce(word_ptr, split))


@triton.jit
def _announce(word_ptr, split):
    """Sets ``split``'s bit in the word at word_ptr; returns the bits set, as the publishing atomic saw them and
    with its own."""
    # every thread's stores are issued before the release that publishes them
    tl.debug_barrier()
    bit = tl.full([], 1, tl.int64) << split.to(tl.int64)
    # its answer is the first look: where it holds every bit, the acquire synchronised with every split's release,
    # and the split that publishes last goes on without a poll's round trip
    return (tl.atomic_or(word_ptr, bit.to(tl.int32), sem="acq_rel").to(tl.int64) & 4294967295) | bit


@triton.jit
def pass1_handoff(logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr, V, K1, S1, n_part, ints_at,
                  stats_at, chunk, word_ptr, k_b, SPIN: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_B: tl.constexpr,
                  stamps=None, STAMPS: tl.constexpr = False, AHEAD: tl.constexpr = False, sample=None,
                  NG: tl.constexpr = 2, WHOLE: tl.constexpr = 0, NS: tl.constexpr = 2, CH: tl.constexpr = 1,
                  MASS_NG: tl.constexpr = 0, CELL_TILE: tl.constexpr = 2):
    """Pass 1's partials of this program's split of row (b, j) (chunk entries a split, as pass 1 plans them);
    in a live row (j <= k_b), published at word_ptr, and then every split's of the row, computing any still
    unpublished after SPIN polls. STAMPS: stamp 15 once its own split's are computed (``triton_cut.stamp``);
    AHEAD: its loads run ahead of its sums (``triton_chain._split_stats``), the same partials. ``sample``: the
    (row_ptr, V, inv_t, wanted) of ``triton_sample.whole_sample``, then a count bracket's r_lo and r_hi, by_mass and
    cells_ptr, where wanted holds for the row's bracket from its whole sample. Returns (whole, o):
    - WHOLE (a count row): the sample, loaded after its own split's partials and taken between its own publish and
      the polls, while the row's other splits finish theirs; whole is, by WHOLE, 1: (o, counts at NG points) of
      ``triton_sample.whole_counts``, else o = -inf and zero counts; 2: (o, j_lo, j_hi) of
      ``triton_sample.whole_ends``, else (-inf, NG, -1);
    - MASS_NG (a by_mass row, top-p's): the sample's max o (else -inf), loaded after its own split's partials, and
      each split's share of the sample's MASS_NG cells (``triton_sample.store_cells``, CELL_TILE entries a tile)
      stored at cells_ptr by whichever program computes the split's partials, before it publishes them, so that the
      row's cells are all in once its partials are (``triton_sample.summed_cells``)."""
    own = tl.program_id(2)
    waits = tl.program_id(1) <= k_b     # pass 1 stores nothing for a row past k_b
    full = (tl.full([], 1, tl.int64) << S1.to(tl.int64)) - 1
    split = own
    o = tl.full([], float("-inf"), tl.float32)
    o_mass = o
    cnt = tl.zeros([NG], tl.float32)
    j_lo = tl.full([], NG, tl.int32)
    j_hi = tl.full([], -1, tl.int32)
    # its own split first, then those it takes over, one a turn
    for turn in range(0, S1):
        if split >= 0:
            # one call site: whichever program computes a split runs these very instructions
            plain_pass1(logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr, V, K1, S1, n_part,
                        ints_at, stats_at, chunk, split, BLOCK_V, BLOCK_B, AHEAD)
            if STAMPS:
                if turn == 0:
                    stamp(stamps, 15, split)
            if waits:
                if WHOLE + MASS_NG > 0:
                    row_ptr, n, inv_t, wanted, r_lo, r_hi, by_mass, cells_ptr = sample
                    if MASS_NG > 0:
                        if wanted & by_mass:
                            # the split's first tile of its share of the cells, in flight with the whole sample's
                            # loads; its addresses wait for pass 1 as the sample's do below (split - own is 0 on the
                            # first turn, the only one where it is added)
                            share = sample_tile(row_ptr, n + tl.where(turn == 0, split - own, 0), split * CELL_TILE,
                                                inv_t, NS, CH, CELL_TILE)
                            if turn == 0:
                                # split - own is 0 here, but not to the compiler, which would compute the sample's
                                # addresses before pass 1 and hold their registers through it
                                o_mass = tl.max(whole_sample(row_ptr, n + (split - own), inv_t, wanted, NS, CH), axis=0)
                            if (o_mass > float("-inf")) & (o_mass < float("inf")):
                                store_cells(row_ptr, n, inv_t, o_mass, split, S1, cells_ptr, NS, CH, MASS_NG,
                                            CELL_TILE, share)
                    # a count round comes between its own publish and the polls: the split that publishes last
                    # counts once, and the others count while they would wait
                    if WHOLE > 0:
                        if (turn == 0) & wanted & ~by_mass:
                            # loaded before the release, so that its loads run while the partials' stores drain
                            values = whole_sample(row_ptr, n + (split - own), inv_t, wanted, NS, CH)
                            seen = _announce(word_ptr, split)
                            if WHOLE == 2:
                                o, j_lo, j_hi = whole_ends(values, r_lo, r_hi, NG)
                            else:
                                o, cnt = whole_counts(values, NG)
                        else:
                            seen = _announce(word_ptr, split)
                    else:
                        seen = _announce(word_ptr, split)
                else:
                    seen = _announce(word_ptr, split)
                # once it has taken a split over, it waits for none
                split = _unpublished(word_ptr, full, own, tl.where(turn == 0, SPIN, 0), seen)
            else:
                split = tl.full([], -1, tl.int32)
    # the acquire that saw every bit synchronised this program's thread with every split's release; the barrier
    # passes that on to the others before they read the partials (and the cells)
    tl.debug_barrier()
    if WHOLE == 2:
        return (o, j_lo, j_hi), o_mass
    else:
        return (o, cnt), o_mass


@triton.jit
def _unpublished(word_ptr, full, own, patience, seen):
    """A split of the row still unpublished after at most ``patience`` polls past ``seen``, the bits the program
    saw last (the first after ``own``, cyclically, so that programs taking splits over spread out), or -1 when all
    are published."""
    polls = 0
    while (seen != full) & (polls < patience):
        seen = _published(word_ptr)
        polls += 1
    missing = full & ~seen
    after = missing & ~((tl.full([], 2, tl.int64) << own.to(tl.int64)) - 1)
    pick = tl.where(after != 0, after, missing)
    # the lowest set bit's index, from its float32's exponent (exact: a power of two below 2**32)
    low = (pick & -pick).to(tl.float32)
    at = (low.to(tl.int32, bitcast=True) >> 23) - 127
    return tl.where(missing != 0, at, -1)


@triton.jit
def _published(word_ptr):
    """The row's published bits (int64, 0 .. 2**32 - 1), read by an acquiring atomic."""
    return tl.atomic_or(word_ptr, 0, sem="acquire").to(tl.int64) & 4294967295
