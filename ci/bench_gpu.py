"""GPU benchmark: the fused Triton sampler vs a multi-pass PyTorch baseline vs the memory floor.

    python ci/bench_gpu.py [--quick] [--sweep] [--filters [--filter-batches 128,1]] [--block] [--markdown PATH]
                           [--json PATH] [--set NAME=VALUE ...]

Per (B, V, logit dtype), k = 4 drafts for every request, temperature 1, dense float32 draft probs near
p (acceptance ~ 0.6 per position), drafts drawn from q:

  fused-inj   triton_sample_into with injected noise (uniform [T], exponential [B, V])
  fused-seed  triton_sample_into with per-request seeds (in-kernel Philox, no noise tensors)
  graph       fused-inj replayed from a CUDA graph (launch overhead removed)
  baseline    ordinary PyTorch ops in the structure production samplers use: softmax to a
              materialised probs tensor, then separate accept, recover (residual + race at every
              draft position) and bonus passes, then assembly
  floor       bytes that must move (logits once, draft probs once, one exponential vector per
              request when injected, the small inputs, the outputs) over the device-to-device copy
              bandwidth measured in the same run (bytes read + bytes written)

--filters times the target filters of SPEC 3.4 at V = 151,936 (B = 128 and B = 1) instead, all requests
filtered, side by side on the same inputs in one process: our filtered call (pass 1, the float32 cut
launches of triton_filter, pass 2 reading the cut), our unfiltered call, the softmax of the target rows
followed by FlashInfer's top_k_renorm_probs / top_p_renorm_probs where flashinfer imports, and a
sort-based PyTorch top-k/top-p filter (the structure of vLLM's fallback; min-p as softmax, max and
compare). Each row also says how many target rows the cut launch resolved on its slow path, how many
the lazy cut left uncut, and on how many cut rows the kept set differs from the PyTorch filter's.
`--filters --dry-run` runs the same plumbing on the CPU under TRITON_INTERPRET=1 at a small size
(wall-clock timings, meaningless as speed). Each setting is also timed in turn with the unfiltered call,
as latency (synchronised, wall clock: B = 1 is host-bound, and an unfiltered time taken once drifts by more
than the filters cost); `--filter-batches 1` times B = 1 alone.
``--set`` overrides a ``triton_filter`` constant for the run, as the cut's probes do (``GATHER_IN_PASS1=0``:
the plan whose pass 1 gathers nothing for the cut).

--block times the block rule (SPEC 3.7) against the standard rule at B = 128, k = 4, V = 151,936 on the
same inputs, and measures each rule's mean accepted length over many seeded calls with the same seeds
(paired: the block rule's gain, with its standard error), after checking the block rule against the
reference under injected noise on the first input set.

Timing: CUDA events around each call (the host launch time included: that is what a call costs when
the GPU waits for it), median over many calls, rotating over enough input sets that together they
exceed the L2 cache several times. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import threading
import time

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from reference import SpecBatch, philox  # noqa: E402
from specverify.kernels.triton_kernels import launches, plan, triton_sample_into  # noqa: E402
from specverify.kernels.triton_launch import launch  # noqa: E402
from specverify.kernels import triton_filter  # noqa: E402
from specverify.kernels.triton_sampler import filtered_sample_into  # noqa: E402
from filter_knobs import add_set_option, apply_sets  # noqa: E402

K = 4
L2_MULTIPLE = 4          # input sets together exceed the L2 this many times
MAX_SETS = 64
DEVICE = "cuda"  # a CPU dry run of the plumbing sets this to "cpu" under TRITON_INTERPRET=1


def copy_bandwidth(nbytes: int = 2 << 30) -> float:
    """Bytes read + written per second of a large device-to-device copy, median of 20."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=DEVICE).uniform_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    del src, dst
    return 2 * nbytes / statistics.median(times)


