"""``specverify check BACKEND``: run every check against a backend and print the report.

BACKEND is a built-in name (reference, cpu, triton) or MODULE:ATTR naming a backend object or a
zero-argument factory. Checks run in child processes (``-n``), each under a timeout, so a backend
that hangs, crashes or exits becomes a FAIL line. Exit status 0 when the verdict is PASS (no check
failed, a core property was checked, every ``--require`` met), 1 otherwise, 2 on bad usage or a
backend that cannot be loaded, 130 when interrupted (the report of the finished checks is printed
and the JSON written all the same).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
import time
from dataclasses import replace

from specverify.checks import CHECKS, NOT_RUN, CheckResult, plan
from specverify.checks.runner import not_applicable_because
from specverify.gpus import choose_gpus, visible_gpus
from specverify.pool import BackendLoadError, CheckPool
from specverify.options import parse_device, unwritable
from specverify.registry import get_engine
from specverify.checks.deviations import load_deviations
from specverify.checks.repro import write_reproducer
from specverify.engine_cli import check_engine, engine_listing
from specverify.report import document, header, junit_xml, render, write_json
from specverify.replay import replay_file
from specverify.strategies import PROFILES, get_profile
from specverify.shards import ShardError, check_shards, measured_costs, parse_shard, read_report, share
from specverify.verdict import RecordedCapabilities, declared, describe, parse_requirements, verdict


def _count(text: str) -> int:
    """A whole number >= 1 (argparse names the option in its error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"takes a whole number >= 1, got {text!r}")
    return value


def _workers(text: str) -> int:
    return (os.cpu_count() or 1) if text == "auto" else _count(text)


def _gpus(spec: str | None, profile) -> list[str] | None:
    """The GPUs the workers are pinned to: ``--gpus`` (see specverify.gpus), else every visible GPU of a
    CUDA run, else none (no pinning)."""
    if spec is not None:
        return choose_gpus(spec)
    return (visible_gpus() or None) if profile.device == "cuda" else None


def _cuda_available() -> bool:
    import torch     # imported by the harness anyway; the workers start from a clean forkserver, not from here
    return torch.cuda.is_available()


def _device(text: str) -> str:
    try:
        return parse_device(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"takes a finite number of seconds > 0, got {text!r}")
    return value


def _unwritable(args) -> str | None:
    """Why a report the command writes at its end (--json, --junit) could not be written there, found before it
    runs; None where each can be."""
    for flag in ("json", "junit"):
        path = getattr(args, flag, None)
        problem = path and unwritable(path)
        if problem:
            return f"--{flag} {path!r} {problem}"
    return None


