"""The faces' files and options: a report, cost report or reproducer they cannot read is refused with status 2 and
a line naming the file and what is wrong with it, never a traceback; a report they would write at the end of a run,
and an option they would meet only during it (a device, the verdict's requirements, a deviations file), are checked
before the run, so that a long run's verdict is not lost to a typo."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from specverify import cli
from specverify.checks.repro import FORMAT
from specverify.cli import main
from specverify.engine_cli import ENGINE_REPRODUCER


def _files(tmp_path) -> dict:
    """Paths of files that hold no report or reproducer, by what is wrong with them."""
    files = {"missing": tmp_path / "missing.json", "text": tmp_path / "text.json", "list": tmp_path / "list.json",
             "tensor": tmp_path / "tensor.pt", "other format": tmp_path / "other.pt", "fields": tmp_path / "fields.pt"}
    files["text"].write_text("not json\n")
    files["list"].write_text(json.dumps([1, 2]))
    torch.save(torch.zeros(2), files["tensor"])
    torch.save({"format": "someone-else/1"}, files["other format"])
    torch.save({"format": FORMAT}, files["fields"])
    files["engine fields"] = tmp_path / "engine.json"
    files["engine fields"].write_text(json.dumps({"kind": ENGINE_REPRODUCER, "check": "engine_law"}))
    return {name: str(path) for name, path in files.items()}


@pytest.mark.parametrize("command, bad, expected", [
    (["merge", "{}"], "missing", "cannot read report {!r}: No such file or directory"),
    (["merge", "{}"], "text", "cannot read report {!r}: not JSON"),
    (["merge", "{}"], "list", "cannot read report {!r}: it holds a JSON list"),
    (["check", "cpu", "--shard", "1/2", "--costs", "{}"], "missing", "cannot read --costs report {!r}: No such file"),
    (["check", "cpu", "--shard", "1/2", "--costs", "{}"], "text", "cannot read --costs report {!r}: not JSON"),
    (["replay", "{}", "cpu"], "missing", "cannot read reproducer {!r}: No such file or directory"),
    (["replay", "{}", "cpu"], "text", "cannot read reproducer {!r}: not a reproducer saved by specverify"),
    (["replay", "{}", "cpu"], "tensor", "cannot read reproducer {!r}: not a specverify reproducer (it holds a Tensor)"),
    (["replay", "{}", "cpu"], "other format", "cannot read reproducer {!r}: not a specverify reproducer (format"),
    (["replay", "{}", "cpu"], "fields", "cannot read reproducer {!r}: a specverify reproducer that lacks"),
    (["replay", "{}", "cpu"], "engine fields", "cannot read reproducer {!r}: an engine reproducer without its field(s) "
                                               "case, backend, profile, message"),
])
def test_unreadable_files_are_refused_naming_the_file_and_the_problem(tmp_path, capsys, command, bad, expected):
    """Each face that reads a file (merge's reports, check's --costs, replay's reproducer) meets a file that is
    missing, not its format, or of its format but not a report or reproducer: status 2, and the error names the
    file and the problem, where Python's exception would have been the only message."""
    path = _files(tmp_path)[bad]
    assert main([arg.format(path) for arg in command]) == 2
    err = capsys.readouterr().err
    assert expected.format(path) in err, err


@pytest.mark.parametrize("command, expected", [
    (["check", "cpu", "--json", "{dir}/no/such/dir/r.json"], "--json '{dir}/no/such/dir/r.json' cannot be written: "
                                                              "there is no directory '{dir}/no/such/dir'"),
    (["check", "cpu", "--junit", "{dir}"], "--junit '{dir}' is a directory"),
    (["merge", "{dir}/a.json", "--json", "{dir}/no/r.json"], "--json '{dir}/no/r.json' cannot be written"),
    (["check", "cpu", "--costs", "{dir}/a.json"], "--costs balances shards: give --shard K/N with it"),
    (["check", "cpu", "--device", "gpu0"], "argument --device: 'gpu0' is not a torch device (cpu, cuda, cuda:N)"),
    (["replay", "{dir}/a.pt", "cpu", "--device", "gpu0"], "argument --device: 'gpu0' is not a torch device"),
])
def test_a_report_that_could_not_be_written_is_refused_before_the_run(tmp_path, capsys, monkeypatch, command,
                                                                      expected):
    """A report path the run would write only at its end (a nightly run takes an hour) is refused before any check
    runs or any report is read: the pool and the report reader fail the test if they are reached. --costs without
    --shard would be read and never used, so it is refused too, as is a --device torch cannot parse, which would
    make every check not applicable."""
    def reached(*args, **kwargs):
        raise AssertionError("the command went on past a report it could not write")

    monkeypatch.setattr(cli, "CheckPool", reached)
    monkeypatch.setattr(cli, "read_report", reached)
    monkeypatch.setattr(cli, "measured_costs", reached)
    monkeypatch.setattr(cli, "replay_file", reached)
    try:
        status = main([arg.format(dir=tmp_path) for arg in command])
    except SystemExit as exc:       # argparse's own refusal
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    assert expected.format(dir=tmp_path) in err, err


@pytest.mark.parametrize("option, expected", [
    ("--specverify-json={dir}/no/r.json",
     "--specverify-json '{dir}/no/r.json' cannot be written: there is no directory"),
    ("--specverify-device=gpu0", "--specverify-device: 'gpu0' is not a torch device"),
    ("--specverify-require=standard,nosuch", "--specverify-require: unknown requirement(s) ['nosuch']"),
    ("--specverify-deviations={dir}/none.toml",
     "--specverify-deviations: cannot read deviations file '{dir}/none.toml'"),
])
def test_the_shipped_suite_refuses_a_bad_option_before_running_a_test(tmp_path, option, expected):
    """The pytest plugin meets the JSON report when the session finishes, the verdict's requirements then too, and
    the deviations file at every test's setup: each mistyped one is a usage error at configure time (status 4, the
    option and the problem named), not a traceback or sixty errors after the suite ran."""
    # one quick case: a plugin that let the run go on would run it, and fail it or the session afterwards
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs",
                           "specverify.suite", "--specverify-backend=cpu", option.format(dir=tmp_path),
                           "-k", "determinism and random"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert expected.format(dir=tmp_path) in proc.stderr, proc.stderr
    assert "passed" not in proc.stdout and "Traceback" not in proc.stdout + proc.stderr


def test_list_of_a_backend_marks_n_a_exactly_what_its_run_reports_n_a_and_why(capsys):
    """`specverify list BACKEND` is the plan before a long run: each check's line says run, or n/a with the reason.
    For an own-stream backend (no injected noise, no trees, no block rule) every pair it marks n/a is n/a when run,
    with the same reason, and pairs it marks run do run (the cheap ones tried here); a backend that cannot be loaded
    is refused with status 2, naming why."""
    from specverify.checks import NOT_APPLICABLE, run_check
    from specverify.mutants.statistical_only import OwnStreamCpuBackend
    from specverify.strategies import get_profile
    assert main(["list", "specverify.mutants.statistical_only:OwnStreamCpuBackend"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line[:4] in ("run ", "n/a ")]
    listed = {line[5:].split(":")[0]: line[5:].partition(": ")[2] or None for line in lines}
    assert len(listed) == len(lines) and sum(why is not None for why in listed.values()) >= 20
    ci = get_profile("ci")
    for pair, why in listed.items():
        check, case = pair[:-1].split("[")
        if why is not None or pair in ("interface_parity[convention]", "greedy_agreement[chain]"):
            result = run_check(OwnStreamCpuBackend(), check, case, ci)
            assert (result.status == NOT_APPLICABLE) == (why is not None), result.line()
            assert why is None or result.message == why, (pair, why, result.message)
    assert main(["list", "nosuch.module:backend"]) == 2
    assert "loading backend 'nosuch.module:backend'" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["check", "cpu", "--profile", "nightly"],
                                  ["check", "cpu", "--profile", "ci", "--device", "cuda"]])
def test_a_cuda_run_where_torch_sees_no_cuda_is_refused_before_any_check(capsys, monkeypatch, argv):
    """The nightly profile runs on cuda: on a machine without CUDA every check would fail on its first tensor
    ("Torch not compiled with CUDA enabled"), a report that says nothing of the backend. The run is refused with
    status 2 and a line saying what to give instead; with --device cpu the same plan runs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "runs on cuda, and torch sees no CUDA device here: give --device cpu" in err, err
    assert "[ 1/" not in err
    assert main(["check", "cpu", "--profile", "nightly", "--device", "cpu", "--checks", "output_structure",
                 "--no-reproducers"]) == 1       # the plan runs (a --checks subset holds no core check: SPEC 7)
    assert "output_structure[random] pass" in capsys.readouterr().err
