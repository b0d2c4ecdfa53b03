"""Offsets past 2^31 elements (SPEC 4.12): the batch's arithmetic at its real sizes, and the check run on the CPU at
sizes shrunk so that 14-bit offsets wrap where 32-bit ones wrap on the GPU."""

import pytest
import torch

from specverify.checks import FAIL, NOT_APPLICABLE, PASS, run_check
from specverify.checks import offsets
from specverify.kernels.cpu import CpuBackend
from specverify.mutants.samplers import RowOffsetsInInt32, RowOffsetsInUint32
from specverify.strategies import get_profile
from shrunk_offsets import shrink


@pytest.mark.parametrize("case,first_past,first_past_drafts,under_2_32", [
    ("rows_past_2_31", 1_366, 1_639, True), ("rows_past_2_32", 2_731, 3_277, False)])
def test_each_case_reaches_past_its_limit_with_requests_to_spare(case, first_past, first_past_drafts, under_2_32):
    """At the real sizes the logits pass the case's limit, the draft rows alone (a kernel that holds them apart)
    pass it too, about 160 requests before the end, and the supports of the requests share no id (a wrapped row
    read gives another request's tokens). The 2^31 case stays under 2^32, so that an unsigned 32-bit offset passes
    it and fails only the 2^32 case; the 2^32 case's control lies past 2^31."""
    limit, requests = offsets.PAST[case], offsets.REQUESTS[case]
    row = (offsets.DRAFTS + 1) * offsets.VOCAB
    past = [b for b in range(requests) if b * row >= limit]
    past_drafts = [b for b in range(requests) if b * offsets.DRAFTS * offsets.VOCAB >= limit]
    assert past[0] == first_past and past_drafts[0] == first_past_drafts and 150 < len(past_drafts) < 170
    assert (requests * row <= 2 ** 32) == under_2_32
    assert limit == 2 ** 31 or (limit // row) * row > 2 ** 31      # the control of the 2^32 case passes 2^31
    start = (torch.arange(requests) * 145) % (offsets.VOCAB - offsets.SUPPORT)
    gaps = torch.diff(start.sort().values)
    assert int(gaps.min()) >= offsets.SUPPORT, "two requests' supports overlap"
    assert offsets.needed_bytes(offsets.REQUESTS["rows_past_2_31"]) / 2 ** 30 < 60   # an 80 GB H100's room


@pytest.fixture
def shrunk(monkeypatch):
    """The cases at V = 64 on the CPU (tests/shrunk_offsets.py): 14-bit offsets wrap past 2^13 elements, as 32-bit
    ones wrap past 2^31."""
    return shrink(monkeypatch)


def _support_of(batch, b):
    row = batch.target_logits[b * (offsets.DRAFTS + 1)]
    return set(torch.nonzero(torch.isfinite(row)).flatten().tolist())


def test_each_request_has_its_own_support_and_some_drafts_of_probability_0(shrunk):
    batch, support = offsets.offsets_batch("cpu", filters=True, requests=60)
    assert batch.target_logits.shape == (60 * (offsets.DRAFTS + 1), 64)
    for b in range(60):
        assert _support_of(batch, b) == set(support[b].tolist())
    drafts = batch.draft_token_ids.view(60, offsets.DRAFTS)
    outside = [b for b in range(60) if int(drafts[b, -1]) not in _support_of(batch, b)]
    assert outside == list(range(0, 60, 3))
    assert bool((batch.temperature == 0).any()) and int(batch.top_k.max()) == 3


def test_a_backend_that_wraps_its_row_offsets_fails_naming_a_request_past_the_limit(shrunk):
    """The CPU backend passes, on both noise paths and every rule, after the control (its first 21 requests, 126
    rows, under 2^13 elements); the same backend reading rows at offsets computed in 14 bits passes the control and
    fails the whole batch, naming a request whose rows lie past 2^13 elements."""
    good = run_check(CpuBackend(), "int64_offsets", "rows_past_2_31", shrunk)
    assert good.status == PASS and good.samples == 21 + 40 * 2 * 3, good.line()
    assert "requests 0-20 (126 rows, every one under 8,192 elements)" in good.message, good.message
    assert "peak 3.0 GiB allocated on the GPU (the case asks" in good.message, good.message
    bad = run_check(RowOffsetsInInt32(), "int64_offsets", "rows_past_2_31", shrunk, reproducer=False)
    assert bad.status == FAIL and "another request's rows" in bad.message, bad.line()
    assert "the control passed first" in bad.message, bad.message
    first_bad = int(bad.message.split("first: request ")[1].split(" ")[0])
    limit = offsets.PAST["rows_past_2_31"]
    assert first_bad * (offsets.DRAFTS + 1) * offsets.VOCAB >= limit - (offsets.DRAFTS + 1) * offsets.VOCAB


def test_unsigned_offsets_pass_the_2_31_case_and_fail_the_2_32_case_after_its_control(shrunk):
    """Offsets computed in unsigned 14 bits (uint32_t at the real sizes, the CUDA kernels' habit) wrap at 2^14,
    not 2^13: the 2^31 case, whose batch stays under 2^14, passes; the 2^32 case's control (42 requests, past
    2^13, under 2^14) passes and its whole batch fails, naming a request past 2^14. Signed offsets fail that
    control, which says that something other than passing 2^14 decides."""
    unsigned = run_check(RowOffsetsInUint32(), "int64_offsets", "rows_past_2_31", shrunk, reproducer=False)
    assert unsigned.status == PASS, unsigned.line()
    bad = run_check(RowOffsetsInUint32(), "int64_offsets", "rows_past_2_32", shrunk, reproducer=False)
    assert bad.status == FAIL and "another request's rows (requests 43 on lie past 16,384" in bad.message, bad.line()
    assert "the control passed first: the standard rule on seeded noise at requests 0-41 (252 rows" in bad.message
    signed = run_check(RowOffsetsInInt32(), "int64_offsets", "rows_past_2_32", shrunk, reproducer=False)
    assert signed.status == FAIL and signed.message.startswith(
        "the control fails, so something other than passing 16,384 elements does"), signed.line()
    good = run_check(CpuBackend(), "int64_offsets", "rows_past_2_32", shrunk)
    assert good.status == PASS and good.samples == 42 + 60 * 2 * 3, good.line()


def test_the_check_is_n_a_off_cuda_and_where_the_gpu_lacks_the_memory(monkeypatch):
    """On the CPU profile it says where it runs; on a GPU with too little free memory it says how much it has and
    needs, never a pass."""
    cpu = run_check(CpuBackend(), "int64_offsets", "rows_past_2_31", get_profile("ci"))
    assert cpu.status == NOT_APPLICABLE and "CUDA device only" in cpu.message
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (8 << 30, 80 << 30))
    from dataclasses import replace
    short = run_check(CpuBackend(), "int64_offsets", "rows_past_2_31", replace(get_profile("ci"), device="cuda"))
    assert short.status == NOT_APPLICABLE and "8.0 GiB free of 80.0" in short.message, short.line()


