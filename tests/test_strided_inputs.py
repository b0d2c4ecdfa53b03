"""Strided inputs (SPEC 4.11): the guard hands a backend views that are not contiguous when the check asks, the
check fails a backend that reads them as if contiguous and passes one that refuses them by name, and the
Triton kernels read every input through its strides."""

from dataclasses import replace

import pytest
import torch

from reference import Noise, SpecBatch
from reference.batch import FIELDS
from specverify.checks import FAIL, NOT_APPLICABLE, PASS, run_check
from specverify.checks.integrity import (FLOAT_POISON, INT_POISON, STRIDE_PAD, outside_view, strided_copy,
                                        strided_inputs)
from specverify.checks.runner import CheckFailure, GuardedBackend
from specverify.generate import random_batch
from specverify.kernels.cpu import CpuBackend
from specverify.strategies import get_profile
from triton_sampler_cases import DEVICES


def _batch(seed=5, V=30):
    g = torch.Generator().manual_seed(seed)
    return random_batch(g, num_requests=6, vocab_size=V, max_draft=3, drafter="dense", greedy_fraction=0.3,
                        zero_draft_fraction=0.2)


def test_a_strided_copy_holds_the_values_in_a_poisoned_buffer_it_shares_with_nothing():
    """A 1-D tensor becomes every other element of a buffer (stride 2), a 2-D one the middle columns of a
    buffer 2 * STRIDE_PAD wider; every element of the buffer outside the view is poison, and the copy shares no
    memory with the original."""
    ids = torch.arange(5, dtype=torch.int64)
    rows = torch.randn(3, 7)
    for t, poison in ((ids, INT_POISON), (rows, FLOAT_POISON)):
        c = strided_copy(t)
        assert torch.equal(c, t) and not c.is_contiguous() and c.untyped_storage().data_ptr() != t.data_ptr()
        outside = outside_view(c)
        assert outside.numel() > 0 and bool((outside == poison).all())
    assert strided_copy(rows).stride() == (7 + 2 * STRIDE_PAD, 1) and strided_copy(ids).stride() == (2,)
    assert all(strided_copy(t).data_ptr() % 16 == 0 for t in (ids, rows, rows.half()))
    assert strided_copy(None) is None and strided_copy(torch.empty(0, 4)).shape == (0, 4)


class Recording(CpuBackend):
    """The correct CPU backend, remembering the tensors it was handed."""

    name = "recording"

    def __call__(self, batch, *, noise=None, seed=None, **kwargs):
        self.handed = [getattr(batch, f) for f in FIELDS] + ([noise.uniform, noise.exponential] if noise else [seed])
        return super().__call__(batch, noise=noise, seed=seed, **kwargs)


def test_the_guard_hands_every_input_over_strided_only_while_the_condition_holds():
    """Under ``strided_inputs`` every non-empty 1-D or 2-D input (the batch's tensors, the noise, the seeds) is a
    view that is not contiguous, with the caller's values; outside it each is contiguous, and the outputs agree."""
    batch = _batch()
    noise = Noise.draw(batch, torch.Generator().manual_seed(1))
    backend = Recording()
    guarded = GuardedBackend(backend)
    for call in (dict(noise=noise), dict(seed=torch.arange(6, dtype=torch.int64))):
        plain = guarded(batch, **call)
        assert all(t.is_contiguous() for t in backend.handed if t is not None)
        with strided_inputs():
            strided = guarded(batch, **call)
        handed = [t for t in backend.handed if t is not None and t.numel() > 1]
        assert len(handed) >= 5 and not any(t.is_contiguous() for t in handed)
        assert plain.emitted() == strided.emitted()
        guarded(batch, **call)      # the condition is over: plain copies again
        assert all(t.is_contiguous() for t in backend.handed if t is not None)


class WritesIntoLogits(CpuBackend):
    name = "writes_into_logits"

    def __call__(self, batch, **kwargs):
        batch.target_logits[0, 0] += 1.0
        return super().__call__(batch, **kwargs)