def _check(args) -> int:
    problem = _unwritable(args)
    if problem:
        print(f"specverify: error: {problem}", file=sys.stderr)
        return 2
    profile = get_profile(args.profile)
    if args.device:
        profile = replace(profile, device=args.device)
    engine = get_engine(args.backend)
    if engine is not None:   # an engine adapter (SPEC 8): its own checks, the same report and verdict
        return check_engine(args, profile, engine)
    if profile.device == "cuda" and not _cuda_available():
        print(f"specverify: error: profile {profile.name!r} runs on cuda, and torch sees no CUDA device here: give "
              f"--device cpu to run its plan on the CPU, or run it on a GPU machine", file=sys.stderr)
        return 2
    selected = args.checks.split(",") if args.checks else None
    unknown = [c for c in selected or [] if c not in CHECKS]
    if unknown:
        print(f"unknown check(s) {unknown}; known: {', '.join(CHECKS)}", file=sys.stderr)
        return 2
    require = parse_requirements(args.require)
    deviations = load_deviations(args.deviations, CHECKS) if args.deviations else ()
    full_plan = plan(profile, selected)
    if args.cases:
        patterns = [p.strip() for p in args.cases.split(",") if p.strip()]
        full_plan = [(c, k) for c, k in full_plan if any(fnmatch.fnmatchcase(k, p) for p in patterns)]
        if not full_plan:
            print(f"--cases {args.cases!r} matches no case of the selected checks", file=sys.stderr)
            return 2
    pairs = full_plan
    if args.costs and not args.shard:
        print("specverify: error: --costs balances shards: give --shard K/N with it", file=sys.stderr)
        return 2
    if args.shard:
        k, n = parse_shard(args.shard)
        measured = measured_costs(args.costs) if args.costs else None
        pairs = share(full_plan, {name: c.kind for name, c in CHECKS.items()}, k, n, measured)
    timeout = args.timeout or profile.check_timeout
    call_timeout = min(args.call_timeout or profile.call_timeout, timeout)
    deadline = args.deadline or profile.deadline
    try:
        gpus = _gpus(args.gpus, profile)
    except ValueError as exc:
        print(f"specverify: error: {exc}", file=sys.stderr)
        return 2
    failures_dir = None if args.no_reproducers else args.failures_dir
    pool = CheckPool(args.backend, profile, workers=min(args.workers, max(1, len(pairs))), timeout=timeout,
                     failures_dir=failures_dir, deviations=deviations, call_timeout=call_timeout,
                     keep_going=args.keep_going, gpus=gpus)
    start = time.perf_counter()
    try:
        loaded = pool.load()
    except BackendLoadError as exc:
        pool.close()
        print(f"specverify: error: {exc}", file=sys.stderr)
        if args.json:
            write_json(args.json, document([], args.backend, profile, time.perf_counter() - start, passed=False,
                                           error=str(exc)))
        return 2
    caps = describe(loaded.capabilities)
    print(header(loaded.name, profile, caps), file=sys.stderr)
    print(f"{len(pairs)} checks in {pool.workers} worker process(es), each under a {timeout:g} s timeout, each "
          f"backend call under {call_timeout:g} s; the run stops at {deadline:g} s"
          + (f" or after {args.maxfail} failed check(s)" if args.maxfail else "")
          + (f"; workers pinned to GPU(s) {', '.join(gpus)}" if gpus else ""), file=sys.stderr)
    done = [0]

    def progress(index: int, result: CheckResult) -> None:
        done[0] += 1
        check, case = pairs[index]
        print(f"[{done[0]:>2}/{len(pairs)}] {check}[{case}] {result.status} ({result.seconds:.1f}s)",
              file=sys.stderr, flush=True)

    interrupted = False
    try:
        results = pool.run(pairs, on_result=progress, max_failures=args.maxfail, deadline=deadline)
    except KeyboardInterrupt:
        interrupted = True
        finished = getattr(pool, "finished", {})
        results = [finished.get(i) or CheckResult(check=c, case=k, backend=loaded.name, kind=CHECKS[c].kind,
                                                  status=NOT_RUN, message="not finished: the run was interrupted")
                   for i, (c, k) in enumerate(pairs)]
    finally:
        pool.close()
    seconds = time.perf_counter() - start
    if failures_dir:
        for result in results:   # a check that hung or crashed its worker gets a "check" reproducer here
            write_reproducer(result, failures_dir, profile, args.backend)
    outcome = verdict(results, loaded.capabilities, require, hang=pool.hang)
    if interrupted:
        outcome.passed = False
        outcome.reasons.append("interrupted (Ctrl-C)")
    print(render(results, loaded.name, profile, seconds, outcome, caps))
    if args.json:
        write_json(args.json, document(results, loaded.name, profile, seconds, outcome, capabilities=caps,
                                       require=list(require), interrupted=interrupted, timeout=timeout,
                                       call_timeout=call_timeout, deadline=deadline, maxfail=args.maxfail,
                                       stopped=pool.stopped, hang=pool.hang, workers=pool.workers, gpus=gpus,
                                       shard=args.shard, plan=[f"{c}[{k}]" for c, k in full_plan],
                                       declared=sorted(declared(loaded.capabilities))))
    if args.junit:
        with open(args.junit, "w") as f:
            f.write(junit_xml(results, loaded.name, seconds))
    if interrupted:
        return 130
    return 0 if outcome.passed else 1


