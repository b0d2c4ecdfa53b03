"""The vLLM adapters without vLLM: a stand-in ``vllm`` package (tests/vllm_stand_in.py), written into a temporary
directory and put on sys.path, has vLLM's module paths and the exact signatures the adapters call (vLLM
cf027b86af71; see specverify/adapters/vllm.py), and implements the documented semantics in plain
PyTorch, in our own words: V1's forward (the main Sampler called for the bonus, temperature with greedy
rows at 1, the greedy, random and synthetic walks, the residual race with 1 / Exp(1), a forced synthetic
rejection emitting the recovered token) and MRV2's rejection_sample (noise keyed by seed and position).
A change to an adapter that breaks the call, the metadata or the noise placement fails here, on the CPU."""

import functools
import importlib
import sys
from dataclasses import replace

import pytest
import torch

import reference
from reference import Noise, SpecBatch
from specverify.adapters import vllm as adapter
from specverify.adapters.vllm_mrv2 import VllmMrv2
from specverify.checks import FAIL, KNOWN, PASS, run_check
from specverify.strategies import get_profile
from vllm_stand_in import installed

PROFILE = replace(get_profile("ci"), examples=6, stat_copies=1_500, replicated_copies=60)   # plumbing, not power


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """The stand-in package on sys.path for this module's tests, and gone after them."""
    yield from installed(tmp_path_factory.mktemp("vllm_stand_in"))


@pytest.mark.parametrize("check,case", [("differential_injected", "standard"), ("differential_injected", "bulk"),
                                        ("acceptance_rate", "mixed_greedy"), ("zero_draft_layouts", "layouts"),
                                        ("batch_invariance", "random"), ("boundary_coins", "zero_mass_drafts")])
def test_v1_adapter_passes_on_a_correct_sampler(stand_in, check, case):
    """Metadata, the three kernel paths (all greedy, all random, mixed), the injected noise at the patch
    points, the bonus stand-in and vLLM's own seeded stream: the checks pass through the adapter. The boundary
    coins reach vLLM's float64 uniforms as given (2^-150 stays above 0 there)."""
    result = run_check(adapter.v1(), check, case, PROFILE)
    assert result.status == PASS, result.line()


def test_v1_metadata_is_the_model_runners_on_its_own_example(stand_in):
    """GPUModelRunner._calc_spec_decode_metadata's documented example (drafts [3, 0, 2, 0, 1]), and
    SamplingMetadata's greedy rows at 0.0 with all_greedy / all_random from the batch."""
    k = torch.tensor([3, 0, 2, 0, 1])
    batch = SpecBatch(num_draft_tokens=k, draft_token_ids=torch.tensor([5, 6, 7, 8, 9, 4]),
                      target_logits=torch.randn(11, 12), draft_probs=None,
                      temperature=torch.tensor([0.0, 0.7, 1.0, 0.0, 1.0]))
    spec, sampling = adapter.v1().metadata(batch, {})
    assert spec.num_draft_tokens == [3, 0, 2, 0, 1] and spec.max_spec_len == 3
    assert spec.cu_num_draft_tokens.tolist() == [3, 3, 5, 5, 6] and spec.cu_num_draft_tokens.dtype == torch.int32
    assert spec.cu_num_sampled_tokens.tolist() == [4, 5, 8, 9, 11]
    assert spec.target_logits_indices.tolist() == [0, 1, 2, 5, 6, 9]
    assert spec.bonus_logits_indices.tolist() == [3, 4, 7, 8, 10]
    assert spec.draft_token_ids.dtype == torch.int32 and spec.draft_token_ids.tolist() == [5, 6, 7, 8, 9, 4]
    assert sampling.temperature.tolist() == pytest.approx([0.0, 0.7, 1.0, 0.0, 1.0])
    assert not sampling.all_greedy and not sampling.all_random and sampling.no_penalties
    greedy = replace(batch, temperature=torch.zeros(5))
    _, sampling = adapter.v1().metadata(greedy, {})
    assert sampling.all_greedy and sampling.temperature is None


