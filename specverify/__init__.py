"""specverify: a test-and-correctness harness for speculative-decoding verification kernels."""

from specverify.backends import Backend, Capabilities, ReferenceBackend, UnsupportedError, require_supported
from specverify.registry import BUILTIN_BACKENDS, get_backend

__all__ = ["BUILTIN_BACKENDS", "Backend", "Capabilities", "ReferenceBackend", "UnsupportedError", "get_backend",
           "require_supported"]
