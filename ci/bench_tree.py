"""Token-tree benchmark (SPEC 3.8): the Triton tree kernel vs a batched PyTorch baseline vs the memory floor.

    python ci/bench_tree.py [--quick] [--dtype bf16|fp32] [--drafter none|dense] [--markdown PATH] [--json PATH]
    TRITON_INTERPRET=1 python ci/bench_tree.py --dry-run      (the plumbing on CPU, tiny sizes, no timings)

Per (B, tree of N nodes, V): every request carries the same EAGLE-like top-k tree (``eagle_parents``: N
nodes over depth D, each level's nodes the children of the previous level's first nodes, two or more
per parent, siblings consecutive); tokens are the parent row's top-k (sibling i takes the (i+1)-th most
likely token of a noisy copy of its parent's row), one-hot q (draft_probs None, EAGLE's deterministic
drafts) unless --drafter dense, temperature 1, logits N(0, 3^2) in --dtype. Columns:

  triton    triton_sample_into(accepted_nodes=...) with per-request seeds (in-kernel Philox), the three
            launches of specverify/kernels/triton_tree.py
  torch     ``torch_tree``: ordinary batched PyTorch, float32: softmax of every row to a materialised
            probs tensor, then one step per node (every request tries one child: gather, test, a
            [B, V] residual update, the next child from linked lists built outside the timing), then
            the exponential race; exponentials drawn in the call
  floor     the target logits read once (every row of every tree: each one may be needed) over the
            device-to-device copy bandwidth measured in the same run (bytes read + written / time)

Timing: CUDA events around each call (host launch time included), median over many calls, rotating
over input sets that together exceed the L2 cache several times. The first case is checked against
reference.sample(method="tree") under injected noise before anything is timed.

Another implementation gets a column of its own: ``run(cases, impls, bw)`` takes impls, a dict of name
-> make(case) returning a zero-argument callable that runs one verification of that case's batch (an
``InputSet``: ``batch``, ``seeds``, ``parents``, ``links``, ...), e.g. SGLang's tree kernel over
``specverify.adapters.tree_layout.to_linked_lists`` of the batch; ``main(extra={"sglang": make})`` adds
it to the default table.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))     # bench_gpu, also when imported

import reference  # noqa: E402
from bench_gpu import _write as write_outputs  # noqa: E402
from reference import Noise, SpecBatch, philox  # noqa: E402
from specverify.kernels.triton_kernels import triton_sample_into  # noqa: E402

DEVICE = "cuda"          # --dry-run sets "cpu" (under TRITON_INTERPRET=1)
L2_MULTIPLE = 4          # input sets together exceed the L2 this many times
MAX_SETS = 64
TREES = ((8, 4), (32, 5), (64, 6))       # (nodes, depth)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def eagle_parents(n: int, depth: int) -> list[int]:
    """Parents of an EAGLE-like top-k tree of n nodes and the given depth: level sizes as even as n allows,
    each level's nodes spread over the first ceil(size / 2) nodes of the level before (its most likely
    ones), siblings consecutive, two or more children per expanded parent where the sizes allow."""
    sizes = [n // depth + (1 if level < n % depth else 0) for level in range(depth)]
    parents, previous, start = [], [-1], 0
    for size in sizes:
        expanded = previous[: max(1, (size + 1) // 2)]
        parents += sorted(expanded[i % len(expanded)] for i in range(size))
        previous, start = list(range(start, start + size)), start + size
    return parents


def torch_tree_links(parents: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(first_child [T + B], next_sibling [T], row [T + B]) of the batch's trees, as the linked lists a
    serving engine hands to its verifier (keys: node t for flat slot t, T + b for request b's root)."""
    B, T = k.shape[0], parents.shape[0]
    d_off = torch.cumsum(k, 0) - k
    request = torch.repeat_interleave(torch.arange(B, device=k.device), k)
    key = torch.where(parents >= 0, d_off[request] + parents, T + request)
    first = torch.full((T + B,), T, dtype=torch.int64, device=k.device)
    first.scatter_reduce_(0, key, torch.arange(T, device=k.device), "amin")
    first = torch.where(first == T, -1, first)
    order = torch.sort(key, stable=True).indices
    sibling = torch.full((T,), -1, dtype=torch.int64, device=k.device)
    same = key[order[1:]] == key[order[:-1]]
    sibling[order[:-1][same]] = order[1:][same]
    row = torch.cat([torch.arange(T, device=k.device) + request + 1, d_off + torch.arange(B, device=k.device)])
    return first, sibling, row