def _merge(args) -> int:
    problem = _unwritable(args)
    if problem:
        print(f"specverify merge: error: {problem}", file=sys.stderr)
        return 2
    docs = [(path, read_report(path)) for path in args.reports]
    try:
        ids = check_shards(docs)
        requires = {tuple(doc.get("require") or ()) for _, doc in docs}
        if len(requires) > 1:
            raise ShardError(f"the shards were run with different --require: {sorted(requires)}")
    except ShardError as exc:
        print(f"specverify merge: error: {exc}", file=sys.stderr)
        return 2
    first = docs[0][1]
    by_id = {f"{r['check']}[{r['case']}]": CheckResult.from_json(r) for _, doc in docs for r in doc["results"]}
    results = [by_id[i] for i in ids]
    caps = RecordedCapabilities(frozenset(first.get("declared") or ()), first.get("capabilities") or "")
    hang = next((doc["hang"] for _, doc in docs if doc.get("hang")), None)
    outcome = verdict(results, caps, tuple(first.get("require") or ()), hang=hang)
    profile = replace(get_profile(first["profile"]), device=first["device"])
    seconds = max(doc.get("seconds", 0.0) for _, doc in docs)   # the shards run side by side
    print(render(results, first["backend"], profile, seconds, outcome, caps.text))
    if args.json:
        write_json(args.json, document(results, first["backend"], profile, seconds, outcome, capabilities=caps.text,
                                       require=list(first.get("require") or ()), merged=[p for p, _ in docs],
                                       plan=ids, declared=sorted(caps.names), hang=hang))
    if args.junit:
        with open(args.junit, "w") as f:
            f.write(junit_xml(results, first["backend"], seconds))
    return 0 if outcome.passed else 1


def _backend_listing(spec: str, profile) -> int:
    """A kernel backend's plan on ``profile``, each (check, case) planned or n/a with the reason its declaration
    gives; the backend is loaded in a worker process, as ``check`` loads it."""
    pool = CheckPool(spec, profile, workers=1, timeout=120)
    try:
        loaded = pool.load()
    except BackendLoadError as exc:
        print(f"specverify: error: {exc}", file=sys.stderr)
        return 2
    finally:
        pool.close()
    caps = loaded.capabilities
    pairs = plan(profile)
    reasons = {(c, k): not_applicable_because(CHECKS[c].needs(k), caps, profile) for c, k in pairs}
    print(f"{loaded.name} on the {profile.name} profile (device {profile.device}): {len(pairs)} checks planned, "
          f"{sum(why is None for why in reasons.values())} run, {sum(why is not None for why in reasons.values())} "
          f"n/a by its declaration\ndeclares: {describe(caps)}")
    for (check, case), why in reasons.items():
        print(f"{'run ' if why is None else 'n/a '} {check}[{case}]" + (f": {why}" if why else ""))
    print("(a check that runs may still find itself n/a, saying why: a case over the profile's budget, a call it "
          "cannot make)")
    return 0


