"""specverify: a test-and-correctness harness for speculative-decoding verification kernels."""

from specverify.backends import (BUILTIN_BACKENDS, Backend, Capabilities, ReferenceBackend, UnsupportedError,
                                 get_backend, require_supported)

__all__ = ["BUILTIN_BACKENDS", "Backend", "Capabilities", "ReferenceBackend", "UnsupportedError", "get_backend",
           "require_supported"]
