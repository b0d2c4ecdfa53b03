"""One backend call at a time, watched: what lets the check pool tell a hung backend from a slow check.

A worker of the pool installs a ``CallWatch`` as the runner's call observer. Before each guarded
backend call it writes, into memory it shares with the parent, the call's start time and a line
describing it; after the call it clears the start time. The parent reads that memory (``CallState``)
to time each call out on its own (``--call-timeout``), far sooner than the whole check's timeout.

When a call outlives its limit, a thread of the worker writes the call's reproducer (the batch, its
noise or seeds and keywords: replaying it calls the backend exactly as the check did) and raises a
flag; the parent waits a few seconds for that flag, then kills the worker. A call stuck while holding
the interpreter (or a device copy that waits on a deadlocked kernel) cannot be saved from inside:
the parent then reports the check's own reproducer, which regenerates the call deterministically.

    shared state   [3] float64   start of the call in flight (time.monotonic, 0: none), calls so far
                                 in this check, 1.0 once the hung call's reproducer is written
    shared text    [512] bytes   "call N (method, noise, B, K, V, dtype)" of the call in flight
"""

from __future__ import annotations

import threading
import time

from specverify.checks.repro import Reproducer
from specverify.checks.runner import CallObserver

TEXT_BYTES = 512
STARTED, COUNT, SAVED = 0, 1, 2


def describe_call(index: int, call) -> str:
    """"call 3 (standard, injected noise, B = 4, max drafts 3, V = 64, float32)"."""
    b, kwargs = call.batch, call.kwargs
    noise = "injected noise" if call.noise is not None else "per-request seeds"
    method = kwargs.get("method", "standard")
    dtype = str(b.target_logits.dtype).replace("torch.", "")
    return (f"call {index} ({method}, {noise}, B = {b.num_requests}, max drafts {b.max_draft}, "
            f"V = {b.vocab_size}, {dtype})")


def reproducer_path(directory: str, backend: str, check: str, case: str) -> str:
    """Where the reproducer of ``check[case]`` on ``backend`` is written (the stem every reproducer uses)."""
    stem = Reproducer("call", check, case, backend, "", "", "").stem()
    return f"{directory.rstrip('/')}/{stem}.pt"


def hung_call_reproducer(call, check: str, case: str, backend: str, profile, message: str) -> Reproducer:
    """The reproducer of a hung call: the whole call (batch, noise or seeds, keywords) on the CPU."""
    call = call.cpu()
    size = call.batch.num_requests
    return Reproducer("call", check, case, backend, profile.name, profile.device, message, call=call,
                      requests=list(range(size)), full_requests=size)


class CallState:
    """The parent's view of one worker's calls (and the memory the worker writes them to)."""

    def __init__(self, ctx) -> None:
        self.numbers = ctx.RawArray("d", 3)
        self.text = ctx.RawArray("c", TEXT_BYTES)

    def running_for(self) -> float:
        """Seconds the call in flight has run, 0.0 when the worker is not inside a backend call."""
        started = self.numbers[STARTED]
        return time.monotonic() - started if started > 0 else 0.0

    @property
    def description(self) -> str:
        return self.text.value.decode("utf-8", "replace")

    @property
    def saved(self) -> bool:
        return self.numbers[SAVED] > 0


class CallWatch(CallObserver):
    """The worker side: records each call and saves the one that outlives ``limit`` seconds."""

    def __init__(self, numbers, text, limit: float, failures_dir: str | None, backend: str, profile) -> None:
        self.numbers, self.text, self.limit = numbers, text, limit
        self.failures_dir, self.backend, self.profile = failures_dir, backend, profile
        self.check = self.case = ""
        self.call = None
        self._lock = threading.Lock()
        threading.Thread(target=self._watch, name="specverify-call-watch", daemon=True).start()

    def begin(self, check: str, case: str) -> None:
        self.check, self.case = check, case
        self.numbers[COUNT] = 0.0
        self.numbers[SAVED] = 0.0

    def started(self, call) -> None:
        self.numbers[COUNT] += 1
        with self._lock:
            self.call = call
        self.text.value = describe_call(int(self.numbers[COUNT]), call).encode()[:TEXT_BYTES - 1]
        self.numbers[STARTED] = time.monotonic()

    def finished(self) -> None:
        self.numbers[STARTED] = 0.0
        with self._lock:
            self.call = None

    def _watch(self) -> None:
        while True:
            time.sleep(0.25)
            started = self.numbers[STARTED]
            if started <= 0 or self.numbers[SAVED] > 0 or time.monotonic() - started < self.limit:
                continue
            with self._lock:
                call = self.call
            if call is None or not self.failures_dir:
                continue
            try:
                self._save(call)
            except Exception:  # noqa: BLE001 - the parent falls back to the check's reproducer
                pass
            self.numbers[SAVED] = 1.0

    def _save(self, call) -> None:
        message = (f"hung: {self.text.value.decode('utf-8', 'replace')} did not return within {self.limit:g} s; "
                   "replaying this call calls the backend exactly as the check did")
        hung_call_reproducer(call, self.check, self.case, self.backend, self.profile, message).save(self.failures_dir)


__all__ = ["CallState", "CallWatch", "describe_call", "hung_call_reproducer", "reproducer_path"]