def test_a_write_into_a_strided_input_is_still_named():
    """The strided copy is compared with the caller's tensor as the plain one is."""
    batch = _batch()
    with strided_inputs(), pytest.raises(CheckFailure, match=r"wrote into its inputs: target_logits \(1 of"):
        GuardedBackend(WritesIntoLogits())(batch, noise=Noise.draw(batch, torch.Generator().manual_seed(2)))


class Refuses(CpuBackend):
    """Refuses strided inputs with a ValueError whose message is ``message``."""

    name = "refuses"
    message = "target_logits must be contiguous"

    def __call__(self, batch, **kwargs):
        if not batch.target_logits.is_contiguous():
            raise ValueError(self.message)
        return super().__call__(batch, **kwargs)


class RefusesNamingNothing(Refuses):
    name = "refuses_naming_nothing"
    message = "unsupported layout"


class Nondeterministic(CpuBackend):
    """Every third call changes the first request's emitted token: a backend the check cannot compare. (Two calls
    apart, one of the two is changed, and the check's calls again are each two after the first.)"""

    name = "nondeterministic"
    calls = 0

    def __call__(self, batch, **kwargs):
        out = super().__call__(batch, **kwargs)
        self.calls += 1
        if self.calls % 3 == 0 and batch.vocab_size > 1:
            out.token_ids[0, 0] = (out.token_ids[0, 0] + 1) % batch.vocab_size
            out.num_accepted[0] = 0
            out.token_ids[0, 1:] = -1
        return out


def test_a_refusal_naming_the_tensor_passes_and_is_counted_one_naming_nothing_fails():
    """SPEC 4.11 lets a backend refuse strided inputs with an error naming the tensor: the check passes and
    says how many calls were refused; an error that names no input is a failure."""
    profile = get_profile("ci")
    refused = run_check(Refuses(), "strided_inputs", "views", profile)
    assert refused.status == PASS and "refused" in refused.message and "target_logits" in refused.message, \
        refused.line()
    unnamed = run_check(RefusesNamingNothing(), "strided_inputs", "views", profile, reproducer=False)
    assert unnamed.status == FAIL and "naming no input" in unnamed.message, unnamed.line()


def test_a_nondeterministic_backend_is_sent_to_the_determinism_check_not_blamed_on_strides():
    """Two outputs that differ only because the backend is nondeterministic are not a strided-input failure:
    the message says so."""
    result = run_check(Nondeterministic(), "strided_inputs", "views", get_profile("ci"), reproducer=False)
    assert result.status == FAIL and "not deterministic" in result.message, result.line()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("field", ["num_draft_tokens", "draft_token_ids", "target_logits", "draft_probs",
                                   "temperature", "uniform", "exponential"])
def test_triton_kernels_read_each_input_through_its_strides(field, device):
    """Each input alone handed over strided gives the contiguous call's tokens. The counts and the drafts once
    read as if contiguous (the interpreter crashed on the poison), the temperatures and uniforms gave other
    tokens: the launch wrapper now copies a 1-D argument whose elements are not adjacent."""
    from specverify.registry import get_backend
    backend = get_backend("triton")
    batch = _batch(seed=3, V=50).to(device)
    noise = Noise.draw(batch, torch.Generator().manual_seed(1)).to(device)
    want = backend(batch, noise=noise)
    fields = {f: getattr(batch, f) for f in FIELDS}
    if field in fields:
        fields[field] = strided_copy(fields[field])
        batch = SpecBatch.assembled(fields, False, valid=True)
    else:
        noise = Noise(**{**{"uniform": noise.uniform, "exponential": noise.exponential},
                         field: strided_copy(getattr(noise, field))})
    got = backend(batch, noise=noise)
    assert got.emitted() == want.emitted()