@pytest.mark.parametrize("check,case", [("differential_injected", "boundary"),
                                        ("token_distribution", "residual_fallback"),
                                        ("recovered_distribution", "residual_fallback")])
def test_v1_residual_without_fallback_is_the_declared_deviation_and_nothing_else(stand_in, check, case):
    """vLLM races an all-zero residual and emits token 0 where SPEC 3 samples p: the boundary case, whose examples
    reach that fallback, and the statistical fallback case (by vLLM's own seeds; 20,000 copies, about 40
    rejections) report it as known. The rest of each case still passes: with the same inputs and the fallback
    given back to the stand-in (its residual p where max(p - q, 0) is zero), the case passes."""
    profile = replace(PROFILE, stat_copies=20_000)
    result = run_check(adapter.v1(), check, case, profile)
    assert result.status == KNOWN and result.deviation == adapter.NO_FALLBACK, result.line()
    module = sys.modules["vllm.v1.sample.rejection_sampler"]
    original = module.recovered

    def with_fallback(out, cu, ids, draft_probs, target_probs, *args, **kwargs):
        if draft_probs is not None:
            empty = ~(target_probs > draft_probs).any(dim=1, keepdim=True)
            draft_probs = torch.where(empty, torch.zeros_like(draft_probs), draft_probs)
        return original(out, cu, ids, draft_probs, target_probs, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "sample_recovered_tokens_kernel", module.Kernel(with_fallback))
        result = run_check(adapter.v1(), check, case, profile)
    assert result.status == PASS, result.line()


def test_v1_synthetic_forced_rejection_is_the_declared_deviation(stand_in):
    """vLLM emits the recovered token at a forced synthetic rejection: reported as known, not passed. Twelve
    examples: a forced rejection whose two tokens differ is not in every draw (six met none, eight met one)."""
    result = run_check(adapter.v1(), "differential_injected", "synthetic", replace(PROFILE, examples=12))
    assert result.status == KNOWN and result.deviation == adapter.SYNTHETIC_RESIDUAL, result.line()


@pytest.mark.parametrize("bug,check,case,symptom", [
    ("DROP_DRAFT_PROBS", "differential_injected", "standard", "acceptance"),
    ("FLOAT32_UNIFORM", "differential_injected", "boundary", "acceptance"),
    ("FLOAT32_UNIFORM", "boundary_coins", "zero_mass_drafts", "every uniform at 0 (injected): request")])
def test_v1_adapter_cannot_hide_replanted_bugs(stand_in, monkeypatch, bug, check, case, symptom):
    """#40269 (q read as 1) and #23803 (float32 uniforms, so u = 0 accepts a draft of probability 0)
    re-planted in the stand-in: the injected differential check fails, and #23803 the boundary coins too. The
    noise goes in at the draws, so the dtype vLLM asks for is the one it gets."""
    monkeypatch.setattr(sys.modules["vllm.v1.sample.rejection_sampler"], bug, True)
    result = run_check(adapter.v1(), check, case, replace(PROFILE, shrink=False))
    assert result.status == FAIL and symptom in result.message, result.line()