class InputSet:
    """One batch with its noise, index helpers for the baseline, and preallocated outputs."""

    def __init__(self, B: int, V: int, dtype: torch.dtype, salt: int) -> None:
        g = torch.Generator(device=DEVICE).manual_seed(1000 * salt + B)
        T = B * K
        self.B, self.V, self.T = B, V, T
        self.num_draft = torch.full((B,), K, dtype=torch.int64, device=DEVICE)
        self.logits = (torch.randn(T + B, V, generator=g, device=DEVICE) * 3).to(dtype)
        # A drafter close to the target (alpha = sum min(p, q) ~ 0.6 per position): realistic
        # acceptance, so both outcomes (a rejected row's residual, the bonus row) are timed.
        draft_rows = torch.arange(T + B, device=DEVICE).view(B, K + 1)[:, :K].reshape(-1)
        self.q = torch.softmax(self.logits[draft_rows].float() + torch.randn(T, V, generator=g, device=DEVICE),
                               dim=-1)
        self.drafts = torch.multinomial(self.q, 1, generator=g).squeeze(1)
        self.temperature = torch.ones(B, dtype=torch.float32, device=DEVICE)
        bits = lambda *shape: torch.randint(0, 2**32, shape, generator=g, device=DEVICE, dtype=torch.int64)  # noqa: E731
        self.uniform = philox.bits_to_uniform(bits(T))
        self.exponential = -torch.log(philox.bits_to_uniform(bits(B, V)))
        self.seeds = philox.request_seeds(7 * salt, B).to(DEVICE)
        # Baseline index helpers (built once, outside the timed region: only the structure is timed).
        rows = torch.arange(T + B, device=DEVICE).view(B, K + 1)
        self.draft_rows = rows[:, :K].reshape(-1)
        self.bonus_rows = rows[:, K]
        self.req_of_draft = torch.arange(B, device=DEVICE).repeat_interleave(K)
        self.row_temp = self.temperature.repeat_interleave(K + 1)
        self.token_ids = torch.empty((B, K + 1), dtype=torch.int64, device=DEVICE)
        self.num_accepted = torch.empty(B, dtype=torch.int64, device=DEVICE)

    def nbytes(self) -> int:
        return (self.logits.numel() * self.logits.element_size() + self.q.numel() * 4
                + self.exponential.numel() * 4)

    def floor_bytes(self, injected: bool) -> int:
        B, T, V = self.B, self.T, self.V
        n = (T + B) * V * self.logits.element_size() + T * V * 4          # logits, draft probs
        n += T * 8 + B * 8 + B * 4                                         # drafts, k, temperature
        n += B * (K + 1) * 8 + B * 8                                       # outputs
        if injected:
            n += B * V * 4 + T * 4                                         # exponential, uniform
        return n

    def fused_bytes(self, injected: bool) -> int:
        """What the fused kernel moves given its outcome: every logits row once, then per request
        the race row again, its exponential vector (injected) and, when rejected, its q row."""
        B, V = self.B, self.V
        rejected = int((self.num_accepted < K).sum())
        n = (self.T + 2 * B) * V * self.logits.element_size() + rejected * V * 4
        if injected:
            n += B * V * 4
        return n

    def fused(self, seeded: bool = False, **kw) -> None:
        noise = dict(seeds=self.seeds) if seeded else dict(uniform=self.uniform, exponential=self.exponential)
        triton_sample_into(self.token_ids, self.num_accepted, self.num_draft, self.drafts, self.logits, self.q,
                           self.temperature, **noise, **kw)

    def baseline(self) -> tuple[torch.Tensor, torch.Tensor]:
        B = self.B
        probs = torch.softmax(self.logits.float() / self.row_temp[:, None], dim=-1)
        target = probs[self.draft_rows]
        bonus = probs[self.bonus_rows]
        # accept
        p_x = target.gather(1, self.drafts[:, None]).squeeze(1)
        q_x = self.q.gather(1, self.drafts[:, None]).squeeze(1)
        accepted = (q_x > 0) & (self.uniform * q_x <= p_x)
        # recover: residual race at every draft position
        residual = (target - self.q).clamp_(min=0)
        recovered = (residual / self.exponential[self.req_of_draft]).argmax(dim=1)
        # bonus
        bonus_token = (bonus / self.exponential).argmax(dim=1)
        # assemble
        n_acc = accepted.view(B, K).to(torch.int32).cumprod(dim=1).sum(dim=1)
        rec_at = recovered.view(B, K).gather(1, n_acc.clamp(max=K - 1).to(torch.int64)[:, None]).squeeze(1)
        extra = torch.where(n_acc == K, bonus_token, rec_at)
        cols = torch.arange(K + 1, device=DEVICE)[None, :]
        drafts = torch.cat([self.drafts.view(B, K), torch.full((B, 1), -1, device=DEVICE, dtype=torch.int64)], 1)
        tokens = torch.where(cols < n_acc[:, None], drafts, torch.full_like(drafts, -1))
        tokens = torch.where(cols == n_acc[:, None], extra[:, None], tokens)
        return tokens, n_acc.to(torch.int64)


