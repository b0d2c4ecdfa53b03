"""ci/nightly_gpu.sh's control of its steps, on a machine without a GPU: the whole nightly does not fit a lent
machine's per-command limit, so ``STEPS`` runs a part of it in a call and ``DEADLINE`` ends a call with every
result it reached. The steps' programs are stood in for by a fake ``python`` and ``nvidia-smi`` on the PATH; the
real steps run on the device (docs/nightly/).
"""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "ci" / "nightly_gpu.sh"
ALL_STEPS = ["driver", "suite", "mutants", "filter-kernels", "sanitizer-memcheck", "sanitizer-initcheck",
             "sanitizer-racecheck", "bench", "rates", "flashinfer", "report"]

# The fake python: `-c` snippets (the plugin's arguments, the environment's versions, the FlashInfer import) go to
# the real interpreter with the snippet replaced by a stand-in where it needs a GPU's packages; every other call is
# a step, logged, and sleeps SLOW_S seconds when its arguments contain SLOW_ARG.
FAKE_PY = """#!/usr/bin/env bash
if [ "$1" = -c ]; then
  case "$2" in
    *flashinfer*) exit ${FLASHINFER_RC:-1} ;;
    *load_args*) exit 0 ;;
    *) echo "fake python"; exit 0 ;;
  esac
fi
[ "$1 $2" = "-m pip" ] && exit 0
echo "$* at $(date +%s.%N)" >> "$CALLS"
if [ -n "${FAIL_ARG:-}" ]; then case "$*" in *"$FAIL_ARG"*) exit 99 ;; esac; fi
if [ -n "${SLOW_ARG:-}" ]; then case "$*" in *"$SLOW_ARG"*) exec sleep "$SLOW_S" ;; esac; fi
exit 0
"""
FAKE_SANITIZER = """#!/usr/bin/env bash
[ "$1" = --version ] && exit 0
echo "sanitizer $* on ${CUDA_VISIBLE_DEVICES-all} at $(date +%s.%N)" >> "$CALLS"
[ -n "${SAN_S:-}" ] && sleep "$SAN_S"
exit 0
"""
FAKE_SMI = """#!/usr/bin/env bash
[ "$1" = -L ] && { echo "GPU 0: Fake GPU (UUID: GPU-0)"; exit 0; }
echo "Fake GPU, 0, 0 MiB"
"""


