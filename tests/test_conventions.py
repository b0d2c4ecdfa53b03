"""The convention helpers every adapter of an external sampler uses (specverify.adapters.conventions),
each against the reference or a hand-checked value, and the FlashInfer adapter's launch plumbing with a
stand-in kernel of FlashInfer's signature: no FlashInfer and no GPU needed."""

from dataclasses import replace

import pytest
import torch

import reference
from reference import Noise, SpecBatch
from reference.sample import filtered_target, synthetic_rates_f32
from specverify.adapters import conventions
from specverify.adapters.flashinfer import STALE_FALLBACK, FlashInferChain
from specverify.checks import FAIL, KNOWN, PASS, run_check
from specverify.generate import random_batch
from specverify.strategies import get_profile


def _batch(seed: int, **kwargs) -> SpecBatch:
    kwargs.setdefault("num_requests", 6)
    kwargs.setdefault("vocab_size", 12)
    return random_batch(torch.Generator().manual_seed(seed), **kwargs)


def _with_filters(batch: SpecBatch) -> SpecBatch:
    B = batch.num_requests
    top_k = torch.tensor([2, 0] * B)[:B]
    top_p = torch.tensor([1.0, 0.6] * B)[:B]
    return SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, batch.target_logits, batch.draft_probs,
                     batch.temperature, top_k, top_p, None)


def test_groups_cover_every_request_once_with_its_own_rows():
    """A fixed-n kernel is launched per group: each request appears in exactly one group, and the rows a
    group gathers are that request's rows (as select_requests finds them), zero-draft requests included."""
    batch = _batch(0, num_requests=9, zero_draft_fraction=0.3)
    groups = conventions.split_by_draft_count(batch)
    seen = torch.cat([g.requests for g in groups]).sort().values
    assert seen.tolist() == list(range(9))
    assert 0 in [g.n for g in groups]
    for g in groups:
        for i, b in enumerate(g.requests.tolist()):
            one = reference.select_requests(batch, torch.tensor([b]))
            assert torch.equal(batch.target_logits[g.logit_rows[i]], one.target_logits)
            assert g.drafts(batch)[i].tolist() == one.draft_token_ids.tolist()
            assert torch.equal(batch.draft_probs[g.draft_rows[i]], one.draft_probs)


def test_assemble_restores_the_reference_output_from_groups():
    """Per-group outputs scattered back give the [B, K + 1] output the reference gives directly."""
    batch = _batch(1)
    out = reference.sample(batch, seed=3)
    parts = [(g, out.token_ids[g.requests, : g.n + 1], out.num_accepted[g.requests])
             for g in conventions.split_by_draft_count(batch)]
    back = conventions.assemble(batch.num_requests, batch.max_draft, parts)
    assert torch.equal(back.token_ids, out.token_ids) and torch.equal(back.num_accepted, out.num_accepted)


@pytest.mark.parametrize("chunk_rows", [None, 2])
def test_target_probs_are_filtered_p_and_one_hot_for_greedy_requests(monkeypatch, chunk_rows):
    """Random rows equal the reference's p' (filters included); a greedy row is one-hot at the lowest
    index among tied maxima. The float64 work runs in chunks of rows (``chunk_rows`` 2: many chunks, each
    of a few requests' rows), which must not change a row."""
    batch = _with_filters(_batch(2, greedy_fraction=0.5))
    batch.target_logits[-1] = 0.0          # the last request's bonus row: all tied
    if chunk_rows is not None:
        monkeypatch.setattr(conventions, "FLOAT64_CHUNK_BYTES", 8 * batch.vocab_size * chunk_rows)
    probs = conventions.target_probs(batch)
    request = conventions.row_requests(batch)
    for row in range(probs.shape[0]):
        b = int(request[row])
        if float(batch.temperature[b]) == 0:
            want = torch.zeros(batch.vocab_size)
            want[int(batch.target_logits[row].double().argmax())] = 1
        else:
            want = filtered_target(batch, torch.tensor([b]), batch.target_logits[row:row + 1],
                                                    batch.temperature[b].double())[0].float()
        assert torch.equal(probs[row], want), row
    if float(batch.temperature[-1]) == 0:
        assert probs[-1].argmax() == 0