def time_calls(fn, sets, min_calls: int = 30, budget_s: float = 0.4) -> float:
    """Median seconds per call, rotating over the input sets (wall clock, three calls, on a CPU dry run)."""
    n = len(sets)
    if DEVICE == "cpu":
        walls = []
        for i in range(3):
            start = time.perf_counter()
            fn(sets[i % n])
            walls.append(time.perf_counter() - start)
        return statistics.median(walls)
    for i in range(max(n, 3)):
        fn(sets[i % n])
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for i in range(n):
        fn(sets[i % n])
    b.record()
    b.synchronize()
    est = a.elapsed_time(b) / 1e3 / n
    calls = max(min_calls, min(2000, int(budget_s / max(est, 1e-6))))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    for i, (s, e) in enumerate(events):
        s.record()
        fn(sets[i % n])
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) / 1e3


def time_paired(fn_a, sets_a, fn_b, sets_b, min_calls: int = 30, budget_s: float = 0.8) -> tuple[float, float]:
    """Median seconds per call of fn_a and of fn_b, called in turn (a, b, a, b, ...) on set i of each list, each
    from an idle GPU to its results (synchronised before and after, wall clock): a call's latency. Both see the
    same host state, where a host-bound call's time drifts between the two halves of a run by more than the
    filters cost; CUDA events can't time such calls in turn, since one queued behind a GPU-bound call is timed
    from when the GPU reaches it, without its host time."""
    n = len(sets_a)
    if DEVICE == "cpu":     # the interpreter's dry run: its times mean nothing, one call each shows the plumbing
        sync, calls = (lambda: None), 1
    else:
        sync = torch.cuda.synchronize
        for i in range(max(n, 3)):
            fn_a(sets_a[i % n])
            fn_b(sets_b[i % n])
        sync()
        start = time.perf_counter()
        for i in range(n):
            fn_a(sets_a[i % n])
            fn_b(sets_b[i % n])
            sync()
        est = (time.perf_counter() - start) / n
        calls = max(min_calls, min(2000, int(budget_s / max(est, 1e-6))))
    walls: tuple = ([], [])
    for i in range(calls):
        for fn, sets, wall in ((fn_a, sets_a, walls[0]), (fn_b, sets_b, walls[1])):
            sync()
            start = time.perf_counter()
            fn(sets[i % n])
            sync()
            wall.append(time.perf_counter() - start)
    return statistics.median(walls[0]), statistics.median(walls[1])


def time_graph(sets) -> float:
    """fused-inj replayed from CUDA graphs (one per input set, up to 32)."""
    sets = sets[:32]
    graphs = []
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for s in sets:
            s.fused()
    torch.cuda.current_stream().wait_stream(stream)
    for s in sets:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            s.fused()
        graphs.append(g)
    return time_calls(lambda g: g.replay(), graphs)


def make_sets(B: int, V: int, dtype: torch.dtype, l2_bytes: int) -> list[InputSet]:
    first = InputSet(B, V, dtype, 0)
    n = min(MAX_SETS, max(2, math.ceil(L2_MULTIPLE * l2_bytes / first.nbytes())))
    return [first] + [InputSet(B, V, dtype, i) for i in range(1, n)]


def check(sets) -> int:
    """Mismatches between fused (injected) and baseline on the first set, and fused vs the reference
    on a slice of it (numerically ambiguous races can differ: counted, not hidden)."""
    s = sets[0]
    s.fused()
    tokens, n_acc = s.baseline()
    return int((tokens != s.token_ids).any(dim=1).sum() + (n_acc != s.num_accepted).sum())


