"""The fused Triton rejection sampler's entry point and launch plan: standard (Leviathan), greedy and
synthetic rules in two launches, the block rule (SPEC 3.7) in three, token trees (SPEC 3.8, ``triton_tree``,
its own launch plan) in three. ``triton_sample_into`` is the entry
point; ``launches`` lists its launches (for the benchmark's host profile); ``plan`` and ``launch_recipe``
are the cached launch plan. The kernels live in ``triton_chain`` (pass 1, pass 2) and ``triton_block``
(the block rule's mass pass), the device functions they share in ``triton_math``, the fast relaunch and
scratch reuse in ``triton_launch``, the Backend in ``triton_sampler``.

Shapes and dtypes (SPEC section 1; B requests, request b proposing k_b drafts, T = sum k_b):

    num_draft_tokens  [B]        int64
    draft_token_ids   [T]        int64, -1 = placeholder (never accepted; the extra token there is from p)
    target_logits     [T + B, V] float32 / bfloat16 / float16 (last dim contiguous); math in float32
    draft_probs       [T, V]     float32 (float64 is read and rounded to float32), or None = one-hot q
    temperature       [B]        float32, 0 = greedy request
    uniform           [T]        float32 in (0, 1)          injected noise, or
    exponential       [B, V]     float32 Exp(1)              (both None with seeds)
    seeds             [B]        int64                       per-request Philox keys (reference.philox)
    rates             [n >= K]   float32                     synthetic conditional rates c_j, or None
    token_ids (out)   [B, K + 1] int64, K >= max k_b         emitted tokens left-aligned, rest -1
    num_accepted (out)[B]        int64
    block             bool                       the block rule (rates must then be None)
    scratch           [words]    int64, one allocation per call: [B, 2] int64 race keys, then
                                 [n_part] int32 argmax index, [B] int32 tickets, [4, n_part] float32
                                 split partials (max, sum, argmax value, residual mass); n_part = B (K + 1) S1

Launch plan (why two launches: at B = 1 the call is launch-bound, at B = 128 it is memory-bound):

    pass 1  grid (B, K + 1, S1)   one program per (request, row, vocabulary split): online max and
                                   sum of exp(l / T), lowest-index argmax of the raw logits. It reads
                                   every target row once and needs no noise and no draft_probs.
    pass 2  grid (B, S2)           every program recombines pass 1's split partials, decides the
                                   request (first rejection, acceptance count) -- redundantly, it is a
                                   few scalar loads -- then runs the exponential race over its split of
                                   the ONE row that emits the extra token (the rejected row: residual
                                   max(p - q, 0), or p for synthetic; the bonus row: p). Split winners
                                   meet in a 64-bit atomic max (score bits, then lowest index); the last
                                   program of the request (an atomic ticket) writes the whole output row.
    mass    grid (B, K - 1, S1)    block rule only, between the two: partial sums over each split of
                                   S_i = sum_v max(w_i p_i(v) - q_i(v), 0), 1 <= i < k_b; w_i needs every
                                   earlier row's normaliser, hence a launch after pass 1. Pass 2 then
                                   finds tau from the end of the block instead of the first rejection,
                                   and races over max(w_tau p_tau - q_tau, 0).

Each program finds its request's first row by summing the draft counts before it (no cumsum launch on
the launch path); a launch of more than ``triton_math.PREFIX_B`` requests, where that sum is O(B^2) work,
appends the prefix sums to the counts instead (a torch.cumsum first).

draft_probs are read only at the draft token (the acceptance test) and along the one rejected row:
an accepted position never needs q(v) for v != x, so the kernel moves fewer bytes than "read every
input once". Pass 1 zeroes pass 2's atomic slots, so no memset launch and no state between calls;
nothing in the launch path syncs with the host (graph-capturable via ``triton_sample_into``).

Under ``TRITON_INTERPRET=1`` (set before this module is imported) the same kernels run on CPU tensors.
"""

from __future__ import annotations

import functools
import itertools

import torch
import triton

