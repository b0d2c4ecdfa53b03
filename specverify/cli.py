"""``specverify check BACKEND``: run every check against a backend and print the report.

BACKEND is a built-in name (reference, cpu, triton) or MODULE:ATTR naming a backend object or a
zero-argument factory. Exit status 0 when every check passes, 1 when one fails, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import sys
import time

from specverify.registry import get_backend
from specverify.checks import CHECKS, plan, run_check
from specverify.report import header, render, summary, write_json
from specverify.strategies import PROFILES, get_profile


def _check(args) -> int:
    profile = get_profile(args.profile)
    if args.device:
        from dataclasses import replace  # noqa: PLC0415
        profile = replace(profile, device=args.device)
    backend = get_backend(args.backend)
    selected = args.checks.split(",") if args.checks else None
    unknown = [c for c in selected or [] if c not in CHECKS]
    if unknown:
        print(f"unknown check(s) {unknown}; known: {', '.join(CHECKS)}", file=sys.stderr)
        return 2
    pairs = plan(profile, selected)
    print(header(backend.name, profile), file=sys.stderr)
    start, results = time.perf_counter(), []
    for i, (check, case) in enumerate(pairs, 1):
        print(f"[{i:>2}/{len(pairs)}] {check}[{case}] ...", end="", file=sys.stderr, flush=True)
        results.append(run_check(backend, check, case, profile))
        print(f" {results[-1].status} ({results[-1].seconds:.1f}s)", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    print(render(results, backend.name, profile, seconds))
    if args.json:
        write_json(args.json, results, backend.name, profile, seconds)
    return 1 if any(r.status == "fail" for r in results) else 0


def _list(_args) -> int:
    for name, check in CHECKS.items():
        print(f"{name:<22} {check.kind:<12} cases: {', '.join(check.cases)}\n{'':<22} {check.doc}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="specverify", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="run every check against a backend and print the report")
    check.add_argument("backend", help="reference, cpu, triton, or MODULE:ATTR")
    check.add_argument("--profile", choices=sorted(PROFILES), default=None,
                       help="ci (default; or $SPECVERIFY_PROFILE), dev, nightly")
    check.add_argument("--device", default=None, help="override the profile's device (cpu, cuda)")
    check.add_argument("--checks", default=None, help="comma-separated subset of checks")
    check.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON")
    check.set_defaults(func=_check)
    sub.add_parser("list", help="list the checks and their cases").set_defaults(func=_list)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, KeyError, ImportError, AttributeError) as exc:
        print(f"specverify: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