def bench(Bs, Vs, dtypes, bw, l2_bytes, graphs: bool):
    rows = []
    for dtype in dtypes:
        for V in Vs:
            for B in Bs:
                sets = make_sets(B, V, dtype, l2_bytes)
                s0 = sets[0]
                mism = check(sets)
                t_inj = time_calls(lambda s: s.fused(), sets)
                moved_inj = statistics.mean(s.fused_bytes(True) for s in sets[:4])
                t_seed = time_calls(lambda s: s.fused(seeded=True), sets)
                t_graph = time_graph(sets) if graphs else float("nan")
                t_base = time_calls(lambda s: s.baseline(), sets)
                fb_inj, fb_seed = s0.floor_bytes(True), s0.floor_bytes(False)
                block_v, s1, _, s2, _, _ = plan(B, K, V, torch.device(DEVICE), logit_bytes=s0.logits.element_size())
                row = dict(B=B, V=V, dtype=str(dtype).replace("torch.", ""), sets=len(sets), plan=(block_v, s1, s2),
                           fused_inj_us=t_inj * 1e6, fused_seed_us=t_seed * 1e6, graph_us=t_graph * 1e6,
                           baseline_us=t_base * 1e6,
                           floor_inj_us=fb_inj / bw * 1e6, floor_seed_us=fb_seed / bw * 1e6,
                           inj_GBps=fb_inj / t_inj / 1e9, seed_GBps=fb_seed / t_seed / 1e9,
                           base_GBps=fb_inj / t_base / 1e9,
                           frac_floor_inj=fb_inj / bw / t_inj, frac_floor_seed=fb_seed / bw / t_seed,
                           frac_floor_base=fb_inj / bw / t_base,
                           moved_GBps_inj=moved_inj / t_inj / 1e9,
                           speedup_inj=t_base / t_inj, speedup_seed=t_base / t_seed, mismatches=mism)
                rows.append(row)
                print(f"B={B:4d} V={V:7d} {row['dtype']:8s} fused-inj {row['fused_inj_us']:9.1f} us "
                      f"({row['frac_floor_inj']:.2f} floor)  seed {row['fused_seed_us']:9.1f}  graph "
                      f"{row['graph_us']:8.1f}  base {row['baseline_us']:9.1f}  x{row['speedup_inj']:.2f}  "
                      f"mism {mism}", flush=True)
                del sets
                torch.cuda.empty_cache()
    return rows


FILTER_SETTINGS = {"none": None, "top_k=50": (50, 1.0, 0.0), "top_p=0.9": (0, 0.9, 0.0),
                   "min_p=0.1": (0, 1.0, 0.1), "top_k=50, top_p=0.9": (50, 0.9, 0.0)}


def torch_filter(logits: torch.Tensor, temperature: torch.Tensor, k: int, p: float, min_p: float) -> torch.Tensor:
    """Filtered probabilities by sorting, in float32 (vLLM's fallback structure): top-k and top-p on the
    sorted logits, then softmax; min-p as softmax, max and compare."""
    x = logits / temperature[:, None]
    if k or p < 1:
        x, order = x.sort(dim=-1, descending=True)
        if k:
            x = x.masked_fill(torch.arange(x.shape[1], device=x.device)[None, :] >= k, float("-inf"))
        if p < 1:
            probs = x.softmax(dim=-1)
            before = probs.cumsum(dim=-1) - probs
            x = x.masked_fill(before >= p, float("-inf"))
        x = torch.empty_like(x).scatter_(1, order, x)
    probs = x.softmax(dim=-1)
    if min_p > 0:
        probs = probs.masked_fill(probs < min_p * probs.amax(dim=-1, keepdim=True), 0.0)
    return probs


def flashinfer_filter(logits: torch.Tensor, temperature: torch.Tensor, k: int, p: float, min_p: float):
    """Softmax, then FlashInfer's sorting-free renormalisation (None where flashinfer does not import or
    has no renormalisation for the setting)."""
    try:
        from flashinfer.sampling import top_k_renorm_probs, top_p_renorm_probs  # noqa: PLC0415
    except ImportError:
        return None
    if min_p > 0:
        return None
    probs = (logits / temperature[:, None]).softmax(dim=-1)
    if k:
        probs = top_k_renorm_probs(probs, k)
    if p < 1:
        probs = top_p_renorm_probs(probs, p)
    return probs