def test_draft_probs_one_hot_for_deterministic_drafters_and_zero_at_placeholders():
    batch = _batch(3, drafter="none")
    x = batch.draft_token_ids.clone()
    x[0] = -1
    batch = SpecBatch(batch.num_draft_tokens, x, batch.target_logits, None, batch.temperature)
    q = conventions.draft_probs(batch)
    assert q[0].sum() == 0
    assert torch.equal(q[1:].argmax(1), x[1:]) and torch.equal(q[1:].sum(1), torch.ones(batch.num_drafts - 1))


@pytest.mark.parametrize("filtered", [False, True])
def test_caller_sampled_bonus_tokens_follow_the_reference(filtered):
    """With no drafts every request emits only its bonus token: the caller's sample must be the
    reference's token under the same exponential noise, greedy and filtered requests included."""
    batch = _batch(4, num_requests=16, max_draft=0, greedy_fraction=0.3)
    batch = _with_filters(batch) if filtered else batch
    noise = Noise.draw(batch, torch.Generator().manual_seed(5))
    want = reference.sample(batch, noise=noise).token_ids[:, 0]
    assert torch.equal(conventions.bonus_tokens(batch, noise), want)


def test_int32_ids_refuse_what_does_not_fit_and_offsets_accumulate():
    assert conventions.int32_ids(torch.tensor([0, 5, -1])).dtype == torch.int32
    with pytest.raises(ValueError, match="do not fit in int32"):
        conventions.int32_ids(torch.tensor([2 ** 31]))
    k = torch.tensor([2, 0, 3])
    assert conventions.cumulative_offsets(k).tolist() == [0, 2, 2, 5]
    assert conventions.cumulative_offsets(k, with_zero=False).tolist() == [2, 2, 5]


def test_kernel_padding_becomes_minus_one_and_counters_give_this_calls_counts():
    V = 7
    assert conventions.from_kernel_padding(torch.tensor([[3, V, V]], dtype=torch.int32), V).tolist() == [[3, -1, -1]]
    counter = conventions.zeroed_counter(3, "cpu")
    before = counter.clone()
    counter += torch.tensor([1, 0, 2], dtype=torch.int32)     # what an accumulating kernel does
    assert conventions.counter_delta(before, counter).tolist() == [1, 0, 2]


def test_num_accepted_recovered_from_tokens_equals_the_reference_count():
    """For kernels that report no count: the prefix equal to the drafts is the accepted count, on random
    batches with dense and one-hot drafters and greedy requests."""
    for seed, drafter in [(6, "dense"), (7, "none"), (8, "dense")]:
        batch = _batch(seed, num_requests=24, drafter=drafter, greedy_fraction=0.3)
        out = reference.sample(batch, seed=seed)
        assert torch.equal(conventions.num_accepted_from_tokens(batch, out.token_ids), out.num_accepted)


def test_num_accepted_from_tokens_is_wrong_where_the_recovered_token_is_the_draft():
    """Its documented limit: a kernel that re-emits the rejected draft at the rejection (vLLM on a NaN row,
    or the synthetic rule) makes the prefix count one too many; the emitted count of a -1 padded output is
    right there, and equal to it on the reference's outputs."""
    batch = SpecBatch(num_draft_tokens=torch.tensor([1, 2]), draft_token_ids=torch.tensor([3, 5, 6]),
                      target_logits=torch.zeros(5, 8), draft_probs=None, temperature=torch.tensor([1.0, 1.0]))
    emitted = torch.tensor([[3, -1, -1], [5, 6, 2]])       # request 0 rejected draft 3 and emitted 3 again
    assert conventions.num_accepted_from_tokens(batch, emitted).tolist() == [1, 2]
    assert conventions.num_accepted_from_emitted(emitted).tolist() == [0, 2]
    for seed in (6, 7):
        batch = _batch(seed, num_requests=24, drafter="dense", greedy_fraction=0.3)
        out = reference.sample(batch, seed=seed)
        assert torch.equal(conventions.num_accepted_from_emitted(out.token_ids), out.num_accepted)