def _list(args) -> int:
    """The kernel checks and the engine checks; with a target, an engine adapter's cases and their checks, or a
    kernel backend's plan, each check run or n/a and why."""
    if args.target is not None:
        engine = get_engine(args.target)
        if engine is not None:
            print(engine_listing(engine))
            return 0
        profile = get_profile(args.profile)
        return _backend_listing(args.target, replace(profile, device=args.device) if args.device else profile)
    for name, check in CHECKS.items():
        print(f"{name:<22} {check.kind:<12} cases: {', '.join(check.cases)}\n{'':<22} {check.doc}")
    print("\nengine checks (an engine adapter's whole loop, SPEC 8; `specverify list MODULE:ATTR` lists its cases):\n"
          + engine_listing(None))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="specverify", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="run every check against a backend and print the report")
    check.add_argument("backend", help="reference, cpu, triton, or MODULE:ATTR")
    check.add_argument("--profile", choices=sorted(PROFILES), default=None,
                       help="ci (default; or $SPECVERIFY_PROFILE), smoke, dev, nightly")
    check.add_argument("--device", type=_device, default=None, help="override the profile's device (cpu, cuda)")
    check.add_argument("--checks", default=None, help="comma-separated subset of checks")
    check.add_argument("--cases", default=None, metavar="PATTERNS",
                       help="comma-separated case-name patterns (fnmatch: 'tree*,filters'): only those cases")
    check.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON")
    check.add_argument("-n", "--workers", type=_workers, default="auto",
                       help="worker processes the checks run in (default: auto, one per CPU core)")
    check.add_argument("--gpus", default=None, metavar="auto|N|IDS",
                       help="pin each worker to one GPU (CUDA_VISIBLE_DEVICES), spread evenly: auto (every visible "
                            "GPU; the default with --device cuda), N (the first N), or ids '0,2' ('2,' alone); "
                            "a production-vocabulary statistical case is drawn in one part per GPU, summed")
    check.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                       help="a check running longer fails and its worker is killed (default: the profile's, "
                            "600 s for ci)")
    check.add_argument("--call-timeout", type=_seconds, default=None, metavar="SECONDS",
                       help="a backend call running longer is a hang: its check fails, naming the call, and the "
                            "backend is not called again (default: the profile's, 120 s for ci; at most --timeout)")
    check.add_argument("--keep-going", action="store_true",
                       help="after a hung call, go on calling the backend (each call still under --call-timeout)")
    check.add_argument("--maxfail", type=_count, default=None, metavar="N",
                       help="stop after N failed checks; the checks in flight and the rest are reported not run")
    check.add_argument("-x", "--exitfirst", dest="maxfail", action="store_const", const=1,
                       help="stop after the first failed check (--maxfail 1)")
    check.add_argument("--deadline", type=_seconds, default=None, metavar="SECONDS",
                       help="stop the whole run after SECONDS; the checks in flight and the rest are reported "
                            "not run (default: the profile's, 900 s for ci)")
    check.add_argument("--require", default=None, metavar="LIST",
                       help="comma-separated subset of standard,greedy,synthetic,block,tree,injected,seeded the backend must "
                            "declare and the run must check; the run fails otherwise")
    check.add_argument("--failures-dir", default="specverify-failures", metavar="DIR",
                       help="where each failed check writes its reproducer (default: specverify-failures)")
    check.add_argument("--no-reproducers", action="store_true",
                       help="report failures without reducing them to reproducers or writing any (a CI shard "
                            "that only needs the verdict; run the failing check again to get its reproducer)")
    check.add_argument("--deviations", default=None, metavar="FILE",
                       help="TOML file of known deviations ([[deviation]] check, case, reason, match): a failure "
                            "matching one is reported as known and does not fail the run")
    check.add_argument("--junit", default=None, metavar="FILE", help="also write JUnit XML, one test case per check")
    check.add_argument("--shard", default=None, metavar="K/N",
                       help="run shard K of N: a deterministic share of the checks, balanced by cost; put the "
                            "shards' --json reports back together with `specverify merge`")
    check.add_argument("--costs", default=None, metavar="REPORT",
                       help="with --shard: balance by the seconds each check took in this earlier --json report")
    check.set_defaults(func=_check)
    merge = sub.add_parser("merge", help="put the --json reports of the shards of one run back together")
    merge.add_argument("reports", nargs="+", help="the shards' --json reports")
    merge.add_argument("--json", default=None, metavar="FILE", help="also write the merged report as JSON")
    merge.add_argument("--junit", default=None, metavar="FILE", help="also write JUnit XML of the merged run")
    merge.set_defaults(func=_merge)
    replay = sub.add_parser("replay", help="re-run a reproducer written by a failed check against a backend")
    replay.add_argument("file", help="a reproducer (.pt) from the failures directory")
    replay.add_argument("backend", help="reference, cpu, triton, or MODULE:ATTR")
    replay.add_argument("--device", type=_device, default=None,
                        help="device to replay on (default: the reproducer's, else cpu)")
    replay.set_defaults(func=lambda args: replay_file(args.file, args.backend, args.device))
    listing = sub.add_parser("list", help="list the checks and their cases")
    listing.add_argument("target", nargs="?", default=None, metavar="BACKEND",
                         help="a backend (reference, cpu, triton, MODULE:ATTR): its plan, each check run or n/a and "
                              "why; an engine adapter: its cases and the checks each gets")
    listing.add_argument("--profile", choices=sorted(PROFILES), default=None,
                         help="with a backend: the profile whose plan to list (default: ci, or $SPECVERIFY_PROFILE)")
    listing.add_argument("--device", type=_device, default=None, help="with a backend: override the profile's device")
    listing.set_defaults(func=_list)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, KeyError, ImportError, AttributeError) as exc:
        print(f"specverify: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