def _nightly(tmp_path: Path, **env: str) -> tuple[int, str, dict, list[str]]:
    """(exit status, stdout and stderr, {step: status} from steps.tsv, the fake python's step calls) of the
    script run into tmp_path/results with the stand-ins and ``env``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("python", FAKE_PY), ("nvidia-smi", FAKE_SMI), ("compute-sanitizer", FAKE_SANITIZER)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    results = tmp_path / "results"
    run_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": str(bin_dir / "python"),
               "CALLS": str(calls), "SPECVERIFY_COMMIT": "test", **env}
    for unset in ("STEPS", "DEADLINE", "SKIP_SANITIZER", "SUITE_RUNNER", "CUDA_VISIBLE_DEVICES", "WORKERS_PER_GPU",
                  "FILTER_WORKERS", "SAN_S", "FAIL_ARG", "SLOW_ARG"):
        if unset not in env:
            run_env.pop(unset, None)
    done = subprocess.run(["bash", str(SCRIPT), str(results)], env=run_env, capture_output=True, text=True,
                          timeout=120)
    tsv = results / "steps.tsv"
    steps = dict(line.split("\t")[:2] for line in tsv.read_text().splitlines()[1:]) if tsv.exists() else {}
    return done.returncode, done.stdout + done.stderr, steps, calls.read_text().splitlines()


def test_steps_runs_only_the_steps_named_and_calls_the_run_partial(tmp_path):
    """A call that runs the suite and the mutants alone: the other steps are recorded as not run, none of their
    programs is started, and the last line says the run was partial, naming what it left out."""
    status, out, steps, calls = _nightly(tmp_path, STEPS="suite mutants")
    assert status == 0, out
    assert steps["suite"] == "pass" and steps["mutants"] == "pass"
    assert {s for s, v in steps.items() if v == "not run (STEPS)"} == set(ALL_STEPS) - {"suite", "mutants"}
    assert len(calls) == 2 and "specverify.cli check triton" in calls[0] and "test_mutants_caught.py" in calls[1]
    last = [line for line in out.splitlines() if line.startswith("nightly: ")][0]
    assert "PASSED" in last and "partial" in last and "driver" in last and "suite" not in last.split("partial")[1]


def test_every_step_runs_by_default_and_the_run_is_not_called_partial(tmp_path):
    """Without STEPS every step runs (FlashInfer where it imports), and the last line claims no part."""
    status, out, steps, calls = _nightly(tmp_path, FLASHINFER_RC="0")
    assert status == 0, out
    assert steps == {s: "pass" for s in ALL_STEPS}
    assert "partial" not in out
    assert sum("sanitizer_driver.py" in c for c in calls) == 4     # the driver, then under each sanitizer


def test_a_step_named_in_steps_that_cannot_run_fails_the_run(tmp_path):
    """FlashInfer named in STEPS where it does not import: the run fails. In the default run the same absence is
    recorded and does not fail it (the nightly checks FlashInfer only where it is installed)."""
    status, out, steps, _ = _nightly(tmp_path, STEPS="flashinfer")
    assert status == 1 and steps["flashinfer"] == "fail(not importable)", out
    status, out, steps, _ = _nightly(tmp_path)
    assert status == 0 and steps["flashinfer"] == "not run (not importable)", out


@pytest.mark.parametrize("steps, deadline, runner, named", [("suite,nosuch", "", "", "nosuch"),
                                                            ("", "ten", "", "ten"), ("", "", "xdist", "xdist")])
def test_unknown_steps_runners_and_bad_deadlines_are_refused_before_any_step(tmp_path, steps, deadline, runner,
                                                                             named):
    """A misspelt step would otherwise be silently left out of a run that then passes; a DEADLINE that is not a
    whole number of seconds would otherwise be ignored; an unknown SUITE_RUNNER would run some other suite. Each
    stops the script at once, naming the value."""
    env = {k: v for k, v in (("STEPS", steps), ("DEADLINE", deadline), ("SUITE_RUNNER", runner)) if v}
    status, out, steps_run, calls = _nightly(tmp_path, **env)
    assert status == 2 and named in out and calls == [] and steps_run == {}, out


def test_deadline_stops_the_running_step_fails_the_rest_and_still_reports(tmp_path):
    """A step still running at DEADLINE is stopped and failed, the steps after it are failed as not run, and the
    report is still written, so that a call cut by the machine's limit keeps what it reached."""
    status, out, steps, calls = _nightly(tmp_path, STEPS="driver suite mutants report", DEADLINE="3",
                                         SLOW_ARG="specverify.cli check", SLOW_S="30")
    assert status == 1, out
    assert steps["driver"] == "pass"
    assert steps["suite"] == "fail(stopped at DEADLINE=3 s)"
    assert steps["mutants"] == "fail(not run (DEADLINE))"
    assert steps["report"] == "pass" and any("nightly_report.py" in c for c in calls)
    assert not any("test_mutants_caught.py" in c for c in calls)
    assert "FAILED" in [line for line in out.splitlines() if line.startswith("nightly: ")][0]


def test_skip_sanitizer_records_the_sanitizers_as_not_run(tmp_path):
    """SKIP_SANITIZER leaves the three sanitizer steps out: steps.tsv says so rather than dropping their rows, and
    the last line calls the run partial."""
    status, out, steps, calls = _nightly(tmp_path, SKIP_SANITIZER="1")
    assert status == 0, out
    assert all(steps[f"sanitizer-{t}"] == "not run (SKIP_SANITIZER)" for t in ("memcheck", "initcheck", "racecheck"))
    assert sum("sanitizer_driver.py" in c for c in calls) == 1
    assert "partial" in [line for line in out.splitlines() if line.startswith("nightly: ")][0]


@pytest.mark.parametrize("visible, gpus", [(None, 1), ("0", 1), ("0,1", 2), ("2, 3,5", 3)])
def test_the_suite_pins_its_workers_to_every_gpu_the_run_may_use(tmp_path, visible, gpus):
    """The suite step runs the check pool over every GPU: CUDA_VISIBLE_DEVICES, where it is set, says which (the
    scaling table runs the same host on one GPU and on two), else `nvidia-smi -L` (one fake GPU here); each GPU gets
    WORKERS_PER_GPU workers."""
    env = {"STEPS": "suite", "WORKERS_PER_GPU": "3"}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    status, out, steps, calls = _nightly(tmp_path, **env)
    assert status == 0 and steps["suite"] == "pass", out
    assert f"GPUs: {gpus}, suite workers: {3 * gpus} (pool)" in out
    assert len(calls) == 1 and f"-n {3 * gpus} --gpus auto" in calls[0] and "--json" in calls[0], calls


