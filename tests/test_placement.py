"""The device-placement check (SPEC 7, issue 31): planned only on CUDA profiles, n/a with its reason
where it cannot run (never a pass), its stale inputs able to show a stale read, and the "cuda2" mutants.

The check itself runs only on a GPU (two for other_device): those tests are skipped here, saying why.
Reading where the call's work ran from a profiler trace is tested here on hand-written traces.
"""

import json
from dataclasses import replace

import pytest
import torch

import reference
from specverify.checks import CHECKS, FAIL, NOT_APPLICABLE, PASS, plan, run_check
from specverify.checks.placement import PLACEMENT_CASES, difference, placement_inputs
from specverify.checks.streams import classify, gpu_work, observe
from specverify.mutants import GPUS_REQUIRED, MUTANTS, Mutant
from specverify.registry import get_backend
from specverify.strategies import get_profile

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
NIGHTLY_CUDA = get_profile("nightly")
ON_GPU = pytest.mark.skipif(GPUS < 1, reason=f"device_placement runs on a GPU; this process sees {GPUS}")


def test_plan_lists_the_check_only_on_a_cuda_profile():
    """`specverify check cpu` (ci on the CPU) does not list it at all; the nightly (cuda) plans both cases."""
    assert not [p for p in plan(get_profile("ci")) if p[0] == "device_placement"]
    assert [p for p in plan(NIGHTLY_CUDA) if p[0] == "device_placement"] == [("device_placement", c)
                                                                            for c in PLACEMENT_CASES]
    assert CHECKS["device_placement"].kind == "structural"


def test_named_on_a_cpu_profile_it_is_planned_and_not_applicable():
    """Asked for by name, the check is never silently dropped: it runs and is n/a, saying why."""
    profile = get_profile("ci")
    assert plan(profile, ["device_placement"]) == [("device_placement", c) for c in PLACEMENT_CASES]
    for case in PLACEMENT_CASES:
        result = run_check(get_backend("cpu"), "device_placement", case, profile)
        assert result.status == NOT_APPLICABLE and "profile device is cpu" in result.message, result.line()


@pytest.mark.skipif(GPUS > 0, reason="checks the no-CUDA path: this process has CUDA")
@pytest.mark.parametrize("case", PLACEMENT_CASES)
def test_without_cuda_a_cuda_profile_gives_not_applicable_with_its_reason(case):
    """The reference backend declares cuda, so the declaration allows the check; the check finds no CUDA."""
    result = run_check(get_backend("reference"), "device_placement", case, NIGHTLY_CUDA)
    assert result.status == NOT_APPLICABLE, result.line()
    assert "torch.cuda.is_available() is False" in result.message


@pytest.mark.parametrize("path", ["seeded", "injected"])
def test_stale_inputs_share_the_layout_and_give_other_tokens(path):
    """The buffers hold the stale call before the real one is copied in: same layout, tensor for tensor,
    and other tokens under the reference, so that a backend reading the stale call is seen."""
    profile, caps = get_profile("ci"), get_backend("triton").capabilities
    real, stale = (placement_inputs(profile, caps, path, s) for s in (False, True))
    assert torch.equal(real.batch.num_draft_tokens, stale.batch.num_draft_tokens)
    assert [(t.shape, t.dtype) for t in real.tensors()] == [(t.shape, t.dtype) for t in stale.tensors()]
    outputs = [reference.sample(c.batch, **(dict(seed=c.seeds) if path == "seeded" else dict(noise=c.noise)))
               for c in (real, stale)]
    why = difference(*outputs)
    assert why is not None and why.startswith(f"{real.batch.num_requests} of {real.batch.num_requests}"), why
    assert difference(outputs[0], outputs[0]) is None


def test_cuda2_is_a_requirement_of_two_gpus():
    """A mutant may require two GPUs ("cuda2"); anything else unknown is refused at declaration."""
    assert GPUS_REQUIRED == {None: 0, "cuda": 1, "cuda2": 2}
    Mutant("two_gpus", object, "bug", "public", ("device_placement",), requires="cuda2")
    with pytest.raises(ValueError, match="requires must be one of"):
        Mutant("four_gpus", object, "bug", "public", ("device_placement",), requires="cuda4")
    assert {n: (m.requires, m.cases) for n, m in MUTANTS.items() if "device_placement" in m.expected_checks} == {
        "outputs_on_current_device": ("cuda2", ("other_device",)),
        "launch_without_device_guard": ("cuda2", ("other_device",)),
        "work_on_default_stream": ("cuda", ("stream",))}