def test_bonus_rows_and_bonus_tokens_from_the_logits_handed_over():
    """The bonus rows are each request's last row, and bonus_tokens samples the logits it is given (as a
    kernel's caller hands them over) by the same law."""
    batch = _batch(11, num_requests=8, greedy_fraction=0.3)
    rows = conventions.bonus_rows(batch)
    assert torch.equal(rows, torch.cumsum(batch.num_draft_tokens + 1, 0) - 1)
    noise = Noise.draw(batch, torch.Generator().manual_seed(12))
    given = conventions.bonus_tokens(batch, noise, logits=batch.target_logits[rows].clone())
    assert torch.equal(given, conventions.bonus_tokens(batch, noise))
    flipped = conventions.bonus_tokens(batch, noise, logits=-batch.target_logits[rows])
    assert not torch.equal(flipped, given)


def test_unconditional_rates_divide_back_to_the_float32_conditional_rates():
    """vLLM's synthetic_acceptance_rates form: R_j non-increasing, and R_j / R_{j-1} in float32 is the c_j
    every backend compares against, exactly."""
    for rate, n in [(0.6, 4), (0.0, 3), (1.0, 2), (0.95, 7)]:
        R = conventions.unconditional_rates(rate, n)
        assert all(0.0 <= r <= 1.0 for r in R) and all(b <= a for a, b in zip(R, R[1:]))
        back = [r / prev if prev > 0 else 0.0 for r, prev in zip(R, [1.0, *R[:-1]])]
        assert torch.equal(torch.tensor(back, dtype=torch.float32), synthetic_rates_f32(rate, n)), (rate, n)


def test_patch_points_replace_for_one_call_and_name_a_missing_point():
    import types  # noqa: PLC0415
    owner = types.SimpleNamespace(draw=lambda: "own")
    with conventions.patch_points(owner, {"draw": lambda: "injected"}, "the kernel module"):
        assert owner.draw() == "injected"
    assert owner.draw() == "own"
    with pytest.raises(ImportError, match=r"the kernel module has no fill: the patch point"):
        with conventions.patch_points(owner, {"fill": None}, "the kernel module"):
            pass
    with conventions.patch_points(torch.Tensor, {"exponential_": lambda self, *a, **k: self.fill_(2.0)}, "torch"):
        assert torch.empty(2).exponential_().tolist() == [2.0, 2.0]
    assert "exponential_" not in vars(torch.Tensor) and bool((torch.empty(3).exponential_() != 2.0).all())


def test_seeds_per_request_and_per_batch():
    assert conventions.request_seeds(5, 3).tolist() == [5, 6, 7]
    seeds = torch.tensor([9, 4, 1])
    assert conventions.batch_seed(seeds) == conventions.batch_seed(seeds.clone())
    assert conventions.batch_seed(seeds) != conventions.batch_seed(seeds.flip(0))
    assert conventions.batch_seed(11) == 11


