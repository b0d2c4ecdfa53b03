"""Pass 1 inside the one-launch cut (``triton_filter``'s STAGE 3 with PASS1): a call of a few rows costs its host
more a launch than pass 1 costs the GPU, so there the one launch's splits are pass 1's (the same chunks), and
each program computes its split's pass-1 partials (``triton_chain._pass1``), publishes them, and waits for the
row's other splits before the cut reads the row's norms (a live row's record holds them, filtered or not). ``@triton.jit`` functions on one
program (b, j, split):

    handoff_flags(tickets_ptr, NR, rid, S1) -> row rid's [S1] int32 flags: 1 where a split's partials are
                         published, all 0 between calls
    pass1_handoff(...)   this split's pass-1 partials, published; on return, where ``waits``, every split's of
                         the row are stored and visible to this program
    handoff_reset(...)   the row's flags back to 0, by its last program (the cut's ticket says which)

A program polls its row's flags at most SPIN times. A split still unpublished then (its program not placed on
an SM yet, or the interpreter, which runs programs one by one) it computes itself, by the same call of
``_pass1``, so the partials are the same bits whoever writes them, and the program that owns the split writes
those bits again when it runs. So no program waits on one that is not running, whatever order the GPU places
them in: there is no grid-wide barrier to deadlock. Every program of a row publishes before it takes the cut's
ticket, so the last one's reset comes after every write of the call.
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_chain import _pass1


@triton.jit
def handoff_flags(tickets_ptr, NR, rid, S1):
    """Row rid's flags in the one-launch plan's tickets ([2 NR] before them; ``triton_filter``)."""
    return tickets_ptr + 2 * NR + rid * S1


@triton.jit
def pass1_handoff(logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr, V, K1, S1, n_part, ints_at,
                  stats_at, chunk, row_flags, waits, SPIN: tl.constexpr, BLOCK_V: tl.constexpr,
                  BLOCK_B: tl.constexpr, BLOCK_S: tl.constexpr):
    """Pass 1's partials of this program's split of row (b, j) (chunk entries a split, as pass 1 plans them);
    where ``waits``, published at row_flags, and then every split's of the row, computing any still unpublished
    after SPIN polls."""
    own = tl.program_id(2)
    ss = tl.arange(0, BLOCK_S)
    split = own
    patience = tl.full([], SPIN, tl.int32)
    while split >= 0:
        # one call site: whichever program computes a split runs these very instructions
        _pass1(logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, scratch_ptr, V, K1, S1, n_part, ints_at,
               stats_at, chunk, split, scratch_ptr, 0, False, 1, BLOCK_V, BLOCK_B, num_draft_ptr, num_draft_ptr,
               num_draft_ptr, num_draft_ptr, False, False, False, False)
        if waits:
            # every thread's stores are issued before the release that publishes them
            tl.debug_barrier()
            tl.atomic_xchg(row_flags + split, 1, sem="release")
            split = _unpublished(row_flags, ss, S1, own, patience)
        else:
            split = tl.full([], -1, tl.int32)
        patience = tl.zeros([], tl.int32)       # once it has taken a split over, it waits for none
    # synchronise with every split's release before any thread reads the partials
    tl.atomic_add(row_flags + ss, 0, mask=ss < tl.where(waits, S1, 0), sem="acquire")
    tl.debug_barrier()


@triton.jit
def handoff_reset(row_flags, S1, BLOCK_S: tl.constexpr):
    ss = tl.arange(0, BLOCK_S)
    tl.store(row_flags + ss, 0, mask=ss < S1)


@triton.jit
def _unpublished(row_flags, ss, S1, own, patience):
    """A split of the row still unpublished after at most patience + 1 polls (the first after ``own``, cyclically,
    so that programs taking splits over spread out), or -1 when all are published."""
    split = _first_unpublished(row_flags, ss, S1, own)
    polls = 0
    while (split >= 0) & (polls < patience):
        split = _first_unpublished(row_flags, ss, S1, own)
        polls += 1
    return split


@triton.jit
def _first_unpublished(row_flags, ss, S1, own):
    flags = tl.load(row_flags + ss, mask=ss < S1, other=1, volatile=True)
    after = (ss - own + S1) % S1
    first = tl.min(tl.where(flags == 0, after, S1), axis=0)
    return tl.where(first < S1, (first + own) % S1, -1)
