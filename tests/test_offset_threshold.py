"""ci/offset_threshold.py, on the CPU at the sizes tests/test_int64_offsets.py shrinks the case to (V = 64, the
limit at 2^13 elements, the mutant's offsets 14 bits wide)."""

import importlib.util
from pathlib import Path

import pytest

from specverify.checks import offsets
from specverify.kernels.cpu import CpuBackend
from specverify.mutants.samplers import RowOffsetsInInt32
from shrunk_offsets import shrink

spec = importlib.util.spec_from_file_location("offset_threshold", Path(__file__).parents[1] / "ci/offset_threshold.py")
threshold = importlib.util.module_from_spec(spec)
spec.loader.exec_module(threshold)


@pytest.fixture
def shrunk(monkeypatch):
    """The 2^31 case at V = 64, its limit at 2^13 elements (tests/shrunk_offsets.py)."""
    shrink(monkeypatch)


class Faults(CpuBackend):
    """Raises as vLLM's kernels do on an H200 once a row's offset wraps (docs/kernels.md)."""

    def __call__(self, batch, *args, **kwargs):
        if batch.target_logits.numel() > offsets.PAST["rows_past_2_31"]:
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore advice")
        return super().__call__(batch, *args, **kwargs)


@pytest.mark.parametrize("path", ["injected", "seeded"])
def test_the_first_size_past_the_limit_is_where_wrapped_offsets_emit_other_requests_ids(shrunk, path):
    """21 requests (126 rows, 8,064 elements) stay under 2^13 and keep their own ids; 24 (144 rows) pass it, and
    the backend reading rows at 14-bit offsets emits another request's ids there, in one of the requests past it."""
    under = threshold.probe(RowOffsetsInInt32(), 21, path, device="cpu")
    assert under["outcome"] == "own ids" and under["past"] == {"rows": False, "draft_rows": False}, under
    past = threshold.probe(RowOffsetsInInt32(), 24, path, device="cpu")
    assert past["outcome"] == "outside" and past["past"]["rows"] and not past["past"]["draft_rows"], past
    first = int(past["first"][0].split()[1])
    assert first >= 21 and f"outside their ids; first: request {first}" in threshold.line(past), past
    assert threshold.probe(CpuBackend(), 24, path, device="cpu")["outcome"] == "own ids"


def test_an_exception_is_reported_by_its_first_line_and_the_backends_frames(shrunk):
    """The row names the exception (not torch's lines of advice) and the frames it was raised from outside
    torch, Triton and the checks: here the stand-in's __call__, in this file."""
    row = threshold.probe(Faults(), 22, "injected", device="cpu")
    assert row["outcome"] == "raised", row
    assert row["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert row["frames"] and row["frames"][-1].endswith("__call__") and "test_offset_threshold.py" in row["frames"][-1]
    assert "RuntimeError: CUDA error" in threshold.line(row) and "__call__" in threshold.line(row)
    assert threshold.probe(Faults(), 21, "injected", device="cpu")["outcome"] == "own ids"


def _rows_failing_from(first: int, seen: list):
    def run(n: int) -> dict:
        seen.append(n)
        return {"requests": n, "outcome": "own ids" if n < first else "raised"}
    return run


@pytest.mark.parametrize("first", [1366, 1367, 1639, 1800])
def test_bisection_finds_the_first_size_that_fails_in_log_steps(first):
    """Between a size that keeps its ids (1,365) and one that does not (1,800), the least failing size is found
    with both ends checked first and then one process a halving: 2 + 9 runs for 435 sizes."""
    seen = []
    found, rows = threshold.first_failing(1365, 1800, _rows_failing_from(first, seen))
    assert found == first and [r["requests"] for r in rows] == seen
    assert seen[:2] == [1365, 1800] and len(seen) <= 2 + 9


def test_bisection_refuses_ends_that_do_not_bracket_a_failure():
    """A low end that fails already, or a high end that passes, gives no threshold: an error naming both outcomes,
    never a size."""
    with pytest.raises(ValueError, match="1365 requests must keep their own ids and 1800 must not; got 'raised'"):
        threshold.first_failing(1365, 1800, _rows_failing_from(1000, []))
    with pytest.raises(ValueError, match="got 'own ids' and 'own ids'"):
        threshold.first_failing(1365, 1800, _rows_failing_from(5000, []))


def test_the_command_asks_for_sizes_or_a_bracket_and_not_both(capsys):
    for argv in (["cpu"], ["cpu", "--requests", "1", "--bisect", "1,2"]):
        with pytest.raises(SystemExit) as exit_:
            threshold.main(argv)
        assert exit_.value.code == 2 and "give --requests N,M,... or --bisect LO,HI" in capsys.readouterr().err