def _triton_on_cuda():
    return get_backend("triton"), replace(get_profile("ci"), device="cuda")


@ON_GPU
def test_triton_passes_the_stream_case():
    backend, profile = _triton_on_cuda()
    result = run_check(backend, "device_placement", "stream", profile)
    assert result.status == PASS, result.line()
    assert "kernel streams not observed" not in result.message, result.line()   # the profiler sees this GPU


@pytest.mark.skipif(GPUS < 2, reason=f"other_device needs 2 GPUs; this process sees {GPUS}")
def test_triton_passes_the_other_device_case():
    backend, profile = _triton_on_cuda()
    result = run_check(backend, "device_placement", "other_device", profile)
    assert result.status == PASS, result.line()


@pytest.mark.skipif(GPUS != 1, reason=f"checks the one-GPU n/a; this process sees {GPUS}")
def test_other_device_on_one_gpu_is_not_applicable_never_a_pass():
    backend, profile = _triton_on_cuda()
    result = run_check(backend, "device_placement", "other_device", profile)
    assert result.status == NOT_APPLICABLE and "needs 2 GPUs" in result.message, result.line()


# ---- where the work ran, read from the trace -------------------------------------------------------
SPIN = "at::cuda::(anonymous namespace)::spin_kernel(long)"   # the markers' kernel, as Kineto names it


def _gpu(cat, name, device, stream, ts):
    return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts, "dur": 1.0,
            "args": {"device": device, "context": 1, "stream": stream, "correlation": int(ts)}}


def _trace(*call, caller=(0, 13), other=(0, 7)):
    """A window as streams.observe makes it: a marker on ``other``, one on ``caller``, the call's events,
    a closing marker on ``caller``; with host-side events (runtime calls, a stream sync) around them."""
    events = [_gpu("kernel", SPIN, *other, 1.0), _gpu("kernel", SPIN, *caller, 2.0)]
    events += [_gpu(cat, name, *lane, 3.0 + i) for i, (cat, name, lane) in enumerate(call)]
    events += [_gpu("kernel", SPIN, *caller, 50.0),
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2.5,
                "dur": 1.0, "args": {"correlation": 3}},
               {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": other[0], "tid": other[1],
                "ts": 60.0, "dur": 1.0, "args": {"device": other[0], "stream": other[1]}},
               {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}}]
    return {"schemaVersion": 1, "traceEvents": events[::-1]}


def test_trace_all_on_the_caller_stream_is_observed_and_passes():
    """Copies and kernels of the call on the caller's lane; the markers and host-side events not counted."""
    seen = classify(_trace(("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", (0, 13)),
                           ("kernel", "_sample_kernel", (0, 13)), ("gpu_memset", "Memset (Device)", (0, 13))))
    assert seen.seen and seen.caller == (0, 13) and seen.other == (0, 7) and len(seen.work) == 3
    assert seen.failure("the caller's stream", "the default stream") is None
    assert seen.summary("the caller's stream").startswith("all 3 kernels, copies and memsets of the call on the "
                                                          "caller's stream (device 0, stream 13")
    assert [w.cat for w in gpu_work(_trace())] == ["kernel"] * 3


def test_trace_a_kernel_on_another_stream_fails_naming_it_and_the_streams():
    seen = classify(_trace(("kernel", "_copy_kernel", (0, 13)), ("kernel", "_sample_kernel", (0, 7)),
                           ("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", (0, 7)), ("kernel", "_end", (0, 13))))
    why = seen.failure("the caller's stream", "the default stream")
    assert why == ("2 of the call's 4 kernels, copies and memsets ran off the caller's stream (device 0, stream 13 "
                   "in the profiler's trace), on device 0, stream 7; first: kernel `_sample_kernel` on device 0, "
                   "stream 7 (the default stream: its marker ran there)"), why


def test_trace_a_copy_on_another_device_fails_naming_the_device():
    """other_device: the caller's lane is cuda:1's current stream, the other marker on cuda:0's."""
    seen = classify(_trace(("kernel", "_sample_kernel", (1, 7)), ("gpu_memcpy", "Memcpy HtoD", (0, 7)),
                           caller=(1, 7), other=(0, 7)))
    why = seen.failure("cuda:1's current stream", "cuda:0's current stream")
    assert why is not None and "first: copy `Memcpy HtoD` on device 0, stream 7 (cuda:0's current stream" in why
    assert "(device 1, stream 7 in the profiler's trace)" in why


