"""The gather of the target-filter cut's read (``triton_read.sweep``): the tokens of a split that lie in the
bracket go to its ``region`` slots of the cut's work space (``triton_cut_kernel``'s layout), and the record launch
moves every split's down to follow each other (``compact``). ``@triton.jit`` functions on one program's tiles:

    lane_groups(region, BLOCK_V, NW)  -> each entry's group (its warp) and the slots a group holds
    gather(...)                       one tile's tokens to their group's slots: by warp ballot (NW > 0) or by
                                      an atomic count (NW = 0, one group a split); with NW = LANES, only
                                      counted a lane
    gather_lanes(...)                 the lane gather's second pass: each lane's tokens from its place on
    order_key(v) / logit_tile(...)    a float32's order key, which a gathered token carries; a tile of logits
    gather_start / gather_end         the atomic count zeroed before; the groups' counts written after
    claim(...) / pack(...)            in the one-launch plan, a split's place in its row's list, and its tokens
                                      copied there
    compact(...)                      a row's gathered tokens, split by split and group by group, moved together

Per (row, split) the work space holds NPART words: six partial sums (0-2, 4-6), the number of groups the
split's gather used (3), and from word 7 each group's count.
"""

from __future__ import annotations

import triton
import triton.language as tl

NPART = tl.constexpr(15)    # work-space words per (row, split), as above
GROUPS = tl.constexpr(8)    # the most lane groups a split's gather has
# the NW of a gather of one group whose read counts each lane's tokens, and whose second pass stores them from the
# lane's place, the count of the lanes before it (``gather_lanes``)
LANES = tl.constexpr(-2)
# ``compact`` moves a ballot split's groups in one tile where each holds at most this, not one dependent load
# and store a group
COMPACT_COLS = tl.constexpr(128)


@triton.jit
def _probe():
    pass


# inline assembly: the GPU's warp ballot (``_ballot``) and ex2 without subnormal results
# (``triton_cut.exp_normal``); the interpreter has none
INLINE_ASM = tl.constexpr(type(_probe).__name__ != "InterpretedFunction")


def ballot_warps(block_v: int, num_warps: int) -> int:
    """The NW of ``gather`` for a program of num_warps gathering block_v-entry tiles: num_warps where it places
    tokens by ballot (every thread holds an entry of a tile, none twice), else 0 (the atomic gather)."""
    return num_warps if block_v >= 32 * num_warps else 0


def ballot_meta(meta: dict) -> dict:
    """A read's launch meta with its gather's NW for its two tiles (NW_READ, NW_COUNT) at its warps."""
    return dict(meta, NW_READ=ballot_warps(meta["BLOCK_READ"], meta["num_warps"]),
                NW_COUNT=ballot_warps(meta["BLOCK_COUNT"], meta["num_warps"]))


def _ballot_asm(lanes: int) -> tuple:
    """PTX of ``_ballot`` for a thread holding ``lanes`` entries: operands $0.. before (lanes), total (lanes),
    inside (lanes). A ballot a register: an entry's slot is the warp's count of the registers before it plus
    the lower lanes' of its own."""
    before, total, inside = 0, lanes, 2 * lanes
    asm = ["{", f".reg .pred p<{lanes}>;", f".reg .b32 b<{lanes}>, lt, t, run;", "mov.u32 lt, %lanemask_lt;",
           "mov.u32 run, 0;"]
    for j in range(lanes):
        asm += [f"setp.ne.b32 p{j}, ${inside + j}, 0;", f"vote.sync.ballot.b32 b{j}, p{j}, -1;",
                f"and.b32 t, b{j}, lt;", "popc.b32 t, t;", f"add.s32 ${before + j}, run, t;", f"popc.b32 t, b{j};",
                "add.s32 run, run, t;"]
    asm += [f"mov.u32 ${total + j}, run;" for j in range(lanes)] + ["}"]
    return tl.constexpr(" ".join(asm)), tl.constexpr(",".join(["=r"] * (2 * lanes) + ["r"] * lanes))


_BALLOT1, _BALLOT1_C = _ballot_asm(1)
_BALLOT2, _BALLOT2_C = _ballot_asm(2)
_BALLOT4, _BALLOT4_C = _ballot_asm(4)
_BALLOT8, _BALLOT8_C = _ballot_asm(8)