@pytest.mark.parametrize("device", DEVICES)
def test_triton_sample_into_writes_strided_outputs_through_their_strides(device):
    """``sample_into`` writes into the caller's tensors: an engine's ``out[:, :K + 1]`` of a wider buffer and every
    other element of a counts buffer get the contiguous call's values, and the buffers' other elements keep theirs.
    The kernels once stored by element index, over the buffer's other columns and rows."""
    from specverify.kernels.triton_kernels import triton_sample_into
    batch = _batch(seed=3, V=50).to(device)
    noise = Noise.draw(batch, torch.Generator().manual_seed(1)).to(device)
    B, K1 = batch.num_requests, batch.max_draft + 1

    def run(token_ids, num_accepted):
        triton_sample_into(token_ids, num_accepted, batch.num_draft_tokens, batch.draft_token_ids,
                           batch.target_logits, batch.draft_probs, batch.temperature, uniform=noise.uniform,
                           exponential=noise.exponential)

    want_ids, want_n = (torch.empty(B, K1, dtype=torch.int64, device=device),
                        torch.empty(B, dtype=torch.int64, device=device))
    run(want_ids, want_n)
    ids_buffer = torch.full((B, K1 + 5), -7, dtype=torch.int64, device=device)
    n_buffer = torch.full((2 * B,), -7, dtype=torch.int64, device=device)
    run(ids_buffer[:, 2:2 + K1], n_buffer[::2])
    assert torch.equal(ids_buffer[:, 2:2 + K1], want_ids) and torch.equal(n_buffer[::2], want_n)
    assert bool((ids_buffer[:, :2] == -7).all() and (ids_buffer[:, 2 + K1:] == -7).all())
    assert bool((n_buffer[1::2] == -7).all())


class SampleIntoByElement(CpuBackend):
    """Declares a graph-capturable entry whose writes go by element index from where each output starts, as a
    kernel storing at ``b * (K + 1) + j`` does."""

    name = "sample_into_by_element"
    capabilities = replace(CpuBackend.capabilities, cuda_graphs=True)
    by_element = True

    def sample_into(self, out, batch, *, method="standard", noise=None, seed_tensor=None, rates=None):
        result = self(batch, noise=noise, seed=seed_tensor, method=method)
        for name in ("token_ids", "num_accepted", "accepted_nodes"):
            dst, src = getattr(out, name), getattr(result, name)
            if dst is None:
                continue
            if self.by_element:
                dst = torch.as_strided(dst, dst.shape, torch.empty(dst.shape, device="meta").stride(),
                                       dst.storage_offset())
            dst.copy_(src)


class SampleIntoThroughStrides(SampleIntoByElement):
    name = "sample_into_through_strides"
    by_element = False


def test_sample_into_outputs_as_views_are_written_through_their_strides():
    """A graph-capturable entry that stores by element index writes outside the views it is given (an engine's
    ``out[:, :K + 1]`` of a wider buffer): the case fails, naming the outputs; the same entry writing through the
    strides passes, on both noise paths and the tree rule (its accepted paths too)."""
    profile = get_profile("ci")
    bad = run_check(SampleIntoByElement(), "strided_inputs", "sample_into_outputs", profile, reproducer=False)
    assert bad.status == FAIL and "written outside them: token_ids" in bad.message, bad.line()
    good = run_check(SampleIntoThroughStrides(), "strided_inputs", "sample_into_outputs", profile)
    assert good.status == PASS and good.samples > 0, good.line()
    plain = run_check(CpuBackend(), "strided_inputs", "sample_into_outputs", profile)
    assert plain.status == NOT_APPLICABLE and "cuda_graphs" in plain.message


class SampleIntoWritesNothing(SampleIntoThroughStrides):
    name = "sample_into_writes_nothing"

    def sample_into(self, out, batch, **kwargs):
        return None


def test_a_sample_into_that_writes_nothing_fails_rather_than_matching_its_own_poison():
    """Both calls' outputs would hold the same poison: the contiguous call's outputs must be well formed first."""
    result = run_check(SampleIntoWritesNothing(), "strided_inputs", "sample_into_outputs", get_profile("ci"),
                       reproducer=False)
    assert result.status == FAIL and "contiguous outputs" in result.message, result.line()
