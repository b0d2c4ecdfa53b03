"""Where a call's GPU work ran (SPEC 7, ``device_placement``): the device and CUDA stream of every
kernel, copy and memset the call queued, read from the PyTorch profiler's trace (CUPTI through Kineto).

The profiled window holds, each synchronised with the host before the next is queued: a marker on the
queue the call must not use (``other``), a marker on the caller's stream, the call, a closing marker on
the caller's stream (one marker on each is queued before the window too: the kernel's lazy loading
stays out of it). A marker is ``torch.cuda._sleep``'s one-thread kernel (``spin_kernel``), which no
sampler launches. The trace names each GPU event's device and stream in its ``args`` ("device",
"stream": CUPTI's stream id, not the handle PyTorch knows); the markers say which lane is the caller's
and which the other's. Every GPU event of the window other than the markers is the call's (the guard's
private copies and comparisons included: they are queued on the caller's current stream too), and each
must be on the caller's lane: a kernel, copy or memset on another stream or device fails, naming the
lanes and the first such event.

What it cannot see: work queued by another process, a host-side copy (no GPU event), and, where the
profiler records no CUDA activity (a torch build without CUPTI, a profiler already running, CUPTI failing
at run time), anything at all. That is told by the markers missing from the trace, never taken for a
pass: the caller then says that kernel streams were not observed.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Callable

import torch

GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")   # trace categories of work queued on a stream
MARKER = "spin_kernel"                              # torch.cuda._sleep's kernel
MARKER_CYCLES = 1_000


@dataclass(frozen=True)
class Work:
    """One GPU event of the trace: its category (kernel, gpu_memcpy, gpu_memset), name, device, stream
    and start time (µs)."""

    cat: str
    name: str
    device: int | None
    stream: int | None
    ts: float

    @property
    def lane(self) -> tuple:
        return self.device, self.stream

    def __str__(self) -> str:
        what = {"kernel": "kernel", "gpu_memcpy": "copy", "gpu_memset": "memset"}[self.cat]
        return f"{what} `{self.name}` on {lane_name(self.lane)}"


def lane_name(lane: tuple) -> str:
    return f"device {lane[0]}, stream {lane[1]}"


def gpu_work(trace: dict) -> list[Work]:
    """The kernels, copies and memsets of a chrome trace (Kineto's JSON), by start time."""
    found = []
    for event in trace.get("traceEvents", []):
        cat = str(event.get("cat", "")).lower()
        if cat not in GPU_WORK or event.get("ph") != "X":
            continue
        args = event.get("args") or {}
        found.append(Work(cat, str(event.get("name", "")), args.get("device"), args.get("stream"),
                          float(event.get("ts", 0))))
    return sorted(found, key=lambda w: w.ts)


@dataclass(frozen=True)
class Observed:
    """What the trace shows of one call. ``seen`` False: kernel streams were not observed (``why``).
    Else ``caller`` is the caller's lane (device, stream), ``other`` the other queue's (None where its
    marker is missing), ``work`` the call's GPU events, ``stray`` those off the caller's lane."""

    seen: bool
    why: str = ""
    caller: tuple | None = None
    other: tuple | None = None
    work: tuple[Work, ...] = ()
    stray: tuple[Work, ...] = ()

    def failure(self, caller_name: str, other_name: str) -> str | None:
        """None unless the call queued GPU work off the caller's lane: then what, where and how much."""
        if not self.stray:
            return None
        first = self.stray[0]
        whose = f" ({other_name}: its marker ran there)" if first.lane == self.other else ""
        lanes = sorted({lane_name(w.lane) for w in self.stray})
        return (f"{len(self.stray)} of the call's {len(self.work)} kernels, copies and memsets ran off "
                f"{caller_name} ({lane_name(self.caller)} in the profiler's trace), on {'; '.join(lanes)}; "
                f"first: {first}{whose}")

    def summary(self, caller_name: str) -> str:
        if not self.seen:
            return f"kernel streams not observed ({self.why}): the rounds alone"
        return (f"all {len(self.work)} kernels, copies and memsets of the call on {caller_name} "
                f"({lane_name(self.caller)} in the profiler's trace)")


def classify(trace: dict) -> Observed:
    """Read the window's trace (module docstring): markers found, the call's events, those off the lane."""
    work = gpu_work(trace)
    if not any(w.cat == "kernel" for w in work):
        return Observed(False, "the profiler's trace holds no kernel, not even the markers: CUPTI not recording")
    spins = [w for w in work if w.cat == "kernel" and MARKER in w.name]
    if not spins:
        return Observed(False, f"the trace holds kernels but no marker ({MARKER})")
    closing = spins[-1]
    opening = [w for w in spins[:-1] if w.lane == closing.lane]
    if not opening:
        return Observed(False, "the marker queued on the caller's stream before the call is missing from the "
                               "trace: the call may not have been recorded whole")
    others = [w for w in spins if w.lane != closing.lane]
    markers = {id(closing), id(opening[0])} | ({id(others[0])} if others else set())
    call = tuple(w for w in work if id(w) not in markers)
    if any(w.device is None or w.stream is None for w in call):
        return Observed(False, "the trace's GPU events carry no device or stream")
    return Observed(True, caller=closing.lane, other=others[0].lane if others else None, work=call,
                    stray=tuple(w for w in call if w.lane != closing.lane))


def _mark(stream: torch.cuda.Stream) -> None:
    with torch.cuda.stream(stream):
        torch.cuda._sleep(MARKER_CYCLES)
    stream.synchronize()


def _trace(prof) -> dict:
    with tempfile.TemporaryDirectory(prefix="specverify-trace-") as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            return json.load(f)


def observe(call: Callable, caller: torch.cuda.Stream, other: torch.cuda.Stream):
    """(call(), Observed): the call made between markers under the profiler (module docstring), both
    queues drained before and after. A profiler that cannot start, stop or export is not observed."""
    _mark(other)    # the markers' kernel loaded (lazily, on its first launch) before the window opens
    _mark(caller)
    activity = torch.profiler.ProfilerActivity.CUDA
    if activity not in torch.profiler.supported_activities():
        return call(), Observed(False, "this torch build's profiler records no CUDA activity")
    prof = torch.profiler.profile(activities=[activity])
    try:
        prof.start()
    except Exception as exc:  # noqa: BLE001 (any profiler failure means: not observed)
        return call(), Observed(False, f"the profiler did not start: {type(exc).__name__}: {exc}")
    stopped = None
    try:
        _mark(other)
        _mark(caller)
        out = call()
        _mark(caller)
    finally:
        caller.synchronize()
        other.synchronize()
        try:
            prof.stop()
        except Exception as exc:  # noqa: BLE001
            stopped = f"the profiler did not stop: {type(exc).__name__}: {exc}"
    if stopped:
        return out, Observed(False, stopped)
    try:
        trace = _trace(prof)
    except Exception as exc:  # noqa: BLE001
        return out, Observed(False, f"the profiler's trace could not be read: {type(exc).__name__}: {exc}")
    return out, classify(trace)


__all__ = ["GPU_WORK", "MARKER", "Observed", "Work", "classify", "gpu_work", "observe"]
