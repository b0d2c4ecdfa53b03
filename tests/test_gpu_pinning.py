"""`specverify check --gpus`: one worker per GPU, pinned through CUDA_VISIBLE_DEVICES before CUDA starts
(issue 31). Checked on the CPU with made-up ids: the workers' environment is what the pinning sets, whatever
device the checks then run on."""

from __future__ import annotations

import json
import re
import os

import pytest

from specverify.cli import main
from specverify.gpus import choose_gpus
from specverify.kernels.cpu import CpuBackend

class PinRecorder(CpuBackend):
    """The CPU backend, named after the CUDA_VISIBLE_DEVICES of the process it runs in: each result's
    ``backend`` field then says what its worker saw (the workers inherit no state from the test)."""

    @property
    def name(self) -> str:
        return "pin_recorder@" + os.environ.get("CUDA_VISIBLE_DEVICES", "unset")


def test_each_worker_runs_pinned_to_one_gpu_and_the_report_names_it(tmp_path, monkeypatch, capsys):
    """Two GPU ids, two workers: each check ran in a worker that saw its own id first (its cuda:0) and
    the other after it (a placement check's second device), both ids lead a worker, and each result in
    the JSON names the GPU its worker was pinned to."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    report = tmp_path / "run.json"
    code = main(["check", "test_gpu_pinning:PinRecorder", "--checks", "differential_injected,determinism",
                 "--cases", "standard,random", "--gpus", "5,7", "-n", "2", "--json", str(report)])
    assert code == 0, capsys.readouterr()
    doc = json.loads(report.read_text())
    assert doc["gpus"] == ["5", "7"]
    assert sorted((r["backend"], r["gpu"]) for r in doc["results"]) == [("pin_recorder@5,7", "5"),
                                                                         ("pin_recorder@7,5", "7")]
    assert "workers pinned to GPU(s) 5, 7" in capsys.readouterr().err


@pytest.mark.parametrize("spec,problem", [("x", "auto, a count >= 1"), ("0", "auto, a count >= 1"),
                                          ("3", "only 2 GPU(s) visible"), ("1,1", "distinct GPU ids")])
def test_a_gpu_choice_that_cannot_be_met_is_refused_by_name(monkeypatch, spec, problem):
    """Counts beyond the visible GPUs, zero, repeated ids and words are errors naming the problem."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    with pytest.raises(ValueError, match=re.escape(problem)):
        choose_gpus(spec)


def test_a_count_takes_the_first_visible_gpus_and_auto_takes_them_all(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3,6")
    assert choose_gpus("2") == ["2", "3"] and choose_gpus("auto") == ["2", "3", "6"] and choose_gpus("6,") == ["6"]
