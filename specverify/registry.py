"""Finding a backend by name: the built-in ones, ``MODULE:ATTR``, or an object following the protocol.

Loading is where a backend's declaration is checked against what the harness allows (for example
an ambiguity margin wider than the harness's), so a bad declaration fails before any check runs.
"""

from __future__ import annotations

import importlib
import math
import os
import sys

from specverify.backends import HARNESS_AMBIGUITY_MARGIN, Backend, ReferenceBackend

BUILTIN_BACKENDS = ("reference", "cpu", "triton")


def _builtin(name: str) -> Backend:
    if name == "reference":
        return ReferenceBackend()
    if name == "cpu":
        from specverify.kernels.cpu import CpuBackend  # noqa: PLC0415
        return CpuBackend()
    if name == "triton":
        from specverify.kernels.triton_sampler import TritonBackend  # noqa: PLC0415
        return TritonBackend()
    raise KeyError(name)


def get_backend(spec) -> Backend:
    """A built-in name ("reference", "cpu", "triton"), "MODULE:ATTR" (an object or a zero-argument
    factory following the protocol), or a backend object, which is returned as is."""
    if not isinstance(spec, str):
        return checked_backend(spec, repr(spec))
    if spec in BUILTIN_BACKENDS:
        return _builtin(spec)
    if ":" not in spec:
        raise ValueError(f"unknown backend {spec!r}: use one of {BUILTIN_BACKENDS} or MODULE:ATTR")
    module_name, attr = spec.split(":", 1)
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())  # like `python -m`, MODULE may live in the working directory
    obj = getattr(importlib.import_module(module_name), attr)
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "capabilities")):
        obj = obj()
    return checked_backend(obj, spec)


def is_engine(obj) -> bool:
    """An engine adapter (SPEC 8), told apart from a kernel backend by what it gives."""
    return all(hasattr(obj, a) for a in ("generate", "target_law", "cases", "vocab_size"))


def get_engine(spec):
    """The engine adapter (SPEC 8) that ``spec`` names, built, or None when it names anything else (a
    kernel backend, or a module that cannot be imported here: the worker pool then reports that as
    usual). An engine is an object that gives ``generate``, ``target_law``, ``cases`` and
    ``vocab_size``, or a factory marked ``specverify_engine = True``."""
    if not isinstance(spec, str):
        return spec if is_engine(spec) else None
    if spec in BUILTIN_BACKENDS or ":" not in spec:
        return None
    module_name, attr = spec.split(":", 1)
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except Exception:  # noqa: BLE001 - not ours to report: the backend path loads it again and says why
        return None
    if getattr(obj, "specverify_engine", False) and not is_engine(obj):
        obj = obj()
    return obj if is_engine(obj) else None


def checked_backend(obj, spec: str) -> Backend:
    """``obj`` if it follows the protocol and declares nothing the harness refuses, else ValueError."""
    missing = [a for a in ("name", "capabilities") if not hasattr(obj, a)]
    if missing or not callable(obj):
        raise ValueError(f"{spec} does not follow the Backend protocol: it needs a callable with "
                         f"'name' and 'capabilities' (missing: {', '.join(missing) or '__call__'})")
    margin = getattr(obj.capabilities, "ambiguity_margin", HARNESS_AMBIGUITY_MARGIN)
    if not isinstance(margin, (int, float)) or not math.isfinite(margin) or not 0 <= margin <= HARNESS_AMBIGUITY_MARGIN:
        raise ValueError(f"{spec}: capabilities.ambiguity_margin={margin!r} is refused: the harness owns the "
                         f"tolerance (SPEC 4.1); a backend may declare a margin in [0, {HARNESS_AMBIGUITY_MARGIN:g}], "
                         "never a wider one")
    return obj
