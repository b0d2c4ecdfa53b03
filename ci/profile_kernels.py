"""Where a statistical draw's device time goes, kernel by kernel (a probe for issue 28; prints, asserts
nothing).

    python ci/profile_kernels.py CASE:COPIES[:FLAGS] ...      e.g. large_vocab_262k:100000:g

FLAGS: g guards the backend as the checks do (else the bare Triton backend); c adds cProfile's top
entries. SEQ=1 counts sequences too; THREADS=N sets torch's intra-op threads (a check worker has one).
Each case is drawn once to warm up (its kernels compile), then timed (samples/s, the backend's share),
then drawn under the torch profiler. The tables go to $OUT/CASE-GUARDED.txt ($OUT defaults to /tmp);
one line a case goes to stdout.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time
from dataclasses import replace

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specverify.checks import sampling  # noqa: E402
from specverify.checks.cases import STAT_CASE_BY_NAME  # noqa: E402
from specverify.checks.runner import GuardedBackend  # noqa: E402
from specverify.kernels.triton_sampler import TritonBackend  # noqa: E402
from specverify.strategies import get_profile  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
SEQUENCES = os.environ.get("SEQ") == "1"


def run(name: str, copies: int, guarded: bool, with_cprofile: bool) -> None:
    case = STAT_CASE_BY_NAME[name]
    nightly = replace(get_profile("nightly"), device="cuda", large_case_budget=None)
    chosen = sampling.Plan(copies, tuple(sampling.reach(case)), (None,) * (case.depth + 1))
    backend = GuardedBackend(TritonBackend()) if guarded else TritonBackend()
    sampling.draw(backend, case, nightly, 1, chosen, SEQUENCES)
    torch.cuda.synchronize()
    start = time.perf_counter()
    _, timing = sampling.draw(backend, case, nightly, 2, chosen, SEQUENCES)
    wall = time.perf_counter() - start
    head = (f"== {name} guarded={guarded} copies={copies:,} launch={sampling.launch_size(case, copies, 'cuda')} "
            f"wall {wall:.3f}s -> {copies / wall:,.0f}/s backend_share {timing.backend_seconds / wall:.2f}")
    print(head, flush=True)
    with open(f"{OUT}/{name}-{int(guarded)}.txt", "w") as f:
        f.write(head + "\n")
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            sampling.draw(backend, case, nightly, 3, chosen, SEQUENCES)
            torch.cuda.synchronize()
        averages = prof.key_averages()
        f.write(averages.table(sort_by="cuda_time_total", row_limit=16, max_name_column_width=90))
        f.write(averages.table(sort_by="cpu_time_total", row_limit=16, max_name_column_width=90))
        if with_cprofile:
            host = cProfile.Profile()
            host.enable()
            sampling.draw(backend, case, nightly, 4, chosen, SEQUENCES)
            torch.cuda.synchronize()
            host.disable()
            text = io.StringIO()
            pstats.Stats(host, stream=text).sort_stats("tottime").print_stats(25)
            pstats.Stats(host, stream=text).sort_stats("cumulative").print_stats(45)
            f.write(text.getvalue())


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    if os.environ.get("THREADS"):
        torch.set_num_threads(int(os.environ["THREADS"]))
    for spec in argv:
        name, copies, *flags = spec.split(":")
        flags = flags[0] if flags else ""
        run(name, int(copies), "g" in flags, "c" in flags)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
