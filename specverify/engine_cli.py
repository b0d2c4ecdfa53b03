"""``specverify check MODULE:ATTR`` where MODULE:ATTR names an engine adapter (SPEC 8).

The engine checks run in this process, one after the other; a sequence case splits its samples over
``-n`` forked workers (seed i for sample i, counts summed: the same counts whatever ``-n``). The report,
the JSON, the JUnit XML and the verdict are the kernel checks' own; a failure writes a ``.txt``
reproducer naming the check, the case and the Python that regenerates it, and a ``.json`` one that
``specverify replay`` re-runs (``replay_engine``): STILL FAILS or PASSES.
"""

from __future__ import annotations

import fnmatch
import json
import os
import platform
import sys
import time

import torch

from specverify.checks.result import FAIL, KNOWN, NOT_RUN, PASS, CheckResult
from specverify.engines import ENGINE_CHECKS, engine_alpha, engine_plan, run_engine_check
from specverify.registry import get_engine
from specverify.report import document, junit_xml, summary, write_json
from specverify.strategies import get_profile
from specverify.verdict import RecordedCapabilities, parse_requirements, verdict

ENGINE_DECLARES = frozenset({"standard", "greedy", "seeded"})
ENGINE_REPRODUCER = "specverify engine reproducer"


def engine_listing(engine=None) -> str:
    """The engine checks, each with the cases it runs on; with ``engine``, that engine's cases and their checks."""
    if engine is None:
        return "\n".join(f"{name:<22} {check.kind:<12} cases: the engine's {'greedy' if check.greedy else 'sampled'} "
                         f"cases\n{'':<22} {check.doc}" for name, check in ENGINE_CHECKS.items())
    lines = [f"{engine.name}: {len(engine.cases)} case(s), V = {engine.vocab_size}; a check that cannot run on a case "
             "is reported n/a, saying why"]
    for case in engine.cases:
        names = [name for name, check in ENGINE_CHECKS.items() if check.applies(case)]
        lines += [f"{case.name:<22} {case.describe()}", f"{'':<22} checks: {', '.join(names)}"]
        lines += [f"{'':<22} {case.doc}"] if case.doc else []
    return "\n".join(lines)


def _write_reproducer(result: CheckResult, directory: str, spec: str, profile) -> None:
    """A failed engine check leaves ``NAME.txt`` (the failure and the Python that regenerates it) and
    ``NAME.json``, which ``specverify replay NAME.json ENGINE`` re-runs: the check, its case and the profile
    fix the seeds and the sample count, so a replay on the same engine draws the same samples."""
    os.makedirs(directory, exist_ok=True)
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in f"{result.backend}-{result.check}-{result.case}")
    path = os.path.join(directory, safe)
    with open(path + ".txt", "w") as f:
        f.write(f"engine check {result.id} of {spec} failed on profile {profile.name}:\n{result.message}\n\n"
                f"{result.counterexample or ''}")
    with open(path + ".json", "w") as f:
        json.dump({"kind": ENGINE_REPRODUCER, "engine": spec, "backend": result.backend, "check": result.check,
                   "case": result.case, "profile": profile.name, "samples": result.samples,
                   "message": result.message}, f, indent=1)
    result.reproducer = path + ".json"
    result.replay = f"specverify replay {path}.json {spec}"


def read_engine_reproducer(path: str) -> dict | None:
    """The engine reproducer at ``path`` (``_write_reproducer``'s JSON), or None where the file is not one."""
    try:
        with open(path) as f:
            repro = json.load(f)
    except (OSError, ValueError):
        return None
    return repro if isinstance(repro, dict) and repro.get("kind") == ENGINE_REPRODUCER else None


def replay_engine(path: str, repro: dict, spec: str, workers: int | None = None) -> int:
    """Re-run the failed engine check of ``repro``, the reproducer read from ``path``, on the engine ``spec``
    names, on the recorded case and profile: exit 1 while it still fails (a declared deviation included), 0 when
    it passes, 2 when it cannot be replayed there (with the reason)."""
    missing = [field for field in ("check", "case", "backend", "profile", "message") if field not in repro]
    if missing:
        print(f"specverify: error: cannot read reproducer {path!r}: an engine reproducer without its field(s) "
              f"{', '.join(missing)}", file=sys.stderr)
        return 2
    print(f"reproducer: {repro['check']}[{repro['case']}], recorded on engine {repro['backend']!r} "
          f"(profile {repro['profile']})\nrecorded failure: {repro['message']}")
    engine = get_engine(spec)
    if engine is None:
        print(f"cannot replay on {spec!r}: not an engine adapter (SPEC 8)", file=sys.stderr)
        return 2
    case = next((c for c in engine.cases if c.name == repro["case"]), None)
    if case is None or repro["check"] not in ENGINE_CHECKS:
        print(f"cannot replay on {spec!r}: it has no case {repro['case']!r} or no check {repro['check']!r}",
              file=sys.stderr)
        return 2
    workers = workers or os.cpu_count() or 1
    print(f"re-running {repro['check']}[{case.name}] on {engine.name!r}, profile {repro['profile']}, samples "
          f"split over {workers} worker(s): the same seeds as the failing run")
    result = run_engine_check(engine, repro["check"], case, get_profile(repro["profile"]), workers=workers)
    print(result.line())
    if result.status in (FAIL, KNOWN):
        print("STILL FAILS" + (f", as a declared deviation ({result.deviation})" if result.status == KNOWN else ""))
        return 1
    if result.status != PASS:
        print(f"cannot replay: {result.status}", file=sys.stderr)
        return 2
    print(f"PASSES: {engine.name!r} no longer fails {result.id}")
    return 0