@pytest.mark.parametrize("trace, reason", [
    ({"traceEvents": []}, "holds no kernel, not even the markers"),
    ({"traceEvents": [_gpu("gpu_memcpy", "Memcpy HtoD", 0, 7, 1.0)]}, "holds no kernel, not even the markers"),
    ({"traceEvents": [_gpu("kernel", "_sample_kernel", 0, 7, 1.0)]}, "no marker"),
    ({"traceEvents": [_gpu("kernel", SPIN, 0, 13, 9.0), _gpu("kernel", "_k", 0, 13, 5.0)]}, "before the call is "
                                                                                           "missing"),
])
def test_trace_without_markers_is_not_observed_never_a_pass(trace, reason):
    """No CUPTI (no kernel at all), or markers missing: the result says kernel streams were not observed."""
    seen = classify(trace)
    assert not seen.seen and reason in seen.why, seen.why
    assert seen.failure("the caller's stream", "the default stream") is None
    assert seen.summary("the caller's stream").startswith("kernel streams not observed (")


class _Queue:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def synchronize(self):
        self.log.append(f"sync {self.name}")


class _Profiler:
    """Stands in for torch.profiler.profile: logs start and stop, exports ``trace`` (or fails to start)."""

    trace, fail = None, False

    def __init__(self, log, activities):
        self.log = log

    def start(self):
        if self.fail:
            raise RuntimeError("a profiler is already running")
        self.log.append("start")

    def stop(self):
        self.log.append("stop")

    def export_chrome_trace(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.trace, f)


@pytest.mark.parametrize("case", ["observed", "no_cuda_activity", "no_start", "no_kernels"])
def test_observe_marks_the_window_and_falls_back_when_nothing_is_recorded(case, monkeypatch):
    """The window's order (drained queues, marker on the other queue, on the caller's, the call, a closing
    marker, drained queues, stop) and each way of not observing, said in its reason, never a pass."""
    from specverify.checks import streams  # noqa: PLC0415
    log = []
    caller, other = _Queue("caller", log), _Queue("other", log)
    trace = _trace(("kernel", "_sample_kernel", (0, 13))) if case != "no_kernels" else {"traceEvents": []}
    profiler = type("P", (_Profiler,), {"trace": trace, "fail": case == "no_start"})
    cuda = torch.profiler.ProfilerActivity.CUDA
    monkeypatch.setattr(torch.profiler, "supported_activities",
                        lambda: set() if case == "no_cuda_activity" else {cuda})
    monkeypatch.setattr(torch.profiler, "profile", lambda activities: profiler(log, activities))
    monkeypatch.setattr(streams, "_mark", lambda q: log.append(f"mark {q.name}"))
    out, seen = observe(lambda: log.append("call") or "out", caller, other)
    assert out == "out"
    if case == "observed":
        assert seen.seen and seen.failure("c", "o") is None and len(seen.work) == 1
        assert log == ["mark other", "mark caller", "start", "mark other", "mark caller", "call", "mark caller",
                       "sync caller", "sync other", "stop"]
        return
    why = {"no_cuda_activity": "records no CUDA activity", "no_start": "did not start: RuntimeError: a profiler",
           "no_kernels": "holds no kernel"}[case]
    assert not seen.seen and why in seen.why, seen.why
    assert "call" in log


@ON_GPU
def test_observe_on_a_gpu_names_work_queued_on_the_default_stream():
    """The profiler on this GPU records the markers; an add queued on the default stream while a side
    stream is current is named; the same add on the side stream passes."""
    side, default = torch.cuda.Stream(), torch.cuda.default_stream()
    x = torch.zeros(16, device="cuda")

    def misplaced():
        with torch.cuda.stream(side), torch.cuda.stream(default):
            return x.add_(1)

    def placed():
        with torch.cuda.stream(side):
            return x.add_(1)

    _, seen = observe(misplaced, side, default)
    assert seen.seen, seen.why
    assert seen.caller != seen.other and seen.failure("side", "default") is not None
    assert seen.stray and seen.stray[0].lane == seen.other, seen.stray
    _, seen = observe(placed, side, default)
    assert seen.seen and seen.work and seen.failure("side", "default") is None, seen


@ON_GPU
def test_work_on_default_stream_fails_on_the_observed_call():
    """The mutant that the rounds missed on the H100 (its host syncs wait the races out) is named by the
    trace, before any round."""
    _, profile = _triton_on_cuda()
    result = run_check(MUTANTS["work_on_default_stream"].build(), "device_placement", "stream", profile)
    assert result.status == FAIL and "observed call" in result.message and "ran off" in result.message, result.line()