@triton.jit
def _ballot(inside, BLOCK_V: tl.constexpr, NW: tl.constexpr):
    """(before, total) [BLOCK_V] int32 for a tile held by NW warps, BLOCK_V / (32 NW) entries a thread: the
    tokens ``inside`` of the entry's warp placed before it, and all of that warp's. On the GPU a warp ballot
    (no memory), in the interpreter the same for warps of consecutive entries (``lane_groups``)."""
    flag = inside.to(tl.int32)
    if INLINE_ASM:
        tl.static_assert(BLOCK_V <= 256 * NW, "a ballot of 1, 2, 4 or 8 entries a thread")
        if BLOCK_V == 32 * NW:
            before, total = tl.inline_asm_elementwise(_BALLOT1, _BALLOT1_C, [flag], dtype=(tl.int32, tl.int32),
                                                      is_pure=False, pack=1)
        elif BLOCK_V == 64 * NW:
            before, total = tl.inline_asm_elementwise(_BALLOT2, _BALLOT2_C, [flag], dtype=(tl.int32, tl.int32),
                                                      is_pure=False, pack=2)
        elif BLOCK_V == 128 * NW:
            before, total = tl.inline_asm_elementwise(_BALLOT4, _BALLOT4_C, [flag], dtype=(tl.int32, tl.int32),
                                                      is_pure=False, pack=4)
        else:
            before, total = tl.inline_asm_elementwise(_BALLOT8, _BALLOT8_C, [flag], dtype=(tl.int32, tl.int32),
                                                      is_pure=False, pack=8)
    else:
        group = tl.reshape(flag, [NW, BLOCK_V // NW])
        before = tl.reshape(tl.cumsum(group, axis=1) - group, [BLOCK_V])
        total = tl.reshape(tl.broadcast_to(tl.sum(group, axis=1)[:, None], [NW, BLOCK_V // NW]), [BLOCK_V])
    return before, total


@triton.jit
def lane_groups(region, BLOCK_V: tl.constexpr, NW: tl.constexpr):
    """(group [BLOCK_V] int32, slots a group) of a gather of BLOCK_V-entry tiles by NW warps into ``region``
    slots: one group a warp (the warp holding each entry: on the GPU its thread's, in the interpreter entries
    of BLOCK_V / NW in a row), or one group where NW is 0 (``ballot_warps``)."""
    if NW > 0:
        if INLINE_ASM:
            group = tl.inline_asm_elementwise("mov.u32 $0, %tid.x; shr.u32 $0, $0, 5;", "=r,r",
                                              [tl.zeros([BLOCK_V], tl.int32)], dtype=tl.int32, is_pure=True, pack=1)
        else:
            group = tl.arange(0, BLOCK_V) // (BLOCK_V // NW)
        return group, region // NW
    else:
        return tl.zeros([BLOCK_V], tl.int32), region


@triton.jit
def gather(key, offs, inside, group_ptr, count, sub, count_ptr, BLOCK_V: tl.constexpr, NW: tl.constexpr):
    """Store the tokens ``inside`` [BLOCK_V] (order keys ``key``, indices ``offs``) as int64 (key << 32 |
    2**32 - 1 - index) to their lane group's slots, group_ptr [BLOCK_V] the first of each entry's group
    (``lane_groups``), count [BLOCK_V] int32 its tokens so far; returns count with this tile's. Those past a
    group's ``sub`` slots are counted, not stored. A token's slot is its warp's ballot (``_ballot``): no atomic,
    whose round trip to memory each tile would wait on. With one group (NW = 0, ``ballot_warps``), an atomic
    add on count_ptr (int32, ``count_word``, zero before: ``gather_start``) hands the slot; with NW = LANES,
    nothing stored, each lane's count kept for ``gather_lanes``."""
    if NW == LANES:
        return count + inside.to(tl.int32)
    packed = _packed(key, offs)
    if NW > 0:
        before, total = _ballot(inside, BLOCK_V, NW)
        at = count + before
        count += total
    else:
        at = tl.atomic_add(count_ptr + tl.zeros([BLOCK_V], tl.int32), 1, mask=inside, sem="relaxed")
    tl.store(group_ptr + at, packed, mask=inside & (at < sub))
    return count


@triton.jit
def _packed(key, offs):
    """A gathered token's int64 word (key << 32 | 2**32 - 1 - index)."""
    # 2**32 - 1 - index as ~index in the low half: one instruction, where int64 subtraction takes three
    return (key.to(tl.int64) << 32) | (~offs).to(tl.uint32).to(tl.int64)


@triton.jit
def order_key(v):
    """float32 -> int32 with the order of the floats (-0.0 and +0.0 share a key, as they tie)."""
    bits = tl.where(v == 0.0, 0.0, v).to(tl.int32, bitcast=True)
    return tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)


@triton.jit
def gather_lanes(row_ptr, lo_v, hi_v, lo32, hi32, count, buf_ptr, sub, BLOCK_V: tl.constexpr):
    """The lane gather's second pass (NW = LANES) over the logits [lo_v, hi_v) that the read counted in ``count``
    [BLOCK_V] a lane: each lane stores its tokens with keys in [lo32, hi32) from its place on, the count of the
    lanes before it (one scan a read), at most ``sub`` slots in all. Nothing waits on an atomic's answer, nor on
    the other warps, a tile: the atomic count's wait is most of a read that gathers a token in most tiles."""
    at = tl.cumsum(count, 0) - count
    # the loads run two tiles ahead of the stores, which depend on nothing else
    ahead1 = logit_tile(row_ptr, lo_v, hi_v, BLOCK_V)
    ahead2 = logit_tile(row_ptr, lo_v + BLOCK_V, hi_v, BLOCK_V)
    for start in range(lo_v, hi_v, BLOCK_V):
        offs = start + tl.arange(0, BLOCK_V)
        logit = ahead1
        ahead1 = ahead2
        ahead2 = logit_tile(row_ptr, start + 2 * BLOCK_V, hi_v, BLOCK_V)
        key = order_key(logit)
        inside = (offs < hi_v) & (key >= lo32) & (key < hi32)
        tl.store(buf_ptr + at, _packed(key, offs), mask=inside & (at < sub))
        at += inside.to(tl.int32)


@triton.jit
def keep_slot(slots_ptr, key, offs, inside, count, D: tl.constexpr, BLOCK_V: tl.constexpr):
    """Store a tile's tokens inside (packed as ``gather`` stores them) at their lanes' slots of the lane gather's
    first pass: [D, BLOCK_V] int64 at slots_ptr, a lane's k-th token at slot k of its column (count [BLOCK_V]: each
    lane's tokens before this tile's; past D, none), so that ``gather_slots`` can place them without
    ``gather_lanes``' second read of the row."""
    lane = tl.arange(0, BLOCK_V)
    tl.store(slots_ptr + count * BLOCK_V + lane, _packed(key, offs), mask=inside & (count < D))


@triton.jit
def gather_slots(count, slots_ptr, buf_ptr, sub, D: tl.constexpr, BLOCK_V: tl.constexpr):
    """The lane gather's end where no lane counted more tokens than its D slots hold (``keep_slot``): each lane
    stores its tokens from its place on, the count of the lanes before it, at most ``sub`` slots in all: the slots
    and the order that ``gather_lanes`` gives, from the lanes' slots."""
    # a slot's store and its load may fall to different threads (each op picks its own layout): every store is in
    # before any load
    tl.debug_barrier()
    at = tl.cumsum(count, 0) - count
    lane = tl.arange(0, BLOCK_V)
    for k in tl.static_range(D):
        token = tl.load(slots_ptr + k * BLOCK_V + lane, mask=count > k, other=0)
        tl.store(buf_ptr + at + k, token, mask=(count > k) & (at + k < sub))


@triton.jit
def logit_tile(row_ptr, start, hi_v, BLOCK_V: tl.constexpr):
    """[BLOCK_V] float32 logits from start (-inf at and past hi_v), as the read loads them."""
    offs = start + tl.arange(0, BLOCK_V)
    return tl.load(row_ptr + offs, mask=offs < hi_v, other=float("-inf")).to(tl.float32)


@triton.jit
def count_word(parts_ptr):
    """The atomic gather's int32 count: the low half (little-endian) of its one group's count word, so that
    slots compare and address in int32."""
    return (parts_ptr + 7).to(tl.pointer_type(tl.int32))


@triton.jit
def gather_start(parts_ptr, NW: tl.constexpr):
    """Zero the atomic gather's count word, where ``gather`` takes one (NW = 0), before any thread adds to it."""
    if NW == 0:
        tl.store(parts_ptr + 7, tl.zeros([], tl.int64))
        tl.debug_barrier()


@triton.jit
def gather_end(parts_ptr, group, count, total, NW: tl.constexpr):
    """Write the split's number of lane groups (word 3) and, for ballot groups and the lanes' one, each one's
    count (word 7 on), for ``compact`` and ``claim``; total: the lanes' counts summed (NW = LANES), which the caller
    reduces with its own sums."""
    if NW > 0:
        tl.static_assert(NW <= GROUPS, "at most GROUPS lane groups a split")
        tl.store(parts_ptr + 7 + group, count.to(tl.int64))     # a group's lanes store the same count
        tl.store(parts_ptr + 3, tl.full([], NW, tl.int64))
    else:
        if NW == LANES:     # each lane holds its own
            tl.store(parts_ptr + 7, total.to(tl.int64))
        tl.store(parts_ptr + 3, tl.full([], 1, tl.int64))


@triton.jit
def claim(parts_ptr, region, total_ptr, CAP: tl.constexpr, own=0, OWN: tl.constexpr = False):
    """A split's place in its row's list (its gather's one group: the count at parts_ptr's word 7, or with OWN the
    count ``own`` that the caller holds, as it wrote it there): the int32 total at total_ptr (zero before the row's
    first split) hands out the offset. A split whose group overflowed its ``region`` slots claims CAP + 1, so that
    the total says the list is not whole. Returns (its tokens, at most region; its offset; how many of them to copy
    there: all, or 0 where it overflowed or the list is full)."""
    if OWN:
        n = own.to(tl.int64)
    else:
        tl.debug_barrier()      # every thread's gathered stores and count are in before any thread reads them
        n = tl.load(parts_ptr + 7, cache_modifier=".cg")
    whole = n <= region
    at = tl.atomic_add(total_ptr, tl.where(whole, n, CAP + 1).to(tl.int32), sem="relaxed").to(tl.int64)
    n = tl.minimum(n, region)
    return n, at, tl.where(whole & (at + n <= CAP), n, 0)


@triton.jit
def pack(buf_ptr, parts_ptr, region, dst_ptr, total_ptr, CAP: tl.constexpr, BLOCK_R: tl.constexpr):
    """Copy one split's tokens (from buf_ptr) into its row's list at dst_ptr, after those of the splits that
    claimed their place before it (``claim``)."""
    _, at, copied = claim(parts_ptr, region, total_ptr, CAP)
    for start in range(0, copied, BLOCK_R):
        i = start + tl.arange(0, BLOCK_R)
        tl.store(dst_ptr + at + i, tl.load(buf_ptr + i, mask=i < copied), mask=i < copied)


@triton.jit
def compact(buf_ptr, parts_ptr, n_splits, region, BLOCK_F: tl.constexpr, BLOCK_R: tl.constexpr):
    """Move the gathered tokens of a row's n_splits splits (at most BLOCK_F) down so that they follow each
    other from buf_ptr: split s's ``region`` slots hold its lane groups' (``gather_end``: parts_ptr's words 3
    and 7 on, NPART a split) one after another, region / groups each. Returns how many tokens there are, or
    -1 when a group overflowed."""
    ff = tl.arange(0, BLOCK_F)
    gg = tl.arange(0, GROUPS)
    # every count in one load, not one dependent load a group
    groups = tl.load(parts_ptr + ff * NPART + 3, mask=ff < n_splits, other=1)
    counts = tl.load(parts_ptr + ff[:, None] * NPART + 7 + gg[None, :],
                     mask=(ff[:, None] < n_splits) & (gg[None, :] < groups[:, None]), other=0)
    subs = region // groups
    over = tl.max(tl.max((counts > subs[:, None]).to(tl.int32), axis=1), axis=0)
    cc = tl.arange(0, COMPACT_COLS)
    n = tl.zeros([], tl.int64)
    for s in range(n_splits):
        sub = tl.sum(tl.where(ff == s, subs, 0), axis=0)
        n_groups = tl.sum(tl.where(ff == s, groups, 0), axis=0)
        got = tl.minimum(tl.sum(tl.where(ff[:, None] == s, counts, 0), axis=0), sub)      # [GROUPS]
        if (n_groups > 1) & (tl.max(got, axis=0) <= COMPACT_COLS):
            # a ballot split's groups in one tile: its destination lies below the next split's slots, and
            # can overlap only this split's own, which every thread loads before any stores
            live = cc[None, :] < got[:, None]
            moved = tl.load(buf_ptr + s * region + gg[:, None] * sub + cc[None, :], mask=live)
            tl.debug_barrier()
            tl.store(buf_ptr + n + (tl.cumsum(got, 0) - got)[:, None] + cc[None, :], moved, mask=live)
            n += tl.sum(got, axis=0)
        else:
            for g in range(n_groups):
                got_g = tl.sum(tl.where(gg == g, got, 0), axis=0)
                src = s * region + g * sub
                if src > 0:         # a move down never overwrites a slot of a later group
                    for start in range(0, got_g, BLOCK_R):
                        i = start + tl.arange(0, BLOCK_R)
                        live = i < got_g
                        moved = tl.load(buf_ptr + src + i, mask=live)
                        # a tile's destination can overlap its own source: every thread loads before any stores
                        tl.debug_barrier()
                        tl.store(buf_ptr + n + i, moved, mask=live)
                n += got_g
    tl.debug_barrier()          # what any thread moved is in place before any thread reads it
    return tl.where(over > 0, -1, n)
