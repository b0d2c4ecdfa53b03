"""pytest plugin (entry point ``pytest11``): options and fixtures for the shipped conformance suite.

    pytest --pyargs specverify.suite --specverify-backend=MODULE:ATTR -n auto
    pytest --pyargs specverify.suite --specverify-backend=triton --specverify-profile=nightly \\
        -n 8 --specverify-gpus=auto --specverify-json=results.json

GPU pinning (``--specverify-gpus`` or ``$SPECVERIFY_GPUS``: "auto" for every visible GPU, or a
comma-separated list of device ids): the xdist controller resolves the list once (``nvidia-smi -L``,
within ``$CUDA_VISIBLE_DEVICES`` if set) and passes it to the workers in ``$SPECVERIFY_GPU_LIST``;
worker ``gwN`` sets ``CUDA_VISIBLE_DEVICES`` to GPU ``N mod count`` in ``pytest_configure``, before
any test imports torch's CUDA state. ``--specverify-json`` writes every CheckResult of the run
(collected from all workers) as one JSON file, in the format of ``specverify check --json``.

Loaded in every pytest run of an environment that has specverify installed, so it imports nothing
heavy at module level.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

GPU_LIST_ENV = "SPECVERIFY_GPU_LIST"
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


def visible_gpus() -> list[str]:
    """Device ids the process may use: $CUDA_VISIBLE_DEVICES if set, else one per line of `nvidia-smi -L`."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
        return [str(i) for i, line in enumerate(l for l in out.splitlines() if l.startswith("GPU "))]
    except (OSError, subprocess.SubprocessError):
        return []


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
    os.environ["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]


def pytest_configure(config):
    profile = config.getoption("--specverify-profile", default=None)
    if profile:
        os.environ["SPECVERIFY_PROFILE"] = profile
    _pin_gpu(config)
    config._specverify_results = []
    config._specverify_start = time.perf_counter()


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    """With --specverify-json: record the CheckResults a suite test obtains through its module's
    ``run_check`` (the shipped suite's), and attach them to the test report (xdist ships them)."""
    module = getattr(pyfuncitem, "module", None)
    original = getattr(module, "run_check", None)
    if not pyfuncitem.config.getoption("--specverify-json", default=None) or original is None \
            or getattr(original, "__module__", "") != "specverify.checks":
        yield
        return
    recorded = []

    def recording(*args, **kwargs):
        result = original(*args, **kwargs)
        recorded.append(result)
        return result

    module.run_check = recording
    try:
        yield
    finally:
        module.run_check = original
        for result in recorded:
            pyfuncitem.user_properties.append((_RESULT_KEY, json.dumps(result.to_json())))


def pytest_runtest_logreport(report):
    if report.when != "call":
        return
    for key, value in getattr(report, "user_properties", ()):
        if key == _RESULT_KEY:
            _COLLECTED.append(json.loads(value))


_COLLECTED: list = []


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--specverify-json", default=None)
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from specverify.checks import check_alpha  # noqa: PLC0415
    from specverify.strategies import get_profile  # noqa: PLC0415
    profile = get_profile(session.config.getoption("--specverify-profile"))
    device = session.config.getoption("--specverify-device") or profile.device
    results = sorted(_COLLECTED, key=lambda r: (r["check"], r["case"]))
    doc = {"backend": session.config.getoption("--specverify-backend"), "profile": profile.name, "device": device,
           "family_alpha": profile.family_alpha, "check_alpha": check_alpha(profile),
           "seconds": time.perf_counter() - session.config._specverify_start,
           "passed": not any(r["status"] == "fail" for r in results), "pytest_exitstatus": int(exitstatus),
           "results": results}
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)


@pytest.fixture(scope="session")
def specverify_profile(request):
    from dataclasses import replace  # noqa: PLC0415

    from specverify.strategies import get_profile  # noqa: PLC0415
    profile = get_profile(request.config.getoption("--specverify-profile"))
    device = request.config.getoption("--specverify-device")
    return replace(profile, device=device) if device else profile


@pytest.fixture(scope="session")
def specverify_backend(request):
    from specverify.registry import get_backend  # noqa: PLC0415
    return get_backend(request.config.getoption("--specverify-backend"))
