"""The stand-in ``vllm`` package of tests/test_vllm_adapter.py: vLLM's module paths and the exact signatures the
adapters call (vLLM cf027b86af71; see specverify/adapters/vllm.py), with the documented semantics in plain
PyTorch, in our own words, as module sources that ``installed`` writes into a directory and puts on sys.path.

    STAND_IN                 {path under the package root: module source}
    installed(root)          a generator: writes the package under root, imports it in place of any vllm, yields
                             root, then removes it and restores what was imported before
"""

import importlib
import sys
import textwrap

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
    n = torch.tensor(num_draft_tokens, dtype=torch.long)
    t = torch.arange(draft_token_ids.shape[0])
    start = torch.cumsum(n, 0) - n                             # each request's first draft token
    row = torch.repeat_interleave(torch.arange(B), n)          # each draft token's request
    j = t - start[row]                                         # and its place in the request
    x, greedy = draft_token_ids.long(), torch.tensor(greedy, dtype=torch.bool)[row]
    if synthetic_mode:
        ok = u < synthetic_conditional_rates[j]
    else:
        ok = x == argmax
        if u is not None:
            q = torch.ones(t.shape, dtype=torch.float64) if draft_probs is None or DROP_DRAFT_PROBS else \
                draft_probs[t, x].double()
            ok = torch.where(greedy, ok, (q > 0) & (probs[t, x].double() / q >= u.double()))
    replacement = argmax if recovered is None else torch.where(greedy, argmax, recovered.long())
    passed = torch.ones(B, max_spec_len + 1, dtype=torch.bool)
    passed[row, j] = ok
    kept = passed.long().cumprod(1).sum(1).clamp(max=n)         # drafts before the first rejection
    before = j < kept[row]
    out[row[before], j[before]] = x[before].to(out.dtype)
    rejected = torch.nonzero(kept < n)[:, 0]
    out[rejected, kept[rejected]] = replacement[(start + kept)[rejected]].to(out.dtype)
    done = torch.nonzero(kept == n)[:, 0]
    out[done, n[done]] = bonus_token_ids.reshape(B)[done].to(out.dtype)
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
    cu = cu_num_draft_tokens.long()
    row = torch.repeat_interleave(torch.arange(cu.shape[0]), torch.diff(cu, prepend=cu.new_zeros(1)))
    T = row.shape[0]
    if NO_DRAFT_PROBS:
        w = target_probs[:T].clone()
        w[torch.arange(T), draft_token_ids[:T].long()] = 0.0
    else:
        w = (target_probs[:T] - draft_probs[:T]).clamp(min=0.0)
    out[:T] = (w * inv_q[row]).argmax(-1).to(out.dtype)


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


def installed(root):
    """Write the stand-in package under ``root`` and put it on sys.path in place of any imported vllm; yield
    root; then take it off and restore the modules it displaced (a fixture's body)."""
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
