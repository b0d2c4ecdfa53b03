"""Wall clock of the harness itself, against issue 19's figures and targets (printed, never asserted).

    python ci/bench_harness.py [--checkout DIR] [--only a,c,d] [--timeout S] [--json FILE]
                               [--pytest-args="--durations=40 -p no:randomly"]

Rows, each run as a subprocess from the checkout (its packages first on PYTHONPATH):

    a  pytest -n auto                                              the README's set-up command
    b  TRITON_INTERPRET=1 specverify check triton --profile smoke  the Triton fast path, interpreted
    c  specverify check cpu                                        the ci profile
    d  specverify check MUTANT --checks differential_injected      a failing check, over the same check
       against specverify check cpu --checks differential_injected passing (the ratio is the figure)

    --samples BACKEND [--profile P] [--device D]   per statistical check: copies, launches, samples/s,
    --samples-from REPORT.json                     the backend's share of the time, det99 (from the
                                                   report's ``sampling`` records; a device run's too)

Rows a and b take many minutes on two cores; --only picks rows. The targets are for two idle cores:
the load average is printed before and after, and a run on a busy machine says so beside its table.
CPU time (user + system of the command and its children) is printed too: it moves less with load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAILING_BACKEND = "specverify.mutants.samplers:DraftProbsDropped"
FAILING_CHECK = "differential_injected"


@dataclass(frozen=True)
class Row:
    key: str
    measure: str
    today: str
    target: str
    target_value: float        # seconds, or a ratio for row d
    unit: str                  # "s" or "x"


ROWS = {r.key: r for r in (
    Row("a", "`pytest -n auto`", "10.6 min", "at most 4 min", 240.0, "s"),
    Row("b", "`TRITON_INTERPRET=1 specverify check triton --profile smoke`", "about 14 min", "at most 3 min",
        180.0, "s"),
    Row("c", "`specverify check cpu` (ci profile)", "34 s", "at most 15 s", 15.0, "s"),
    Row("d", f"failing `{FAILING_CHECK}` ({FAILING_BACKEND.split(':')[1]}) against the same check passing",
        "up to 10x slower", "at most 2x", 2.0, "x"),
)}


@dataclass
class Run:
    command: list
    seconds: float
    cpu_seconds: float         # user + system time of the command and every process it waited for
    returncode: int | None     # None: killed at the timeout
    tail: str


def specverify_command() -> list[str]:
    """The ``specverify`` console script beside this interpreter, else the same CLI through -m."""
    script = Path(sys.executable).parent / "specverify"
    if script.exists():
        return [str(script)]
    found = shutil.which("specverify")
    return [found] if found else [sys.executable, "-m", "specverify.cli"]


def run(command: list[str], checkout: Path, timeout: float, extra_env: dict | None = None) -> Run:
    env = dict(os.environ, **(extra_env or {}))
    env["PYTHONPATH"] = os.pathsep.join([str(checkout)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    print(f"$ {' '.join(command)}", file=sys.stderr, flush=True)
    start, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    # A session of its own, so that a timeout ends the command's children too (pytest-xdist workers).
    proc = subprocess.Popen(command, cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
        returncode = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        returncode = None
    seconds = time.perf_counter() - start
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (now.ru_utime - used.ru_utime) + (now.ru_stime - used.ru_stime)
    print(f"  {seconds:.1f} s wall, {cpu:.1f} s CPU, exit {returncode if returncode is not None else 'timeout'}",
          file=sys.stderr, flush=True)
    return Run(command, seconds, cpu, returncode, output[-20000:])


def measure(key: str, checkout: Path, timeout: float, pytest_args: list[str]) -> dict:
    """The runs of one row and the figure compared with its target (seconds, or the ratio for d)."""
    cli = specverify_command()
    if key == "a":
        runs = [run([sys.executable, "-m", "pytest", "-n", "auto"] + pytest_args, checkout, timeout)]
    elif key == "b":
        runs = [run(cli + ["check", "triton", "--profile", "smoke"], checkout, timeout, {"TRITON_INTERPRET": "1"})]
    elif key == "c":
        runs = [run(cli + ["check", "cpu"], checkout, timeout)]
    else:
        runs = [run(cli + ["check", FAILING_BACKEND, "--checks", FAILING_CHECK], checkout, timeout),
                run(cli + ["check", "cpu", "--checks", FAILING_CHECK], checkout, timeout)]
    if key == "d":
        failing, passing = runs
        value = failing.seconds / passing.seconds
        shown = f"{value:.1f}x ({failing.seconds:.1f} s failing / {passing.seconds:.1f} s passing)"
        cpu = f"{failing.cpu_seconds:.0f} / {passing.cpu_seconds:.0f} s"
        expected = failing.returncode == 1 and passing.returncode == 0
    else:
        value = runs[0].seconds
        shown = f"{value / 60:.1f} min" if value >= 120 else f"{value:.1f} s"
        cpu = f"{runs[0].cpu_seconds:.0f} s"
        expected = runs[0].returncode == 0
    if any(r.returncode is None for r in runs):
        shown += " (timed out)"
    elif not expected:
        shown += " (unexpected exit status: " + ", ".join(str(r.returncode) for r in runs) + ")"
    return dict(key=key, value=value, shown=shown, cpu=cpu, met=value <= ROWS[key].target_value and expected,
                runs=[asdict(r) for r in runs])


def table(results: list[dict]) -> str:
    lines = ["| | measure | today | target | measured | CPU time | met |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for res in results:
        row = ROWS[res["key"]]
        lines.append(f"| {row.key} | {row.measure} | {row.today} | {row.target} | {res['shown']} | {res['cpu']} | "
                     f"{'yes' if res['met'] else 'no'} |")
    return "\n".join(lines)


STATISTICAL = "token_distribution,acceptance_rate,synthetic_rate,accepted_length,sequence_distribution"


def _rate(rate) -> str:
    return "-" if rate is None else f"{rate:,.0f}"


def samples_table(report: dict) -> str:
    """Markdown: each statistical check's sampling speed and power, from a check run's JSON report."""
    lines = [f"backend `{report['backend']}`, profile `{report['profile']}`, device {report['device']}", "",
             "| check | copies | launches | samples/s | after the first launch | backend share | "
             "det99 (worst position) | budget cut | s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for r in report["results"]:
        s = r.get("sampling")
        if not s:
            continue
        det = r.get("detectable")
        det = f"{float(det):.4f} {r.get('detectable_measure') or ''}" if det not in (None, "inf") else "-"
        lines.append(f"| {r['check']}[{r['case']}] | {s['copies']:,} | {s['launches']:,} | "
                     f"{s['samples_per_second'] or 0:,.0f} | {_rate(s.get('steady_samples_per_second'))} | "
                     f"{s['backend_share'] or 0:.0%} | {det} | "
                     f"{'yes' if s.get('budget_cut') else ''} | {r['seconds']:.1f} |")
    return "\n".join(lines)


def samples(backend: str, profile: str, device: str, timeout: float) -> str:
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-harness-samples-{os.getpid()}.json"
    cli = specverify_command() + ["check", backend, "--profile", profile, "--checks", STATISTICAL, "--json", str(out)]
    run(cli + (["--device", device] if device else []), REPO, timeout)
    return samples_table(json.loads(out.read_text()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, default=REPO, help="repository to measure (default: this one)")
    parser.add_argument("--only", default="a,b,c,d", help="comma-separated rows among a, b, c, d (default: all)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds before a command is killed")
    parser.add_argument("--json", type=Path, default=None, help="also write the results, with output tails")
    parser.add_argument("--pytest-args", default="",
                        help='extra arguments for row a, given as --pytest-args="--durations=40"')
    parser.add_argument("--samples", metavar="BACKEND", help="tabulate the statistical checks' sampling speed")
    parser.add_argument("--samples-from", type=Path, metavar="REPORT", help="the same table from a JSON report")
    parser.add_argument("--profile", default="ci", help="profile of --samples (default ci)")
    parser.add_argument("--device", default=None, help="device of --samples (default: the profile's)")
    args = parser.parse_args(argv)
    if args.samples_from or args.samples:
        print(samples_table(json.loads(args.samples_from.read_text())) if args.samples_from
              else samples(args.samples, args.profile, args.device, args.timeout))
        return 0
    keys = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = [k for k in keys if k not in ROWS]
    if unknown:
        parser.error(f"unknown row(s) {unknown}: choose among {', '.join(ROWS)}")
    checkout = args.checkout.resolve()
    cores = os.cpu_count() or 1
    load_before = os.getloadavg()
    results = [measure(k, checkout, args.timeout, shlex.split(args.pytest_args)) for k in keys]
    load_after = os.getloadavg()
    print(table(results))
    print(f"\n{cores} cores; load average (1, 5, 15 min) before {load_before[0]:.2f} {load_before[1]:.2f} "
          f"{load_before[2]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; "
          f"checkout {checkout}")
    if load_before[0] > 0.5:
        print("The machine was not idle at the start: the targets are for idle cores, and these times are inflated.")
    if args.json:
        args.json.write_text(json.dumps(dict(cores=cores, load_before=load_before, load_after=load_after,
                                             checkout=str(checkout), results=results), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
