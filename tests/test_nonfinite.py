"""Non-finite target rows (SPEC 3.6): refused by default with a named error, checkable by opt-in, the
opt-in kept through every copy the harness makes, and every row kind present in the check's batches."""

import pytest
import torch

import reference
from reference import SpecBatch, select_requests
from specverify.checks import PASS, run_check
from specverify.checks.nonfinite import ROW_KINDS, nonfinite_batch
from specverify.checks.repro import Call, python_source
from specverify.checks.runner import private_batch
from specverify.kernels.cpu import CpuBackend
from specverify.strategies import get_profile


def test_nan_logits_are_refused_by_default_with_the_opt_in_named():
    batch, _, _ = nonfinite_batch(0, 12, "dense")
    with pytest.raises(ValueError, match="target_logits contains NaN.*allow_nonfinite=True"):
        SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, batch.target_logits, batch.draft_probs,
                  batch.temperature)
    with pytest.raises(ValueError, match="allow_nonfinite must be a bool"):
        SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, batch.target_logits, batch.draft_probs,
                  batch.temperature, allow_nonfinite=1)


def test_opt_in_survives_every_copy_the_harness_makes():
    """A copy that dropped the opt-in would refuse the batch: device moves, sub-batches, the guard's
    private copy and the reproducer's source all keep it."""
    batch, _, bad = nonfinite_batch(1, 12, "none")
    assert batch.to("cpu").allow_nonfinite and private_batch(batch).allow_nonfinite
    assert select_requests(batch, torch.nonzero(bad).flatten()).allow_nonfinite
    scope = {}
    exec(python_source(Call(batch, None, torch.arange(10), {})), scope)
    rebuilt = scope["batch"]
    assert rebuilt.allow_nonfinite and torch.equal(rebuilt.target_logits.isnan(), batch.target_logits.isnan())


def test_check_batches_cover_every_row_kind():
    """Over the rounds the check runs, each kind of bad row appears (the kind cycles with the round)."""
    seen = set()
    for seed in range(len(ROW_KINDS)):
        batch, clean, bad = nonfinite_batch(seed, 12, "dense")
        assert torch.equal(batch.nonfinite_requests(), bad)
        rows = batch.target_logits[~torch.isclose(batch.target_logits, clean.target_logits).all(dim=1)]
        for row in rows:
            finite = torch.isfinite(row)
            seen.add("all_nan" if row.isnan().all() else "some_nan" if row.isnan().any() else
                     "all_neginf" if row.isneginf().all() else
                     "one_posinf" if int(row.isposinf().sum()) == 1 else "several_posinf")
            assert not finite.all()
    assert seen == set(ROW_KINDS)


def test_reference_decides_finite_requests_as_alone():
    """The reference's finite requests equal its output on the finite requests alone (same seeds)."""
    batch, _, bad = nonfinite_batch(2, 12, "dense")
    seeds = torch.arange(10, dtype=torch.int64) * 7
    full = reference.sample(batch, seed=seeds)
    good = torch.nonzero(~bad).flatten()
    alone = reference.sample(select_requests(batch, good), seed=seeds[good])
    assert full.token_ids[good, : alone.token_ids.shape[1]].tolist() == alone.token_ids.tolist()


class RefusesNonFinite(CpuBackend):
    name = "refuses_nonfinite"

    def _sample(self, batch, **kwargs):
        if batch.allow_nonfinite and bool(batch.nonfinite_requests().any()):
            raise ValueError("target_logits holds non-finite rows")
        return super()._sample(batch, **kwargs)


def test_refusing_the_batch_with_value_error_is_allowed_and_reported():
    result = run_check(RefusesNonFinite(), "nonfinite_rows", "rows", get_profile("ci"))
    assert result.status == PASS and "refused" in result.message, result.line()