def filter_cost(l2_bytes, Bs=(128, 1), V: int = 151_936) -> list[dict]:
    """Per B and setting: median microseconds of our filtered call, our unfiltered call, FlashInfer's
    softmax + renormalisation and the PyTorch sort filter over the same target rows; every request random
    (temperature 1) and filtered."""
    rows = []
    for B in Bs:
        sets = make_sets(B, V, torch.float32, l2_bytes)
        base = time_calls(lambda s: s.fused(), sets) * 1e6
        for name, setting in FILTER_SETTINGS.items():
            row = dict(B=B, V=V, setting=name, unfiltered_us=base)
            if setting is None:
                rows.append(dict(row, us=base, ratio=1.0))
                continue
            k, p, min_p = setting
            filters = tuple(torch.full((B,), v, device=DEVICE, dtype=dt) for v, dt in
                            zip(setting, (torch.int64, torch.float32, torch.float32)))
            pairs = [(s, SpecBatch(s.num_draft, s.drafts, s.logits, s.q, s.temperature, *filters)) for s in sets]

            def ours(pair):
                s, batch = pair
                filtered_sample_into(s.token_ids, s.num_accepted, batch, uniform=s.uniform, exponential=s.exponential)
            t = time_calls(ours, pairs) * 1e6
            row.update(us=t, ratio=t / base, **_cut_stats(pairs[0], k, p, min_p))
            # the ratio again from each call's latency, taken in turn with the unfiltered one (B = 1 is
            # host-bound: its unfiltered time, measured once before the settings, drifts by more than the
            # filters cost)
            plain_us, filtered_us = (x * 1e6 for x in time_paired(lambda s: s.fused(), sets, ours, pairs))
            row.update(paired_unfiltered_us=plain_us, paired_us=filtered_us, paired_ratio=filtered_us / plain_us)
            row["torch_sort_us"] = time_calls(lambda s: torch_filter(s.logits, s.row_temp, k, p, min_p),
                                              sets) * 1e6
            if flashinfer_filter(sets[0].logits, sets[0].row_temp, k, p, min_p) is not None:
                row["flashinfer_us"] = time_calls(
                    lambda s: flashinfer_filter(s.logits, s.row_temp, k, p, min_p), sets) * 1e6
            rows.append(row)
            print(f"filters B={B} V={V} {name:22s} ours {t:9.1f} us x{t / base:.2f}  torch sort "
                  f"{row['torch_sort_us']:9.1f}  flashinfer {row.get('flashinfer_us', float('nan')):9.1f}  "
                  f"slow rows {row['slow_rows']}/{row['rows']}  uncut {row['uncut_rows']}  "
                  f"kept sets unlike torch's {row['kept_differ']}  "
                  f"latency in turn: {filtered_us:.1f} against {plain_us:.1f} us, x{filtered_us / plain_us:.2f}",
                  flush=True)
        del sets
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    return rows


def work_space() -> tuple:
    """(work, records, tickets, views) of this thread's cut work space (``triton_filter._work``): what its last
    filtered call left there."""
    return next(held for (thread, _, _), held in triton_filter._buffers.items() if thread == threading.get_ident())


def last_records(rows: int) -> torch.Tensor:
    """[6, rows] the cut records the last filtered call of ``rows`` target rows left, on the CPU."""
    return work_space()[1][:6 * rows].view(6, rows).cpu()


def _cut_stats(pair, k: int, p: float, min_p: float) -> dict:
    """After our filtered call on ``pair``: how many target rows took the cut's slow path, how many the lazy
    cut left uncut (``triton_lazy``: pass 2 needs no cut of them), and on how many of the cut rows the kept set
    differs from the PyTorch sort filter's (float32 both; near-cut tokens may differ)."""
    s, batch = pair
    filtered_sample_into(s.token_ids, s.num_accepted, batch, uniform=s.uniform, exponential=s.exponential)
    rows = s.logits.shape[0]
    record = last_records(rows)
    values, index = record[0], record[1]
    logits = s.logits.cpu()
    ids = torch.arange(logits.shape[1])[None, :]
    keep = ((logits > values[:, None]) | ((logits == values[:, None]) & (ids <= index[:, None]))) & \
        (torch.exp(logits / s.row_temp.cpu()[:, None] - record[4][:, None]) >= record[2][:, None])
    theirs = torch_filter(s.logits, s.row_temp, k, p, min_p).cpu() > 0
    cut = record[5] <= 2
    return dict(rows=rows, slow_rows=int((record[5] == 2).sum()), uncut_rows=int((~cut).sum()),
                kept_differ=int(((keep != theirs).any(dim=1) & cut).sum()))


