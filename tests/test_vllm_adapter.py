"""The vLLM adapters without vLLM: a stand-in ``vllm`` package, written here into a temporary directory
and put on sys.path, has vLLM's module paths and the exact signatures the adapters call (vLLM
cf027b86af71; see specverify/adapters/vllm.py), and implements the documented semantics in plain
PyTorch, in our own words: V1's forward (the main Sampler called for the bonus, temperature with greedy
rows at 1, the greedy, random and synthetic walks, the residual race with 1 / Exp(1), a forced synthetic
rejection emitting the recovered token) and MRV2's rejection_sample (noise keyed by seed and position).
A change to an adapter that breaks the call, the metadata or the noise placement fails here, on the CPU."""

import functools
import importlib
import sys
import textwrap
from dataclasses import replace

import pytest
import torch

import reference
from reference import Noise, SpecBatch
from specverify.adapters import vllm as adapter
from specverify.adapters.vllm_mrv2 import VllmMrv2
from specverify.checks import FAIL, KNOWN, PASS, run_check
from specverify.strategies import get_profile

V1_SAMPLER = '''
import dataclasses
import torch
from vllm.v1.spec_decode.utils import unconditional_to_conditional_rates

MAX_SPEC_LEN = 128
PLACEHOLDER_TOKEN_ID = -1
DROP_DRAFT_PROBS = False       # a re-planted bug (#40269): the random walk reads q as 1
FLOAT32_UNIFORM = False        # a re-planted bug (#23803): uniforms drawn in float32 can be exactly 0


class RejectionSampler(torch.nn.Module):
    def __init__(self, sampler, spec_config=None, device=None):
        super().__init__()
        self.sampler = sampler
        self.use_fp64_gumbel = getattr(sampler, "use_fp64_gumbel", False)
        self.rates = None
        if spec_config is not None and spec_config.rejection_sample_method == "synthetic":
            self.rates = torch.tensor(unconditional_to_conditional_rates(spec_config.synthetic_acceptance_rates),
                                      dtype=torch.float32, device=device)

    def forward(self, metadata, draft_probs, logits, sampling_metadata):
        assert metadata.max_spec_len <= MAX_SPEC_LEN
        bonus = self.sampler(logits=logits[metadata.bonus_logits_indices],
                             sampling_metadata=dataclasses.replace(sampling_metadata, max_num_logprobs=-1),
                             predict_bonus_token=True, logprobs_mode_override="raw_logits").sampled_token_ids
        target = logits[metadata.target_logits_indices].to(torch.float32)
        if not sampling_metadata.all_greedy:
            per_row = torch.repeat_interleave(sampling_metadata.temperature,
                                              torch.tensor(metadata.num_draft_tokens, device=target.device))
            target = target / torch.where(per_row == 0, torch.ones_like(per_row), per_row)[:, None]
        out = rejection_sample(metadata.draft_token_ids, metadata.num_draft_tokens, metadata.max_spec_len,
                               metadata.cu_num_draft_tokens, draft_probs, target, bonus, sampling_metadata,
                               synthetic_mode=self.rates is not None, synthetic_conditional_rates=self.rates,
                               use_fp64_gumbel=self.use_fp64_gumbel)
        return type("SamplerOutput", (), {"sampled_token_ids": out, "logprobs_tensors": None})()


def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                     target_logits, bonus_token_ids, sampling_metadata, synthetic_mode=False,
                     synthetic_conditional_rates=None, use_fp64_gumbel=False):
    B = len(num_draft_tokens)
    out = torch.full((B, max_spec_len + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int32)
    meta = sampling_metadata
    greedy = [True] * B if meta.all_greedy else (meta.temperature == 0).tolist()
    u = None
    if synthetic_mode or not meta.all_greedy:
        u = generate_uniform_probs(draft_token_ids.shape[0], num_draft_tokens, meta.generators, target_logits.device)
    argmax = target_logits.argmax(dim=-1)
    probs = target_logits.softmax(dim=-1, dtype=torch.float32)
    recovered = None
    if not meta.all_greedy:
        recovered = sample_recovered_tokens(max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
                                            draft_probs, probs, meta, target_logits.device, use_fp64_gumbel)
    start = 0
    for b, n in enumerate(num_draft_tokens):
        rejected = False
        for j in range(n):
            t, x = start + j, int(draft_token_ids[start + j])
            if synthetic_mode:
                ok = bool(u[t] < synthetic_conditional_rates[j])
            elif greedy[b]:
                ok = x == int(argmax[t])
            else:
                q = 1.0 if draft_probs is None or DROP_DRAFT_PROBS else float(draft_probs[t, x])
                ok = q > 0 and float(probs[t, x]) / q >= float(u[t])
            out[b, j] = x if ok else int(argmax[t] if greedy[b] else recovered[t])
            if not ok:
                rejected = True
                break
        if not rejected:
            out[b, n] = int(bonus_token_ids[b])
        start += n
    return out


def generate_uniform_probs(num_tokens, num_draft_tokens, generators, device):
    u = torch.rand((num_tokens,), dtype=torch.float32 if FLOAT32_UNIFORM else torch.float64, device=device)
    start = 0
    for b, n in enumerate(num_draft_tokens):
        if n and b in generators:
            u[start:start + n].uniform_(generator=generators[b])
        start += n
    return u


def sample_recovered_tokens(max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids, draft_probs,
                            target_probs, sampling_metadata, device, use_fp64_gumbel=False):
    B, V = len(num_draft_tokens), target_probs.shape[-1]
    e = torch.empty((B, V), dtype=torch.float64 if use_fp64_gumbel else torch.float32, device=device)
    e.exponential_()
    for b, g in sampling_metadata.generators.items():
        if num_draft_tokens[b] > 0:
            e[b].exponential_(generator=g)
    inv = e.reciprocal()
    out = torch.empty_like(draft_token_ids)
    sample_recovered_tokens_kernel[(B, max_spec_len)](out, cu_num_draft_tokens, draft_token_ids, draft_probs,
                                                      target_probs, inv, V, 8192, NO_DRAFT_PROBS=draft_probs is None,
                                                      USE_FP64_GUMBEL=use_fp64_gumbel)
    return out


def recovered(out, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q, vocab_size,
              BLOCK_SIZE, NO_DRAFT_PROBS=False, USE_FP64_GUMBEL=False):
    start = 0
    for b, end in enumerate(cu_num_draft_tokens.tolist()):
        for t in range(start, end):
            if NO_DRAFT_PROBS:
                w = target_probs[t].clone()
                w[int(draft_token_ids[t])] = 0.0
            else:
                w = (target_probs[t] - draft_probs[t]).clamp(min=0.0)
            out[t] = int((w * inv_q[b]).argmax())
        start = end


class Kernel:                    # launched as a Triton kernel is: kernel[grid](*args, **kwargs)
    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, grid):
        return self.fn


def not_launched(*args, **kwargs):
    raise AssertionError("the stand-in walks in PyTorch: only the recovered-token kernel is launched")


sample_recovered_tokens_kernel = Kernel(recovered)
rejection_greedy_sample_kernel = rejection_random_sample_kernel = expand_kernel = Kernel(not_launched)
'''

