"""Token trees (SPEC 3.8) in Triton: recursive rejection sampling over each request's tree of drafts, in
three launches, graph-capturable, no host sync. ``triton_kernels.triton_sample_into`` routes calls given
``accepted_nodes`` here (``tree_recipe``, ``tree_launches``); the Backend (``triton_sampler``) declares the
method. Decisions are float32: they may differ from the float64 reference only where SPEC 3.8's "Float32
tree decisions" excuses it (a decision within 4.1's tolerance).

Shapes and dtypes (B requests, request b with N_b nodes, T = sum N_b, K1 = K + 1 output columns with
K >= max N_b; request b's rows start at row0 = d_off + b, d_off = sum N_b of the requests before b):

    target_logits   [T + B, V]  float32 / bfloat16 / float16, last dim contiguous: row0 is the root's row,
                                row0 + 1 + i node i's (row j of a request is the row of node j - 1)
    draft_token_ids [T]         int64, node i's token at d_off + i, -1 = placeholder (never accepted, q = 0)
    tree_parents    [T]         int64, local parent (-1: a child of the root), parents before children;
                                absent (HAS_PARENTS off): every request is a chain, parent i - 1
    draft_probs     [T, V]      float32 q_i, or None (HAS_Q off): one-hot at node i's token
    temperature     [B]         float32, 0 = greedy request
    uniform         [T]         float32 one per node slot, exponential [B, V] float32, or
    seeds           [B]         int64 (SEEDED): reference.philox's stream, uniforms by node slot as for chains
    token_ids (out) [B, K1]     int64: the path's tokens, the final token, then -1
    num_accepted (out) [B]      int64: the path's depth
    accepted_nodes (out) [B, K] int64: the path's local node indices, then -1
    scratch         [words]     int64: the chain kernels' layout (``triton_math.scratch_views``: race keys,
                                pass 1's split partials, tickets), then at ``walk_at`` the walk's result:
                                [B, 4] int32 header (final row j, residual steps n, depth, unused),
                                [B, BLOCK_K] int32 rejected slots, [B, BLOCK_K] int32 their tokens,
                                [B, BLOCK_K] float32 the mass before each step, [B, 2] float32 (row max,
                                row sum of exp) of row j

The residual at a node is never stored: after n rejections it is the fold
r_0 = p_node, r_s = max(r_{s-1} - m_{s-1} q_s, 0) with m_s = sum_v r_s(v) (m_0 = 1), recomputed tile by
tile from the node's row and the rejected siblings' q rows (one-hot: a compare). A step whose residual
would be zero everywhere (rounding only) is dropped: r stays as it was (reference.tree.after_rejection).

Launch plan:

    pass 1  grid (B, K1, S1)   ``triton_chain._row_stats_kernel``, unchanged: per row max and sum of
                               exp(l / T) and the lowest-index argmax, in S1 vocabulary splits
    walk    grid (B,)          one program per request walks its tree: try the children of the current
                               node in sibling order (the smallest index > the last tried whose parent is
                               the node), accept (q(x) > 0 and u q(x) <= r(x) / m) and descend, or reject
                               and fold q into the residual; where another sibling will be tested, one
                               pass over the row (a loop over V tiles) sums the new mass (one-hot q: 1 minus
                               the removed p(x), good to a few ulps while the removed mass is <= 0.9; the
                               pass beyond). It stops when no child is left. Greedy requests descend into
                               the first child whose token is the row's argmax. Writes the path,
                               num_accepted and (greedy) the final token; leaves the final node's fold in
                               scratch.
    race    grid (B, S2)       random requests: the exponential race over a split of the final node's
                               residual, and over the residual before its last step (the fallback where
                               the last step leaves nothing); splits meet in the chain kernel's 64-bit
                               atomic max (score bits, lowest index), the last program writes the token.

On a single path every operation is the chain kernel's (m = 1 at each test, r(x) = p(x) with its
formula, the race over max(p - q, 0) or p), so a chain given as a tree gives its tokens bit for bit.
"""

from __future__ import annotations

import functools
import itertools