def block_cost(l2_bytes, bw, B: int = 128, V: int = 151_936, draws: int = 128) -> list[dict]:
    """Per logit dtype and rule: median microseconds (injected, seeded), fraction of the memory floor, and
    the mean of num_accepted over ``draws`` seeded calls on every input set (the same seeds for both rules),
    with the block rule's paired gain over the standard rule and its standard error."""
    import reference
    from specverify.checks.differential import compare_to_reference

    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        sets = make_sets(B, V, dtype, l2_bytes)
        s0 = sets[0]
        batch = SpecBatch(s0.num_draft, s0.drafts, s0.logits, s0.q, s0.temperature)
        noise = reference.Noise(s0.uniform, s0.exponential)
        s0.fused(block=True)
        got = reference.SpecOutput(s0.token_ids.clone(), s0.num_accepted.clone())
        comparison = compare_to_reference(batch, got, noise, method="block")
        accepted = {}
        for method in ("standard", "block"):
            blk = method == "block"
            t_inj = time_calls(lambda s: s.fused(block=blk), sets)
            t_seed = time_calls(lambda s: s.fused(seeded=True, block=blk), sets)
            counts = []
            for d in range(draws):
                for i, s in enumerate(sets):
                    s.seeds = philox.request_seeds(100_000 * d + i, B).to(DEVICE)
                    s.fused(seeded=True, block=blk)
                    counts.append(s.num_accepted.clone())
            accepted[method] = torch.cat(counts).double()
            fb_inj, fb_seed = s0.floor_bytes(True), s0.floor_bytes(False)
            row = dict(B=B, V=V, K=K, dtype=str(dtype).replace("torch.", ""), method=method, inj_us=t_inj * 1e6,
                       seed_us=t_seed * 1e6, frac_floor_inj=fb_inj / bw / t_inj, frac_floor_seed=fb_seed / bw / t_seed,
                       mean_accepted=float(accepted[method].mean()), calls=draws * len(sets),
                       requests=int(accepted[method].numel()))
            if blk:
                gain = accepted["block"] - accepted["standard"]
                row.update(gain=float(gain.mean()), gain_se=float(gain.std() / math.sqrt(gain.numel())),
                           real_divergences=len(comparison.real), ambiguous_divergences=len(comparison.ambiguous),
                           decisions=comparison.decisions)
            rows.append(row)
            print(f"block-vs-standard {row['dtype']:8s} {method:8s} inj {row['inj_us']:8.1f} us "
                  f"({row['frac_floor_inj']:.2f} floor)  seed {row['seed_us']:8.1f} us  mean accepted "
                  f"{row['mean_accepted']:.4f}" + (f"  gain {row['gain']:+.4f} +- {row['gain_se']:.4f}  vs reference: "
                                                    f"{row['real_divergences']} real, {row['ambiguous_divergences']} "
                                                    f"ambiguous of {row['decisions']}" if blk else ""), flush=True)
        del sets
        torch.cuda.empty_cache()
    return rows