@pytest.mark.parametrize("make", [adapter.v1, adapter.v1_fp64])
@pytest.mark.parametrize("temperature", [[1.0, 0.0, 0.7], [0.0, 0.0, 0.0], [1.0, 0.5, 0.7]])
def test_v1_injected_noise_reaches_vllm_and_the_patch_points_are_restored(stand_in, make, temperature):
    """Mixed, all-greedy and all-random batches (vLLM's three paths), float32 and float64 races: under
    injected noise the adapter's tokens are the reference's, and afterwards torch.rand and
    Tensor.exponential_ are torch's again."""
    before = torch.rand
    g = torch.Generator().manual_seed(3)
    batch = SpecBatch(num_draft_tokens=torch.tensor([2, 0, 3]), draft_token_ids=torch.tensor([1, 4, 2, 7, 0]),
                      target_logits=torch.randn(8, 16, generator=g),
                      draft_probs=torch.softmax(torch.randn(5, 16, generator=g), -1),
                      temperature=torch.tensor(temperature))
    noise = Noise.draw(batch, g)
    for kwargs in ({}, {"method": "synthetic", "synthetic_acceptance_rate": 1.0, "num_speculative_steps": 3}):
        got = make()(batch, noise=noise, **kwargs)
        want = reference.sample(batch, noise=noise, **kwargs)
        assert torch.equal(got.token_ids, want.token_ids) and torch.equal(got.num_accepted, want.num_accepted)
    assert torch.rand is before and "exponential_" not in vars(torch.Tensor)


def test_v1_names_an_injection_point_that_is_no_longer_reached(stand_in, monkeypatch):
    """A vLLM that stops drawing its exponentials with Tensor.exponential_: the call fails, naming the point,
    instead of comparing vLLM's own noise with the harness's."""
    module = sys.modules["vllm.v1.sample.rejection_sampler"]
    original = module.sample_recovered_tokens

    @functools.wraps(original)      # the same signature: only the way it draws changed
    def draws_otherwise(*args, **kwargs):
        with monkeypatch.context() as m:
            m.setattr(torch.Tensor, "exponential_", lambda self, *a, **k: self.fill_(1.0))
            return original(*args, **kwargs)
    monkeypatch.setattr(module, "sample_recovered_tokens", draws_otherwise)
    batch = SpecBatch(num_draft_tokens=torch.tensor([1]), draft_token_ids=torch.tensor([2]),
                      target_logits=torch.randn(2, 8), draft_probs=None, temperature=torch.tensor([1.0]))
    with pytest.raises(RuntimeError, match="never reached the patch point.*exponential_"):
        adapter.v1()(batch, noise=Noise.draw(batch, torch.Generator().manual_seed(0)))


def test_a_changed_vllm_signature_is_named(stand_in, monkeypatch):
    """A vLLM whose function takes other parameters fails on load, naming the function and both lists."""
    module = sys.modules["vllm.v1.sample.rejection_sampler"]
    monkeypatch.setattr(module, "sample_recovered_tokens", lambda max_spec_len, num_draft_tokens, device: None)
    with pytest.raises(ImportError, match=r"rejection_sampler\.sample_recovered_tokens takes \(max_spec_len, "
                                          r"num_draft_tokens, device\)"):
        adapter.v1().modules()
    monkeypatch.undo()
    monkeypatch.setattr(module, "MAX_SPEC_LEN", 64)
    with pytest.raises(ImportError, match="MAX_SPEC_LEN is 64"):
        adapter.v1().modules()


def test_without_vllm_the_error_says_where_to_put_it(monkeypatch):
    """No vllm importable (a None entry in sys.modules makes the import fail): the error says what to do."""
    for name in [n for n in sys.modules if n.split(".")[0] == "vllm"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"vLLM's source on sys.path"):
        adapter.v1().modules()


@pytest.mark.parametrize("check,case", [("token_distribution", "dense_q"), ("acceptance_rate", "mixed_greedy"),
                                        ("output_structure", "random"), ("batch_invariance", "random")])
def test_mrv2_adapter_passes_on_a_correct_sampler(stand_in, check, case):
    """State slots, positions, draft logits, the temperature step and the -1 padding after num_sampled."""
    result = run_check(VllmMrv2(), check, case, PROFILE)
    assert result.status == PASS, result.line()