METADATA = '''
from dataclasses import dataclass
import torch

@dataclass
class SpecDecodeMetadata:
    draft_token_ids: torch.Tensor
    num_draft_tokens: list
    cu_num_draft_tokens: torch.Tensor
    cu_num_sampled_tokens: torch.Tensor
    target_logits_indices: torch.Tensor
    bonus_logits_indices: torch.Tensor
    logits_indices: torch.Tensor

    def __post_init__(self):
        self.max_spec_len = max(self.num_draft_tokens)
'''

SAMPLING_METADATA = '''
from dataclasses import dataclass
import torch
from vllm.v1.sample.logits_processor import LogitsProcessors

@dataclass
class SamplingMetadata:
    temperature: object
    all_greedy: bool
    all_random: bool
    top_p: object
    top_k: object
    generators: dict
    max_num_logprobs: object
    no_penalties: bool
    prompt_token_ids: object
    frequency_penalties: torch.Tensor
    presence_penalties: torch.Tensor
    repetition_penalties: torch.Tensor
    output_token_ids: list
    allowed_token_ids_mask: object
    bad_words_token_ids: dict
    logitsprocs: LogitsProcessors
    logprob_token_ids: object = None
    spec_token_ids: object = None
    thinking_budget_state_holder: object = None
'''