def test_a_failure_leaves_a_check_reproducer_never_the_whole_batch(shrunk):
    """The failing call holds 11 GB of logits on the GPU, and no sub-batch fails as the whole does: the reproducer
    re-runs the check (kind "check"), with no call in it to copy to the host or save."""
    bad = run_check(RowOffsetsInInt32(), "int64_offsets", "rows_past_2_31", shrunk)
    assert bad.status == FAIL, bad.line()
    assert bad.repro.kind == "check" and bad.repro.call is None, (bad.repro.kind, bad.repro.call)


class CrashesPastTheLimit(CpuBackend):
    """Raises as a kernel reading a wrapped address does (vLLM's, docs/kernels.md) once the logits pass 2^13."""

    def __call__(self, batch, *args, **kwargs):
        if batch.target_logits.numel() >= offsets.PAST["rows_past_2_31"]:
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
                               "asynchronously reported at some other API call")
        return super().__call__(batch, *args, **kwargs)


def test_a_crash_past_the_limit_is_reported_beside_the_control_that_passed(shrunk):
    """A kernel whose wrapped offset leaves the allocation raises instead of emitting another request's ids: the
    failure names the exception by its first line (torch's run on with advice) and the control under the limit
    that passed, so the size is what decides."""
    bad = run_check(CrashesPastTheLimit(), "int64_offsets", "rows_past_2_31", shrunk, reproducer=False)
    assert bad.status == FAIL, bad.line()
    assert bad.message.startswith("the call raised RuntimeError: CUDA error: an illegal memory access was "
                                  "encountered; the control passed first"), bad.message
    assert "; the control passed first: the standard rule on seeded noise at requests 0-20" in bad.message


def test_a_failure_under_the_limit_says_the_size_is_not_the_cause(shrunk, monkeypatch):
    """Offsets that wrap at 2^11 elements break the control's requests too: the message says that something other
    than the size fails, never that the backend's offsets wrap at 2^31."""
    monkeypatch.setattr(RowOffsetsInInt32, "offset_bits", 12)
    bad = run_check(RowOffsetsInInt32(), "int64_offsets", "rows_past_2_31", shrunk, reproducer=False)
    assert bad.status == FAIL, bad.line()
    assert bad.message.startswith("the control fails, so something other than passing 8,192 elements does: the "
                                  "standard rule")
    assert "(every row under 8,192 elements)" in bad.message, bad.message
