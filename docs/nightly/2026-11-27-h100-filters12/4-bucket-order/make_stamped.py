"""Write probes/stamped/{triton_filter,triton_record,triton_search}.py: the working tree's, with %globaltimer stamps
at each phase of the one-launch cut (16 int64 words a (row, split) after the tallies). Not for commit."""
import re
src = "specverify/kernels/"
f = open(src + "triton_filter.py").read()
r = open(src + "triton_record.py").read()
s = open(src + "triton_search.py").read()

def sub(text, old, new):
    assert old in text, old[:80]
    return text.replace(old, new, 1)

NOW = '''

@triton.jit
def now():
    t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [tl.zeros([2], tl.int32)], dtype=tl.int64,
                                  is_pure=False, pack=1)
    return tl.max(t, axis=0)


@triton.jit
def stamp_at(work_ptr, NR, rid, SF, split, CAP: tl.constexpr, SCRATCH: tl.constexpr, NT: tl.constexpr):
    return work_ptr + NR * (3 + SF * 15 + 2 * CAP + SCRATCH) + NR * SF * 2 * NT + (rid * SF + split) * 16
'''
s = s + NOW
r = sub(r, "from specverify.kernels.triton_search import kept_mass, resolve, slow_cut",
        "from specverify.kernels.triton_search import kept_mass, resolve, slow_cut, now, stamp_at")
f = sub(f, "from specverify.kernels.triton_tally import tally_keys, tally_pack",
        "from specverify.kernels.triton_tally import tally_keys, tally_pack\nfrom specverify.kernels.triton_search import now, stamp_at")
# kernel phases
f = sub(f, '''        m, z, above = cut_row_norms(scratch_ptr, k_b, K1, S1, n_part, ints_at, stats_at, BLOCK_K, BLOCK_S)
        live, on, row_ptr, rid, k, k_on, top_p, p_on, floor, inv_t = cut_request(
            logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, top_k_ptr, top_p_ptr, min_p_ptr, k_b, V, K1,
            HAS_K, HAS_P, HAS_M, BLOCK_B)
        if STAGE == 0:''', '''        if STAGE == 3:
            st = stamp_at(work_ptr, NR, tl.program_id(0) * K1 + tl.program_id(1), SF, tl.program_id(2), CAP, SCRATCH,
                          TALLY_N)
            tl.store(st, now())
        m, z, above = cut_row_norms(scratch_ptr, k_b, K1, S1, n_part, ints_at, stats_at, BLOCK_K, BLOCK_S)
        live, on, row_ptr, rid, k, k_on, top_p, p_on, floor, inv_t = cut_request(
            logits_ptr, stride_logits, temperature_ptr, num_draft_ptr, top_k_ptr, top_p_ptr, min_p_ptr, k_b, V, K1,
            HAS_K, HAS_P, HAS_M, BLOCK_B)
        if STAGE == 0:''')
f = sub(f, '''                else:
                    lo, hi = bracket(row_ptr, V, k, k_on, top_p, p_on, z, m, inv_t, CAP, NS, CH, NG, NG_COUNT,
                                     BLOCK_SAMPLE, BLOCK_MASS)
                    read_split(''', '''                else:
                    st = stamp_at(work_ptr, NR, rid, SF, tl.program_id(2), CAP, SCRATCH, TALLY_N)
                    tl.store(st + 1, now() + (m - m).to(tl.int64) + (z - z).to(tl.int64))
                    lo, hi = bracket(row_ptr, V, k, k_on, top_p, p_on, z, m, inv_t, CAP, NS, CH, NG, NG_COUNT,
                                     BLOCK_SAMPLE, BLOCK_MASS)
                    tl.store(st + 2, now() + (lo - lo) + (hi - hi))
                    read_split(''')
f = sub(f, '''                               floor, HAS_M, CAP, BLOCK_READ, BLOCK_COUNT, NW_READ, NW_COUNT)
                    if k_on | p_on:     # the split's tokens join''', '''                               floor, HAS_M, CAP, BLOCK_READ, BLOCK_COUNT, NW_READ, NW_COUNT)
                    tl.debug_barrier()
                    tl.store(st + 3, now())
                    tl.store(st + 4, now())
                    if k_on | p_on:     # the split's tokens join''')