import triton
import triton.language as tl

from specverify.kernels.triton_chain import _row_stats_kernel
from specverify.kernels.triton_math import (NO_INDEX, neg_log, no_race, offset_block, philox_uniform, publish_races,
                                            race_tile, request_offset, row_norms, scratch_views)


@triton.jit
def _walk_views(scratch_ptr, walk_at, B, BLOCK_K: tl.constexpr):
    """(header, slots, tokens, masses, row stats) pointers of the walk's region (module docstring)."""
    ints = (scratch_ptr + walk_at).to(tl.pointer_type(tl.int32), bitcast=True)
    floats = (scratch_ptr + walk_at).to(tl.pointer_type(tl.float32), bitcast=True)
    return (ints, ints + 4 * B, ints + 4 * B + B * BLOCK_K, floats + 4 * B + 2 * B * BLOCK_K,
            floats + 4 * B + 3 * B * BLOCK_K)


@triton.jit
def _fold(r, offs, mask, first, last, slots, toks, masses, q_ptr, stride_q, d_off,
          HAS_Q: tl.constexpr, BLOCK_K: tl.constexpr, IN_MEMORY: tl.constexpr = False):
    """Steps first..last-1 of the residual fold on r (a block or a scalar at vocabulary ids offs):
    r <- max(r - m_s q_s(offs), 0), q_s the row of the node at slots[s] (one-hot at toks[s] without q).
    slots, toks, masses: [BLOCK_K] blocks (the walk's registers), or IN_MEMORY pointers to them (the
    race reads the walk's scratch: a scalar load per step instead of a reduction over the block)."""
    jj = tl.arange(0, BLOCK_K)
    for s in range(first, last):
        if IN_MEMORY:
            m_s = tl.load(masses + s)
        else:
            m_s = tl.sum(tl.where(jj == s, masses, 0.0), axis=0)
        if HAS_Q:
            if IN_MEMORY:
                slot = tl.load(slots + s)
            else:
                slot = tl.sum(tl.where(jj == s, slots, 0), axis=0)
            q = tl.load(q_ptr + (d_off + slot) * stride_q + offs, mask=mask, other=0.0).to(tl.float32)
        else:
            if IN_MEMORY:
                tok = tl.load(toks + s)
            else:
                tok = tl.sum(tl.where(jj == s, toks, 0), axis=0)
            q = tl.where(offs == tok, 1.0, 0.0)
        r = tl.maximum(r - m_s * q, 0.0)
    return r