def torch_tree(batch: SpecBatch, links: tuple, uniform: torch.Tensor, steps: int,
               exponential: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The tree rule in plain batched PyTorch, float32, no host sync (random requests only): the baseline.
    Each of ``steps`` (>= max N_b) steps tries one child of every request still walking."""
    first, sibling, row = links
    B, T, V = batch.num_requests, batch.num_drafts, batch.vocab_size
    K, dev = batch.max_draft, batch.target_logits.device
    k = batch.num_draft_tokens
    request = torch.repeat_interleave(torch.arange(B, device=dev), k + 1, output_size=T + B)
    probs = torch.softmax(batch.target_logits.float() / batch.temperature[request, None], dim=-1)
    x_all, q_all = batch.draft_token_ids, batch.draft_probs
    d_off = torch.cumsum(k, 0) - k
    cand, here = first[T:].clone(), row[T:].clone()
    r, m = probs[here], torch.ones(B, device=dev)
    depth = torch.zeros(B, dtype=torch.int64, device=dev)
    tokens = torch.full((B, K + 1), -1, dtype=torch.int64, device=dev)
    nodes = torch.full((B, K + 1), -1, dtype=torch.int64, device=dev)
    b_idx = torch.arange(B, device=dev)
    for _ in range(steps):
        active = cand >= 0
        c = cand.clamp(min=0)
        x = x_all[c]
        xc = x.clamp(min=0)
        q_x = q_all[c, xc] if q_all is not None else torch.ones(B, device=dev)
        r_x = r.gather(1, xc[:, None])[:, 0]
        tried = active & (x >= 0)
        accept = tried & (q_x > 0) & (r_x > 0) & (uniform[c] * q_x <= r_x / m)
        if q_all is not None:
            r_new = torch.clamp(r - m[:, None] * q_all[c].float(), min=0)
        else:
            r_new = r.scatter(1, xc[:, None], torch.clamp(r_x - m, min=0)[:, None])
        m_new = r_new.sum(dim=1)
        keep = tried & ~accept & (m_new > 0)
        r, m = torch.where(keep[:, None], r_new, r), torch.where(keep, m_new, m)
        slot = depth.clamp(max=K)
        tokens[b_idx, slot] = torch.where(accept, x, tokens[b_idx, slot])
        nodes[b_idx, slot] = torch.where(accept, c - d_off, nodes[b_idx, slot])
        depth += accept.to(torch.int64)
        here = torch.where(accept, row[c], here)
        r, m = torch.where(accept[:, None], probs[here], r), torch.where(accept, 1.0, m)
        cand = torch.where(accept, first[c], torch.where(active, sibling[c], cand))
    if exponential is None:
        exponential = torch.empty(B, V, device=dev).exponential_()
    y = torch.where(r > 0, r / exponential, -1.0).argmax(dim=1)
    tokens[b_idx, depth] = y
    return tokens, depth, nodes[:, :K]


class InputSet:
    """One batch of B identical-shape trees (``eagle_parents``), per-request seeds, preallocated outputs,
    and the baseline's linked lists."""

    def __init__(self, B: int, n: int, depth: int, V: int, dtype: torch.dtype, dense: bool, salt: int) -> None:
        g = torch.Generator(device=DEVICE).manual_seed(1000 * salt + B + n)
        local = torch.tensor(eagle_parents(n, depth), dtype=torch.int64, device=DEVICE)
        self.parents = local.repeat(B)
        k = torch.full((B,), n, dtype=torch.int64, device=DEVICE)
        T = B * n
        logits = torch.randn(T + B, V, generator=g, device=DEVICE) * 2
        # a peaked target, as a served model's: four likely tokens per row (logits +16, +15, +14, +13), so
        # that the top-k drafts are accepted a few levels deep
        likely = torch.randint(0, V, (T + B, 4), generator=g, device=DEVICE)
        logits.scatter_add_(1, likely, torch.tensor([16.0, 15.0, 14.0, 13.0], device=DEVICE).expand(T + B, 4))
        # sibling i: the (i + 1)-th largest entry of a noisy copy of the parent's row
        rank = torch.tensor([sum(1 for j in range(i) if eagle_parents(n, depth)[j] == p)
                             for i, p in enumerate(eagle_parents(n, depth))], device=DEVICE).repeat(B)
        parent_row = torch.arange(B, device=DEVICE).repeat_interleave(n) * (n + 1) + self.parents + 1
        noisy = logits[parent_row] + torch.randn(T, V, generator=g, device=DEVICE)
        drafts = noisy.topk(int(rank.max()) + 1 if T else 1, dim=1).indices.gather(1, rank[:, None])[:, 0]
        q = torch.softmax(noisy, dim=1) if dense else None
        del noisy
        self.batch = SpecBatch(k, drafts, logits.to(dtype), q, torch.ones(B, device=DEVICE),
                               tree_parents=self.parents)
        self.seeds = philox.request_seeds(salt, B).to(DEVICE)
        self.uniform = torch.rand(T, generator=g, device=DEVICE)
        self.links = torch_tree_links(self.parents, k)
        self.out = (torch.empty((B, n + 1), dtype=torch.int64, device=DEVICE),
                    torch.empty(B, dtype=torch.int64, device=DEVICE),
                    torch.empty((B, n), dtype=torch.int64, device=DEVICE))
        self.B, self.n, self.depth, self.V = B, n, depth, V

    def nbytes(self) -> int:
        t = self.batch.target_logits
        q = self.batch.draft_probs
        return t.numel() * t.element_size() + (0 if q is None else q.numel() * 4)

    def floor_bytes(self) -> int:
        """Every target row once, the small inputs and the outputs."""
        t = self.batch.target_logits
        return t.numel() * t.element_size() + self.B * 8 * (3 * self.n + 4)


def make_triton(s: InputSet, **plan):
    b = s.batch
    return lambda: triton_sample_into(s.out[0], s.out[1], b.num_draft_tokens, b.draft_token_ids, b.target_logits,
                                      b.draft_probs, b.temperature, seeds=s.seeds, accepted_nodes=s.out[2],
                                      tree_parents=b.tree_parents, **plan)


def make_torch(s: InputSet):
    return lambda: torch_tree(s.batch, s.links, s.uniform, s.n)


def time_calls(fns: list) -> float:
    """Median seconds per call, rotating over ``fns`` (one per input set): bench_gpu's CUDA-event timing,
    or, in the dry run, a few wall-clock calls (the plumbing only)."""
    if DEVICE == "cuda":
        from bench_gpu import time_calls as cuda_time_calls     # noqa: PLC0415 (needs CUDA only here)
        return cuda_time_calls(lambda fn: fn(), fns)
    times = []
    for i in range(3):
        t0 = time.perf_counter()
        fns[i % len(fns)]()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def make_sets(B: int, n: int, depth: int, V: int, dtype, dense: bool, l2_bytes: int) -> list[InputSet]:
    first = InputSet(B, n, depth, V, dtype, dense, 0)
    count = min(MAX_SETS, max(1, -(-L2_MULTIPLE * l2_bytes // first.nbytes())))
    return [first] + [InputSet(B, n, depth, V, dtype, dense, salt) for salt in range(1, count)]


def check(s: InputSet) -> int:
    """Requests whose tokens or paths differ from the reference's under the set's injected noise (the
    baseline's uniforms, exponentials drawn here); 0 expected, a float32 near-tie may make one."""
    b = s.batch
    exponential = torch.empty(s.B, s.V, device=DEVICE).exponential_()
    noise = Noise(s.uniform, exponential)
    want = reference.sample(b.to("cpu"), method="tree", noise=noise.to("cpu"))
    token_ids, num_accepted, nodes = (torch.empty_like(t) for t in s.out)
    triton_sample_into(token_ids, num_accepted, b.num_draft_tokens, b.draft_token_ids, b.target_logits,
                       b.draft_probs, b.temperature, uniform=s.uniform, exponential=exponential,
                       accepted_nodes=nodes, tree_parents=b.tree_parents)
    base = torch_tree(b, s.links, s.uniform, s.n, exponential)
    bad = 0
    for got in ((token_ids, num_accepted, nodes), base):
        same = (got[0].cpu() == want.token_ids).all(1) & (got[2].cpu() == want.accepted_nodes).all(1)
        bad += int((~same).sum())
    return bad


def run(cases, impls: dict, bw: float, l2_bytes: int, dtype, dense: bool) -> list[dict]:
    """One row per (B, nodes, depth, V) of ``cases``: each implementation's median seconds per call, the
    floor, and the mean accepted depth of the Triton kernel on the first set (a sanity figure)."""
    rows = []
    for B, n, depth, V in cases:
        sets = make_sets(B, n, depth, V, dtype, dense, l2_bytes)
        row = dict(B=B, nodes=n, depth=depth, V=V, sets=len(sets), floor_s=sets[0].floor_bytes() / bw)
        if not rows:
            row["check_mismatches"] = check(sets[0])
        for name, make in impls.items():
            row[f"{name}_s"] = time_calls([make(s) for s in sets])
        make_triton(sets[0])()
        row["mean_depth"] = float(sets[0].out[1].float().mean())
        print(row, flush=True)
        rows.append(row)
        del sets
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    return rows


def markdown(rows: list[dict], names: list[str], bw: float, meta: dict) -> str:
    lines = [f"Token trees (SPEC 3.8) on {meta['device']}, {meta['date']}, torch {meta['torch']}, triton "
             f"{meta['triton']}; `{meta['command']}`. Logits {meta['dtype']}, drafter {meta['drafter']}, "
             f"temperature 1. Copy bandwidth (read + write) {bw / 1e12:.2f} TB/s. Times are medians, in us.", "",
             "| B | nodes | depth | V | " + " | ".join(names) + " | floor | " +
             " | ".join(f"{name} / triton" for name in names[1:]) + " | triton / floor | mean depth |",
             "|" + "---|" * (6 + 2 * len(names))]
    for r in rows:
        us = [r[f"{name}_s"] * 1e6 for name in names]
        lines.append(f"| {r['B']} | {r['nodes']} | {r['depth']} | {r['V']:,} | " + " | ".join(f"{t:.1f}" for t in us)
                     + f" | {r['floor_s'] * 1e6:.1f} | " + " | ".join(f"{t / us[0]:.2f}" for t in us[1:])
                     + f" | {us[0] / (r['floor_s'] * 1e6):.2f} | {r['mean_depth']:.2f} |")
    return "\n".join(lines) + "\n"


def main(extra: dict | None = None) -> None:
    global DEVICE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="B in {1, 128}, 64-node trees, V = 151,936")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--drafter", choices=("none", "dense"), default="none")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch baseline column")
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU (TRITON_INTERPRET=1)")
    ap.add_argument("--markdown", help="write the table here")
    ap.add_argument("--json", help="write all numbers here")
    args = ap.parse_args()
    if args.dry_run:
        DEVICE = "cpu"
        cases, bw, l2, name = [(1, 8, 4, 300), (3, 32, 5, 500)], 1e12, 1, "cpu (dry run)"
    else:
        if not torch.cuda.is_available():
            sys.exit("bench_tree.py needs a CUDA GPU (or --dry-run under TRITON_INTERPRET=1)")
        from bench_gpu import copy_bandwidth    # noqa: PLC0415 (needs CUDA only here)
        props = torch.cuda.get_device_properties(0)
        l2 = getattr(props, "L2_cache_size", 50 << 20)
        name = f"{props.name} ({props.multi_processor_count} SMs, L2 {l2 >> 20} MB)"
        bw = copy_bandwidth()
        Bs, Vs, trees = ((1, 128), (151_936,), TREES[2:]) if args.quick else ((1, 32, 128), (32_000, 151_936), TREES)
        cases = [(B, n, depth, V) for V in Vs for n, depth in trees for B in Bs]
    meta = dict(device=name, torch=torch.__version__, triton=triton.__version__, dtype=args.dtype,
                drafter=args.drafter, date=datetime.date.today().isoformat(), command="python " + " ".join(sys.argv))
    print(meta, flush=True)
    impls = {"triton": make_triton}
    if not args.no_torch:
        impls["torch"] = make_torch
    impls.update(extra or {})
    rows = run(cases, impls, bw, l2, DTYPES[args.dtype], args.drafter == "dense")
    # bench_gpu's: print the table, write it to --markdown and every number to --json when asked
    write_outputs(args, dict(meta=meta, copy_bandwidth=bw, rows=rows), markdown(rows, list(impls), bw, meta))


if __name__ == "__main__":
    main()
