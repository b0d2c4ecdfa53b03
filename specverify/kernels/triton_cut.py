"""Device functions of the target-filter cut (SPEC 3.4) that ``triton_cut_kernel``'s kernel calls: the per-token
test pass 2 applies (``kept``), the row's settings and norms, and the work space's layout (the sample bracket is
``triton_bracket``'s, the read ``triton_read``'s, the search over the tokens ``triton_search``'s). All are
``@triton.jit`` functions on one row (B requests, request b's row j at ``row_ptr``, V entries; ``m`` the row's max
of l / T, ``inv_t`` = 1 / T):

    order_key(v) / key_value(key)    float32 <-> int32 keys ordered as the floats (-0.0 is +0.0)
    kept(l, idx, cut_val, cut_idx, floor, inv_t, m) -> (keep, e = exp(l / T - m))
    cut_request(...)  -> this program's row of its request and the request's filter settings
    cut_row_norms(...) -> the row's max of l / T, its sum of exp(l / T - max) and the key above its largest
    bounds(...)       -> a row's bracket as stage 0 left it in the work space
    unpack(...)       (valid, key, index, e) of gathered slots; decode(...) the same of loaded ones

The one read of the row that gathers the bracket's tokens is ``triton_read``'s (its gather ``triton_gather``'s).

Masses are fixed point: ``MASS_ONE`` per unit of e, so sums are exact integers whatever the order.
"""

from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton_gather import INLINE_ASM, NPART, order_key
from specverify.kernels.triton_math import request_offset, row_norms, scratch_views

MASS_ONE = tl.constexpr(17592186044416.0)   # 2**44: a row of 2**18 tokens sums below 2**62
KMIN = tl.constexpr(-2147483648)            # at or below every order key
KMAX = tl.constexpr(2147483648)             # above every order key
NONE = tl.constexpr(-9223372036854775808)   # an empty slot of the gathered tokens
DROP = tl.constexpr(104.0)                  # exp(-104) is below float32's smallest number: no mass deeper
DEFER = tl.constexpr(2147483649)            # stage 4's hi of a row it leaves to stage 0: no bracket's key


@triton.jit
def key_value(key):
    """The float32 of an int32 order key."""
    return tl.where(key >= 0, key, key ^ 0x7FFFFFFF).to(tl.float32, bitcast=True)


@triton.jit
def kept(logit, idx, cut_val, cut_idx, floor, inv_t, m):
    """(keep, e): the record's per-token test and e = exp(l / T - m), the very expression pass 2 uses."""
    e = tl.exp(logit * inv_t - m)
    keep = ((logit > cut_val) | ((logit == cut_val) & (idx <= cut_idx))) & (e >= floor)
    return keep, e


@triton.jit
def exp_normal(x):
    """tl.exp(x) where it is at least 2**-126 (x >= -87.3), else 0, for a value that is only weighed
    (``weight`` truncates anything below 2**-44 to 0): on the GPU one ex2 instruction without its handling
    of subnormal results, the three instructions of tl.exp's lowering that only those need. Bit for bit
    tl.exp's exponent of x * log2(e) elsewhere. The interpreter takes tl.exp."""
    if INLINE_ASM:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * 1.4426950408889634],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:
        return tl.exp(x)


@triton.jit
def weight(e):
    return (e * MASS_ONE).to(tl.int64)


@triton.jit
def pick(values, at, pos):
    return tl.sum(tl.where(pos == at, values, 0), axis=0)


@triton.jit
def add2(a1, b1, a2, b2):
    """The combine of a reduction or scan of two operands that adds each."""
    return a1 + a2, b1 + b2