f = sub(f, """                                       TALLY_BLOCK)
""", """                                       TALLY_BLOCK)
                            tl.debug_barrier()
                            tl.store(st + 5, now())
""")
f = sub(f, '''                    writes = done == SF - 1
                    if writes:
                        tl.store(tickets_ptr + rid, 0)''', '''                    writes = done == SF - 1
                    tl.store(st + 6, now() + done.to(tl.int64) * 0)
                    tl.store(st + 7, writes.to(tl.int64))
                    if writes:
                        tl.store(tickets_ptr + rid, 0)''')
f = sub(f, '''                             RANK_N, RANK_BLOCK, ONLY_RANK, SCRATCH, FINISH, n_packed, STAGE == 3, TALLY_N)
''', '''                             RANK_N, RANK_BLOCK, ONLY_RANK, SCRATCH, FINISH, n_packed, STAGE == 3, TALLY_N)
                if STAGE == 3:
                    tl.debug_barrier()
                    tl.store(stamp_at(work_ptr, NR, rid, SF, tl.program_id(2), CAP, SCRATCH, TALLY_N) + 13, now())
''')
f = sub(f, '''        words += B * K1 * (cap + sf * 2 * one["TALLY_N"])''', '''        words += B * K1 * (cap + sf * 2 * one["TALLY_N"]) + B * K1 * sf * 16''')
f = sub(f, '''    work, record, tickets = _work(logits.device, stream, words, grid1[0] * grid1[1])''',
        '''    work, record, tickets = _work(logits.device, stream, words, grid1[0] * grid1[1])
    global _last_sf, _last_stamp_at
    m3 = stages[-1][2]
    NR_ = grid1[0] * grid1[1]
    _last_sf = sf
    _last_stamp_at = NR_ * (3 + sf * 15 + 2 * m3["CAP"] + m3["SCRATCH"]) + NR_ * sf * 2 * m3["TALLY_N"]''')
# record phases
r = sub(r, '''        # min-p alone decides when''', '''        st = stamp_at(work_ptr, NR, rid, SF, tl.program_id(2), CAP, SCRATCH, TALLY_N)
        tl.store(st + 8, now() + (w_all - w_all) + (w_mp - w_mp) + (c_hi - c_hi))
        # min-p alone decides when''')
r = sub(r, '''                elif PACKED and TALLY_N > 0:
''', '''                elif PACKED and TALLY_N > 0:
                    tl.store(st + 14, n)
''')
r = sub(r, '''TALLY_N), parts, SF, TALLY_N, BLOCK_F)
''', '''TALLY_N), parts, SF, TALLY_N, BLOCK_F, st)
''')
# inside resolve: after top-k find (10), after top-p find (11), after the tie search (12)
s = sub(s, '''            parts_ptr=None, SF=0, NT: tl.constexpr = 0, BLOCK_F: tl.constexpr = 1):''', '''            parts_ptr=None, SF=0, NT: tl.constexpr = 0, BLOCK_F: tl.constexpr = 1, st=None):''')
s = sub(s, '''        n_in, w_all_in = pick(t_cnt, 0, jt), pick(t_mass, 0, jt)
''', '''        n_in, w_all_in = pick(t_cnt, 0, jt), pick(t_mass, 0, jt)
        tl.store(st + 9, now() + n_in * 0 + w_all_in * 0)
''')
s = sub(s, '''        c_k, w_k = c_hi + c_at, w_hi + w_at
''', '''        c_k, w_k = c_hi + c_at, w_hi + w_at
        if NT > 0:
            tl.store(st + 10, now() + (c_k - c_k))
''')
s = sub(s, '''        # the crossing's tie group: the first''', '''        if NT > 0:
            tl.store(st + 11, now() + (w_at - w_at))
        # the crossing's tie group: the first''')
s = sub(s, '''    z = w_hi_mp + kept_in
''', '''    z = w_hi_mp + kept_in
    if NT > 0:
        tl.store(st + 12, now() + (z - z) + cut_idx.to(tl.int64) * 0)
''')
open("probes/stamped/triton_filter.py", "w").write(f)
open("probes/stamped/triton_record.py", "w").write(r)
open("probes/stamped/triton_search.py", "w").write(s)
print("ok")
