"""Each statistical case's draw alone on the GPU, warm: samples/s against issue 28's 10 M target.

    python ci/sampling_rates.py [--copies N] [--json FILE] [--markdown FILE] [--backend NAME] [--device D]

The nightly's suite shares the GPU between its workers, so the rates in its report are what a case
gets beside three others. This draws each statistical case the way its checks draw it (through the
guard, sequences counted where a check needs them), once to compile its kernels and once timed, with
the GPU to itself. A case at a small vocabulary (every row within one tile) is held to the target;
a wider one is listed with its bytes per copy and the rate the GPU's memory bandwidth allows for the
inputs alone. Prints a table; exits 0 unless a draw raised (a rate under the target is reported, not
an error: benchmarks never assert wall clock).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specverify.checks import sampling  # noqa: E402
from specverify.checks.cases import STAT_CASES  # noqa: E402
from specverify.checks.runner import GuardedBackend  # noqa: E402
from specverify.registry import get_backend  # noqa: E402
from specverify.strategies import get_profile  # noqa: E402

TARGET = 10_000_000      # samples/s per statistical check at the small vocabularies (issue 28)
SMALL_VOCAB = 1024       # a case whose rows fit the narrowest tile is a small-vocabulary case
PEAK_BYTES_PER_S = {"H100": 3.35e12, "H200": 4.8e12}   # HBM bandwidth, the makers' figures


def device_name(device: str) -> str:
    return torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else device


def peak_bandwidth(device: str) -> float | None:
    return next((bw for key, bw in PEAK_BYTES_PER_S.items() if key in device_name(device)), None)


def input_bytes(case) -> int:
    """Bytes a copy's V-wide inputs take as float32: its target rows and draft rows (a bf16 case less)."""
    draft_rows = case.k if case.q is not None else 0
    return 4 * case.vocab_size * (case.k + 1 + draft_rows)


def measure(backend, case, profile, copies: int) -> dict:
    """One warm-up draw of a whole launch, then ``copies`` timed; the draw as the checks run it."""
    sequences = "sequence_distribution" in case.checks
    warm = sampling.Plan(sampling.launch_size(case, copies, profile.device), tuple(sampling.reach(case)),
                         (None,) * (case.depth + 1))
    sampling.draw(backend, case, profile, 1, warm, sequences)    # a draw ends synchronized with its device
    _, timing = sampling.draw(backend, case, profile, 2, replace(warm, copies=copies), sequences)
    wall = timing.total_seconds
    return {"case": case.name, "vocab_size": case.vocab_size, "copies": copies, "launches": timing.launches,
            "seconds": round(wall, 4), "samples_per_second": copies / wall,
            "backend_share": timing.backend_seconds / wall, "input_bytes_per_copy": input_bytes(case),
            "small_vocab": case.vocab_size <= SMALL_VOCAB}


def table(rows: list[dict], bandwidth: float | None) -> str:
    lines = ["| case | V | copies | launches | samples/s | backend share | input bytes/copy | "
             "bandwidth floor (copies/s) | 10 M target |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        floor = f"{bandwidth / r['input_bytes_per_copy']:,.0f}" if bandwidth else "-"
        if r["small_vocab"]:
            met = "met" if r["samples_per_second"] >= TARGET else "**not met**"
        else:
            met = f"not held to it (V = {r['vocab_size']:,})"
        lines.append(f"| {r['case']} | {r['vocab_size']:,} | {r['copies']:,} | {r['launches']} | "
                     f"{r['samples_per_second']:,.0f} | {r['backend_share']:.2f} | {r['input_bytes_per_copy']:,} | "
                     f"{floor} | {met} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="triton")
    ap.add_argument("--device", default="cuda", help="the device the inputs are built on (default cuda)")
    ap.add_argument("--copies", type=int, default=10_000_000, help="timed copies per case (default 10 M)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args(argv)
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        print("sampling_rates: no CUDA device here", file=sys.stderr)
        return 2
    if args.copies < 1:
        print(f"sampling_rates: --copies must be at least 1, not {args.copies}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)   # as a check worker has
    profile = replace(get_profile("nightly"), device=args.device, large_case_budget=None)
    backend = GuardedBackend(get_backend(args.backend))
    rows = []
    for case in STAT_CASES:
        if case.launch_copies:   # the production vocabularies: the suite's own budgets measure them
            continue
        rows.append(measure(backend, case, profile, args.copies))
        r = rows[-1]
        print(f"{r['case']}: {r['samples_per_second']:,.0f} samples/s ({r['copies']:,} copies in {r['seconds']} s)",
              flush=True)
    bandwidth = peak_bandwidth(args.device)
    text = (f"Each statistical case alone on {device_name(args.device)}, warm, through the guard "
            f"(`python ci/sampling_rates.py --backend {args.backend} --copies {args.copies}`):\n\n"
            + table(rows, bandwidth) + "\n")
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"device": device_name(args.device), "target": TARGET,
                                         "peak_bytes_per_second": bandwidth, "cases": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
