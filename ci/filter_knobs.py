"""The ``--set NAME=VALUE`` option that the cut's probes share (ci/filter_stages.py, ci/cut_sass.py): each sets
a constant of ``specverify.kernels.triton_filter`` (an integer, or a float where the constant is one) for the run,
and an unknown name stops the run."""

from __future__ import annotations

import argparse
import sys


def add_set_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a triton_filter constant for this run (NS=1024, COUNT_TILE=1024)")


def apply_sets(module, items: list[str]) -> None:
    """setattr(module, NAME, VALUE) for each item, as a float where the constant is one, else an int; exits naming
    the first unknown NAME."""
    for item in items:
        name, value = item.split("=")
        if not hasattr(module, name):
            sys.exit(f"--set: {module.__name__} has no {name}")
        setattr(module, name, float(value) if isinstance(getattr(module, name), float) else int(value))
