"""specverify: a test-and-correctness harness for speculative-decoding verification kernels.

The names below are imported on first use (PEP 562): the pytest plugin (``specverify.plugin``, loaded in
every pytest run of an environment that has specverify installed) imports ``specverify.gpus``, and that
must not import torch through this package; a plain pytest run started by the suite paid about 2 s a
process for it.
"""

from __future__ import annotations

_FROM_BACKENDS = frozenset({"Backend", "Capabilities", "ReferenceBackend", "UnsupportedError", "require_supported"})
_FROM_REGISTRY = frozenset({"BUILTIN_BACKENDS", "get_backend"})

__all__ = ["BUILTIN_BACKENDS", "Backend", "Capabilities", "ReferenceBackend", "UnsupportedError", "get_backend",
           "require_supported"]


def __getattr__(name: str):
    # import statements, not importlib: tests/test_import_cycles.py reads the dependencies from them
    if name in _FROM_BACKENDS:
        from specverify import backends as module
    elif name in _FROM_REGISTRY:
        from specverify import registry as module
    else:
        raise AttributeError(f"module 'specverify' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value     # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
