"""Where a backend's calls first fail as its logits pass 2^31 elements (SPEC 4.12, docs/kernels.md).

    python ci/offset_threshold.py BACKEND --requests 1638,1639 [--path injected|seeded] [--json FILE]
    python ci/offset_threshold.py BACKEND --bisect 1365,1800 ...      # the first size that fails, by bisection

Builds the `int64_offsets` check's batch (five drafts a request at V = 262,144, each request four ids of its own) at
each number of requests, calls the backend once by the standard rule, and prints one line a size: the rows, the draft
rows, whether each layout's last row ends past 2^31 elements, and the outcome: every request within its own ids, the
requests outside them, or the exception with the frames it was raised from. Each size runs in a process of its own
with CUDA_LAUNCH_BLOCKING=1: an illegal address ends the process's CUDA context, and names the launch that made it.
It checks nothing (the harness's `int64_offsets` does); it locates the size at which a failure begins.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import traceback

from specverify.checks import offsets

LIBRARIES = ("/torch/", "/triton/", "/specverify/checks/", os.path.abspath(__file__))


def probe(spec, requests: int, path: str, device: str = "cuda", case: str = "rows_past_2_31") -> dict:
    """One call of the offsets batch at ``requests`` requests: {requests, rows, draft_rows, past, outcome, ...},
    ``past`` against ``case``'s limit. ``spec`` is what ``get_backend`` takes."""
    from specverify.registry import get_backend

    V, D, past = offsets.VOCAB, offsets.DRAFTS, offsets.PAST[case]
    row = {"requests": requests, "rows": requests * (D + 1), "draft_rows": requests * D,
           "past": {"rows": requests * (D + 1) * V > past, "draft_rows": requests * D * V > past}}
    backend = get_backend(spec)
    batch, support = offsets.offsets_batch(device, False, requests)
    try:
        if path == "seeded":
            out = backend(batch, seed=offsets.request_seeds(requests, device), method="standard")
        else:
            out = backend(batch, noise=offsets._noise(batch, 1), method="standard")
        outside = offsets._own_support(out, support, (batch.temperature == 0).cpu())
        row.update(outcome="outside" if outside else "own ids", outside=len(outside), first=outside[:1])
    except Exception as e:
        frames = [f"{os.path.relpath(f.filename)}:{f.lineno} {f.name}" for f in traceback.extract_tb(e.__traceback__)
                  if not any(lib in f.filename for lib in LIBRARIES)]
        row.update(outcome="raised", error=f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}",
                   frames=frames[-3:])
    return row


def line(row: dict) -> str:
    past = ", ".join(k for k, v in row["past"].items() if v) or "neither"
    head = f"{row['requests']:>6,} requests {row['rows']:>7,} rows {row['draft_rows']:>7,} draft rows; past the " \
           f"limit: {past:<15}"
    if row["outcome"] == "raised":
        return f"{head} {row['error']}\n{'':>8}at {' <- '.join(reversed(row['frames']))}"
    if row["outcome"] == "outside":
        return f"{head} {row['outside']} request(s) outside their ids; first: {row['first'][0]}"
    return f"{head} every request within its own ids"


def in_a_process(backend: str, n: int, path: str, case: str) -> dict:
    """``probe`` at ``n`` requests in a child process of its own; a row saying so where the child ends without one."""
    child = subprocess.run([sys.executable, __file__, backend, "--requests", str(n), "--path", path, "--case", case,
                            "--one", str(n)],
                           capture_output=True, text=True, env=dict(os.environ, CUDA_LAUNCH_BLOCKING="1"))
    if child.returncode != 0 or not child.stdout.strip():
        tail = (child.stderr.strip().splitlines() or ["no output"])[-1]
        return {"requests": n, "outcome": "process", "error": f"exit {child.returncode}: {tail}"}
    return json.loads(child.stdout.strip().splitlines()[-1])


def first_failing(lo: int, hi: int, run) -> tuple[int, list[dict]]:
    """The least number of requests in (lo, hi] whose ``run(n)`` row is not "own ids", where ``lo``'s is and
    ``hi``'s is not (each checked first); the rows ``run`` gave, in order. ValueError where the ends disagree."""
    rows = [run(lo), run(hi)]
    if rows[0]["outcome"] != "own ids" or rows[1]["outcome"] == "own ids":
        raise ValueError(f"--bisect {lo},{hi}: {lo} requests must keep their own ids and {hi} must not; got "
                         f"{rows[0]['outcome']!r} and {rows[1]['outcome']!r}")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        rows.append(run(mid))
        lo, hi = (mid, hi) if rows[-1]["outcome"] == "own ids" else (lo, mid)
    return hi, rows


def _shown(row: dict) -> str:
    if row["outcome"] == "process":
        return f"{row['requests']:>6,} requests: the process ended without a row ({row['error']})"
    return line(row)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("backend", help="a built-in name or MODULE:ATTR, as `specverify check` takes")
    ap.add_argument("--requests", help="comma-separated numbers of requests, one process each")
    ap.add_argument("--bisect", help="LO,HI: LO requests keep their own ids, HI do not; find the first size that fails")
    ap.add_argument("--path", choices=("injected", "seeded"), default="injected")
    ap.add_argument("--case", choices=tuple(offsets.PAST), default="rows_past_2_31",
                    help="the limit the rows' 'past' column is against (2^31 or 2^32 elements)")
    ap.add_argument("--json", help="write the rows here too")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)      # a child: one size, its row as JSON
    args = ap.parse_args(argv)
    if args.one is not None:
        print(json.dumps(probe(args.backend, args.one, args.path, case=args.case)))
        return 0
    if bool(args.requests) == bool(args.bisect):
        ap.error("give --requests N,M,... or --bisect LO,HI")

    def run(n: int) -> dict:
        row = in_a_process(args.backend, n, args.path, args.case)
        print(_shown(row), flush=True)
        return row

    first = None
    try:
        if args.bisect:
            lo, hi = (int(x) for x in args.bisect.split(","))
            first, rows = first_failing(lo, hi, run)
            print(f"the first size that fails: {first:,} requests", flush=True)
        else:
            rows = [run(int(x)) for x in args.requests.split(",")]
    except ValueError as exc:
        print(f"offset_threshold: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "path": args.path, "first_failing": first, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