def test_the_pytest_runner_runs_the_shipped_suite_under_xdist(tmp_path):
    """SUITE_RUNNER=pytest keeps the shipped suite's face on the GPU: pytest-xdist, one group per case."""
    status, out, steps, calls = _nightly(tmp_path, STEPS="suite", SUITE_RUNNER="pytest")
    assert status == 0 and steps["suite"] == "pass", out
    assert "suite workers: 1 (pytest)" in out
    assert len(calls) == 1 and "--pyargs specverify.suite" in calls[0] and "--dist loadgroup" in calls[0], calls


def _sanitizer_calls(calls: list[str]) -> dict:
    """{tool: (the GPU it was pinned to, when it started)} from the fake compute-sanitizer's lines."""
    found = {}
    for line in calls:
        if line.startswith("sanitizer "):
            words = line.split()
            found[words[words.index("--tool") + 1]] = (words[-3], float(words[-1]))
    return found


def test_on_two_gpus_the_driver_and_each_sanitizer_run_in_parts_and_the_tools_side_by_side(tmp_path):
    """The driver and the three compute-sanitizer runs take most of a nightly and each keeps one GPU busy: with two
    GPUs the driver runs in two parts (one per GPU, ``sanitizer_driver.py --parts``), each tool over two parts under
    its own sanitizer processes, and the three tools start together; each is recorded, and a failing one fails the
    run though it ran in the background."""
    steps_named = "driver sanitizer-memcheck sanitizer-initcheck sanitizer-racecheck"
    status, out, steps, calls = _nightly(tmp_path, STEPS=steps_named, CUDA_VISIBLE_DEVICES="3,5", SLOW_ARG="--wrap",
                                         SLOW_S="1.5")
    assert status == 0, out
    assert all(steps[s] == "pass" for s in steps_named.split())
    assert calls[0].startswith("ci/sanitizer_driver.py --parts 2 at "), calls
    tools = {}
    for call in calls[1:]:
        assert call.startswith("ci/sanitizer_driver.py --parts 2 --wrap compute-sanitizer --tool "), call
        words = call.split()
        tools[words[words.index("--tool") + 1]] = float(words[-1])
        assert "--error-exitcode 99 --print-limit 50" in call
    assert set(tools) == {"memcheck", "initcheck", "racecheck"}
    assert max(tools.values()) - min(tools.values()) < 1.5, calls   # side by side: in turn, 3 s from first to last
    status, out, steps, _ = _nightly(tmp_path, STEPS="sanitizer-memcheck sanitizer-racecheck",
                                     CUDA_VISIBLE_DEVICES="0,1", FAIL_ARG="--tool racecheck")
    assert status == 1 and steps["sanitizer-racecheck"] == "fail(rc=99)" and steps["sanitizer-memcheck"] == "pass"
    assert steps["sanitizer-initcheck"] == "not run (STEPS)", steps


def test_on_one_gpu_the_sanitizers_run_one_after_another(tmp_path):
    """One GPU: the tools run in turn, unpinned, memcheck first."""
    status, out, steps, calls = _nightly(tmp_path, STEPS="sanitizer-memcheck sanitizer-initcheck sanitizer-racecheck",
                                         SAN_S="0.1")
    assert status == 0, out
    runs = _sanitizer_calls(calls)
    assert [t for t, _ in sorted(runs.items(), key=lambda kv: kv[1][1])] == ["memcheck", "initcheck", "racecheck"]
    assert {g for g, _ in runs.values()} == {"all"}