def fake_chain(draft_probs, draft_token_ids, target_probs, accepted, emitted, deterministic, generator, *, seed,
               offset, slot_keyed=True, skip_bonus=False, stale_fallback=False):
    """A pure-torch chain_speculative_sampling: FlashInfer's signature and outputs, its own noise keyed by
    seed and the row's slot in the launch, the standard rule on the probabilities it is given. With
    ``stale_fallback``, a residual zero everywhere gives what FlashInfer 0.7.2.post1 gives there, its uninitialised
    ``last_valid_id``: True, the last id in the support of the previous row's sample (0 before any row); an int,
    that id every time (what another kernel left in the same shared memory)."""
    R, n, V = draft_probs.shape[0], draft_token_ids.shape[1], target_probs.shape[-1]
    u, e = torch.empty(R, n, dtype=torch.float64), torch.empty(R, V, dtype=torch.float64)
    for r in range(R):   # each row's own stream, drawn in the kernel's order: u, then E
        g = torch.Generator().manual_seed((int(seed[r]) * 7919 + (r if slot_keyed else 0) + int(offset[r])) % 2 ** 63)
        u[r], e[r] = torch.rand(n, generator=g, dtype=torch.float64), -torch.log(torch.rand(V, generator=g,
                                                                                          dtype=torch.float64))
    x, p, q = draft_token_ids.long(), target_probs.double(), draft_probs.double()
    qx, px = q.gather(2, x[..., None])[..., 0], p[:, :n].gather(2, x[..., None])[..., 0]
    j = ((qx > 0) & (u * qx <= px)).long().cumprod(1).sum(1)   # [R] accepted drafts: the first rejection's place
    rows = torch.arange(R)
    w = torch.cat([(p[:, :n] - q).clamp(min=0), p[:, n:]], 1)[rows, j]   # [R, V] the residual, or p after all n
    empty = (w.sum(1) == 0) & (j < n)
    w = torch.where(empty[:, None] & (stale_fallback is False), p[rows, j], w)
    stale = empty & (stale_fallback is not False)
    token = reference.race.winners(torch.where(stale[:, None], p[rows, j], w), e)
    if skip_bonus:
        token = torch.where(j == n, 0, token)
    # A stale row emits the last support id of the latest earlier row that sampled (0 before any).
    last = V - 1 - w.ne(0).flip(1).long().argmax(1)
    sampled = torch.where(~stale, rows, -1).cummax(0).values
    after = torch.where(sampled >= 0, last[sampled.clamp(min=0)], 0)
    before = torch.cat([torch.zeros(1, dtype=torch.long), after])[:R]
    if stale_fallback is not False:
        token = torch.where(stale, before if stale_fallback is True else torch.full_like(token, stale_fallback), token)
    out = torch.full((R, n + 1), -1, dtype=torch.long)
    out[:, :n] = torch.where(torch.arange(n) < j[:, None], x, -1)
    out[rows, j] = token
    emitted += j.to(emitted.dtype)
    return out.to(torch.int32), accepted, emitted


class CpuChain(FlashInferChain):
    """The adapter on the CPU around the stand-in kernel."""

    capabilities = replace(FlashInferChain.capabilities, devices=frozenset({"cpu"}))

    def __init__(self, **kwargs):
        super().__init__(kernel=lambda *a, **kw: fake_chain(*a, **kw, **kwargs))


PROFILE = replace(get_profile("ci"), examples=8, stat_copies=2_000)   # plumbing, not power
FALLBACK_PROFILE = replace(PROFILE, stat_copies=8_000)   # enough copies that some reject at the empty residual


@pytest.mark.parametrize("check,case", [("token_distribution", "dense_q"), ("acceptance_rate", "mixed_greedy"),
                                        ("token_distribution", "residual_fallback"),
                                        ("token_distribution", "filtered_target"), ("output_structure", "random"),
                                        ("zero_draft_layouts", "layouts")])
def test_flashinfer_adapter_plumbing_passes_with_a_correct_kernel(check, case):
    """Grouping by draft count, p' and one-hot targets, int32 ids, counters and scatter-back: with a correct
    kernel of FlashInfer's signature, the adapter passes the distribution and structure checks."""
    result = run_check(CpuChain(), check, case, PROFILE)
    assert result.status == PASS, result.line()


def test_flashinfer_adapter_plumbing_cannot_hide_a_wrong_bonus_token():
    """The same checks fail when the kernel's bonus token is wrong: the plumbing passes what it gets."""
    result = run_check(CpuChain(skip_bonus=True), "token_distribution", "dense_q", PROFILE)
    assert result.status == FAIL, result.line()


@pytest.mark.parametrize("check,stale,symptom", [
    ("token_distribution", True, "of probability 0 emitted (token, count): [(7, "),
    ("token_distribution", 2 ** 31 - 1, "emitted ids [2147483647] outside [0, 8)"),
    ("recovered_distribution", True, "of probability 0 emitted (token, count): [(7, ")],
    ids=["another-requests-id", "another-kernels-bits", "another-requests-id-among-rejections"])