@triton.jit
def row_settings(b, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, V, HAS_K: tl.constexpr, HAS_P: tl.constexpr,
                 HAS_M: tl.constexpr):
    """Request b's filters: (on: random with a filter on, k, k_on, top_p, p_on, floor, 1 / T)."""
    temperature = tl.load(temperature_ptr + b).to(tl.float32)
    k = tl.zeros([], tl.int64)
    top_p = tl.full([], 1.0, tl.float64)
    floor = tl.zeros([], tl.float32)
    if HAS_K:
        k = tl.load(top_k_ptr + b).to(tl.int64)
    if HAS_P:
        top_p = tl.load(top_p_ptr + b).to(tl.float64)
    if HAS_M:
        floor = tl.load(min_p_ptr + b).to(tl.float32)
    k_on = (k > 0) & (k < V)
    p_on = top_p < 1.0
    on = (k_on | p_on | (floor > 0.0)) & (temperature != 0.0)
    return on, k, k_on, top_p, p_on, floor, 1.0 / tl.where(temperature == 0.0, 1.0, temperature)


@triton.jit
def cut_request(logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, top_k_ptr, top_p_ptr, min_p_ptr, k_b, V, K1,
             HAS_K: tl.constexpr, HAS_P: tl.constexpr, HAS_M: tl.constexpr, BLOCK_B: tl.constexpr):
    """This program's row (b, j) of request b's k_b + 1: (live: j <= k_b, on: a random request with a filter
    on, row_ptr, its record index b K1 + j, k, k_on, top_p, p_on, floor, 1 / T)."""
    b = tl.program_id(0)
    j = tl.program_id(1)
    on, k, k_on, top_p, p_on, floor, inv_t = row_settings(b, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, V,
                                                          HAS_K, HAS_P, HAS_M)
    row_ptr = logits_ptr + (request_offset(num_draft_ptr, b, BLOCK_B) + b + j) * stride_logits
    return j <= k_b, on, row_ptr, b * K1 + j, k, k_on, top_p, p_on, floor, inv_t


@triton.jit
def cut_row_norms(scratch_ptr, k_b, K1, S1, n_part, ints_at, stats_at, BLOCK_K: tl.constexpr, BLOCK_S: tl.constexpr):
    """This program's row (b, j)'s max of l / T and its sum of exp(l / T - max), and the order key just above
    the row's largest logit, all three from pass 1's partials of that row alone (in the one launch that is pass
    1 too, the request's other rows may still be computing theirs)."""
    slots_ptr, part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, ticket_ptr, part_mass_ptr = \
        scratch_views(scratch_ptr, n_part, ints_at, stats_at)
    rid = tl.program_id(0) * K1 + tl.program_id(1)
    live = tl.program_id(1) <= k_b      # pass 1 writes no partials for a row past k_b: nothing to read there
    jj = tl.arange(0, BLOCK_K)
    # row_norms of "request" rid with one row (0 if live, none past k_b): the partials at rid S1 onwards
    row_max, row_sum, row_amax = row_norms(part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, rid,
                                           tl.where(live, 0, -1), 1, S1, BLOCK_K, BLOCK_S)
    ss = tl.arange(0, BLOCK_S)
    top = tl.max(tl.load(part_amax_val_ptr + rid * S1 + ss, mask=ss < tl.where(live, S1, 0), other=float("-inf")),
                 axis=0)
    return pick(row_max, 0, jj), pick(row_sum, 0, jj), order_key(top).to(tl.int64) + 1


@triton.jit
def unweighed(k_on, hi, floor):
    """Whether a filtered row's read needs no mass: top-k on, nothing above its bracket [lo, hi), min-p off.
    Its cut, Z' and top-p's target (a share of what top-k keeps) come from the gathered tokens alone, so its
    read is keys, counts and the gather, and the filtered plan's pass 1 does it (``triton_chain``)."""
    return k_on & (hi == KMAX) & (floor <= 0.0)


@triton.jit
def work_gathered(work_ptr, NR, rid):
    """Row rid's word saying whether pass 1 gathers it, in the cut's work space (``triton_cut_kernel``'s layout, NR
    rows)."""
    return work_ptr + 2 * NR + rid


@triton.jit
def work_parts(work_ptr, NR, rid, SF, split):
    """Row rid's split's NPART partial sums in the cut's work space."""
    return work_ptr + 3 * NR + (rid * SF + split) * NPART


