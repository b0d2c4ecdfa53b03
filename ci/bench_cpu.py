"""CPU backend against the reference on the CPU: median wall time of many calls, and the ratio.

    python ci/bench_cpu.py [--requests 64] [--k 4] [--vocab 32000] [--repeats 15] [--threads N]

Every request proposes exactly k drafts from a dense drafter and samples at temperature 0.8 (the
reference's slowest path: a float64 softmax, residual and race per position). Printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import reference
from reference import Noise, SpecBatch
from specverify import get_backend


def make_batch(B: int, k: int, V: int, dtype: torch.dtype, seed: int = 0) -> tuple[SpecBatch, Noise]:
    g = torch.Generator().manual_seed(seed)
    T = B * k
    logits = (torch.randn(T + B, V, generator=g) * 3).to(dtype)
    q = torch.softmax(torch.randn(T, V, generator=g) * 3, dim=-1)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1)
    batch = SpecBatch(torch.full((B,), k, dtype=torch.int64), drafts, logits, q, torch.full((B,), 0.8))
    return batch, Noise.draw(batch, g)


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up: first-touch allocations, lazy imports
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--reference-repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (default: torch's choice); 1 is robust on a busy machine")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cpu = get_backend("cpu")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; B={args.requests} k={args.k} V={args.vocab}")
    print(f"{'logits':8s} {'noise':9s} {'reference ms':>13s} {'cpu ms':>9s} {'ratio':>7s}")
    for dtype in (torch.float32, torch.bfloat16):
        batch, noise = make_batch(args.requests, args.k, args.vocab, dtype)
        for path, kwargs in (("injected", {"noise": noise}), ("seeded", {"seed": 1234})):
            same = cpu(batch, **kwargs)
            ref = reference.sample(batch, **kwargs)
            if not torch.equal(same.token_ids, ref.token_ids):
                print("  note: outputs differ (an ambiguous decision, or a bug: run the tests)")
            t_ref = median_seconds(lambda: reference.sample(batch, **kwargs), args.reference_repeats)
            t_cpu = median_seconds(lambda: cpu(batch, **kwargs), args.repeats)
            name = str(dtype).replace("torch.", "")
            print(f"{name:8s} {path:9s} {t_ref * 1e3:13.1f} {t_cpu * 1e3:9.2f} {t_ref / t_cpu:7.1f}x")


if __name__ == "__main__":
    main()
