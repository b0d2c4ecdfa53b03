"""The target-filter cut's launch plan (``triton_filter``): for a batch's shape, the filters passed and the
cut's settings, its splits, the work space's size and each launch's grid and meta, in launch order. Plain
Python, cached per argument list: a call of a few rows costs the host more than the GPU.

    _recipe(B, K1, V, S1, ...) -> (id, SF, chunk, region, work words, stages), stages ((STAGE, grid, meta), ...)
    one_launch_splits(rows, programs, most, sms) -> the one launch's splits a row
"""

from __future__ import annotations

import functools

import triton

from specverify.kernels.triton_cut import STAMPS_N
from specverify.kernels.triton_gather import INLINE_ASM, LANES, NPART, ballot_meta

# the interpreter takes wide tiles and neither warps nor register caps (``_options``)
_INTERPRETED = not INLINE_ASM.value
_recipe_ids = iter(range(1 << 62))


@functools.lru_cache(maxsize=1024)
def _recipe(B: int, K1: int, V: int, S1: int, block_v: int, block_b: int, warps: int, flags: tuple, dtypes: tuple,
            chunk1: int, lazy: tuple | None, settings: tuple, sms: int | None = None):
    """(id, SF, chunk, region, work words, stages) of a cut: at most max_splits splits per row, or the one
    launch's own count (each keeps cap / next_pow2(SF) gathered tokens), whole tiles per split; stages
    ((STAGE, grid, meta), ...) in launch order, built once here since the host's work is what a call of a few
    rows costs. STAGE None is pass 1 with the gather (its meta: pass 1's and CAP), where pass 1's splits (S1 of
    chunk1 entries) are the cut's.
    lazy: (HAS_Q, SEEDED) of pass 2 where the call may cut lazily (top-p alone), else None; a first stage
    "lazy" then stands for the lazy cut's pass 1, where the plan is the three launches.
    settings: ``triton_filter._settings()``, whose names these are in lower case; sms: the GPU's SMs, which the
    one launch's programs must not outnumber (None: the interpreter's, which runs them one by one)."""
    (cap, ns, ch, programs, rank_n, scratch_share, finish_n, one_launch_rows, gather_in_pass1, max_splits,
     ng, ng_count, block_read, read_warps, count_tile, read_maxnreg, bracket_warps, bracket_maxnreg, record_warps,
     record_maxnreg, sample_tile, mass_sample_tile, search_tile, nc_gpu, pass1_maxnreg, pre_bracket_warps,
     pre_bracket_maxnreg, lazy_pass1_maxnreg, one_launch_tile, one_launch_programs, one_launch_most, tally_n,
     tally_tile, one_launch_pass1, handoff_spin, one_launch_shared, one_launch_share_tile, _,
     one_launch_stamps, one_launch_maxnreg, _, one_launch_scan_gather, one_launch_row_tally, _,
     bracket_sigmas, slow_tile, pack_tile, one_launch_round_ng, one_launch_pass1_ahead,
     one_launch_whole_sample, one_launch_rank_top, one_launch_copy_tile, one_launch_sums_once,
     one_launch_mass_cells, one_launch_bucket_slots, one_launch_cells_ahead, one_launch_lane_slots) = settings
    tiles = triton.cdiv(V, block_v)
    if B * K1 <= one_launch_rows:     # its splits are its own (pass 1's too where pass 1 is planned so)
        splits = one_launch_splits(B * K1, one_launch_programs, one_launch_most, sms)
    else:
        splits = min(max(S1, triton.cdiv(programs, B * K1)), max_splits)
    chunk = triton.cdiv(tiles, min(splits, tiles)) * block_v
    sf = triton.cdiv(V, chunk)
    block_f = max(2, triton.next_power_of_2(sf))
    whole = V <= cap
    if whole:           # a short row is gathered whole: every split's region holds its chunk
        cap = block_f * max(16, triton.next_power_of_2(chunk))
    # the interpreter runs a tile in one numpy call: wide tiles and searches there (fewer steps), register-sized
    # ones on the GPU; the results are the same integers either way
    wide = _INTERPRETED
    lazy = lazy if not whole and B * K1 > one_launch_rows else None
    meta = dict(HAS_K=flags[0], HAS_P=flags[1], HAS_M=flags[2], CAP=cap, NS=ns, CH=ch, NG=ng, NG_COUNT=ng_count,
                NC=64 if wide else nc_gpu, BLOCK_V=block_v, BLOCK_B=block_b, BLOCK_K=max(2, triton.next_power_of_2(K1)),
                BLOCK_S=max(2, triton.next_power_of_2(S1)), BLOCK_F=block_f,
                BLOCK_R=min(cap, 1024 if wide else search_tile),
                BLOCK_SAMPLE=min(ns, 1024 if wide else sample_tile),
                BLOCK_MASS=min(ns, 1024 if wide else mass_sample_tile), BLOCK_FB=1024 if wide else 128,
                BLOCK_READ=block_v if wide else min(block_v, block_read),
                BLOCK_COUNT=block_v if wide else min(block_v, count_tile), RANK_N=rank_n,
                RANK_BLOCK=max(2, triton.next_power_of_2(min(rank_n, V))), ONLY_RANK=whole and V <= rank_n,
                LAZY=lazy is not None, HAS_Q=bool(lazy and lazy[0]), SEEDED=bool(lazy and lazy[1]), TALLY_N=0,
                TALLY_BLOCK=1, PASS1=False, SPIN=0, SHARED=False, STAMPS=False, ROW_TALLY=False, BUCKET_BITS=0,
                SIGMAS=float(bracket_sigmas), SLOW_TILE=slow_tile, ROUND_NG=0,
                BLOCK_ROUND=2, SHARE_G=ng + ng_count, AHEAD=False, WHOLE=0, RANK_TOP=0, COPY_TILE=0,
                SUMS_ONCE=False, MASS_NG=0, CELL_TILE=2, SLOTS=0, CELLS_AHEAD=False, LANE_SLOTS=0, LANE_WORDS=0,
                num_warps=warps)
    # one region per split (block_f, BLOCK_F's size, is at least 2 for the partial sums' loads)
    meta["SCRATCH"] = cap // scratch_share if scratch_share else 0
    # the search ranks an interval's last few tokens where the scratch can hold them (0: it searches on)
    finish = min(finish_n, meta["RANK_BLOCK"])
    meta["FINISH"] = finish if rank_n and finish >= 2 and finish <= meta["SCRATCH"] else 0
    words = B * K1 * (3 + sf * NPART.value + cap + meta["SCRATCH"])
    read_meta = dict(meta, num_warps=min(warps, read_warps))
    pre = bool(gather_in_pass1 and flags[0] and not whole and B * K1 > one_launch_rows and (sf, chunk) == (S1, chunk1))
    meta["PRE"] = read_meta["PRE"] = pre
    if B * K1 <= one_launch_rows:
        # its splits gather by one atomic count each, at 256 logits a tile: by ballot, at 1,024, B = 1's one
        # launch measured 70-100 us against 35-72 (its last split compacts every split's groups alone)
        # where its splits are pass 1's, it is pass 1 too (``triton_handoff``: at most 32 splits, a bit each); the
        # interpreter runs its programs one by one, where a split waits for none of the later ones
        one = dict(read_meta, STAGE=3, BLOCK_READ=read_meta["BLOCK_READ"] if wide else min(block_v, one_launch_tile),
                   TALLY_N=0 if whole else tally_n, TALLY_BLOCK=1024 if wide else tally_tile,
                   PASS1=bool(one_launch_pass1) and (sf, chunk) == (S1, chunk1) and sf <= 32,
                   SHARED=bool(one_launch_shared) and sf <= 32, SPIN=0 if wide else handoff_spin,
                   STAMPS=bool(one_launch_stamps))
        one["AHEAD"] = one["PASS1"] and bool(one_launch_pass1_ahead)
        if one_launch_row_tally and one["TALLY_N"] > 0:     # the row's buckets, a binary search of the keys deep
            assert tally_n & (tally_n - 1) == 0, f"ONE_LAUNCH_ROW_TALLY takes a power of 2 TALLY_N, not {tally_n}"
            one.update(ROW_TALLY=True, BUCKET_BITS=tally_n.bit_length() - 1, TALLY_BLOCK=1024 if wide else pack_tile,
                       RANK_TOP=int(one_launch_rank_top) if 2 <= rank_n <= meta["SCRATCH"] else 0,
                       COPY_TILE=int(one_launch_copy_tile), SUMS_ONCE=bool(one_launch_sums_once),
                       SLOTS=int(one_launch_bucket_slots))
        if one["SHARED"]:   # sample tiles narrow enough that every split has one to tally
            share_tile = min(1 << (max(1, ns // sf).bit_length() - 1), one_launch_share_tile)
            one.update(BLOCK_SAMPLE=min(one["BLOCK_SAMPLE"], share_tile), BLOCK_MASS=min(one["BLOCK_MASS"], share_tile))
        if one_launch_round_ng:     # the sample bracket in one round (``triton_bracket``'s ROUND_NG), its shares in
            # the two rounds' room or more; on the GPU its [ROUND_NG, BLOCK_ROUND] sums take 32 registers a thread each
            _takes("ONE_LAUNCH_ROUND_NG", one_launch_round_ng,
                   one_launch_round_ng >= 2 and not one_launch_round_ng & (one_launch_round_ng - 1),
                   "0 or a power of 2 of at least 2")
            _takes("ONE_LAUNCH_WHOLE_SAMPLE", one_launch_whole_sample, one_launch_whole_sample in (0, 1, 2),
                   "0 (the shared round), 1 (the whole sample's counts) or 2 (its bracket's ends by a search)")
            block = one["BLOCK_SAMPLE"] if wide else min(one["BLOCK_SAMPLE"], max(2, 8192 // one_launch_round_ng))
            one.update(ROUND_NG=one_launch_round_ng, BLOCK_ROUND=block,
                       SHARE_G=max(ng + ng_count, -(-one_launch_round_ng // 2)),
                       WHOLE=int(one_launch_whole_sample) if one["PASS1"] else 0)
        _takes("ONE_LAUNCH_MASS_CELLS", one_launch_mass_cells,
               one_launch_mass_cells == 0 or one_launch_mass_cells >= 4 and not one_launch_mass_cells & (
                   one_launch_mass_cells - 1), "0 (two shared rounds) or a power of 2 of at least 4")
        if one["PASS1"] and one_launch_mass_cells and not whole:    # its splits store their cells before they publish
            # a cell's count of the whole sample fits its 16 bits; the splits' shares fit the rounds' room; a tile
            # of a warp's lanes and more, each entry in one thread (the histogram's)
            assert ns < 1 << 16, f"top-p's cells count the sample in 16 bits: NS = {ns} is too many"
            lanes = 32 * one["num_warps"]
            one.update(MASS_NG=int(one_launch_mass_cells),
                       CELL_TILE=min(ns, max(lanes, 1 << (max(1, ns // sf).bit_length() - 1))),
                       SHARE_G=max(one["SHARE_G"], -(-one_launch_mass_cells // 24)),
                       CELLS_AHEAD=bool(one_launch_cells_ahead))
        _takes("ONE_LAUNCH_CELLS_AHEAD", one_launch_cells_ahead, one_launch_cells_ahead in (0, 1),
               "0 (loaded after) or 1 (loaded ahead)")
        _takes("ONE_LAUNCH_BUCKET_SLOTS", one_launch_bucket_slots,
               one_launch_bucket_slots == 0 or 2 <= one_launch_bucket_slots <= 128 and not one_launch_bucket_slots & (
                   one_launch_bucket_slots - 1), "0 (none) or a power of 2 from 2 to 128")
        _takes("ONE_LAUNCH_COPY_TILE", one_launch_copy_tile,
               one_launch_copy_tile >= 0 and not one_launch_copy_tile & (one_launch_copy_tile - 1),
               "0 (four search tiles) or a power of 2")
        _takes("ONE_LAUNCH_SUMS_ONCE", one_launch_sums_once, one_launch_sums_once in (0, 1),
               "0 (each search loads the bucket sums) or 1 (the record loads them once)")
        _takes("ONE_LAUNCH_RANK_TOP", one_launch_rank_top, one_launch_rank_top in (0, 1),
               "0 (the searches) or 1 (top-k's set ranked from one copy)")
        # its read gathers one group a split: by an atomic count or a second pass from each lane's place
        # (ONE_LAUNCH_SCAN_GATHER 0 or 2; the scan of each tile that 1 was timed slower than both and went)
        _takes("ONE_LAUNCH_SCAN_GATHER", one_launch_scan_gather, one_launch_scan_gather in (0, 2),
               "0 (an atomic count) or 2 (the lanes)")
        nw = LANES.value if one_launch_scan_gather else 0
        _takes("ONE_LAUNCH_LANE_SLOTS", one_launch_lane_slots, one_launch_lane_slots in (0, 1, 2, 4, 8, 16),
               "0 (the second pass alone) or a power of 2 up to 16 (slots a lane)")
        if one_launch_scan_gather and one_launch_lane_slots:    # a lane's slots, in its read's wider tile
            one.update(LANE_SLOTS=int(one_launch_lane_slots),
                       LANE_WORDS=int(one_launch_lane_slots) * max(one["BLOCK_READ"], one["BLOCK_COUNT"]))
        stages = ((3, (B, K1, sf), _options(dict(one, NW_READ=nw, NW_COUNT=nw), 0, one_launch_maxnreg, wide)),)
        # the rows' lists of packed tokens (``triton_cut.packed_tokens``), their splits' tallies, the shares of
        # their sample brackets (``triton_cut.bracket_shares``), their buckets' slots (``triton_cut.bucket_slots``),
        # their splits' lanes' slots (``triton_cut.lane_slots``)
        words += B * K1 * (cap + sf * 2 * one["TALLY_N"] + sf * 6 * one["SHARE_G"] + one["TALLY_N"] * one["SLOTS"]
                           + sf * one["LANE_WORDS"])
        if one["STAMPS"]:   # the splits' phase stamps last (``triton_cut.stamp``): a reader finds them from the end
            words += B * K1 * sf * STAMPS_N.value
    else:       # a row of at most CAP tokens is gathered whole: no bracket to find (stages 1 and 2 know it from V)
        plans = ((0, 1, _options(meta, bracket_warps, bracket_maxnreg, wide)),
                 (1, sf, _options(read_meta, 0, read_maxnreg, wide)),
                 (2, 1, _options(meta, record_warps, record_maxnreg, wide)))
        stages = tuple((stage, (B, K1, splits), ballot_meta(dict(m, STAGE=stage))) for stage, splits, m in plans
                       if stage or not whole)
        # pass 1 gathering (its meta: pass 1's, and CAP) or summing for the lazy cut, or both, before the others
        pass1 = dict(GATHER=pre, LAZY=lazy is not None, HAS_K=flags[0], HAS_P=flags[1], HAS_M=flags[2], CAP=cap,
                     BLOCK_V=block_v, BLOCK_B=block_b, num_warps=warps)
        if pre:         # after the count bracket
            pre_bracket = _options(dict(meta, STAGE=4), pre_bracket_warps, pre_bracket_maxnreg, wide)
            stages = ((4, (B, K1, 1), ballot_meta(pre_bracket)),
                      (None, (B, K1, sf), _options(pass1, 0, lazy_pass1_maxnreg if lazy else pass1_maxnreg,
                                                   wide))) + stages
        elif lazy:
            stages = ((None, (B, K1, S1), pass1),) + stages
    return ("cut", next(_recipe_ids)), sf, chunk, cap // triton.next_power_of_2(sf), words, stages


def _takes(name: str, value, ok: bool, takes: str) -> None:
    """Refuses a setting's value, naming both, unless ok: a probe sets the settings by name, and a value the plan
    misreads would compile a kernel that runs something else."""
    if not ok:
        raise ValueError(f"{name} takes {takes}, not {value}")


def one_launch_splits(rows: int, programs: int, most: int, sms: int | None = None) -> int:
    """The one launch's split target for a batch of ``rows`` rows: about ``programs`` programs in all, at most
    ``sms`` where given (the GPU's SMs: the launch holds one program an SM, and a split waits for its row's
    others, so one left for a second wave stalls its row until the waiting ones give up and take it over), at
    most ``most`` a row. Plain integers: a filtered call of a few rows plans pass 1 by it (``pass1_splits``), and
    triton.cdiv costs a call of Triton's constexpr machinery on some versions."""
    splits = -(-programs // rows)
    if sms:
        splits = min(splits, max(1, sms // rows))
    return min(splits, most)


def _options(meta: dict, warps: int, maxnreg: int, interpreted: bool) -> dict:
    """meta with a launch's own warps and register cap where set (non-zero; the interpreter takes neither)."""
    meta = dict(meta)
    if warps:
        meta["num_warps"] = warps
    if maxnreg and not interpreted:
        meta["maxnreg"] = maxnreg
    return meta