@triton.jit
def work_tokens(work_ptr, NR, rid, SF, CAP: tl.constexpr):
    """Row rid's CAP gathered tokens in the cut's work space."""
    return work_ptr + NR * (3 + SF * NPART) + rid * CAP


@triton.jit
def packed_tokens(work_ptr, NR, rid, SF, CAP: tl.constexpr, SCRATCH: tl.constexpr):
    """Row rid's CAP-token list in the cut's work space, after every row's search scratch: the one-launch plan's
    splits put their gathered tokens there one after another."""
    return work_ptr + _packed_rows(NR, SF, CAP, SCRATCH) + rid * CAP


@triton.jit
def _packed_rows(NR, SF, CAP: tl.constexpr, SCRATCH: tl.constexpr):
    """The words before the rows' packed lists (``packed_tokens``) in the work space."""
    return NR * (3 + SF * NPART + CAP + SCRATCH)


@triton.jit
def split_tallies(work_ptr, NR, rid, SF, split, CAP: tl.constexpr, SCRATCH: tl.constexpr, NT: tl.constexpr):
    """Row rid's split's tallies in the one-launch plan's work space, after the packed lists: [NT] counts, then
    [NT] masses, of its gathered tokens at or above each of ``triton_tally.tally_keys``."""
    return work_ptr + NR * (3 + SF * NPART + 2 * CAP + SCRATCH) + (rid * SF + split) * (2 * NT)


@triton.jit
def bracket_shares(work_ptr, NR, rid, SF, CAP: tl.constexpr, SCRATCH: tl.constexpr, NT: tl.constexpr,
                   NG: tl.constexpr):
    """Row rid's shares of its sample bracket's tallies in the one-launch plan's work space, after its splits'
    tallies: room for [2 rounds, SF, 3, G] words at any grid G <= NG, or [SF, 3, G] of one round at G <= 2 NG
    (``triton_bracket``'s SHARED tally)."""
    return work_ptr + NR * (3 + SF * NPART + 2 * CAP + SCRATCH + SF * 2 * NT) + rid * SF * (6 * NG)


@triton.jit
def bucket_slots(work_ptr, NR, rid, SF, CAP: tl.constexpr, SCRATCH: tl.constexpr, NT: tl.constexpr, NG: tl.constexpr,
                 SLOTS: tl.constexpr):
    """Row rid's [NT, SLOTS] slots of its buckets' tokens in the one-launch plan's work space, after the bracket's
    shares (``triton_tally.bucket_pack``): a bucket's first tokens, in the order its count reached them."""
    return work_ptr + NR * (3 + SF * NPART + 2 * CAP + SCRATCH + SF * 2 * NT + SF * 6 * NG) + rid * (NT * SLOTS)


# the one launch's stamps a split (``triton_cut_kernel``'s STAMPS): its eight phases (0-7), the record's seven (8-14),
# which the split that writes the record stamps (``triton_record``), and what the splits wait on: its own pass-1
# partials published (15, ``triton_handoff``), then each round of the sample bracket's shared tally, its own share
# published and every split's in (16-19, ``triton_bracket``); the SM it runs on (SM_SLOT, ``place``); the steps of the
# record's last key search, which its writer stamps (21-23, and 24 its first copy, ``triton_search._find``)
STAMPS_N = tl.constexpr(25)
SM_SLOT = tl.constexpr(20)


@triton.jit
def lane_slots(work_ptr, NR, rid, SF, CAP: tl.constexpr, SCRATCH: tl.constexpr, NT: tl.constexpr, NG: tl.constexpr,
               SLOTS: tl.constexpr, LANE_WORDS: tl.constexpr):
    """This split's LANE_WORDS words of its lanes' slots (``triton_gather.keep_slot``) of row rid in the one-launch
    plan's work space, after the buckets' slots."""
    return bucket_slots(work_ptr, NR, NR, SF, CAP, SCRATCH, NT, NG, SLOTS) + (rid * SF + tl.program_id(2)) * LANE_WORDS


