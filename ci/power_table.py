"""The mutant table of docs/power.md: which checks catch each mutant, and the correct backend's control.

    python ci/power_table.py [--workers 2] > power_rows.md

Every mutant runs each of its expected checks (all cases, or the cases it names) at its profile's
sizes. A catch counts only if the mutant's correct control backend passes the same (check, case):
the control is run for the first catching check and its verdict printed in the row, and the script
exits 1 if any mutant is not caught or any control fails. Mutants that need CUDA (one GPU, or two for
"cuda2") run where that many GPUs are visible; elsewhere their row says so and cites the nightly GPU
report that records their catch, or says that no GPU run has yet.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

NIGHTLY_REPORT = "docs/nightly/2026-11-23-h100/report.md"
# the GPU report that records a GPU mutant's catch (its control passing the same check), and the machine
TWO_GPU_MUTANTS = "docs/nightly/2026-11-27-h100-nightly8/1-x2-1c91a47/mutants.log"
GPU_CATCHES = {"stale_draft_probs_graph": (NIGHTLY_REPORT, "the H100"),
               "work_on_default_stream": ("docs/nightly/2026-11-25-h100-nightly3/mutants.log", "the H100"),
               "launch_without_device_guard": (TWO_GPU_MUTANTS, "two H100s"),
               "outputs_on_current_device": (TWO_GPU_MUTANTS, "two H100s"),
               "row_offsets_in_int32": ("docs/nightly/2026-11-30-h200-bf16/4-mutants/mutants.log", "an H200")}


def _row(name: str) -> tuple[str, bool]:
    import torch  # noqa: PLC0415

    import reference  # noqa: PLC0415
    from specverify.checks import FAIL, PASS, check_request_alignment, run_check  # noqa: PLC0415
    from specverify.mutants import GPUS_REQUIRED, MUTANTS, cpu_plan  # noqa: PLC0415
    from specverify.mutants.statistical_only import OwnStreamCpuBackend  # noqa: PLC0415
    from specverify.registry import get_backend  # noqa: PLC0415
    from specverify.strategies import get_profile  # noqa: PLC0415
    torch.set_num_threads(1)
    mutant = MUTANTS[name]
    gpus = GPUS_REQUIRED[mutant.requires]
    cuda = gpus > 0
    profile = replace(get_profile(mutant.profile), device="cuda" if cuda else "cpu")
    if mutant.stat_copies is not None and not cuda:
        profile = replace(profile, stat_copies=mutant.stat_copies)
    lead = f"| `{name}` | {mutant.bug_class} | {mutant.seed} | {profile.name} |"
    if cuda and (torch.cuda.device_count() if torch.cuda.is_available() else 0) < gpus:
        checks = ", ".join(mutant.expected_checks)
        caught = (f"{checks} catches it on {GPU_CATCHES[name][1]} ({GPU_CATCHES[name][0]})" if name in GPU_CATCHES
                  else f"expected: {checks}[{', '.join(mutant.cases)}] on "
                       f"{'one GPU' if gpus == 1 else f'a {gpus}-GPU host'}; NOT YET RUN on a GPU")
        return f"{lead} needs {'CUDA' if gpus == 1 else f'{gpus} GPUs'}, not run here; {caught} | - | - | - | - |", True
    caught, start = [], time.perf_counter()
    if mutant.kind == "alignment":
        r = check_request_alignment(mutant.build(), name=name)
        caught = [r] if r.status == FAIL else []
    else:
        backend = mutant.build()
        for check, case in cpu_plan(mutant):
            r = run_check(backend, check, case, profile)
            if r.status == FAIL:
                caught.append(r)
    seconds = time.perf_counter() - start
    if not caught:
        return f"{lead} **NOT CAUGHT** | - | - | - | {seconds:.1f} |", False
    first = caught[0]
    if mutant.kind == "alignment":
        control = check_request_alignment(reference.align_draft_probs)
    else:
        if mutant.control != "cpu":
            correct = get_backend(mutant.control)
        else:
            correct = OwnStreamCpuBackend() if mutant.build().capabilities.seeded_stream == "own" else get_backend("cpu")
        control = run_check(correct, first.check, first.case, profile)
    verdict = "pass" if control.status == PASS else f"**CONTROL {control.status.upper()}**"
    samples = f"{first.samples:,}" if first.samples else "-"
    return (f"{lead} {', '.join(r.id for r in caught)} | {samples} | {verdict} | {first.seconds:.1f} | {seconds:.1f} |",
            control.status == PASS)


def main(argv=None) -> int:
    from specverify.mutants import MUTANTS  # noqa: PLC0415
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    print("| mutant | bug class | seed | profile | caught by (every failing expected check) | samples (first) "
          "| control on the first catch | first catch (s) | all expected checks (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    ok = True
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for row, good in pool.map(_row, sorted(MUTANTS)):
            print(row, flush=True)
            ok = ok and good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
