"""Checks in child processes: a backend that hangs, crashes, exits or corrupts the GPU ends one check
as a FAIL line, never the run, and a broken backend gets its red verdict in minutes.

Each worker is a child process (forked from a server that has imported the harness, so a fresh one
starts in well under a second) that loads the backend itself and runs (check, case) pairs one at a
time through ``specverify.checks.run_check``. The parent never imports the backend's module. It
waits for each pair under a per-check timeout and each backend call under a per-call timeout
(``specverify.watch``); on a timeout it kills the worker, on a dead worker it reads how it died
(signal, exit status), and in both cases records a FAIL naming that and starts a new worker for the
remaining pairs. Backend output on stdout goes to stderr in the workers, so the report on stdout
stays readable.

A run stops early, the checks in flight killed and the rest reported "not run" with the reason, when

- a backend call outlives the call timeout: the backend is declared hung (SPEC 7) and is not called
  again, unless ``keep_going`` (then each later call gets the same limit, never the whole timeout);
- ``max_failures`` checks have failed (``--maxfail N``, ``-x``);
- the run's ``deadline`` passes (``--deadline``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait

from specverify.checks import CHECKS, FAIL, NOT_RUN, PASS, CheckResult
from specverify.checks.cases import long_draw
from specverify.checks.parts import merge_parts, parts_for
from specverify.checks.statistical import sample_group
from specverify.gpus import pinned_order
from specverify.strategies import Profile
from specverify.watch import CallState, reproducer_path

SAVE_GRACE = 10.0     # seconds the parent waits for a hung call's reproducer before killing its worker

CUDA_FAULT_MARKERS = ("CUDA error", "device-side assert", "cudaError", "illegal memory access")


class BackendLoadError(RuntimeError):
    """The backend could not be loaded in a worker (import error, bad declaration, crash at import)."""


@dataclass
class Loaded:
    name: str
    capabilities: object


def _serve(conn, spec: str, profile: Profile, sys_path: list, threads: int, failures_dir: str | None,
           deviations: tuple, numbers, text, call_timeout: float, visible: str | None = None) -> None:
    """Worker main loop: load the backend, then answer (check, case) requests until told to stop. Without
    a ``failures_dir`` a failed check is not reduced to a reproducer (nothing would be written)."""
    os.dup2(2, 1)   # whatever the backend prints goes to stderr, not into the report
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle; it kills the workers
    sys.path[:] = sys_path
    if visible is not None:     # before CUDA starts in this process: its own GPU is its cuda:0
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    import torch  # noqa: PLC0415
    if visible is not None and torch.cuda.is_initialized():
        conn.send(("load_error", f"CUDA was started before the worker was pinned (CUDA_VISIBLE_DEVICES={visible})"))
        return

    from specverify.checks import run_check  # noqa: PLC0415
    from specverify.checks.repro import write_reproducer  # noqa: PLC0415
    from specverify.checks.runner import observe_calls  # noqa: PLC0415
    from specverify.registry import get_backend  # noqa: PLC0415
    from specverify.watch import CallWatch  # noqa: PLC0415
    torch.set_num_threads(threads)
    try:
        backend = get_backend(spec)
        caps = backend.capabilities
        conn.send(("loaded", Loaded(str(backend.name), caps)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which exits with status 2
        conn.send(("load_error", f"{type(exc).__name__}: {exc}"))
        return
    watch = CallWatch(numbers, text, call_timeout, failures_dir, str(backend.name), profile)
    observe_calls(watch)
    while True:
        request = conn.recv()
        if request is None:
            return
        check, case, part = request
        watch.begin(check, case)
        try:
            result = run_check(backend, check, case, profile, deviations, reproducer=failures_dir is not None,
                               **({"part": part} if part else {}))
        except SystemExit as exc:
            conn.send(("last", _fail(check, case, backend.name,
                                     f"the backend called sys.exit({exc.code!r}) during the check")))
            return
        try:
            if failures_dir:
                write_reproducer(result, failures_dir, spec=spec)
        except Exception as exc:  # noqa: BLE001 - a reproducer that cannot be written is said, not fatal
            result.message += f" (reproducer not written: {type(exc).__name__}: {exc})"
        result.__dict__.pop("repro", None)
        # The CUDA context is unusable after a fault: the next check gets a fresh worker.
        last = result.status == FAIL and any(m in result.message for m in CUDA_FAULT_MARKERS)
        conn.send(("last" if last else "result", result))
        if last:
            return


def _fail(check: str, case: str, backend: str, message: str) -> CheckResult:
    return CheckResult(check=check, case=case, backend=backend, kind=CHECKS[check].kind, status=FAIL,
                       message=message)


def _not_run(check: str, case: str, backend: str, message: str, seconds: float = 0.0) -> CheckResult:
    return CheckResult(check=check, case=case, backend=backend, kind=CHECKS[check].kind, status=NOT_RUN,
                       message=message, seconds=seconds)


def _death(exitcode: int | None) -> str:
    if exitcode is None:
        return "the worker process died"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"the backend crashed the worker process ({name})"
    return (f"the worker process exited with status {exitcode} during the check (the backend ended the "
            "process, e.g. os._exit or exit)")


class _Worker:
    def __init__(self, ctx, spec: str, profile: Profile, threads: int, failures_dir: str | None,
                 deviations: tuple, call_timeout: float, gpu: str | None = None,
                 visible: str | None = None) -> None:
        self.conn, child = ctx.Pipe()
        self.calls = CallState(ctx)
        self.gpu = gpu
        self.proc = ctx.Process(target=_serve, daemon=True,
                                args=(child, spec, profile, list(sys.path), threads, failures_dir, deviations,
                                      self.calls.numbers, self.calls.text, call_timeout, visible))
        self.proc.start()
        child.close()
        self.item = None          # (index, check, case, part) in flight; part (k, n) or None
        self.deadline = None
        self.started = None

    def send(self, index: int, check: str, case: str, part: tuple | None, timeout: float) -> None:
        self.item, self.started = (index, check, case, part), time.perf_counter()
        self.deadline = self.started + timeout
        self.conn.send((check, case, part))

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()


def _group(item) -> str | None:
    """The draw an item (index, check, case, part) shares with others; a part of a split draw shares none."""
    return None if item[3] else sample_group(item[1], item[2])


def thread_share(workers: int) -> int:
    """torch intra-op threads for each of ``workers`` processes computing side by side on this machine's
    cores: each takes its share, so that together they do not oversubscribe the cores."""
    return max(1, (os.cpu_count() or 1) // workers)


class CheckPool:
    """Runs (check, case) pairs of one backend in ``workers`` child processes, each check under
    ``timeout`` seconds and each backend call under ``call_timeout`` (at most ``timeout``). With ``gpus``
    (ids), each worker is pinned to one of them, the least used when it starts, and its results say which."""

    def __init__(self, spec: str, profile: Profile, workers: int = 1, timeout: float = 600.0,
                 failures_dir: str | None = None, deviations: tuple = (), call_timeout: float | None = None,
                 keep_going: bool = False, gpus: list[str] | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        call_timeout = timeout if call_timeout is None else call_timeout
        if not call_timeout > 0:
            raise ValueError(f"call_timeout must be > 0 seconds, got {call_timeout}")
        self.spec, self.profile, self.workers, self.timeout = spec, profile, workers, timeout
        self.call_timeout = min(call_timeout, timeout)
        self.keep_going = keep_going       # after a hung call, go on calling the backend
        self.failures_dir = failures_dir   # where workers write the reproducers of failed checks; None: none
        self.deviations = tuple(deviations)  # declared by the run, besides the backend's own
        self.gpus = list(gpus or [])
        self.threads = thread_share(workers)
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["specverify._worker_preload"])
        self._live: list[_Worker] = []
        self.loaded: Loaded | None = None
        self.hang: str | None = None       # the first hung call, named: "check[case], call N (...)"
        self.stopped: str | None = None    # why the run stopped early, if it did

    def _spawn(self) -> _Worker:
        gpu = min(self.gpus, key=lambda g: sum(w.gpu == g for w in self._live)) if self.gpus else None
        worker = _Worker(self._ctx, self.spec, self.profile, self.threads, self.failures_dir, self.deviations,
                         self.call_timeout, gpu, None if gpu is None else pinned_order(gpu, self.gpus))
        limit = max(self.timeout, 120.0)
        deadline = time.perf_counter() + limit
        while not worker.conn.poll(0.2) and worker.proc.is_alive():
            if time.perf_counter() > deadline:
                worker.kill()
                raise BackendLoadError(f"loading backend {self.spec!r} took over {limit:g} s")
        try:
            kind, payload = worker.conn.recv()
        except (EOFError, OSError):
            worker.proc.join(5)
            worker.kill()
            raise BackendLoadError(f"loading backend {self.spec!r}: {_death(worker.proc.exitcode)}") from None
        if kind == "load_error":
            worker.kill()
            raise BackendLoadError(f"loading backend {self.spec!r}: {payload}")
        self.loaded = payload
        self._live.append(worker)
        return worker

    def load(self) -> Loaded:
        """Start one worker (loading the backend there) and return what it declares."""
        if not self._live:
            self._spawn()
        return self.loaded

    def run(self, pairs: list[tuple[str, str]], on_result=None, max_failures: int | None = None,
            deadline: float | None = None) -> list[CheckResult]:
        """Results in the order of ``pairs``; ``on_result(i, result)`` as each finishes. The run stops
        early (``self.stopped`` says why; the checks in flight and the rest become "not run") after
        ``max_failures`` failed checks, ``deadline`` seconds after it starts, or when a call hangs
        (unless ``keep_going``). On KeyboardInterrupt the workers are killed and the exception
        propagates; ``self.finished`` holds what completed."""
        seconds, deadline = deadline, None if deadline is None else time.perf_counter() + deadline
        self.finished: dict[int, CheckResult] = {}
        self._failures, self._max_failures, self.stopped = 0, max_failures, None
        # the production-vocabulary cases are the longest: started first, they do not end the run alone
        order = sorted(range(len(pairs)), key=lambda i: -long_draw(pairs[i][1]))
        declared = tuple(self.deviations) + tuple(getattr(self.load().capabilities, "deviations", ()))
        split = {i: parts_for(*pairs[i], min(len(self.gpus), self.workers), declared) for i in order}
        # a split pair is n items (its parts), dealt to any workers; the rest, one item each
        pending = deque((i, *pairs[i], (k, split[i]) if split[i] > 1 else None)
                        for i in order for k in range(split[i]))
        self._parts: dict[int, dict] = {}      # index -> {part k: its result}, until every part is in
        self._queues: dict[_Worker, deque] = {}
        try:
            while pending or any(self._queues.values()) or any(w.item for w in self._live):
                if deadline is not None and time.perf_counter() >= deadline and self.stopped is None:
                    self.stopped = f"the run's deadline of {seconds:g} s passed (--deadline)"
                if self.stopped is not None:
                    self._stop(pending, on_result)
                    break
                while pending and len(self._live) < self.workers:
                    self._spawn()
                for worker in self._live:
                    if worker.item is None:
                        self._dispatch(worker, pending)
                busy = [w for w in self._live if w.item is not None]
                now = time.perf_counter()
                wake = min([w.deadline for w in busy] + ([deadline] if deadline is not None else []))
                # calls are timed in the workers' shared memory: look again at least every second
                wait([w.conn for w in busy] + [w.proc.sentinel for w in busy],
                     timeout=min(1.0, max(0.0, wake - now) + 0.05))
                for worker in busy:
                    self._collect(worker, on_result)
                    if worker not in self._live:
                        self._requeue(worker, pending)
                    if self.stopped is not None:
                        break   # the rest in flight are stopped, not failed: a hang is named once
        except BaseException:
            self.close()
            raise
        return [self.finished[i] for i in range(len(pairs))]

    def _dispatch(self, worker: _Worker, pending: deque) -> None:
        """Send ``worker`` its next pair: the rest of a statistical case it started (one draw serves the
        case's checks in one worker, ``statistical.sample_group``), else the next pending pair, whose
        case's other statistical pairs it then keeps."""
        queue = self._queues.setdefault(worker, deque())
        if not queue and pending:
            item = pending.popleft()
            queue.append(item)
            group = _group(item)
            if group is not None:
                mine = [_group(i) == group for i in pending]
                queue.extend(i for i, m in zip(pending, mine) if m)
                kept = [i for i, m in zip(pending, mine) if not m]
                pending.clear()
                pending.extend(kept)
        if queue:
            worker.send(*queue.popleft(), self.timeout)

    def _requeue(self, worker: _Worker, pending: deque) -> None:
        """A worker that ended (killed, crashed) gives back the pairs it was keeping."""
        pending.extendleft(reversed(self._queues.pop(worker, deque())))

    def _stop(self, pending: deque, on_result) -> None:
        """Kill the checks in flight and report them and every pending pair as not run."""
        name = self.loaded.name if self.loaded else self.spec
        for worker in list(self._queues):
            self._requeue(worker, pending)
        for worker in list(self._live):
            if worker.item is not None:
                index, check, case, _ = worker.item
                self._record(index, _not_run(check, case, name, f"stopped while running: {self.stopped}",
                                             time.perf_counter() - worker.started), on_result)
                worker.item = None
            worker.kill()
        self._live = []
        while pending:
            index, check, case, _ = pending.popleft()
            self._record(index, _not_run(check, case, name, f"not run: {self.stopped}"), on_result)

    def _record(self, index: int, result: CheckResult, on_result) -> None:
        if index in self.finished:      # a split pair: recorded at its first failed part, or once complete
            return
        self.finished[index] = result
        if on_result:
            on_result(index, result)
        if result.status == FAIL:
            self._failures += 1
            if self._max_failures is not None and self._failures >= self._max_failures and self.stopped is None:
                self.stopped = f"{self._failures} check(s) failed (--maxfail {self._max_failures})"

    def _hung_call(self, worker: _Worker) -> str | None:
        """The call in flight if it has outlived the call timeout, or the check's timeout has passed during
        it (its description), else None."""
        running = worker.calls.running_for()
        if running <= 0 or (running < self.call_timeout and time.perf_counter() < worker.deadline):
            return None
        return worker.calls.description or "a backend call"

    def _collect(self, worker: _Worker, on_result) -> None:
        index, check, case, part = worker.item
        result, last = None, False
        if worker.conn.poll():
            try:
                kind, result = worker.conn.recv()
                last = kind == "last"
            except (EOFError, OSError):
                result = None
        hung = None if result is not None or not worker.proc.is_alive() else self._hung_call(worker)
        if result is None and hung is None and worker.proc.is_alive() and time.perf_counter() < worker.deadline:
            return   # still running
        if result is None:
            reproducer = None
            if hung is not None:
                # the worker's watch saves the call once it outlives the call timeout: worth waiting for
                # unless the check's own timeout cut the call short long before that
                running = worker.calls.running_for()
                soon = self.call_timeout - running <= SAVE_GRACE
                reproducer = self._await_reproducer(worker, check, case) if soon else None
                limit = (f"{self.call_timeout:g} s (--call-timeout)" if running >= self.call_timeout
                         else f"the check's {self.timeout:g} s (--timeout)")
                message = f"hung: {hung} did not return within {limit}; the worker was killed"
                if self.hang is None:
                    self.hang = f"{check}[{case}], {hung}"
                    if not self.keep_going:
                        self.stopped = (f"the backend hung in {check}[{case}] and is not called again "
                                        "(--keep-going calls it on)")
            elif worker.proc.is_alive():
                message = (f"timed out after {self.timeout:g} s (--timeout): the check did not finish; "
                           "the worker was killed")
            else:
                worker.proc.join(5)
                message = _death(worker.proc.exitcode)
            result = _fail(check, case, self.loaded.name, message)
            result.seconds = time.perf_counter() - worker.started
            if reproducer:
                result.reproducer = reproducer
                result.replay = f"specverify replay {reproducer} {self.spec}"
            worker.kill()
        worker.item = None
        if last:
            worker.proc.join(5)
            worker.kill()
        if worker.conn.closed:
            self._live.remove(worker)
        result.gpu = worker.gpu
        if part is None:
            self._record(index, result, on_result)
            return
        # a part: kept until its siblings are in; one that did not pass decides the pair at once
        if result.status != PASS:
            result.message = f"part {part[0] + 1} of {part[1]}: {result.message}"
            self._record(index, result, on_result)
            return
        got = self._parts.setdefault(index, {})
        got[part[0]] = result
        if len(got) == part[1]:
            self._record(index, merge_parts(check, case, self.profile, [got[k] for k in range(part[1])]), on_result)

    def _await_reproducer(self, worker: _Worker, check: str, case: str) -> str | None:
        """The path of the hung call's reproducer once the worker has written it (None if it cannot)."""
        if not self.failures_dir:
            return None
        limit = time.perf_counter() + SAVE_GRACE
        while not worker.calls.saved and worker.proc.is_alive() and time.perf_counter() < limit:
            time.sleep(0.1)
        path = reproducer_path(self.failures_dir, self.loaded.name, check, case)
        return path if worker.calls.saved and os.path.exists(path) else None

    def close(self) -> None:
        for worker in self._live:
            try:
                if worker.item is None and worker.proc.is_alive():
                    worker.conn.send(None)
                    worker.proc.join(2)
            except OSError:
                pass
            worker.kill()
        self._live = []


__all__ = ["BackendLoadError", "CheckPool", "Loaded"]