def check_engine(args, profile, engine) -> int:
    """The ``check`` command for an engine; the exit status as ``specverify.cli._check`` gives it."""
    selected = args.checks.split(",") if args.checks else None
    unknown = [c for c in selected or [] if c not in ENGINE_CHECKS]
    if unknown:
        print(f"unknown engine check(s) {unknown}; known: {', '.join(ENGINE_CHECKS)}", file=sys.stderr)
        return 2
    pairs = engine_plan(engine, selected)
    if args.cases:
        patterns = [p.strip() for p in args.cases.split(",") if p.strip()]
        pairs = [(c, k) for c, k in pairs if any(fnmatch.fnmatchcase(k.name, p) for p in patterns)]
        if not pairs:
            print(f"--cases {args.cases!r} matches no engine case", file=sys.stderr)
            return 2
    require = parse_requirements(args.require)
    text = (getattr(engine, "describe", lambda: "engine")() + "; engine checks (SPEC 8): alpha "
            f"{engine_alpha(engine, profile):.2g} per sequence case (family {profile.family_alpha:g})")
    caps = RecordedCapabilities(ENGINE_DECLARES, text)
    print(f"{len(pairs)} engine checks in this process, samples split over {args.workers} worker(s); the run stops "
          f"at {args.deadline or profile.deadline:g} s", file=sys.stderr)
    start, deadline = time.perf_counter(), args.deadline or profile.deadline
    results, failures = [], 0
    for i, (check, case) in enumerate(pairs):
        stop = None
        if time.perf_counter() - start >= deadline:
            stop = f"the run's deadline of {deadline:g} s passed (--deadline)"
        elif args.maxfail and failures >= args.maxfail:
            stop = f"stopped after {failures} failed check(s) (--maxfail)"
        if stop:
            result = CheckResult(check=check, case=case.name, backend=engine.name, kind=ENGINE_CHECKS[check].kind,
                                 status=NOT_RUN, message=stop)
        else:
            result = run_engine_check(engine, check, case, profile, workers=args.workers)
        if result.status == FAIL:
            failures += 1
            if not args.no_reproducers:
                _write_reproducer(result, args.failures_dir, args.backend, profile)
        results.append(result)
        print(f"[{i + 1:>2}/{len(pairs)}] {result.id} {result.status} ({result.seconds:.1f}s)", file=sys.stderr,
              flush=True)
    seconds = time.perf_counter() - start
    outcome = verdict(results, caps, require)
    print(render(results, engine.name, profile, seconds, outcome, text))
    if args.json:
        write_json(args.json, document(results, engine.name, profile, seconds, outcome, capabilities=text,
                                       require=list(require), engine=True, workers=args.workers,
                                       engine_alpha=engine_alpha(engine, profile),
                                       plan=[f"{c}[{k.name}]" for c, k in pairs], declared=sorted(ENGINE_DECLARES)))
    if args.junit:
        with open(args.junit, "w") as f:
            f.write(junit_xml(results, engine.name, seconds))
    return 0 if outcome.passed else 1


def render(results, name: str, profile, seconds: float, outcome, text: str) -> str:
    """The kernel report's layout, with the engine run's own error budget in its header."""
    lines = [f"specverify: engine {name!r}, profile {profile.name!r}, device cpu", f"declares: {text}",
             "power: det99 = the smallest deviation each statistical check detects with probability 0.99 at its "
             "alpha: tv = total-variation distance of the law of the first L emitted tokens, acceptance = shift "
             "of the first draft's acceptance probability",
             f"torch {torch.__version__}, python {platform.python_version()}", ""]
    lines += [r.line() for r in results] + [""] + outcome.lines() + ["", summary(results, seconds, outcome)]
    return "\n".join(lines)
