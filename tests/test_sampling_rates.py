"""ci/sampling_rates.py, the nightly's step that draws each statistical case alone: a broken step costs a
GPU run to find, so its plumbing and its judgement against the 10 M target are checked here on the CPU."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from specverify.checks.cases import STAT_CASES

SCRIPT = Path(__file__).resolve().parents[1] / "ci" / "sampling_rates.py"


def _script():
    spec = importlib.util.spec_from_file_location("sampling_rates", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _threads():
    """The step sets one intra-op thread, as a check worker has; the rest of this worker keeps its own."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _row(case, rate, vocab):
    return {"case": case, "vocab_size": vocab, "copies": 1_000, "launches": 1, "samples_per_second": rate,
            "backend_share": 0.5, "input_bytes_per_copy": 4 * vocab, "small_vocab": vocab <= 1024}


def test_rates_are_judged_against_the_target_only_at_small_vocabularies():
    """A small-vocabulary case under 10 M samples/s is reported as missing the target, one at or above
    it as meeting it; a case at V = 8,195 is listed but never judged (its rows bound it)."""
    rates = _script()
    text = rates.table([_row("slow", rates.TARGET - 1, 8), _row("fast", rates.TARGET, 8),
                        _row("wide", 1.0, 8_195)], bandwidth=3.35e12)
    lines = {line.split(" | ")[0].strip("| "): line for line in text.splitlines()[2:]}
    assert lines["slow"].endswith("| **not met** |")
    assert lines["fast"].endswith("| met |")
    assert "not held to it (V = 8,195)" in lines["wide"]
    assert f"{3.35e12 / (4 * 8_195):,.0f}" in lines["wide"]     # the bandwidth floor of its inputs


def test_the_step_draws_every_case_but_the_production_vocabularies(tmp_path, monkeypatch):
    """The step as the nightly runs it, on the CPU backend with a few copies: every statistical case but
    the production vocabularies (the suite's budgets measure those) gets a positive rate."""
    rates = _script()
    out = tmp_path / "rates.json"
    monkeypatch.setattr(sys, "argv", ["sampling_rates.py", "--backend", "cpu", "--device", "cpu",
                                      "--copies", "200", "--json", str(out)])
    assert rates.main() == 0
    rows = json.loads(out.read_text())["cases"]
    assert [r["case"] for r in rows] == [c.name for c in STAT_CASES if not c.launch_copies]
    assert all(r["samples_per_second"] > 0 and r["copies"] == 200 for r in rows)


def test_the_step_refuses_a_copy_count_below_one(monkeypatch, capsys):
    """--copies 0 would divide by a zero-length draw's time: the step names the setting instead."""
    rates = _script()
    monkeypatch.setattr(sys, "argv", ["sampling_rates.py", "--device", "cpu", "--copies", "0"])
    assert rates.main() == 2
    assert "--copies must be at least 1" in capsys.readouterr().err