MRV2_UTILS = '''
import torch


def _draw(seed, pos, salt, shape):
    g = torch.Generator().manual_seed((int(seed) * 1000003 + int(pos) * 7919 + salt) % 2 ** 63)
    return torch.rand(shape, generator=g, dtype=torch.float64).clamp(min=2.2250738585072014e-308)


def rejection_sample(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                     expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps,
                     synthetic_conditional_rates=None, use_fp64=False):
    B, V = cu_num_logits.shape[0] - 1, target_logits.shape[-1]
    sampled = torch.full((B, num_speculative_steps + 1), 12345, dtype=torch.int64)   # unwritten: garbage
    num_sampled = torch.zeros(B, dtype=torch.int32)
    for b in range(B):
        s, e = int(cu_num_logits[b]), int(cu_num_logits[b + 1])
        state = int(idx_mapping[b])
        greedy, sd = float(temperature[state]) == 0.0, int(seed[state])
        i, stop = 0, None
        while i < e - s - 1 and stop is None:
            t, x = s + i, int(draft_sampled[s + i + 1])
            p = target_logits[t].double().softmax(-1)
            if greedy and synthetic_conditional_rates is None:
                ok = x == int(target_logits[t].argmax())
            else:
                u = float(_draw(sd, pos[t], 0, ()))
                if synthetic_conditional_rates is not None:
                    ok = u < float(synthetic_conditional_rates[i])
                else:
                    q = 1.0 if draft_logits is None else float(draft_logits[state, i].double().softmax(-1)[x])
                    ok = float(p[x]) > u * q
            if ok:
                sampled[b, i] = x
                i += 1
            else:
                stop = i
        t = s + i
        p = target_logits[t].double().softmax(-1)
        if greedy:
            token = int(target_logits[t].argmax())
        else:
            if stop is not None and draft_logits is not None:
                w = (p - draft_logits[state, i].double().softmax(-1)).clamp(min=0)
            elif stop is not None:
                w = p.clone()
                w[int(draft_sampled[t + 1])] = 0.0
            else:
                w = p
            token = int((w.log() - (-_draw(sd, pos[t], 1, (V,)).log()).log()).argmax())
        sampled[b, i] = token
        num_sampled[b] = i + 1
    return sampled, num_sampled
'''

GUMBEL = '''
def apply_temperature(logits, expanded_idx_mapping, temperature):
    for row in range(logits.shape[0]):
        t = float(temperature[int(expanded_idx_mapping[row])])
        if t not in (0.0, 1.0):
            logits[row] = logits[row] / t
'''

SPEC_UTILS = '''
def unconditional_to_conditional_rates(rates):
    return [r / prev if prev > 0.0 else 0.0 for r, prev in zip(rates, [1.0, *rates[:-1]])]
'''

LOGITS_PROCESSORS = '''
class LogitsProcessors:
    def __init__(self, logitsprocs=None):
        self.argmax_invariant, self.non_argmax_invariant = [], []
'''

CPU_WRAPPERS = '''
from vllm.v1.sample.rejection_sampler import not_launched, recovered

CALLS = []


class _FuncWrapper:
    def __init__(self, func):
        self.func = func

    def __getitem__(self, *args, **kwargs):
        return self.func


def sample_recovered_impl(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q,
                          vocab_size, BLOCK_SIZE=None, NO_DRAFT_PROBS=False, USE_FP64_GUMBEL=False):
    CALLS.append("sample_recovered_tokens")      # stands in for the C++ op
    recovered(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q,
              vocab_size, BLOCK_SIZE, NO_DRAFT_PROBS)


def lagging_impl(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q,
                 vocab_size, BLOCK_SIZE=None, NO_DRAFT_PROBS=False):
    raise AssertionError("never reached: the call does not bind")


sample_recovered_tokens_kernel = _FuncWrapper(sample_recovered_impl)
rejection_greedy_sample_kernel = rejection_random_sample_kernel = expand_kernel = _FuncWrapper(not_launched)
'''