def test_mrv2_differential_checks_are_not_applicable():
    """MRV2 draws its uniforms in the kernel from (seed, position): neither injected noise nor fixed coins reach
    them, so the differential checks and boundary_coins are n/a, saying why."""
    result = run_check(VllmMrv2(), "differential_injected", "standard", PROFILE)
    assert result.status == "n/a" and "injected" in result.message, result.line()
    result = run_check(VllmMrv2(), "boundary_coins", "zero_mass_drafts", PROFILE)
    assert result.status == "n/a" and "fixed coins" in result.message, result.line()


@pytest.fixture()
def cpu_worker(stand_in, monkeypatch):
    """The CPU wrappers' C++ ops taken as built (the stand-in wrappers compute in PyTorch)."""
    monkeypatch.setattr(adapter, "cpu_ops_built", lambda: True)
    wrappers = importlib.import_module("vllm.utils.cpu_triton_utils")
    wrappers.CALLS.clear()
    return wrappers


def test_v1_cpu_runs_vllms_cpu_wrappers_and_restores_the_kernels(cpu_worker):
    """The CPU entry swaps in the CPU worker's wrappers, as CPUModelRunner does, for the call only: the
    recovered tokens come from the wrapper, the answer is the reference's, and the sampler module's
    kernels are its own again afterwards."""
    module = sys.modules["vllm.v1.sample.rejection_sampler"]
    before = {name: getattr(module, name) for name in adapter.CPU_KERNELS}
    result = run_check(adapter.v1_cpu(), "differential_injected", "standard", PROFILE)
    assert result.status == PASS, result.line()
    assert "sample_recovered_tokens" in cpu_worker.CALLS
    assert {name: getattr(module, name) for name in adapter.CPU_KERNELS} == before


def test_v1_cpu_catches_a_wrapper_lagging_the_samplers_arguments(cpu_worker, monkeypatch):
    """Seed 003 (#41932) and the same class at cf027b86af71: a CPU wrapper that lacks a keyword the
    sampler passes (USE_FP64_GUMBEL) fails the check with a TypeError naming the wrapper."""
    monkeypatch.setattr(cpu_worker, "sample_recovered_tokens_kernel", cpu_worker._FuncWrapper(cpu_worker.lagging_impl))
    result = run_check(adapter.v1_cpu(), "differential_injected", "standard", PROFILE)
    assert result.status == FAIL, result.line()
    assert "cpu_triton_utils.sample_recovered_tokens_kernel" in result.message
    assert "USE_FP64_GUMBEL" in result.message


def test_v1_cpu_without_a_cpu_build_says_what_it_needs(stand_in, monkeypatch):
    """No C++ ops and no interpreter: the entry cannot compute, and says so instead of failing obscurely."""
    monkeypatch.setattr(adapter, "cpu_ops_built", lambda: False)
    monkeypatch.setattr(adapter, "INTERPRETED", False)
    batch = SpecBatch(num_draft_tokens=torch.tensor([1]), draft_token_ids=torch.tensor([2]),
                      target_logits=torch.zeros(2, 8), draft_probs=None, temperature=torch.ones(1))
    with pytest.raises(RuntimeError, match="not built for the CPU.*TRITON_INTERPRET=1"):
        adapter.v1_cpu()(batch, noise=Noise.draw(batch, torch.Generator().manual_seed(0)))


@pytest.fixture
def shrunk_offsets(monkeypatch):
    """int64_offsets at V = 64 on the CPU, the 2^31 case's limit at 2^13 elements (tests/shrunk_offsets.py)."""
    from specverify.checks import offsets
    from shrunk_offsets import shrink
    return offsets, shrink(monkeypatch, PROFILE)


def _faulting_past(limit, fn):
    """``fn`` (its signature kept) raising as vLLM's launches do on an H200 once its first [rows, V] tensor
    argument holds more than ``limit()`` elements."""
    @functools.wraps(fn)
    def launch(*args, **kwargs):
        rows = next(a for a in args if isinstance(a, torch.Tensor) and a.dim() == 2)
        if rows.numel() > limit():
            raise RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered")
        return fn(*args, **kwargs)
    return launch