def block_markdown(rows, bw, meta) -> str:
    lines = [f"Device: {meta['device']}; torch {meta['torch']}, triton {meta['triton']}; {meta['date']}; "
             f"`{meta['command']}`. Copy bandwidth (read + write) {bw / 1e12:.2f} TB/s.", "",
             "| logits | rule | injected (us) | of floor | seeded (us) | of floor | mean accepted | block gain (± s.e.) "
             "| vs reference |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        gain = f"{r['gain']:+.4f} ± {r['gain_se']:.4f}" if "gain" in r else ""
        ref = (f"{r['real_divergences']} real, {r['ambiguous_divergences']} ambiguous of {r['decisions']} decisions"
               if "gain" in r else "")
        lines.append(f"| {r['dtype']} | {r['method']} | {r['inj_us']:.1f} | {r['frac_floor_inj']:.2f} | "
                     f"{r['seed_us']:.1f} | {r['frac_floor_seed']:.2f} | {r['mean_accepted']:.4f} | {gain} | {ref} |")
    r = rows[0]
    lines += ["", f"B = {r['B']}, k = {r['K']}, V = {r['V']}; mean accepted over {r['calls']} seeded calls "
              f"({r['requests']} requests) per rule, the same seeds for both rules."]
    return "\n".join(lines) + "\n"


def filter_markdown(rows, meta) -> str:
    lines = [f"Device: {meta['device']}; torch {meta['torch']}, triton {meta['triton']}; {meta['date']}; "
             f"`{meta['command']}`.", "",
             "| B | filter (every request) | ours, filtered (us) | vs ours unfiltered | ours unfiltered (us) "
             "| softmax + FlashInfer renorm (us) | PyTorch sort filter (us) | slow-path rows | rows left uncut "
             "| kept sets unlike PyTorch's (of the cut rows) | latency in turn: filtered / unfiltered (us) "
             "| latency ratio |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        fi = f"{r['flashinfer_us']:.1f}" if "flashinfer_us" in r else "-"
        sort = f"{r['torch_sort_us']:.1f}" if "torch_sort_us" in r else "-"
        slow = f"{r['slow_rows']}/{r['rows']}" if "rows" in r else "-"
        paired = f"{r['paired_us']:.1f} / {r['paired_unfiltered_us']:.1f}" if "paired_us" in r else "-"
        paired_ratio = f"{r['paired_ratio']:.2f}" if "paired_us" in r else "-"
        lines.append(f"| {r['B']} | {r['setting']} | {r['us']:.1f} | {r['ratio']:.2f} | {r['unfiltered_us']:.1f} | "
                     f"{fi} | {sort} | {slow} | {r.get('uncut_rows', '-')} | {r.get('kept_differ', '-')} | {paired} "
                     f"| {paired_ratio} |")
    return "\n".join(lines) + "\n"


def sweep(bw, l2_bytes):
    """Launch-plan variants at the target shapes (printed; the defaults in triton_kernels.plan come from it)."""
    out = []
    for B, V in ((1, 151_936), (32, 151_936), (128, 151_936)):
        sets = make_sets(B, V, torch.float32, l2_bytes)
        fb = sets[0].floor_bytes(True)
        for block_v in (1024, 2048, 4096):
            for warps in (4, 8):
                for waves in (1, 2, 4, 8, 16):
                    target = waves * torch.cuda.get_device_properties(0).multi_processor_count
                    splits = (triton.cdiv(target, B * (K + 1)), triton.cdiv(target, B))
                    t = time_calls(lambda s: s.fused(block_v=block_v, splits=splits, num_warps=warps), sets,
                                   budget_s=0.15)
                    out.append(dict(B=B, V=V, block_v=block_v, warps=warps, waves=waves, us=t * 1e6,
                                    frac=fb / bw / t))
                    print(f"sweep B={B:4d} V={V} block_v={block_v:5d} warps={warps} waves={waves:2d} "
                          f"{t * 1e6:9.1f} us  {fb / bw / t:.2f} floor", flush=True)
        del sets
        torch.cuda.empty_cache()
    return out


def host_profile():
    """Host microseconds per step of one B = 1 call (wall clock, no sync inside the loop)."""
    import time
    out = {}
    for B in (1, 128):
        s = InputSet(B, 151_936, torch.float32, 0)
        args = (s.token_ids, s.num_accepted, s.num_draft, s.drafts, s.logits, s.q, s.temperature)
        noise = dict(uniform=s.uniform, exponential=s.exponential)
        plan_ = launches(*args, **noise)

        def wall(fn, n=400):
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            return (t1 - t0) / n * 1e6

        compiled = [k[g](*a, **m) for k, g, a, m, *_ in plan_]
        direct = [(c, g, a + tuple(v for name, v in m.items() if name != "num_warps"))
                  for c, (k, g, a, m, *_) in zip(compiled, plan_)]
        steps = {
            "torch.empty": lambda: torch.empty(16, device="cuda"),
            "plan (cached)": lambda: plan(B, K, 151_936, torch.device("cuda"), None, None, 4, None),
            "launches() (plan + 1 alloc)": lambda: launches(*args, **noise),
            "pass 1 launch (JIT)": lambda: plan_[0][0][plan_[0][1]](*plan_[0][2], **plan_[0][3]),
            "pass 2 launch (JIT)": lambda: plan_[1][0][plan_[1][1]](*plan_[1][2], **plan_[1][3]),
            "pass 1+2 direct (CompiledKernel)": lambda: [c[g](*a) for c, g, a in direct],
            "pass 1+2 launch() (fast relaunch)": lambda: [launch(*step) for step in plan_],
            "triton_sample_into": lambda: s.fused(),
            "baseline": lambda: s.baseline(),
        }
        for name, fn in steps.items():
            try:
                out[f"B={B} {name}"] = wall(fn)
            except Exception as e:  # noqa: BLE001 (a probe: report and go on)
                out[f"B={B} {name}"] = repr(e)[:200]
            print(f"host B={B} {name:36s} {out[f'B={B} {name}']}", flush=True)
    return out


def markdown(rows, bw, meta) -> str:
    lines = [f"Device: {meta['device']}; torch {meta['torch']}, triton {meta['triton']}; {meta['date']}.",
             f"Copy bandwidth (read + write) measured in the same run: {bw / 1e12:.2f} TB/s. k = {K} for every "
             "request, temperature 1, dense float32 draft probs close to p (alpha ~ 0.6), drafts drawn from q.", "",
             "| B | V | logits | fused inj (us) | GB/s | of floor | fused seeded (us) | of floor | graph (us) "
             "| baseline (us) | of floor | speedup inj | speedup seeded | kernel GB/s moved |",
             "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['B']} | {r['V']} | {r['dtype']} | {r['fused_inj_us']:.1f} | {r['inj_GBps']:.0f} | "
                     f"{r['frac_floor_inj']:.2f} | {r['fused_seed_us']:.1f} | {r['frac_floor_seed']:.2f} | "
                     f"{r['graph_us']:.1f} | {r['baseline_us']:.1f} | {r['frac_floor_base']:.2f} | "
                     f"{r['speedup_inj']:.2f} | {r['speedup_seed']:.2f} | {r['moved_GBps_inj']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="B in {1, 128}, V = 151936, fp32 only")
    ap.add_argument("--sweep", action="store_true", help="also sweep launch-plan variants")
    ap.add_argument("--filters", action="store_true", help="the cost of target filters at B = 128, V = 151936")
    ap.add_argument("--filter-batches", default="128,1", help="the batch sizes --filters times (default 128,1)")
    ap.add_argument("--block", action="store_true",
                    help="the block rule against the standard rule at B = 128, k = 4, V = 151936")
    ap.add_argument("--dry-run", action="store_true",
                    help="with --filters: the plumbing on the CPU under TRITON_INTERPRET=1, at B = 2, V = 12,000")
    ap.add_argument("--no-graph", action="store_true")
    ap.add_argument("--host-profile", action="store_true", help="host cost of each step of a call, then stop")
    ap.add_argument("--markdown", help="write the table here")
    ap.add_argument("--json", help="write all numbers here")
    add_set_option(ap)
    args = ap.parse_args()
    apply_sets(triton_filter, args.set)
    if args.dry_run:
        if not (args.filters and os.environ.get("TRITON_INTERPRET") == "1"):
            sys.exit("--dry-run runs --filters on the CPU: set TRITON_INTERPRET=1 and pass --filters")
        global DEVICE
        DEVICE = "cpu"
        rows = filter_cost(0, Bs=(2,), V=12_000)      # above the gather capacity: the sample bracket runs
        meta = dict(device="CPU (Triton interpreter, dry run)", torch=torch.__version__, triton=triton.__version__,
                    date=datetime.date.today().isoformat(), command="python " + " ".join(sys.argv))
        _write(args, dict(meta=meta, filters=rows), filter_markdown(rows, meta))
        return
    if not torch.cuda.is_available():
        sys.exit("bench_gpu.py needs a CUDA GPU")
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    meta = dict(device=f"{props.name} ({props.multi_processor_count} SMs, L2 {l2 >> 20} MB)",
                torch=torch.__version__, triton=triton.__version__,
                date=datetime.date.today().isoformat(), command="python " + " ".join(sys.argv))
    print(meta, flush=True)
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s", flush=True)
    result = dict(meta=meta, copy_bandwidth=bw)
    if args.host_profile:
        result["host"] = host_profile()
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
        return
    if args.filters:
        result["filters"] = filter_cost(l2, Bs=tuple(int(b) for b in args.filter_batches.split(",")))
        _write(args, result, filter_markdown(result["filters"], meta))
        return
    if args.block:
        result["block"] = block_cost(l2, bw)
        _write(args, result, block_markdown(result["block"], bw, meta))
        return
    if args.sweep:
        result["sweep"] = sweep(bw, l2)
    if args.quick:
        Bs, Vs, dtypes = (1, 128), (151_936,), (torch.float32,)
    else:
        Bs, Vs, dtypes = (1, 32, 128, 256), (32_000, 151_936, 262_144), (torch.float32, torch.bfloat16)
    result["rows"] = bench(Bs, Vs, dtypes, bw, l2, graphs=not args.no_graph)
    _write(args, result, markdown(result["rows"], bw, meta))


def _write(args, result: dict, table: str) -> None:
    """Print the table; write it to --markdown and every number to --json when asked."""
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