def test_flashinfer_stale_fallback_is_the_declared_deviation_and_fails_undeclared(check, stale, symptom):
    """FlashInfer emits, at a residual zero everywhere, whatever its shared memory holds: the id another request's
    sample left there (V - 1, the bonus row's last id, of probability 0 at a draft position), or another kernel's
    bits (INT32_MAX on an H200). The statistical fallback case (8,000 copies, about 16 rejections) reports either
    as known, and the same kernel behind an adapter that declares nothing fails it with that symptom."""
    result = run_check(CpuChain(stale_fallback=stale), check, "residual_fallback", FALLBACK_PROFILE)
    assert result.status == KNOWN and result.deviation == STALE_FALLBACK, result.line()
    undeclared = CpuChain(stale_fallback=stale)
    undeclared.capabilities = replace(CpuChain.capabilities, deviations=())
    result = run_check(undeclared, check, "residual_fallback", FALLBACK_PROFILE)
    assert result.status == FAIL and symptom in result.message, result.line()


def test_flashinfer_adapter_batch_invariance_is_not_applicable_by_declaration():
    result = run_check(CpuChain(), "batch_invariance", "random", PROFILE)
    assert result.status == "n/a" and "seeded_batch_invariant" in result.message, result.line()


def test_flashinfer_adapter_names_the_missing_package():
    """Without FlashInfer installed the adapter says how to get it (this machine has none)."""
    pytest.importorskip("torch")
    try:
        import flashinfer  # noqa: F401, PLC0415
    except ImportError:
        pass
    else:
        pytest.skip("FlashInfer is installed here")
    batch = _batch(9).to("cpu")
    with pytest.raises(ImportError, match=r"specverify\[flashinfer\]"):
        replace_caps = type("CpuReal", (FlashInferChain,), {"capabilities": CpuChain.capabilities})
        replace_caps()(batch, seed=0)


def test_greedy_requests_get_one_hot_q_at_their_drafts_whatever_the_drafter():
    """With the one-hot target, a one-hot q at the draft makes the standard rule the greedy rule even
    where the drafter gave the draft q(x) = 0."""
    batch = _batch(10, greedy_fraction=0.5)
    q = conventions.draft_probs(batch)
    greedy_slot = torch.repeat_interleave(batch.temperature == 0, batch.num_draft_tokens)
    assert bool(greedy_slot.any()) and bool((~greedy_slot).any())
    assert torch.equal(q[greedy_slot].argmax(1), batch.draft_token_ids[greedy_slot])
    assert torch.equal(q[greedy_slot].sum(1), torch.ones(int(greedy_slot.sum())))
    assert torch.equal(q[~greedy_slot], batch.draft_probs[~greedy_slot].float())


def test_rows_of_is_a_view_for_consecutive_rows_and_a_gather_otherwise():
    """A uniform batch's one group takes every row in order: its rows are a view of the adapter's tensor (no 11 GB
    copy at int64_offsets' size); a group of some requests, or rows out of order, are gathered; both equal t[rows]."""
    t = torch.randn(12, 5)
    for rows in (torch.arange(12).view(4, 3), torch.arange(3, 9).view(2, 3), torch.tensor([[0, 1], [3, 4]]),
                 torch.tensor([[1, 0]]), torch.zeros(0, 2, dtype=torch.int64)):
        got = conventions.rows_of(t, rows)
        assert torch.equal(got, t[rows]) and got.shape == (*rows.shape, 5)
        consecutive = rows.numel() > 0 and bool((rows.flatten() == torch.arange(int(rows.flatten()[0]),
                                                     int(rows.flatten()[0]) + rows.numel())).all())
        assert (got.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()) == consecutive, rows
    batch = _batch(1)
    p = torch.randn(batch.target_logits.shape[0], 7)
    for g in conventions.split_by_draft_count(batch):
        assert torch.equal(conventions.rows_of(p, g.logit_rows), p[g.logit_rows])
