"""How often the cut's sample bracket misses its crossing, and what the misses cost a call (issue 29's probe).

    python ci/filter_misses.py [--B 1] [--V 151936] [--calls 2000] [--rounds 2] [--all-tensors]
                               [--settings 'top_p=0.9'] [--set NAME=VALUE ...] [--dry-run] VARIANT [VARIANT ...]

A narrower bracket (``triton_filter.BRACKET_SIGMAS``, a smaller sample) gathers fewer tokens, but a row whose
crossing falls outside it takes the slow path (``triton_slow``), which a median latency hides. For each filter
setting of ``bench_gpu.FILTER_SETTINGS`` and each variant of the settings ('NAME=V,NAME=V', or 'default'), the
variants in turn ``--rounds`` times: ``--calls`` filtered calls, each on fresh N(0, 9) logits (drawn before the
call, outside its time), each timed alone from an idle GPU to its results (wall clock, synchronised), and the
rows that took the slow path counted from the call's records. Prints a table: slow rows of the rows cut, the
calls with a slow row, and the mean, median and 99th percentile of a call. Asserts nothing. It needs a CUDA GPU;
``--dry-run`` runs the same plumbing on the CPU under TRITON_INTERPRET=1 (its times are the interpreter's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

import bench_gpu
from filter_knobs import add_set_option, apply_sets
from filter_stages import _caller, _filters, _variant_setter
from specverify.kernels import triton_filter


def miss_rows(sets, filters, variants: list[str], calls: int, rounds: int, seed: int = 0) -> list[dict]:
    """A row a variant {variant, calls, rows: rows cut, slow: of them on the slow path, slow_calls: calls with
    one or more (a launch waits for its slowest row), mean_us, median_us, p99_us} of ``calls`` filtered calls a
    round on sets[0], its logits drawn afresh (N(0, 9), seeded) before each; the variants in turn ``rounds``
    times, the same draws for each. The settings are restored after."""
    apply = _variant_setter(variants, "filter_misses.py")
    call, s = _caller(sets, filters), sets[0]
    rows_of = s.token_ids.numel()
    cpu = bench_gpu.DEVICE == "cpu"
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    kept = s.logits.clone()
    tally = {v: dict(variant=v, calls=0, rows=0, slow=0, slow_calls=0, walls=[]) for v in variants}
    g = torch.Generator(device=s.logits.device)
    try:
        for r in range(rounds):
            for v in variants:
                apply(v)
                call(s)         # compiled and warm before the timed calls
                g.manual_seed(seed + r)
                t = tally[v]
                for _ in range(calls):
                    s.logits.copy_(torch.randn(s.logits.shape, generator=g, device=s.logits.device) * 3)
                    sync()
                    start = time.perf_counter()
                    call(s)
                    sync()
                    t["walls"].append(time.perf_counter() - start)
                    state = bench_gpu.last_records(rows_of)[5]
                    t["calls"] += 1
                    t["rows"] += int((state <= 2).sum())
                    slow = int((state == 2).sum())
                    t["slow"] += slow
                    t["slow_calls"] += int(slow > 0)
    finally:
        apply("default")
        s.logits.copy_(kept)
    out = []
    for v in variants:
        t = tally.pop(v)
        walls = sorted(t.pop("walls"))
        out.append(dict(t, mean_us=statistics.fmean(walls) * 1e6, median_us=statistics.median(walls) * 1e6,
                        p99_us=walls[min(len(walls) - 1, int(0.99 * len(walls)))] * 1e6))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="+", metavar="VARIANT")
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--V", type=int, default=151_936)
    ap.add_argument("--calls", type=int, default=2000, help="filtered calls a variant and round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the variants in turn")
    ap.add_argument("--all-tensors", action="store_true",
                    help="pass all three filter tensors (off: 0 or 1), as the benchmark does")
    ap.add_argument("--settings", default=None,
                    help="which of bench_gpu.FILTER_SETTINGS to run, ';'-separated (default: every filtered one)")
    ap.add_argument("--dry-run", action="store_true",
                    help="the plumbing on the CPU under TRITON_INTERPRET=1 (with --V, --set CAP=... to shrink it)")
    add_set_option(ap)
    args = ap.parse_args()
    if args.dry_run:
        if os.environ.get("TRITON_INTERPRET") != "1":
            sys.exit("--dry-run runs the kernels on the CPU: set TRITON_INTERPRET=1")
        bench_gpu.DEVICE = "cpu"
    elif not torch.cuda.is_available():
        sys.exit("filter_misses.py times the filtered call on a CUDA GPU, and none is available (--dry-run: the CPU)")
    if args.calls < 1 or args.rounds < 1:
        sys.exit(f"--calls and --rounds take at least 1, not {args.calls} and {args.rounds}")
    apply_sets(triton_filter, args.set)
    try:        # a misspelt setting would time the defaults twice
        _variant_setter(args.variants, "filter_misses.py")
    except ValueError as e:
        sys.exit(str(e))
    sets = bench_gpu.make_sets(args.B, args.V, torch.float32, 1 << 10)[:1]
    print("| filter | variant | calls | slow rows / rows cut | calls with a slow row | mean (us) | median (us) "
          "| p99 (us) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, setting in bench_gpu.FILTER_SETTINGS.items():
        if setting is None or (args.settings is not None and name not in args.settings.split(";")):
            continue
        for row in miss_rows(sets, _filters(args, setting), args.variants, args.calls, args.rounds):
            print(f"| {name} | {row['variant']} | {row['calls']} | {row['slow']} / {row['rows']} | "
                  f"{row['slow_calls']} | {row['mean_us']:.1f} | {row['median_us']:.1f} | {row['p99_us']:.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()