def test_v1_rows_past_2_31_fault_as_the_declared_deviation_and_only_after_the_control(stand_in, shrunk_offsets):
    """vLLM's sample_recovered_tokens faults on an H200 once target_probs' draft rows pass 2^31 elements
    (docs/kernels.md): the stand-in's recovered-token launch faulting past the shrunk limit is reported as the
    declared deviation; one that faults under the limit too fails, since the control's failure is another defect;
    the stand-in without the fault passes."""
    offsets, profile = shrunk_offsets
    module = sys.modules["vllm.v1.sample.rejection_sampler"]
    original = module.recovered
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "sample_recovered_tokens_kernel",
                      module.Kernel(_faulting_past(lambda: offsets.PAST["rows_past_2_31"], original)))
        result = run_check(adapter.v1(), "int64_offsets", "rows_past_2_31", profile, reproducer=False)
    assert result.status == KNOWN and result.deviation == adapter.INT32_ROWS, result.line()
    with pytest.MonkeyPatch.context() as patch:   # the 2^32 case: its control, past 2^31, meets the same fault
        patch.setattr(module, "sample_recovered_tokens_kernel",
                      module.Kernel(_faulting_past(lambda: offsets.PAST["rows_past_2_31"], original)))
        result = run_check(adapter.v1(), "int64_offsets", "rows_past_2_32", profile, reproducer=False)
    assert result.status == KNOWN and result.deviation == adapter.INT32_ROWS, result.line()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "sample_recovered_tokens_kernel",
                      module.Kernel(_faulting_past(lambda: offsets.PAST["rows_past_2_31"] // 4, original)))
        result = run_check(adapter.v1(), "int64_offsets", "rows_past_2_31", profile, reproducer=False)
    assert result.status == FAIL and result.message.startswith("the control fails"), result.line()
    assert run_check(adapter.v1(), "int64_offsets", "rows_past_2_31", profile).status == PASS


def test_mrv2_rows_past_2_31_fault_as_the_declared_deviation(stand_in, shrunk_offsets):
    """MRV2's first launch faults on an H200 once the logits' rows pass 2^31 elements (docs/kernels.md): reported
    as its declared deviation; the stand-in without the fault passes, so the deviation is the fault's alone."""
    offsets, profile = shrunk_offsets
    module = sys.modules["vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "rejection_sample", _faulting_past(lambda: offsets.PAST["rows_past_2_31"], module.rejection_sample))
        result = run_check(VllmMrv2(), "int64_offsets", "rows_past_2_31", profile, reproducer=False)
    assert result.status == KNOWN, result.line()
    assert result.deviation == importlib.import_module("specverify.adapters.vllm_mrv2").INT32_ROWS
    result = run_check(VllmMrv2(), "int64_offsets", "rows_past_2_31", profile)
    assert result.status == PASS, result.line()


def test_v1_replicated_excuses_the_fallback_under_any_rule_and_the_race_only_under_synthetic():
    """On CUDA at the ci profile the replicated case's standard-rule examples meet the empty residual (9
    divergences, docs/kernels.md): the declared fallback excuses them whatever the rule; an exponential race's
    divergence under the standard rule stays a failure."""
    from specverify.checks.deviations import matching
    declared = [d for d in adapter.v1().capabilities.deviations if d.covers("differential_injected", "replicated")]
    fallback = ("request 3119, position 2: expected [2, 4, 6], got [2, 4, 0] (REAL: residual fallback to p "
                "(max(p - q, 0) is zero everywhere) margin 0.357, l / T's rounding allows 1.94e-07 more)")
    race = "request 0, position 2: expected [0, 3, 1], got [0, 3, 0] (REAL: exponential race margin 0.0916)"
    assert matching(fallback, declared, method="standard").reason == adapter.NO_FALLBACK
    assert matching(race, declared, method="synthetic").reason == adapter.SYNTHETIC_RESIDUAL
    assert matching(race, declared, method="standard") is None
