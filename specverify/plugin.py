"""pytest plugin (entry point ``pytest11``): options and fixtures for the shipped conformance suite.

    pytest --pyargs specverify.suite --specverify-backend=MODULE:ATTR -n auto
    pytest --pyargs specverify.suite --specverify-backend=triton --specverify-profile=nightly \\
        -n 8 --specverify-gpus=auto --specverify-json=results.json

GPU pinning (``--specverify-gpus`` or ``$SPECVERIFY_GPUS``: "auto" for every visible GPU, or a
comma-separated list of device ids): the xdist controller resolves the list once (``nvidia-smi -L``,
within ``$CUDA_VISIBLE_DEVICES`` if set) and passes it to the workers in ``$SPECVERIFY_GPU_LIST``;
worker ``gwN`` sets ``CUDA_VISIBLE_DEVICES`` to GPU ``N mod count`` first, then the others
(``gpus.pinned_order``: its own GPU is its cuda:0, and a placement check finds a second device), in
``pytest_configure``, before any test imports torch's CUDA state. ``--specverify-json`` writes every CheckResult of the run
(collected from all workers) as one JSON file, in the format of ``specverify check --json``.

For the shipped suite, the production-vocabulary draws are collected first and xdist keeps that
order (``specverify.schedule``), and on a CPU profile each xdist worker takes its share of the
cores for torch's threads.

Loaded in every pytest run of an environment that has specverify installed, so it imports nothing
heavy at module level.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace

import pytest

from specverify.gpus import pinned_order, visible_gpus
from specverify.options import parse_device, unwritable

GPU_LIST_ENV = "SPECVERIFY_GPU_LIST"
RUN_ENV = "SPECVERIFY_RUN"        # "start time;directory" of the run, set by the controller for its workers
_RESULT_KEY = "specverify_result"


def load_args() -> list[str]:
    """pytest arguments that load this plugin in a child pytest run: none where the ``pytest11`` entry
    point is installed, ``-p specverify.plugin`` where specverify is only on the path (naming it as well
    as the entry point would register it twice)."""
    import importlib.metadata

    installed = any(e.value == __name__ for e in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", __name__]


def pytest_addoption(parser):
    group = parser.getgroup("specverify")
    group.addoption("--specverify-backend", default=os.environ.get("SPECVERIFY_BACKEND", "cpu"),
                    help="backend to check: reference, cpu, triton, or MODULE:ATTR (default: cpu or $SPECVERIFY_BACKEND)")
    group.addoption("--specverify-profile", default=None,
                    help="ci, dev or nightly (default: $SPECVERIFY_PROFILE or ci)")
    group.addoption("--specverify-device", default=None, help="override the profile's device")
    group.addoption("--specverify-gpus", default=os.environ.get("SPECVERIFY_GPUS"),
                    help="pin each xdist worker to one GPU through CUDA_VISIBLE_DEVICES: 'auto' (every visible "
                         "GPU) or a list of device ids '0,1,3' (default: $SPECVERIFY_GPUS, else no pinning)")
    group.addoption("--specverify-json", default=None, metavar="FILE",
                    help="write every CheckResult of the run (all workers) to FILE as JSON")
    group.addoption("--specverify-failures-dir", default="specverify-failures", metavar="DIR",
                    help="where each failed check writes its reproducer (default: specverify-failures)")
    group.addoption("--specverify-deviations", default=None, metavar="FILE",
                    help="TOML file of known deviations: a failure matching one is an xfail, not a failure")
    group.addoption("--specverify-deadline", type=float, default=None, metavar="SECONDS",
                    help="after SECONDS from the start of the session, the remaining checks are reported not run "
                         "and the session fails (default: the profile's, 900 s for ci)")
    group.addoption("--specverify-call-timeout", type=float, default=None, metavar="SECONDS",
                    help="a backend call running longer is a hang: its check fails naming the call and the rest "
                         "are not run (default: the profile's, 120 s for ci). In-process: a call stuck in C code "
                         "(a deadlocked GPU kernel) is only interrupted by `specverify check`'s worker processes")
    group.addoption("--specverify-keep-going", action="store_true",
                    help="after a hung call, go on calling the backend (each call under the call timeout)")
    group.addoption("--specverify-require", default=os.environ.get("SPECVERIFY_REQUIRE"), metavar="LIST",
                    help="comma-separated subset of standard,greedy,synthetic,block,tree,injected,seeded the backend must "
                         "declare and the run must check (default: $SPECVERIFY_REQUIRE)")


def _pin_gpu(config) -> None:
    spec = config.getoption("--specverify-gpus", default=None)
    if not spec:
        return
    # xdist gives its workers ``config.workerinput``; $PYTEST_XDIST_WORKER alone would also be inherited by a
    # pytest run started from inside a worker, which is a controller of its own.
    workerinput = getattr(config, "workerinput", None)
    worker = workerinput["workerid"] if workerinput else None
    if worker is None:
        # The controller (or a run without xdist): resolve once; xdist workers inherit the environment.
        gpus = visible_gpus() if spec == "auto" else [d.strip() for d in spec.split(",") if d.strip()]
        if not gpus:
            raise pytest.UsageError(f"--specverify-gpus={spec}: no GPU found (nvidia-smi -L lists none)")
        os.environ[GPU_LIST_ENV] = ",".join(gpus)
        return
    gpus = [d for d in os.environ.get(GPU_LIST_ENV, "").split(",") if d]
    if not gpus:
        raise pytest.UsageError(f"worker {worker}: --specverify-gpus given but ${GPU_LIST_ENV} is empty")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise pytest.UsageError(f"worker {worker}: CUDA was initialised before GPU pinning; "
                                "CUDA_VISIBLE_DEVICES can no longer take effect")
    index = int(worker.removeprefix("gw"))
    os.environ["CUDA_VISIBLE_DEVICES"] = pinned_order(gpus[index % len(gpus)], gpus)


def _refuse_bad_options(config) -> None:
    """A usage error, before any test runs, for an option the run would otherwise meet only at a test's setup (the
    deviations file, in every test) or when the session finishes (the verdict's requirements, the JSON report): a
    typo must not cost a whole conformance run. The controller checks them before any worker starts; its xdist
    workers, which would check them again, do not."""
    if getattr(config, "workerinput", None):
        return
    path = config.getoption("--specverify-json", default=None)
    problem = path and unwritable(path)
    if problem:
        raise pytest.UsageError(f"--specverify-json {path!r} {problem}")
    for flag, check in (("--specverify-device", parse_device), ("--specverify-require", _parse_requirements),
                        ("--specverify-deviations", _load_deviations)):
        value = config.getoption(flag, default=None)
        try:
            if value:
                check(value)
        except ValueError as exc:
            raise pytest.UsageError(f"{flag}: {exc}") from None


def _parse_requirements(text: str) -> None:
    from specverify.verdict import parse_requirements  # noqa: PLC0415
    parse_requirements(text)


def _load_deviations(path: str) -> None:
    from specverify.checks import CHECKS  # noqa: PLC0415
    from specverify.checks.deviations import load_deviations  # noqa: PLC0415
    load_deviations(path, CHECKS)


def pytest_configure(config):
    profile = config.getoption("--specverify-profile", default=None)
    if profile:
        os.environ["SPECVERIFY_PROFILE"] = profile
    _pin_gpu(config)
    _refuse_bad_options(config)
    # the suite groups a statistical case's checks (one draw serves them); xdist declares the mark where
    # it is installed, and without it the mark does nothing
    config.addinivalue_line("markers", "xdist_group(name): run under --dist loadgroup in one xdist worker")
    config._specverify_start = time.perf_counter()
    if _runs_suite(config):
        # the suite's long draws are collected first (``specverify.schedule``): xdist keeps that order
        from specverify.schedule import keep_collection_order  # noqa: PLC0415
        keep_collection_order(config)
        _share_cores(config)
    if not getattr(config, "workerinput", None):
        # one clock and one directory for the whole run: xdist workers inherit them
        # (created only when a hang is written there)
        import tempfile  # noqa: PLC0415
        directory = os.path.join(tempfile.gettempdir(), f"specverify-run-{os.getpid()}-{time.time_ns()}")
        os.environ[RUN_ENV] = f"{time.time()};{directory}"


def _share_cores(config) -> None:
    """On a CPU profile, an xdist worker of the suite takes its share of the cores for torch's intra-op
    threads, as the CLI's workers do: the backends compute on those cores, so each worker taking them
    all oversubscribes the machine, and a production-vocabulary draw then measures itself over its
    budget. On a GPU profile the cores only do the host's work, and a worker keeps torch's default."""
    workers = (getattr(config, "workerinput", None) or {}).get("workercount")
    if not workers:
        return
    from specverify.strategies import get_profile  # noqa: PLC0415
    device = config.getoption("--specverify-device") or get_profile(config.getoption("--specverify-profile")).device
    if device == "cpu":
        import torch  # noqa: PLC0415

        from specverify.pool import thread_share  # noqa: PLC0415
        torch.set_num_threads(thread_share(int(workers)))


def _runs_suite(config) -> bool:
    return any("specverify.suite" in a or "specverify/suite" in a for a in config.args)


def pytest_collection_modifyitems(session, config, items):
    if _runs_suite(config):
        from specverify.schedule import order_items  # noqa: PLC0415
        order_items(items)


def pytest_runtest_logreport(report):
    if report.when != "call":
        return
    for key, value in getattr(report, "user_properties", ()):
        if key == _RESULT_KEY:
            _COLLECTED.append(json.loads(value))


_COLLECTED: list = []


def _judge(config, stopped: str | None = None) -> None:
    """The run's verdict over every CheckResult the suite recorded (from all workers): coverage and
    --specverify-require, which pytest's own pass/fail counts cannot see. When pytest stopped the session
    early (``stopped``: --maxfail, -x), every check of the plan that recorded nothing is not run."""
    from specverify.checks import CHECKS, NOT_RUN, CheckResult, plan  # noqa: PLC0415
    from specverify.registry import get_backend  # noqa: PLC0415
    from specverify.strategies import get_profile  # noqa: PLC0415
    from specverify.verdict import parse_requirements, verdict  # noqa: PLC0415
    results = [CheckResult.from_json(r) for r in _COLLECTED]
    backend = get_backend(config.getoption("--specverify-backend"))
    caps = backend.capabilities
    if stopped:
        seen = {(r.check, r.case) for r in results}
        results += [CheckResult(check=c, case=k, backend=str(backend.name), kind=CHECKS[c].kind, status=NOT_RUN,
                                message=f"not run: {stopped}")
                    for c, k in plan(get_profile(config.getoption("--specverify-profile"))) if (c, k) not in seen]
    results.sort(key=lambda r: (r.check, r.case))
    config._specverify_verdict = verdict(results, caps, parse_requirements(config.getoption("--specverify-require")))
    config._specverify_results = results


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    # xdist workers carry ``workerinput``; only the controller (or a run without xdist) judges the run.
    if getattr(config, "workerinput", None) or not _COLLECTED:
        return
    stop = session.shouldfail or session.shouldstop
    _judge(config, f"pytest stopped the session ({stop})" if stop else None)
    outcome = config._specverify_verdict
    if outcome.reasons and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    path = config.getoption("--specverify-json", default=None)
    if path:
        from specverify.report import document, write_json  # noqa: PLC0415
        from specverify.strategies import get_profile  # noqa: PLC0415
        profile = get_profile(config.getoption("--specverify-profile"))
        device = config.getoption("--specverify-device")
        if device:
            profile = replace(profile, device=device)
        write_json(path, document(config._specverify_results, config.getoption("--specverify-backend"), profile,
                                  time.perf_counter() - config._specverify_start, outcome,
                                  pytest_exitstatus=int(session.exitstatus)))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    outcome = getattr(config, "_specverify_verdict", None)
    if outcome is None:
        return
    terminalreporter.section("specverify verdict")
    for line in outcome.lines():
        terminalreporter.write_line(line)
    terminalreporter.write_line("PASSED" if outcome.passed else "FAILED")


@pytest.fixture
def specverify_record(request):
    """``record(result)``: attach a CheckResult to this test's report, for the run's verdict and JSON."""
    from specverify.checks.repro import write_reproducer  # noqa: PLC0415

    def record(result):
        config = request.config
        write_reproducer(result, config.getoption("--specverify-failures-dir"),
                         request.getfixturevalue("specverify_profile"), config.getoption("--specverify-backend"))
        request.node.user_properties.append((_RESULT_KEY, json.dumps(result.to_json())))
        return result
    return record


@pytest.fixture(scope="session")
def specverify_profile(request):
    from specverify.strategies import get_profile  # noqa: PLC0415
    profile = get_profile(request.config.getoption("--specverify-profile"))
    device = request.config.getoption("--specverify-device")
    return replace(profile, device=device) if device else profile


@pytest.fixture(scope="session")
def specverify_deviations(request):
    """The run's declared deviations (``--specverify-deviations FILE``), besides the backend's own."""
    from specverify.checks import CHECKS  # noqa: PLC0415
    from specverify.checks.deviations import load_deviations  # noqa: PLC0415
    path = request.config.getoption("--specverify-deviations")
    return load_deviations(path, CHECKS) if path else ()


@pytest.fixture(scope="session")
def specverify_backend(request):
    from specverify.registry import get_backend  # noqa: PLC0415
    return get_backend(request.config.getoption("--specverify-backend"))


class CallHung(BaseException):
    """A backend call outlived the call timeout (a BaseException: no check's ``except Exception`` may
    swallow it)."""


class SuiteGuard:
    """The shipped suite's deadline and hung-call handling, in the test's own process.

    A call is interrupted by SIGALRM after the call timeout: enough for a backend stuck in Python or in
    an interruptible system call; a call stuck in C code (a deadlocked GPU kernel) is only stopped by
    ``specverify check``, which runs checks in worker processes. The first hang is written to the run's
    directory, so every xdist worker stops calling the backend (unless --specverify-keep-going)."""

    def __init__(self, config, profile) -> None:
        start, _, self.directory = os.environ.get(RUN_ENV, f"{time.time()};").partition(";")
        self.seconds = config.getoption("--specverify-deadline") or profile.deadline
        self.deadline = float(start) + self.seconds
        self.call_timeout = config.getoption("--specverify-call-timeout") or profile.call_timeout
        self.keep_going = config.getoption("--specverify-keep-going")
        self.profile = profile

    @property
    def _marker(self) -> str | None:
        return os.path.join(self.directory, "hang") if self.directory else None

    def why_not_run(self) -> str | None:
        if time.time() >= self.deadline:
            return f"not run: the run's deadline of {self.seconds:g} s passed (--specverify-deadline)"
        marker = self._marker
        if marker and os.path.exists(marker) and not self.keep_going:
            with open(marker) as f:
                where = f.read().strip()
            return (f"not run: the backend hung in {where} and is not called again "
                    "(--specverify-keep-going calls it on)")
        return None

    def run(self, check: str, case: str, backend: str, fn):
        """``fn()`` (which runs the check) with every guarded backend call under the call timeout;
        a hung call becomes the check's FAIL result, naming the call, with the call's reproducer."""
        import signal  # noqa: PLC0415

        from specverify.checks import CHECKS, FAIL, CheckResult  # noqa: PLC0415
        from specverify.checks.runner import CallObserver, observe_calls  # noqa: PLC0415
        from specverify.watch import describe_call, hung_call_reproducer  # noqa: PLC0415
        limit = self.call_timeout

        class Alarm(CallObserver):
            count, call = 0, None

            def started(self, call) -> None:
                self.count += 1
                self.call = call
                signal.setitimer(signal.ITIMER_REAL, limit)

            def finished(self) -> None:
                signal.setitimer(signal.ITIMER_REAL, 0)

        def ring(*_):
            raise CallHung()

        alarm = Alarm()
        previous = signal.signal(signal.SIGALRM, ring)
        observe_calls(alarm)
        try:
            return fn()
        except CallHung:
            where = describe_call(alarm.count, alarm.call)
            message = f"hung: {where} did not return within {limit:g} s (--specverify-call-timeout)"
            result = CheckResult(check=check, case=case, backend=backend, kind=CHECKS[check].kind, status=FAIL,
                                 message=message)
            result.repro = hung_call_reproducer(alarm.call, check, case, backend, self.profile, message)
            marker = self._marker
            if marker and not os.path.exists(marker):
                os.makedirs(self.directory, exist_ok=True)
                with open(marker, "w") as f:
                    f.write(f"{check}[{case}], {where}")
            return result
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            observe_calls(None)
            signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def specverify_guard(request, specverify_profile):
    return SuiteGuard(request.config, specverify_profile)