@triton.jit
def stamps_at(work_ptr, NR, rid, SF, CAP: tl.constexpr, SCRATCH: tl.constexpr, NT: tl.constexpr, NG: tl.constexpr,
              SLOTS: tl.constexpr, LANE_WORDS: tl.constexpr = 0):
    """This split's STAMPS_N stamp slots of row rid in the one-launch plan's work space, after the lanes' slots
    (``stamp``)."""
    return bucket_slots(work_ptr, NR, NR, SF, CAP, SCRATCH, NT, NG, SLOTS) + NR * SF * LANE_WORDS + \
        (rid * SF + tl.program_id(2)) * STAMPS_N


@triton.jit
def stamp(stamps_ptr, phase: tl.constexpr, after):
    """Stores the stamp of ``phase`` (< STAMPS_N) at this split's slots (``stamps_at``): the GPU's %globaltimer
    (ns) once ``after`` (an int32 of what the phase computed) is known and every thread is past the phase; in the
    interpreter phase + 1, a clock that only says the stamp was reached."""
    tl.debug_barrier()
    if INLINE_ASM:
        # the input ties the read to ``after``, and an impure asm is neither hoisted nor merged
        clock = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [tl.zeros([], tl.int32) + after],
                                          dtype=tl.int64, is_pure=False, pack=1)
        tl.store(stamps_ptr + phase, clock)
    else:
        tl.store(stamps_ptr + phase, tl.zeros([], tl.int64) + phase + 1 + after * 0)


@triton.jit
def place(stamps_ptr, rid, SF):
    """Stores where this split runs at slot SM_SLOT of its stamps (``stamps_at``): 1 + the GPU's %smid, which says
    whether programs of the launch share an SM; in the interpreter, which runs them one by one, each alone, 1 +
    its split's number in the launch."""
    if INLINE_ASM:
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [tl.zeros([], tl.int32)], dtype=tl.int32,
                                       is_pure=False, pack=1)
    else:
        sm = rid * SF + tl.program_id(2)
    tl.store(stamps_ptr + SM_SLOT, sm.to(tl.int64) + 1)


@triton.jit
def sums4(a, b, c, d):
    """The sums of four [N] tensors of one dtype in one reduction (``join4``)."""
    return split4(tl.sum(join4(a, b, c, d), axis=0))


@triton.jit
def join4(a, b, c, d):
    """[N, 2, 2]: four [N] tensors of one dtype joined, for one sum or running sum of all four over N: one round trip
    through shared memory on the GPU, where each tensor's would be one, and numpy's under the interpreter, which runs a
    combine of the kernel's own element by element in Python. (A joined max, and the record's eight partial sums
    joined, compiled to more barriers than their reductions with a combine of their own, so those stay.)"""
    return tl.join(tl.join(a, b), tl.join(c, d))


@triton.jit
def split4(x):
    """The four tensors [...] of ``join4``'s x [..., 2, 2], in its order."""
    ab, cd = tl.split(x)
    a, b = tl.split(ab)
    c, d = tl.split(cd)
    return a, b, c, d


@triton.jit
def unpack(buf_ptr, i, live, inv_t, m):
    """(valid, key, index, e) of gathered slots i."""
    return decode(tl.load(buf_ptr + i, mask=live, other=NONE), inv_t, m)


@triton.jit
def decode(packed, inv_t, m):
    """(valid, key, index, e) of gathered tokens as loaded (NONE: an empty slot)."""
    valid = packed != NONE
    key = (packed >> 32).to(tl.int32)
    e = tl.where(valid, exp_normal(key_value(key) * inv_t - m), 0.0)     # e is only weighed
    return valid, key, (4294967295 - (packed & 4294967295)).to(tl.int32), e


@triton.jit
def bounds(work_ptr, rid, V, CAP: tl.constexpr):
    """The row's bracket: stage 0's, or everything where the row has at most CAP tokens (no stage 0 then)."""
    lo = tl.full([], KMIN, tl.int64)
    hi = tl.full([], KMAX, tl.int64)
    if V > CAP:
        lo = tl.load(work_ptr + 2 * rid)
        hi = tl.load(work_ptr + 2 * rid + 1)
    return lo, hi