@pytest.mark.parametrize("cores, workers", [(2, 8), (32, 32)])
def test_the_filter_kernel_tests_take_a_worker_a_core_and_at_least_four_a_gpu(tmp_path, cores, workers):
    """The filter cut's kernel tests are bound by compiling kernels, a process a core: as many xdist workers as
    cores, pinned to the GPUs by the plugin, and never fewer than four a GPU (two GPUs: at least 8). The cores are
    a stand-in ``nproc``'s, so both sides of the bound are seen on any machine."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nproc").write_text(f"#!/bin/sh\necho {cores}\n")
    (bin_dir / "nproc").chmod(0o755)
    status, out, steps, calls = _nightly(tmp_path, STEPS="filter-kernels", CUDA_VISIBLE_DEVICES="0,1")
    assert status == 0 and steps["filter-kernels"] == "pass", out
    assert len(calls) == 1 and f"-n {workers} --specverify-gpus=auto" in calls[0], calls


def test_the_report_names_the_runner_the_checks_per_gpu_and_each_split_draw():
    """The nightly's report of a pool run says it was the pool, on which GPUs, how many checks each GPU ran (a
    split draw on each of its GPUs), and each split draw's parts; a pytest run keeps its exit status, and a run on
    one GPU says that nothing was split."""
    import sys
    sys.path.insert(0, str(ROOT / "ci"))
    import nightly_report  # noqa: PLC0415

    split = {"check": "token_distribution", "case": "large_vocab_262k", "kind": "statistical", "status": "pass",
             "gpu": "0,1", "seconds": 128.2, "sampling": {"parts": 2, "part_copies": [10_000_000, 10_000_000],
                                                           "copies": 20_000_000, "steady_samples_per_second": 162_939}}
    whole = {"check": "output_structure", "case": "random", "kind": "structural", "status": "pass", "gpu": "1",
             "seconds": 3.0}
    doc = {"backend": "triton", "profile": "nightly", "device": "cuda", "passed": True, "seconds": 139.0,
           "family_alpha": 1e-3, "check_alpha": 2.9e-5, "workers": 12, "gpus": ["0", "1"], "results": [split, whole]}
    text = "\n".join(nightly_report.suite_section(doc))
    assert "(check pool, 12 workers pinned to GPU(s) 0, 1, 139 s)" in text
    assert "Checks run per GPU: GPU 0: 1, GPU 1: 2." in text
    assert ("`token_distribution[large_vocab_262k]`: 2 parts on GPUs 0,1, copies 10,000,000 + 10,000,000 = "
            "20,000,000 in 128.2 s (162,939 samples/s summed)") in text
    one = dict(doc, gpus=["0"], results=[dict(whole, gpu="0")], pytest_exitstatus=0)
    text = "\n".join(nightly_report.suite_section(one))
    assert "(pytest exit status 0, 139 s)" in text and "No draw was split over GPUs" in text


def test_the_report_states_a_third_party_kernels_verdict_and_its_deviations():
    """The nightly's FlashInfer step writes flashinfer.json: the report gives its counts, each declared deviation
    as met, not met but intermittent (kept), or not met (to remove), and each failure; a known deviation in the
    suite's table reads KNOWN. The first document is the 2026-11-30 nightly's own, whose NaN-row deviation did not
    occur (declared intermittent since)."""
    import json
    import sys
    sys.path.insert(0, str(ROOT / "ci"))
    import nightly_report  # noqa: PLC0415

    path = ROOT / "docs" / "nightly" / "2026-11-30-h200-nightly11" / "3-flashinfer" / "flashinfer.json"
    doc = json.loads(path.read_text())
    text = "\n".join(nightly_report.third_party_section("flashinfer", doc))
    assert "**PASSED**: 31 passed, 0 failed, 38 not applicable, 2 known deviation(s) (285 s)" in text, text
    assert "Declared deviations that did not occur (remove them):\n- `nonfinite_rows[rows]`: " in text
    assert "Known deviations" in text and "- `token_distribution[residual_fallback]`: " in text
    failing = dict(doc, passed=False, verdict=dict(doc["verdict"], deviations_not_seen={},
                                                    intermittent_not_seen={"nonfinite_rows[rows]": "reads memory"}),
                   results=doc["results"] + [{"check": "determinism", "case": "random", "status": "fail",
                                              "message": "outputs differ between two calls"}])
    text = "\n".join(nightly_report.third_party_section("flashinfer", failing))
    assert "**FAILED**: 31 passed, 1 failed" in text and "remove them" not in text
    assert "this run did not meet (kept):\n- `nonfinite_rows[rows]`: reads memory" in text
    assert "Failures:\n- `determinism[random]`: outputs differ between two calls" in text
    known = {"check": "nonfinite_rows", "case": "rows", "kind": "structural", "status": "known deviation"}
    suite = {"backend": "x", "profile": "nightly", "device": "cuda", "passed": True, "seconds": 1.0,
             "family_alpha": 1e-3, "check_alpha": 1e-4, "results": [known]}
    assert "| nonfinite_rows | rows | structural | KNOWN |" in "\n".join(nightly_report.suite_section(suite))
