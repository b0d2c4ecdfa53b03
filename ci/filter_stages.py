"""Each launch of a filtered Triton call, timed alone: pass 1, the cut's stages, pass 2 (issue 29's probe).

    python ci/filter_stages.py [--B 128] [--V 151936] [--programs 2048,4096]

Inputs as ``bench_gpu.py --filters`` builds them (every request filtered, float32, k = 4); CUDA events
around each launch, median of 35 calls after 5 warm-up calls. ``--programs`` sets
``triton_filter.READ_PROGRAMS`` (stage 1's split target) for each row of output. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import bench_gpu  # noqa: E402
from specverify.kernels import triton_filter  # noqa: E402
from specverify.kernels.triton_chain import with_cut  # noqa: E402
from specverify.kernels.triton_kernels import launches  # noqa: E402
from specverify.kernels.triton_launch import launch  # noqa: E402


def stage_times(sets, filters, calls: int = 40, warm: int = 5) -> tuple[dict, int]:
    """({launch label: median us}, slow-path rows of the last call)."""
    times: dict = {}
    for i in range(calls):
        s = sets[i % len(sets)]
        steps = launches(s.token_ids, s.num_accepted, s.num_draft, s.drafts, s.logits, s.q, s.temperature,
                         uniform=s.uniform, exponential=s.exponential)
        cut, record = triton_filter.cut_launches(steps[0], *filters)
        plan = [("pass 1", steps[0])] + [(f"stage {st[3]['STAGE']} grid {st[1]}", st) for st in cut] \
            + [("pass 2", with_cut(steps[-1], record))]
        for label, step in plan:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            launch(*step)
            end.record()
            torch.cuda.synchronize()
            if i >= warm:
                times.setdefault(label, []).append(start.elapsed_time(end) * 1000)
    return {k: statistics.median(v) for k, v in times.items()}, int((record.view(6, -1)[5] == 2).sum())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=128)
    ap.add_argument("--V", type=int, default=151_936)
    ap.add_argument("--programs", default=str(triton_filter.READ_PROGRAMS))
    args = ap.parse_args()
    sets = bench_gpu.make_sets(args.B, args.V, torch.float32, 50 << 20)
    for programs in map(int, args.programs.split(",")):
        triton_filter.READ_PROGRAMS = programs
        for name, setting in bench_gpu.FILTER_SETTINGS.items():
            if setting is None:
                continue
            on = (setting[0] > 0, setting[1] < 1, setting[2] > 0)
            filters = tuple(torch.full((args.B,), v, device="cuda", dtype=dt) if o else None
                            for v, dt, o in zip(setting, (torch.int64, torch.float32, torch.float32), on))
            times, slow = stage_times(sets, filters)
            shown = ", ".join(f"{k} {v:.1f}" for k, v in times.items())
            print(f"programs {programs} {name:20s} slow rows {slow}: {shown} (us)", flush=True)


if __name__ == "__main__":
    main()