from specverify.kernels import triton_math
from specverify.kernels.triton_block import mass_launch
from specverify.kernels.triton_chain import _row_stats_kernel, chain_launches
from specverify.kernels.triton_interpreter import shorten_the_interpreter
from specverify.kernels.triton_launch import launch, launch_key, scratch, unit_stride
from specverify.kernels.triton_math import offset_block
from specverify.kernels.triton_tree import tree_launches, tree_recipe

DEFAULT_BLOCK_V = 1024  # for 4-byte logits; 2048 for 2-byte ones
# Programs per SM worth of work that the split heuristic aims for; more only adds partials.
_WAVES = 4


def _nonempty(t: torch.Tensor) -> torch.Tensor:
    """A zero-element tensor may have a null data pointer; kernels get a 1-element stand-in (never read)."""
    return t if t.numel() else torch.zeros(1, dtype=t.dtype, device=t.device)


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # the interpreter runs programs one by one; a few splits exercise the merge path


@functools.lru_cache(maxsize=4096)
def plan(B: int, K: int, V: int, device: torch.device, block_v: int | None = None,
         splits: tuple[int, int] | None = None, logit_bytes: int = 4,
         num_warps: int | None = None) -> tuple[int, int, int, int, int, int]:
    """(BLOCK_V, S1, chunk1, S2, chunk2, num_warps). Pass 1 splits each row into S1 chunks, pass 2
    each request's race row into S2, so that even B = 1 fills the GPU (one program streams a 150k-entry
    row at a small fraction of HBM bandwidth). Chunks are whole tiles and every split holds a real
    entry. A tile is 16 bytes of logits per thread of 8 warps (the launch-plan sweep of ci/bench_gpu.py
    ranks it first; docs/benchmarks.md). Cached: the host path of a small call is what it costs."""
    block_v = block_v or min(DEFAULT_BLOCK_V * 4 // logit_bytes, max(16, triton.next_power_of_2(V)))
    tiles = triton.cdiv(V, block_v)
    want1, want2 = splits if splits is not None else default_splits(B, K, device)
    chunk1 = triton.cdiv(tiles, min(tiles, max(1, want1))) * block_v
    chunk2 = triton.cdiv(tiles, min(tiles, max(1, want2))) * block_v
    warps = num_warps or (8 if block_v >= 1024 else 4)
    return block_v, triton.cdiv(V, chunk1), chunk1, triton.cdiv(V, chunk2), chunk2, warps


@functools.lru_cache(maxsize=4096)
def default_splits(B: int, K: int, device: torch.device) -> tuple[int, int]:
    """(pass 1's, pass 2's) split targets of ``plan``: _WAVES programs an SM."""
    target = _WAVES * _sm_count(device)
    return triton.cdiv(target, max(1, B * (K + 1))), triton.cdiv(target, max(1, B))


_recipe_ids = itertools.count()


@functools.lru_cache(maxsize=4096)
def launch_recipe(B: int, K1: int, V: int, device: torch.device, block_v: int | None,
                  splits: tuple[int, int] | None, num_warps: int | None, strides: tuple, dtypes: tuple,
                  has_q: bool, seeded: bool, synthetic: bool, block: bool = False, prefix: bool = False):
    """Everything of a call's launches that depends only on shapes, strides, dtypes and options: (id, grid1,
    grid2, scratch words, pass 1 integer arguments, pass 2 integer arguments, pass 1 meta, pass 2 meta,
    mass-pass grid or None, mass-pass meta). Cached, with an id unique to this recipe: the host path is
    what a small call costs."""
    logit_bytes = torch.empty((), dtype=dtypes[0]).element_size()
    block_v, s1, chunk1, s2, chunk2, warps = plan(B, K1 - 1, V, device, block_v, splits, logit_bytes, num_warps)
    # One allocation, no views. Offsets in int64 words.
    n_part = B * K1 * s1
    ints_at = 2 * B
    stats_at = ints_at + (n_part + B + 1) // 2
    words = stats_at + (4 * n_part + 1) // 2
    block_b = offset_block(B, prefix)
    ints1 = (V, K1, s1, n_part, ints_at, stats_at, chunk1)
    ints2 = (V, K1, s1, n_part, ints_at, stats_at, s2, chunk2)
    meta1 = dict(BLOCK_V=block_v, BLOCK_B=block_b, num_warps=warps)
    shared = dict(BLOCK_K=max(2, triton.next_power_of_2(K1)), BLOCK_S=max(2, triton.next_power_of_2(s1)),
                  BLOCK_V=block_v, BLOCK_B=block_b, num_warps=warps)
    meta2 = dict(HAS_Q=has_q, SEEDED=seeded, SYNTHETIC=synthetic, BLOCK=block, FILTERED=False, **shared)
    # the block rule's residual masses S_1..S_{K-1}: none to sum for blocks of one draft
    grid_mass = (B, K1 - 2, s1) if block and K1 > 2 else None
    meta_mass = dict(HAS_Q=has_q, **shared)
    return next(_recipe_ids), (B, K1, s1), (B, s2, 1), words, ints1, ints2, meta1, meta2, grid_mass, meta_mass


def launches(token_ids, num_accepted, num_draft_tokens, draft_token_ids, target_logits, draft_probs, temperature,
             *, uniform=None, exponential=None, seeds=None, rates=None, block=False, block_v=None, splits=None,
             num_warps=None, accepted_nodes=None, tree_parents=None) -> list:
    """The (kernel, grid, args, meta, fast-launch key, stream) of each launch of triton_sample_into (empty
    for B = 0): scratch allocated, plan chosen. Separate so that the host cost of each step can be measured."""
    B, K1 = token_ids.shape
    V = target_logits.shape[1]
    if B == 0:
        return []
    seeded = seeds is not None
    if seeded == (uniform is not None or exponential is not None):
        raise ValueError("give either (uniform, exponential) or seeds")
    if block and rates is not None:
        raise ValueError("block=True is the block rule, rates the synthetic rule: give one")
    # the kernels take each row's stride, but index the row's entries and every 1-D argument by element
    num_draft_tokens, draft_token_ids, temperature = (unit_stride(t) for t in (num_draft_tokens, draft_token_ids,
                                                                                temperature))
    uniform, seeds, rates, tree_parents = (unit_stride(t) for t in (uniform, seeds, rates, tree_parents))
    if target_logits.stride(1) != 1:
        target_logits = target_logits.contiguous()
    if draft_probs is not None and draft_probs.stride(1) != 1:
        draft_probs = draft_probs.contiguous()
    if exponential is not None and exponential.stride(1) != 1:
        exponential = exponential.contiguous()
    dev = target_logits.device
    prefix = B > triton_math.PREFIX_B
    if prefix:      # the requests' draft offsets follow the counts (triton_math.request_offset)
        num_draft_tokens = torch.cat([num_draft_tokens, torch.cumsum(num_draft_tokens, 0) - num_draft_tokens])
    q = draft_probs if draft_probs is not None else target_logits
    drafts = _nonempty(draft_token_ids)
    uniform_arg = _nonempty(uniform) if uniform is not None else temperature
    exp_arg = exponential if exponential is not None else temperature
    seeds_arg = seeds if seeded else num_draft_tokens
    rates_arg = rates if rates is not None else temperature
    tensors = (target_logits, drafts, q, temperature, num_draft_tokens, uniform_arg, exp_arg, seeds_arg, rates_arg,
               token_ids, num_accepted)
    stride, q_stride, exp_stride = target_logits.stride(0), q.stride(0), exp_arg.stride(0) if exponential is not None else 0
    if accepted_nodes is not None:   # the tree rule (SPEC 3.8): triton_tree's three launches
        if block or rates is not None:
            raise ValueError("accepted_nodes selects the tree rule: give neither block=True nor rates")
        planned = plan(B, K1 - 1, V, dev, block_v, splits, target_logits.element_size(), num_warps)
        nodes = _nonempty(accepted_nodes)
        parents = _nonempty(tree_parents) if tree_parents is not None else drafts
        tensors = tensors[:9] + (token_ids, num_accepted, nodes, parents)
        recipe = tree_recipe(B, K1, V, planned, (stride, q_stride, exp_stride), tuple(t.dtype for t in tensors),
                             draft_probs is not None, tree_parents is not None, seeded, prefix)
        key, stream = (None, None) if _INTERPRETED else launch_key(recipe[0], tensors)
        buf = scratch(dev, stream, recipe[4])
        return tree_launches((token_ids, num_accepted, nodes),
                             (target_logits, stride, drafts, parents, q, q_stride, temperature, num_draft_tokens),
                             (uniform_arg, exp_arg, exp_stride, seeds_arg), recipe, buf, key, stream)
    recipe_id, grid1, grid2, words, ints1, ints2, meta1, meta2, grid_mass, meta_mass = launch_recipe(
        B, K1, V, dev, block_v, splits, num_warps, (stride, q_stride, exp_stride), tuple([t.dtype for t in tensors]),
        draft_probs is not None, seeded, rates is not None, block, prefix)
    key, stream = (None, None) if _INTERPRETED else launch_key(recipe_id, tensors)
    buf = scratch(dev, stream, words)
    rows = (target_logits, stride, drafts, q, q_stride, temperature, num_draft_tokens)
    pass1, pass2 = chain_launches(rows, (uniform_arg, exp_arg, exp_stride, seeds_arg, rates_arg),
                                  (token_ids, num_accepted), buf, (grid1, grid2), (ints1, ints2), (meta1, meta2),
                                  key, stream)
    if grid_mass is None:
        return [pass1, pass2]
    return [pass1, mass_launch(rows, buf, grid_mass, ints1, meta_mass, key, stream), pass2]


def triton_sample_into(token_ids: torch.Tensor, num_accepted: torch.Tensor, num_draft_tokens: torch.Tensor,
                       draft_token_ids: torch.Tensor, target_logits: torch.Tensor,
                       draft_probs: torch.Tensor | None, temperature: torch.Tensor, *,
                       uniform: torch.Tensor | None = None, exponential: torch.Tensor | None = None,
                       seeds: torch.Tensor | None = None, rates: torch.Tensor | None = None,
                       block: bool = False, block_v: int | None = None, splits: tuple[int, int] | None = None,
                       num_warps: int | None = None, accepted_nodes: torch.Tensor | None = None,
                       tree_parents: torch.Tensor | None = None) -> None:
    """Write token_ids [B, K + 1] and num_accepted [B] in place; K is token_ids.shape[1] - 1 (static).

    Give (uniform, exponential) for injected noise, or seeds [B] int64 for the in-kernel Philox stream.
    rates (float32 [n >= K]) selects the synthetic rule, block=True the block rule (SPEC 3.7; one more
    launch, between the two, when K >= 2). accepted_nodes ([B, K] int64, written) selects the tree rule
    (SPEC 3.8, ``triton_tree``) with tree_parents ([T] int64; None: chains). No host sync, no
    data-dependent size: safe to capture in a CUDA graph. The caller guarantees K >= max k_b (rows past
    K would not be visited). An output that is a view with gaps (``out[:, :K + 1]`` of a wider buffer) is
    written through a contiguous buffer copied into it: the kernels store by element index.
    """
    given = (token_ids, num_accepted, accepted_nodes)
    written = tuple(t if t is None or t.is_contiguous() else torch.empty(t.shape, dtype=t.dtype, device=t.device)
                    for t in given)
    for step in launches(written[0], written[1], num_draft_tokens, draft_token_ids, target_logits, draft_probs,
                         temperature, uniform=uniform, exponential=exponential, seeds=seeds, rates=rates,
                         block=block, block_v=block_v, splits=splits, num_warps=num_warps,
                         accepted_nodes=written[2], tree_parents=tree_parents):
        launch(*step)
    for out, buffer in zip(given, written):
        if buffer is not out:
            out.copy_(buffer)


def interpreted() -> bool:
    """True when these kernels were decorated under TRITON_INTERPRET=1 (they then run on CPU tensors)."""
    return type(_row_stats_kernel).__name__ == "InterpretedFunction"


_INTERPRETED = interpreted()
if _INTERPRETED:
    shorten_the_interpreter()