STAND_IN = {
    "vllm/utils/cpu_triton_utils.py": CPU_WRAPPERS,
    "vllm/v1/sample/rejection_sampler.py": V1_SAMPLER,
    "vllm/v1/spec_decode/metadata.py": METADATA,
    "vllm/v1/sample/metadata.py": SAMPLING_METADATA,
    "vllm/v1/sample/logits_processor/__init__.py": LOGITS_PROCESSORS,
    "vllm/v1/spec_decode/utils.py": SPEC_UTILS,
    "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py": MRV2_UTILS,
    "vllm/v1/worker/gpu/sample/gumbel.py": GUMBEL,
}
PROFILE = replace(get_profile("ci"), examples=6, stat_copies=1_500, replicated_copies=60)   # plumbing, not power


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """The stand-in package on sys.path for this module's tests, and gone after them."""
    root = tmp_path_factory.mktemp("vllm_stand_in")
    for path, text in STAND_IN.items():
        file = root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(textwrap.dedent(text))
    for directory in {p.parent for p in root.rglob("*.py")} | {root / "vllm"}:
        (directory / "__init__.py").touch()
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if name.split(".")[0] == "vllm"}
    sys.path.insert(0, str(root))
    for name in ("vllm.v1.sample.rejection_sampler", "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils"):
        importlib.import_module(name)      # whichever test a worker runs first finds them loaded
    yield root
    sys.path.remove(str(root))
    for name in [n for n in sys.modules if n.split(".")[0] == "vllm"]:
        del sys.modules[name]
    sys.modules.update(saved)


@pytest.mark.parametrize("check,case", [("differential_injected", "standard"), ("differential_injected", "bulk"),
                                        ("differential_injected", "boundary"),
                                        ("acceptance_rate", "mixed_greedy"), ("zero_draft_layouts", "layouts"),
                                        ("batch_invariance", "random")])
def test_v1_adapter_passes_on_a_correct_sampler(stand_in, check, case):
    """Metadata, the three kernel paths (all greedy, all random, mixed), the injected noise at the patch
    points, the bonus stand-in and vLLM's own seeded stream: the checks pass through the adapter."""
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


def test_v1_synthetic_forced_rejection_is_the_declared_deviation(stand_in):
    """vLLM emits the recovered token at a forced synthetic rejection: reported as known, not passed."""
    result = run_check(adapter.v1(), "differential_injected", "synthetic", PROFILE)
    assert result.status == KNOWN and result.deviation == adapter.SYNTHETIC_RESIDUAL, result.line()


@pytest.mark.parametrize("bug,case", [("DROP_DRAFT_PROBS", "standard"), ("FLOAT32_UNIFORM", "boundary")])
def test_v1_adapter_cannot_hide_replanted_bugs(stand_in, monkeypatch, bug, case):
    """#40269 (q read as 1) and #23803 (float32 uniforms, so u = 0 accepts a draft of probability 0)
    re-planted in the stand-in: the injected differential check fails. The noise goes in at the draws,
    so the dtype vLLM asks for is the one it gets."""
    monkeypatch.setattr(sys.modules["vllm.v1.sample.rejection_sampler"], bug, True)
    result = run_check(adapter.v1(), "differential_injected", case, replace(PROFILE, shrink=False))
    assert result.status == FAIL and "acceptance" in result.message, result.line()


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
    result = run_check(VllmMrv2(), "differential_injected", "standard", PROFILE)
    assert result.status == "n/a" and "injected" in result.message, result.line()


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
