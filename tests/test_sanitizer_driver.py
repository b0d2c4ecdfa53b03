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


def test_the_parts_of_a_run_cover_every_work_item_once_on_the_inputs_of_the_whole_run(monkeypatch, capsys):
    """``--part K/N`` takes every N-th work item from the K-th: the parts of a run together run each item exactly once
    (the filtered cases here, and the plain cases' inputs, which a part draws whether it runs them or not)."""
    whole = _batches(monkeypatch, set(range(1, len(sanitizer_driver.FILTERED) + 1)))
    capsys.readouterr()
    ran = []
    for k in (1, 2, 3):
        calls = []

        class Recording(CpuBackend):
            def __call__(self, batch, **kwargs):
                calls.append(batch)
                return super().__call__(batch, **kwargs)

        monkeypatch.setattr(sanitizer_driver, "TritonBackend", Recording)
        assert sanitizer_driver.filtered_calls(torch.Generator().manual_seed(2026), "cpu", part=(k, 3)) == 0
        numbers = [int(line.split()[0][1:]) for line in capsys.readouterr().out.splitlines() if line.startswith("#")]
        assert numbers == [n for n in whole if (n - 1) % 3 == k - 1]
        for number, batch in zip(numbers, calls, strict=True):
            assert torch.equal(batch.target_logits, whole[number].target_logits)
        ran += numbers
    assert sorted(ran) == sorted(whole)
    every = list(sanitizer_driver.plain_inputs(torch.Generator().manual_seed(7)))
    indices = sorted({item[0] for item in every})
    assert indices == list(range(len(sanitizer_driver.FILTERED) + 1, len(sanitizer_driver.FILTERED)
                                 + len(sanitizer_driver.CASES) + 1))
    assert sum(sanitizer_driver.in_part(i, (k, 3)) for i in indices for k in (1, 2, 3)) == len(indices)


def test_parts_run_side_by_side_each_pinned_to_a_gpu_and_the_first_failure_is_the_status(capsys):
    """``--parts N`` starts N processes at once, part k on the k-th GPU (in turn), relays each line with its part,
    and exits with the first non-zero status in part order (a sanitizer's 99 stays 99)."""
    script = ("import os, sys, time; print('start', time.time(), os.environ.get('CUDA_VISIBLE_DEVICES')); "
              "time.sleep(1.0); sys.exit({code})")
    codes = {1: 0, 2: 99, 3: 7}
    status = sanitizer_driver.run_parts(3, lambda k: [sys.executable, "-c", script.format(code=codes[k])],
                                        ["4", "6"])
    assert status == 99
    lines = capsys.readouterr().out.splitlines()
    starts = {}
    for line in lines:
        if " start " in line:
            words = line.split()
            starts[words[1]] = (float(words[3]), words[4])
    assert {part: gpu for part, (_, gpu) in starts.items()} == {"1/3]": "4", "2/3]": "6", "3/3]": "4"}
    assert max(t for t, _ in starts.values()) - min(t for t, _ in starts.values()) < 1.0   # one after another: 2 s
    assert lines[-1] == "sanitizer driver: 3 parts on GPUs 4, 6, exit statuses [0, 99, 7]"


def test_conflicting_ways_of_choosing_the_work_are_refused(monkeypatch, capsys):
    """A part (--part, --parts) is a share of the whole run; with --filtered or --filtered-cases, which narrow each
    other, it would run something neither names, so the driver stops, naming both. --wrap without --parts would wrap
    nothing."""
    import pytest
    for argv, named in ((["--part", "1/2", "--filtered-cases", "3"], "--filtered-cases and --part"),
                        (["--parts", "2", "--filtered", ""], "--filtered and --parts"),
                        (["--wrap", "compute-sanitizer"], "--wrap is for --parts"),
                        (["--part", "3/2"], "K must lie between 1 and N"), (["--part", "x"], "two whole numbers")):
        monkeypatch.setattr(sys, "argv", ["sanitizer_driver.py", "--device", "cpu", *argv])
        with pytest.raises(SystemExit) as exc:
            sanitizer_driver.main()
        assert exc.value.code == 2 and named in capsys.readouterr().err, argv


def test_parts_run_the_driver_itself_under_the_wrapping_command(monkeypatch):
    """Each part is this driver with ``--part k/N`` on the same device, after the ``--wrap`` words (a sanitizer
    and its options); on the CPU no GPU is pinned."""
    seen = {}

    def fake_run_parts(n, command, gpus):
        seen.update(n=n, argv=[command(k) for k in range(1, n + 1)], gpus=gpus)
        return 0

    monkeypatch.setattr(sanitizer_driver, "run_parts", fake_run_parts)
    monkeypatch.setattr(sys, "argv", ["sanitizer_driver.py", "--device", "cpu", "--parts", "2", "--wrap",
                                      "compute-sanitizer --tool racecheck --print-limit 50"])
    assert sanitizer_driver.main() == 0
    me = [sys.executable, sanitizer_driver.__file__, "--device", "cpu"]
    wrap = ["compute-sanitizer", "--tool", "racecheck", "--print-limit", "50"]
    assert seen == {"n": 2, "gpus": [], "argv": [wrap + me + ["--part", "1/2"], wrap + me + ["--part", "2/2"]]}


def test_a_terminated_run_of_parts_terminates_its_parts(tmp_path):
    """The nightly's DEADLINE stops a step with SIGTERM to the driver; its parts must end with it, or they would keep
    a GPU busy under the steps after it."""
    import os
    import signal
    import subprocess
    import time
    pids = tmp_path / "pids"
    child = f"import os, time; open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n'); time.sleep(60)"
    runner = (f"import sys; sys.path.insert(0, {str(Path(sanitizer_driver.__file__).parent)!r}); "
              "import side_by_side as d; "
              f"sys.exit(d.run_parts(2, lambda k: [sys.executable, '-c', {child!r}], []))")
    proc = subprocess.Popen([sys.executable, "-c", runner])
    deadline = time.monotonic() + 30
    while (not pids.exists() or len(pids.read_text().split()) < 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    for pid in map(int, pids.read_text().split()):
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"part {pid} outlived its terminated run")


def test_filtered_and_filtered_cases_narrow_each_other(monkeypatch):
    """--filtered TAG with --filtered-cases N,N runs the numbered cases that carry the tag: the two are one way of
    choosing the work, not two."""
    seen = []
    monkeypatch.setattr(sanitizer_driver, "run", lambda *args: seen.append(args) or 0)
    monkeypatch.setattr(sys, "argv", ["sanitizer_driver.py", "--device", "cpu", "--filtered", "take-over",
                                      "--filtered-cases", "8,9"])
    assert sanitizer_driver.main() == 0
    assert seen == [("cpu", "take-over", {8, 9}, None)]
