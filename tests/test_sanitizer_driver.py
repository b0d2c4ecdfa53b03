"""ci/sanitizer_driver.py in parts: a sanitizer's slow tools run the filtered cases a few at a time, in calls that
each fit a lent machine's limit, so a part must run exactly the cases it names, on the inputs the whole run gives
them. The driver's kernels are stood in for by the CPU backend (the device runs the real ones: docs/nightly/)."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ci"))
import sanitizer_driver  # noqa: E402

from specverify.kernels.cpu import CpuBackend  # noqa: E402


def _batches(monkeypatch, numbers):
    """{case number: the batch the driver called the sampler with} for a run of ``numbers`` alone."""
    seen, calls = {}, []

    class Recording(CpuBackend):
        def __call__(self, batch, **kwargs):
            calls.append(batch)
            return super().__call__(batch, **kwargs)

    monkeypatch.setattr(sanitizer_driver, "TritonBackend", Recording)
    errors = sanitizer_driver.filtered_calls(torch.Generator().manual_seed(2026), "cpu", None, numbers)
    assert errors == 0
    for number, batch in zip(sorted(numbers), calls, strict=True):
        seen[number] = batch
    return seen


def test_a_part_runs_the_cases_it_numbers_on_the_inputs_of_the_whole_run(monkeypatch, capsys):
    """Cases 2 and 3 alone, then 1 to 3: the same batches for 2 and 3 (case 1's batch is drawn either way), and
    each line names its case's number."""
    part = _batches(monkeypatch, {2, 3})
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("#")]
    assert [line.split()[0] for line in lines] == ["#2", "#3"]
    whole = _batches(monkeypatch, {1, 2, 3})
    for number in (2, 3):
        a, b = part[number], whole[number]
        assert torch.equal(a.target_logits, b.target_logits) and torch.equal(a.draft_token_ids, b.draft_token_ids)
        assert torch.equal(a.top_k, b.top_k) and torch.equal(a.top_p, b.top_p)
