"""Where a statistical case's sampling time goes on a device: the guarded and the bare backend, with
cProfile's top entries (a probe for issue 28; prints, asserts nothing).

    python ci/profile_sampling.py [--case dense_q] [--copies 4000000] [--device cuda]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from dataclasses import replace

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specverify.checks import sampling  # noqa: E402
from specverify.checks.cases import STAT_CASE_BY_NAME  # noqa: E402
from specverify.checks.runner import GuardedBackend  # noqa: E402
from specverify.kernels.triton_sampler import TritonBackend  # noqa: E402
from specverify.strategies import get_profile  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="dense_q")
    ap.add_argument("--copies", type=int, default=4_000_000)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    case = STAT_CASE_BY_NAME[args.case]
    profile = replace(get_profile("nightly"), device=args.device)
    chosen = sampling.Plan(args.copies, tuple(sampling.reach(case)), (None,) * (case.depth + 1))
    for name, backend in (("bare", TritonBackend()), ("guarded", GuardedBackend(TritonBackend()))):
        sampling.draw(backend, case, profile, 1, replace(chosen, copies=min(args.copies, 1000)))   # warm-up
        prof = cProfile.Profile()
        prof.enable()
        _, timing = sampling.draw(backend, case, profile, 2, chosen)
        prof.disable()
        print(f"{name}: {timing.to_json()}")
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.top)
    # the bare call alone on one batch, after a warm-up at the same shape: what the kernel costs
    g = torch.Generator(device=args.device).manual_seed(3)
    batch = case.batch(args.copies, g, args.device)
    seeds = torch.randint(0, 2 ** 62, (args.copies,), device=args.device, generator=g)
    backend = TritonBackend()
    for rep in range(4):
        torch.cuda.synchronize()
        start = time.perf_counter()
        backend(batch, seed=seeds, **case.call_kwargs())
        torch.cuda.synchronize()
        print(f"bare call {rep}: {time.perf_counter() - start:.4f} s for {args.copies:,} requests")


if __name__ == "__main__":
    main()