@triton.jit
def _mass(row_ptr, inv_t, n_max, n_sum, n, slots, toks, masses, q_ptr, stride_q, d_off, V,
          HAS_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr):
    """sum_v r_n(v) of the fold's n steps over the row at row_ptr (a loop over V tiles)."""
    acc = tl.zeros([BLOCK_V], dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        offs = start + tl.arange(0, BLOCK_V)
        mask = offs < V
        logit = tl.load(row_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
        p = tl.exp(logit * inv_t - n_max) * (1.0 / n_sum)
        acc += tl.where(mask, _fold(p, offs, mask, 0, n, slots, toks, masses, q_ptr, stride_q, d_off, HAS_Q,
                                    BLOCK_K), 0.0)
    return tl.sum(acc, axis=0)


@triton.jit
def _tree_walk_kernel(
    logits_ptr, stride_logits, draft_ids_ptr, parents_ptr, q_ptr, stride_q, temperature_ptr, num_draft_ptr,
    uniform_ptr, seeds_ptr, scratch_ptr, token_ids_ptr, num_accepted_ptr, nodes_ptr,
    V, K1, S1, n_part, ints_at, stats_at, walk_at, B,
    HAS_Q: tl.constexpr, HAS_PARENTS: tl.constexpr, SEEDED: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_B: tl.constexpr,
):
    slots_ptr, part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, ticket_ptr, part_mass_ptr = \
        scratch_views(scratch_ptr, n_part, ints_at, stats_at)
    head_ptr, rej_ptr, tok_ptr, mass_ptr, stat_ptr = _walk_views(scratch_ptr, walk_at, B, BLOCK_K)
    b = tl.program_id(0)
    k_b = tl.load(num_draft_ptr + b).to(tl.int32)
    d_off = request_offset(num_draft_ptr, b, BLOCK_B)
    row0 = d_off + b
    temperature = tl.load(temperature_ptr + b).to(tl.float32)
    greedy = temperature == 0.0
    inv_t = 1.0 / tl.where(greedy, 1.0, temperature)
    row_max, row_sum, row_amax = row_norms(part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr,
                                           b, k_b, K1, S1, BLOCK_K, BLOCK_S)
    jj = tl.arange(0, BLOCK_K)
    is_node = jj < k_b
    x_all = tl.load(draft_ids_ptr + d_off + jj, mask=is_node, other=0)
    if HAS_PARENTS:
        par = tl.load(parents_ptr + d_off + jj, mask=is_node, other=-2).to(tl.int32)
    else:
        par = jj - 1
    par = tl.where(is_node, par, -2)            # padding lanes are nobody's children
    testable = is_node & (x_all >= 0)
    # Every node's test inputs at once, as the chain kernel's at_drafts gathers them: its token's logit in
    # its parent's row, that row's stats (an exact gather: one term plus zeros), q(x) and u. The walk
    # then makes no dependent load at a first try (nor at any try with one-hot q).
    x_at_all = tl.where(testable, x_all, 0)
    prow = par + 1
    at_prow = prow[:, None] == jj[None, :]
    p_max = tl.sum(tl.where(at_prow, row_max[None, :], 0.0), axis=1)
    p_sum = tl.sum(tl.where(at_prow, row_sum[None, :], 0.0), axis=1)
    p_top = tl.sum(tl.where(at_prow, row_amax[None, :], 0), axis=1)
    logit_all = tl.load(logits_ptr + (row0 + prow) * stride_logits + x_at_all, mask=testable,
                        other=0.0).to(tl.float32)
    p_sum = tl.where(testable, p_sum, 1.0)
    p_first = tl.exp(logit_all * inv_t - p_max) / p_sum             # r(x) at a node's first try
    p_fold = tl.exp(logit_all * inv_t - p_max) * (1.0 / p_sum)      # p(x) as the fold (and the race) take it
    if HAS_Q:
        q_all = tl.load(q_ptr + (d_off + jj) * stride_q + x_at_all, mask=testable, other=0.0).to(tl.float32)
    else:
        q_all = tl.full([BLOCK_K], 1.0, tl.float32)
    if SEEDED:
        seed = tl.load(seeds_ptr + b)
        u_all = philox_uniform(seed, jj, 0)
    else:
        u_all = tl.load(uniform_ptr + d_off + jj, mask=testable, other=0.5).to(tl.float32)
    greedy_ok = x_all == p_top

    node = tl.full([], -1, tl.int32)            # the current node (-1: the root); its row is node + 1
    last = tl.full([], -1, tl.int32)            # the last child of node tried
    depth = tl.zeros([], tl.int32)
    n = tl.zeros([], tl.int32)                  # residual steps at node
    m = tl.full([], 1.0, tl.float32)            # mass of the residual
    slots = tl.zeros([BLOCK_K], tl.int32)       # step s: the rejected node, its token, the mass before it
    toks = tl.zeros([BLOCK_K], tl.int32)
    masses = tl.zeros([BLOCK_K], tl.float32)
    path = tl.full([BLOCK_K], -1, tl.int32)
    path_tok = tl.full([BLOCK_K], -1, tl.int64)
    removed = tl.zeros([], tl.float32)         # one-hot q: the mass taken out of p at node so far
    c = tl.min(tl.where(par == -1, jj, NO_INDEX), axis=0)          # the child to try: the root's first
    while c < k_b:      # each node is tried at most once: at most k_b iterations
        at_c = jj == c
        x = tl.sum(tl.where(at_c, x_all, 0), axis=0)
        tries = x >= 0                          # a placeholder is skipped: never accepted, r unchanged
        x_at = tl.where(tries, x, 0)
        # r(x): at the node's own row p(x) as the chain kernel's test computes it; after rejections the fold
        r_x = _fold(tl.sum(tl.where(at_c, p_fold, 0.0), axis=0), x_at, tries, 0, n, slots, toks, masses,
                    q_ptr, stride_q, d_off, HAS_Q, BLOCK_K)
        r_x = tl.where(n == 0, tl.sum(tl.where(at_c, p_first, 0.0), axis=0), r_x)
        ratio = tl.where(n == 0, r_x, r_x / m)
        q_x = tl.sum(tl.where(at_c, q_all, 0.0), axis=0)
        u = tl.sum(tl.where(at_c, u_all, 0.0), axis=0)
        g_ok = tl.sum(tl.where(at_c, greedy_ok.to(tl.int32), 0), axis=0) > 0
        # r(x) > 0: a float64 uniform below float32's range loads as 0 (SPEC 2)
        accept = tries & tl.where(greedy, g_ok, (q_x > 0.0) & (r_x > 0.0) & (u * q_x <= ratio))
        rejected = tries & ~accept & ~greedy

        path = tl.where(accept & (jj == depth), c, path)
        path_tok = tl.where(accept & (jj == depth), x, path_tok)
        depth += accept.to(tl.int32)
        slots = tl.where(rejected & (jj == n), c, slots)
        toks = tl.where(rejected & (jj == n), x_at.to(tl.int32), toks)
        masses = tl.where(rejected & (jj == n), m, masses)
        n = tl.where(accept, 0, n + rejected.to(tl.int32))
        removed = tl.where(accept, 0.0, removed + tl.where(rejected, r_x, 0.0))
        last = tl.where(accept, -1, c)
        m = tl.where(accept, 1.0, m)
        node = tl.where(accept, c, node)
        # the new mass, only where another sibling will be tested against it
        more = rejected & (tl.max(tl.where(testable & (par == node) & (jj > c), 1, 0), axis=0) > 0)
        m_new = m
        if more:
            row = node + 1
            row_ptr = logits_ptr + (row0 + row) * stride_logits
            n_max = tl.sum(tl.where(jj == row, row_max, 0.0), axis=0)
            n_sum = tl.sum(tl.where(jj == row, row_sum, 0.0), axis=0)
            if HAS_Q:
                m_new = _mass(row_ptr, inv_t, n_max, n_sum, n, slots, toks, masses, q_ptr, stride_q, d_off, V,
                              HAS_Q, BLOCK_K, BLOCK_V)
            else:
                # one-hot: r is p without the rejected tokens, its mass 1 - removed, good to a few ulps
                # while removed <= 0.9; beyond, the remaining entries are summed (no cancellation)
                m_new = 1.0 - removed
                if removed > 0.9:
                    m_new = _mass(row_ptr, inv_t, n_max, n_sum, n, slots, toks, masses, q_ptr, stride_q, d_off,
                                  V, HAS_Q, BLOCK_K, BLOCK_V)
        kept = m_new > 0.0          # zero everywhere (rounding only): the step is dropped, r kept
        n = tl.where(more & ~kept, n - 1, n)
        removed = tl.where(more & ~kept, removed - r_x, removed)
        m = tl.where(more & kept, m_new, m)
        c = tl.min(tl.where((par == node) & (jj > last), jj, NO_INDEX), axis=0)

    # ---- outputs of the path; the race writes a random request's final token
    row = node + 1
    top = tl.sum(tl.where(jj == row, row_amax, 0), axis=0)
    cols = tl.arange(0, BLOCK_K)
    final = tl.where(greedy, top, -1).to(tl.int64)
    token = tl.where(cols < depth, path_tok, tl.where(cols == depth, final, -1))
    tl.store(token_ids_ptr + b * K1 + cols, token, mask=cols < K1)
    tl.store(nodes_ptr + b * (K1 - 1) + cols, path.to(tl.int64), mask=cols < K1 - 1)
    tl.store(num_accepted_ptr + b, depth.to(tl.int64))
    tl.store(head_ptr + 4 * b, row)
    tl.store(head_ptr + 4 * b + 1, n)
    tl.store(head_ptr + 4 * b + 2, depth)
    tl.store(rej_ptr + b * BLOCK_K + jj, slots)
    tl.store(tok_ptr + b * BLOCK_K + jj, toks)
    tl.store(mass_ptr + b * BLOCK_K + jj, masses)
    tl.store(stat_ptr + 2 * b, tl.sum(tl.where(jj == row, row_max, 0.0), axis=0))
    tl.store(stat_ptr + 2 * b + 1, tl.sum(tl.where(jj == row, row_sum, 0.0), axis=0))


@triton.jit
def _tree_race_kernel(
    logits_ptr, stride_logits, q_ptr, stride_q, temperature_ptr, num_draft_ptr, exp_ptr, stride_exp, seeds_ptr,
    scratch_ptr, token_ids_ptr,
    V, K1, n_part, ints_at, stats_at, walk_at, B, S2, chunk,
    HAS_Q: tl.constexpr, SEEDED: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    slots_ptr, part_max_ptr, part_sum_ptr, part_amax_val_ptr, part_amax_idx_ptr, ticket_ptr, part_mass_ptr = \
        scratch_views(scratch_ptr, n_part, ints_at, stats_at)
    head_ptr, rej_ptr, tok_ptr, mass_ptr, stat_ptr = _walk_views(scratch_ptr, walk_at, B, BLOCK_K)
    b = tl.program_id(0)
    split = tl.program_id(1)
    temperature = tl.load(temperature_ptr + b).to(tl.float32)
    if temperature != 0.0:          # greedy requests are finished by the walk
        inv_t = 1.0 / temperature
        d_off = request_offset(num_draft_ptr, b, BLOCK_B)
        row = tl.load(head_ptr + 4 * b)
        n = tl.load(head_ptr + 4 * b + 1)
        depth = tl.load(head_ptr + 4 * b + 2)
        slots = rej_ptr + b * BLOCK_K          # the walk's steps, read by _fold from memory
        toks = tok_ptr + b * BLOCK_K
        masses = mass_ptr + b * BLOCK_K
        n_max = tl.load(stat_ptr + 2 * b)
        inv_sum = 1.0 / tl.load(stat_ptr + 2 * b + 1)
        if SEEDED:
            seed = tl.load(seeds_ptr + b)
        row_ptr = logits_ptr + (d_off + b + row) * stride_logits
        before = tl.maximum(n - 1, 0)
        lo = split * chunk
        hi = tl.minimum(lo + chunk, V)
        best_w, best_w_idx, best_p, best_p_idx = no_race(BLOCK_V)
        for start in range(lo, hi, BLOCK_V):
            offs = start + tl.arange(0, BLOCK_V)
            mask = offs < hi
            logit = tl.load(row_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
            p = tl.exp(logit * inv_t - n_max) * inv_sum
            r_prev = _fold(p, offs, mask, 0, before, slots, toks, masses, q_ptr, stride_q, d_off, HAS_Q, BLOCK_K,
                           True)
            r = _fold(r_prev, offs, mask, before, n, slots, toks, masses, q_ptr, stride_q, d_off, HAS_Q, BLOCK_K,
                      True)
            if SEEDED:
                expo = neg_log(philox_uniform(seed, offs, 1))
            else:
                expo = tl.load(exp_ptr + b.to(tl.int64) * stride_exp + offs, mask=mask, other=1.0).to(tl.float32)
            # the fallback race is the residual before the last step (r_prev), not p
            best_w, best_w_idx, best_p, best_p_idx = race_tile(best_w, best_w_idx, best_p, best_p_idx, r, r_prev,
                                                               expo, mask, offs)
        publish_races(slots_ptr, b, best_w, best_w_idx, best_p, best_p_idx, V)
        ticket = tl.atomic_add(ticket_ptr + b, 1, sem="acq_rel")
        if ticket == S2 - 1:
            key_w = tl.atomic_add(slots_ptr + 2 * b, 0, sem="acquire")
            key_p = tl.atomic_add(slots_ptr + 2 * b + 1, 0, sem="acquire")
            # the last step left nothing (rounding only): the residual before it
            key = tl.where(key_w > 0, key_w, key_p)
            extra = (4294967295 - (key & 4294967295)).to(tl.int64)
            # no candidate at all (a NaN row, SPEC 3.6): a valid id, never the empty key's -1
            tl.store(token_ids_ptr + b * K1 + depth, tl.where(key > 0, extra, 0))


_recipe_ids = itertools.count()


@functools.lru_cache(maxsize=1024)
def tree_recipe(B: int, K1: int, V: int, planned: tuple, strides: tuple, dtypes: tuple, has_q: bool,
                has_parents: bool, seeded: bool, prefix: bool = False):
    """(id, grids, integer arguments, metas, scratch words) of the three launches, from
    ``triton_kernels.plan``'s (BLOCK_V, S1, chunk1, S2, chunk2, num_warps). Cached, like the chain's recipe,
    and keyed like it on everything Triton specialises on but alignment (strides, dtypes)."""
    block_v, s1, chunk1, s2, chunk2, warps = planned
    n_part = B * K1 * s1
    ints_at = 2 * B
    stats_at = ints_at + (n_part + B + 1) // 2
    walk_at = stats_at + (4 * n_part + 1) // 2
    block_k = max(2, triton.next_power_of_2(K1))
    words = walk_at + (6 * B + 3 * B * block_k + 1) // 2
    block_b = offset_block(B, prefix)
    ints = ((V, K1, s1, n_part, ints_at, stats_at, chunk1),
            (V, K1, s1, n_part, ints_at, stats_at, walk_at, B),
            (V, K1, n_part, ints_at, stats_at, walk_at, B, s2, chunk2))
    metas = (dict(BLOCK_V=block_v, BLOCK_B=block_b, num_warps=warps),
             dict(HAS_Q=has_q, HAS_PARENTS=has_parents, SEEDED=seeded, BLOCK_K=block_k,
                  BLOCK_S=max(2, triton.next_power_of_2(s1)), BLOCK_V=block_v, BLOCK_B=block_b, num_warps=warps),
             dict(HAS_Q=has_q, SEEDED=seeded, BLOCK_K=block_k, BLOCK_V=block_v, BLOCK_B=block_b, num_warps=warps))
    return next(_recipe_ids), ((B, K1, s1), (B, 1, 1), (B, s2, 1)), ints, metas, words


def tree_launches(outs: tuple, rows: tuple, noise: tuple, recipe: tuple, buf, key, stream) -> list:
    """The three launch steps (kernel, grid, args, meta, fast-launch key, stream) for ``triton_launch.launch``.
    outs = (token_ids, num_accepted, accepted_nodes); rows = (logits, stride_logits, draft_ids, parents, q,
    stride_q, temperature, num_draft) (parents and q: any tensor, never read, when absent); noise =
    (uniform, exp, stride_exp, seeds) (stand-ins where absent); recipe from ``tree_recipe``; buf the call's
    scratch of at least its words; key the call's fast-launch key, or None under the interpreter."""
    _, grids, ints, metas, _ = recipe
    logits, stride, draft_ids, parents, q, stride_q, temperature, num_draft = rows
    uniform, exp, stride_exp, seeds = noise
    token_ids, num_accepted, nodes = outs
    walk_args = rows + (uniform, seeds, buf, token_ids, num_accepted, nodes)
    race_args = (logits, stride, q, stride_q, temperature, num_draft, exp, stride_exp, seeds, buf, token_ids)
    # pass numbers 11-13: never a chain launch's key (1-3) under the same recipe id
    return [(_row_stats_kernel, grids[0], (logits, stride, temperature, num_draft, buf) + ints[0], metas[0],
             key and key + (11,), stream),
            (_tree_walk_kernel, grids[1], walk_args + ints[1], metas[1], key and key + (12,), stream),
            (_tree_race_kernel, grids[2], race_args + ints[2], metas[2], key and key + (13,), stream)]
