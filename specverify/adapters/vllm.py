"""vLLM's V1 rejection sampler (``vllm.v1.sample.rejection_sampler.RejectionSampler``) behind specverify's
convention; MRV2's sampler is in ``specverify.adapters.vllm_mrv2``.

    PYTHONPATH=/path/to/vllm specverify check specverify.adapters.vllm:v1

vLLM is imported from ``sys.path`` on the first call (a vLLM checkout, or an installed vLLM), never at
import. Written against vLLM cf027b86af71251a8e937a56751636686b4429e4 (2026-06-13, the cyyever/vllm fork
of vllm-project/vllm); the newest commit read, b221cf7c404ed02ad1e90a46471aa340576c67dd (2026-06-14), has
the same sampler files. Every vLLM function the adapter calls or patches is checked against the
parameters it has there: a vLLM whose names or signatures differ fails with an ImportError naming the
function, its parameters, and the ones expected, never with a TypeError deep in a call.

What the adapter does, as vLLM's model runner does it (``GPUModelRunner._calc_spec_decode_metadata`` and
``InputBatch._make_sampling_metadata``):

- ``SpecDecodeMetadata``: int32 drafts, cumulative draft and sampled counts, the draft rows as
  ``target_logits_indices`` and the last row of each request as ``bonus_logits_indices``; the logits
  tensor is the batch's ``target_logits`` [T + B, V] as it is (any dtype: vLLM casts to float32).
- ``SamplingMetadata``: greedy requests at temperature 0.0, ``temperature=None`` when all are greedy,
  ``all_greedy``/``all_random`` from the batch (all three kernel paths are reached), no penalties, no
  logprobs, no filters (top-k/top-p are applied by ``apply_top_k_top_p``, outside the sampler files
  checked here: ``target_filters`` is not declared).
- The bonus token comes from vLLM's main Sampler, outside the rejection sampler. A stand-in with the
  Sampler's call samples it by the reference's law (``conventions.bonus_tokens``) from the bonus logits
  vLLM hands it: ``bonus_sampled_by_caller``. Seeded calls draw its exponentials from the request's own
  ``torch.Generator`` first, as vLLM's Sampler does before the rejection sampler draws.
- Injected noise goes in at the draws named in ``PATCH_POINTS``, so that vLLM's own functions run
  unchanged around them: the ``torch.rand`` of ``generate_uniform_probs`` returns the harness's
  uniforms in the dtype vLLM asks for (float64 at this commit: a regression to float32 rounds the
  boundary case's 2^-150 to 0 and shows), and the fill of ``sample_recovered_tokens``' [B, V] buffer
  (``q.exponential_()``) copies the harness's exponentials. Every injected call checks that each
  point it needed was reached. Seeded calls give
  every request a ``torch.Generator`` seeded with its seed: vLLM's own stream, checked statistically;
  each request draws only from its own generator, so the stream is batch invariant.
- ``MAX_SPEC_LEN`` (128) is ``max_draft``. Synthetic mode: the harness's rate becomes the per-position
  unconditional rates ``synthetic_acceptance_rates`` of vLLM's ``SpeculativeConfig`` (validated by its
  own resolver when ``vllm.config`` imports), one sampler per setting.
- ``num_accepted``: the emitted count less one (vLLM pads with -1 and its model runner counts so).
- A batch with no drafts at all never reaches the rejection sampler in vLLM (the main Sampler runs
  alone); the adapter does the same. An empty batch is never sampled: ``empty_batches=False``.

``v1_cpu`` runs the same sampler as vLLM's CPU worker does: ``CPUModelRunner`` swaps the sampler's
Triton kernels for the wrappers of its C++ ops (``CPU_KERNELS``), and the entry swaps the same ones for
each call, binding every launch to the wrapper's signature first (``CpuKernel``).

Known and declared: at a rejection forced by the synthetic rule, vLLM emits its recovered token (a
sample of the residual max(p - q, 0)) where SPEC 3 emits a sample of p; where the residual is empty it
emits token 0; past 8,192 draft rows at V = 262,144 its row offsets wrap in 32 bits (docs/kernels.md).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
from contextlib import ExitStack
from types import SimpleNamespace

import torch

from reference import Noise, SpecBatch, SpecOutput
from specverify.adapters import conventions
from specverify.backends import ALL_LOGIT_DTYPES, Backend, Capabilities, Deviation
from specverify.checks.deviations import MethodDeviation

COMMIT = "cf027b86af71251a8e937a56751636686b4429e4"
# vLLM's samplers are Triton kernels: CPU tensors only under the Triton interpreter (set before import)
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
DEVICES = frozenset({"cpu", "cuda"}) if INTERPRETED else frozenset({"cuda"})
SAMPLER = "vllm.v1.sample.rejection_sampler"
MAX_SPEC_LEN = 128          # vllm.v1.sample.rejection_sampler.MAX_SPEC_LEN at COMMIT; checked on load

# (module, attribute) -> the parameters it has at COMMIT. Checked on first use.
SIGNATURES = {
    (SAMPLER, "RejectionSampler.__init__"): ("self", "sampler", "spec_config", "device"),
    (SAMPLER, "RejectionSampler.forward"): ("self", "metadata", "draft_probs", "logits", "sampling_metadata"),
    (SAMPLER, "rejection_sample"): ("draft_token_ids", "num_draft_tokens", "max_spec_len", "cu_num_draft_tokens",
                                    "draft_probs", "target_logits", "bonus_token_ids", "sampling_metadata",
                                    "synthetic_mode", "synthetic_conditional_rates", "use_fp64_gumbel"),
    (SAMPLER, "generate_uniform_probs"): ("num_tokens", "num_draft_tokens", "generators", "device"),
    (SAMPLER, "sample_recovered_tokens"): ("max_spec_len", "num_draft_tokens", "cu_num_draft_tokens",
                                           "draft_token_ids", "draft_probs", "target_probs", "sampling_metadata",
                                           "device", "use_fp64_gumbel"),
}
DATACLASS_FIELDS = {
    ("vllm.v1.spec_decode.metadata", "SpecDecodeMetadata"): (
        "draft_token_ids", "num_draft_tokens", "cu_num_draft_tokens", "cu_num_sampled_tokens",
        "target_logits_indices", "bonus_logits_indices", "logits_indices"),
    ("vllm.v1.sample.metadata", "SamplingMetadata"): (
        "temperature", "all_greedy", "all_random", "top_p", "top_k", "generators", "max_num_logprobs",
        "no_penalties", "prompt_token_ids", "frequency_penalties", "presence_penalties", "repetition_penalties",
        "output_token_ids", "allowed_token_ids_mask", "bad_words_token_ids", "logitsprocs"),
}
# Where injected noise enters vLLM, in one place: (owner, attribute) replaced for the call.
PATCH_POINTS = {
    "uniform": ("torch", "rand"),                        # the draw of generate_uniform_probs' [T] uniforms
    "exponential": ("torch.Tensor", "exponential_"),     # the fill of sample_recovered_tokens' [B, V] buffer
}

SYNTHETIC_RESIDUAL = "at a synthetic forced rejection vLLM emits the residual's sample; SPEC 3 samples p"
SYNTHETIC_LAW = r"token distribution differs from the exact one|of probability 0 emitted"
# the same behaviour seen by a structural check: where q = p the residual is empty, and its sample has p = 0
SYNTHETIC_SUPPORT = r"extra token \d+ at position \d+ has probability 0"
NO_FALLBACK = ("real defect: where max(p - q, 0) is zero everywhere (p == q up to rounding: a rejection only rounding "
               "allows, as when the drafter is the target model), sample_recovered_tokens_kernel's scores are all 0 "
               "and it keeps the first index, so token 0 is emitted whatever p(0); SPEC 3 samples p: docs/kernels.md")
INT32_ROWS = ("real defect: sample_recovered_tokens_kernel and rejection_random_sample_kernel address target_probs' "
              "rows as (start_idx + pos) * vocab_size, start_idx an int32 of cu_num_draft_tokens: past 2^31 elements "
              "(8,192 draft rows at V = 262,144) the offset wraps, and the launch faults on an H200: docs/kernels.md")
# a wrapped read faults, or lands in another tensor and emits another request's ids; either only after the control
# under 2^31 elements passed (a failure of the control is another defect, and fails)
PAST_THE_CONTROL = (r"(an illegal memory access was encountered|emitted ids of another request's rows).*"
                    r"; the control passed first")
# the 2^32 case's control lies past 2^31 elements: there the same defect fails the control
IN_THE_2_32_CONTROL = (r"^the control fails, so something other than passing [\d,]+ elements does: .*"
                       r"(an illegal memory access was encountered|emitted ids of another request's rows)")
DEVIATIONS = (
    Deviation("differential_injected", "boundary", NO_FALLBACK, r"REAL: residual fallback to p"),
    Deviation("int64_offsets", "rows_past_2_31", INT32_ROWS, PAST_THE_CONTROL),
    Deviation("int64_offsets", "rows_past_2_32", INT32_ROWS, IN_THE_2_32_CONTROL),
    # the same defect by seeds: every rejection of residual_fallback empties the residual, and p(0) = 0 there
    *(Deviation(check, "residual_fallback", NO_FALLBACK,
                r"of probability 0 emitted \(token, count\): \[\(0, \d+\)\]$")
      for check in ("token_distribution", "recovered_distribution")),
    # the synthetic-only cases: every call is synthetic, so the case scopes them
    Deviation("differential_injected", "synthetic", SYNTHETIC_RESIDUAL, r"REAL: exponential race"),
    Deviation("token_distribution", "synthetic_rate", SYNTHETIC_RESIDUAL, SYNTHETIC_LAW),
    # replicated runs every rule: only the synthetic calls' divergences are excused, and the empty residual's
    # fallback wherever its examples meet one (on CUDA at the ci profile: 9 of its divergences)
    MethodDeviation("differential_injected", "replicated", SYNTHETIC_RESIDUAL, r"REAL: exponential race",
                    method="synthetic"),
    Deviation("differential_injected", "replicated", NO_FALLBACK, r"REAL: residual fallback to p"),
    # only where a profile's examples meet a synthetic rejection with q = p (the nightly's, on MRV2)
    MethodDeviation("output_structure", "random", SYNTHETIC_RESIDUAL, SYNTHETIC_SUPPORT, method="synthetic",
                    intermittent=True),
)


def load_module(name: str, what: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ImportError(f"the vLLM adapter ({what}) needs vLLM's source on sys.path (a checkout at "
                          f"{COMMIT[:12]} or later, e.g. PYTHONPATH=/path/to/vllm): import {name} failed: {e}") from e


def resolve(module, dotted: str):
    obj = module
    for part in dotted.split("."):
        if not hasattr(obj, part):
            raise ImportError(f"vLLM changed: {module.__name__}.{dotted} does not exist (the adapter was written "
                              f"against vLLM {COMMIT[:12]})")
        obj = getattr(obj, part)
    return obj


def check_signatures(signatures: dict, fields: dict, what: str) -> dict:
    """Import every module named, and check each function's parameters and each dataclass's fields
    against the commit the adapter was written for. Returns {module name: module}."""
    modules = {}
    for (name, dotted), params in signatures.items():
        module = modules.setdefault(name, load_module(name, what))
        have = tuple(inspect.signature(resolve(module, dotted)).parameters)
        if have != params:
            raise ImportError(f"vLLM changed: {name}.{dotted} takes ({', '.join(have)}); the adapter calls it "
                              f"as at vLLM {COMMIT[:12]}: ({', '.join(params)})")
    for (name, cls), want in fields.items():
        module = modules.setdefault(name, load_module(name, what))
        have = tuple(getattr(resolve(module, cls), "__dataclass_fields__", {}))
        if have[: len(want)] != want:
            raise ImportError(f"vLLM changed: the fields of {name}.{cls} are ({', '.join(have)}); the adapter "
                              f"builds it as at vLLM {COMMIT[:12]}: ({', '.join(want)}, ...)")
    return modules


class BonusSampler:
    """Stands in for vLLM's main Sampler, the one call RejectionSampler.forward makes of it: the bonus
    token of each request, by the reference's law, from the bonus logits vLLM passes."""

    logprobs_mode = "raw_logprobs"

    def __init__(self, use_fp64_gumbel: bool = False) -> None:
        self.use_fp64_gumbel = use_fp64_gumbel
        self.batch: SpecBatch | None = None
        self.noise: Noise | None = None
        self.calls = 0

    def __call__(self, logits, sampling_metadata, predict_bonus_token=False, logprobs_mode_override=None):
        batch, noise = self.batch, self.noise
        if noise is None:      # seeded: each request's exponentials from its own generator, drawn first
            exponential = torch.empty(logits.shape, dtype=torch.float64, device=logits.device)
            for b, generator in sampling_metadata.generators.items():
                exponential[b].exponential_(generator=generator)
            noise = SimpleNamespace(exponential=exponential)
        self.calls += 1
        tokens = conventions.bonus_tokens(batch, noise, logits=logits).to(logits.device, torch.int32)
        return SimpleNamespace(sampled_token_ids=tokens[:, None].contiguous(), logprobs_tensors=None)


class NoisePatch:
    """The injected noise at PATCH_POINTS for one call; records which points were reached."""

    def __init__(self, noise: Noise) -> None:
        self.noise, self.reached = noise, set()
        self.original_rand, self.original_fill = torch.rand, torch.Tensor.exponential_

    def make_rand(self):
        patch = self

        def rand(*size, generator=None, dtype=None, device=None, **kwargs):
            shape = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else tuple(size)
            if generator is None and shape == tuple(patch.noise.uniform.shape):
                patch.reached.add("uniform")
                return patch.noise.uniform.to(device=device, dtype=dtype or torch.get_default_dtype()).clone()
            return patch.original_rand(*size, generator=generator, dtype=dtype, device=device, **kwargs)
        return rand

    def make_fill(self):
        patch = self

        def exponential_(tensor, lambd=1.0, *, generator=None):
            if generator is None and tuple(tensor.shape) == tuple(patch.noise.exponential.shape):
                patch.reached.add("exponential")
                return tensor.copy_(patch.noise.exponential.to(tensor.device, tensor.dtype))
            return patch.original_fill(tensor, lambd, generator=generator)
        return exponential_


class VllmV1(Backend):
    """V1's RejectionSampler, called through forward() as the model runner calls it."""

    name = "vllm-v1"
    capabilities = Capabilities(
        methods=frozenset({"standard", "synthetic"}), noise=frozenset({"injected", "seeded"}),
        devices=DEVICES, logit_dtypes=ALL_LOGIT_DTYPES, seeded_stream="own",
        max_draft=MAX_SPEC_LEN, empty_batches=False, bonus_sampled_by_caller=True, deviations=DEVIATIONS,
        notes=(f"vLLM {COMMIT[:12]}: V1 RejectionSampler.forward with SpecDecodeMetadata and SamplingMetadata",
               "the bonus token: the adapter's stand-in for vLLM's main Sampler (the reference's law)",
               "injected noise at the draws of generate_uniform_probs and sample_recovered_tokens",
               "cpu: vLLM's Triton kernels need TRITON_INTERPRET=1"))

    def __init__(self, modules: dict | None = None, use_fp64_gumbel: bool = False) -> None:
        self._modules = modules          # tests pass stand-in modules; None: import vLLM on first use
        self.use_fp64_gumbel = use_fp64_gumbel
        self._samplers: dict = {}

    def modules(self) -> dict:
        if self._modules is None:
            self._modules = check_signatures(SIGNATURES, DATACLASS_FIELDS, "V1 RejectionSampler")
            limit = getattr(self._modules[SAMPLER], "MAX_SPEC_LEN", None)
            if limit != MAX_SPEC_LEN:
                raise ImportError(f"vLLM changed: {SAMPLER}.MAX_SPEC_LEN is {limit}, the adapter declares "
                                  f"max_draft={MAX_SPEC_LEN} as at vLLM {COMMIT[:12]}")
        return self._modules

    def sampler(self, device, rate, steps):
        """One RejectionSampler per synthetic setting (vLLM fixes it at construction)."""
        key = (str(device), rate, steps)
        if key not in self._samplers:
            spec_config = None
            if rate is not None:
                rates = conventions.unconditional_rates(rate, steps)
                spec_config = SimpleNamespace(rejection_sample_method="synthetic", num_speculative_tokens=steps,
                                              synthetic_acceptance_rates=resolve_rates(steps, rates))
            bonus = BonusSampler(self.use_fp64_gumbel)
            module = self.modules()[SAMPLER]
            self._samplers[key] = (module.RejectionSampler(bonus, spec_config, device), bonus)
        return self._samplers[key]

    def _sample(self, batch: SpecBatch, *, method, noise, seed, synthetic_acceptance_rate,
                num_speculative_steps) -> SpecOutput:
        dev, B = batch.device, batch.num_requests
        rate = synthetic_acceptance_rate if method == "synthetic" else None
        rejection, bonus = self.sampler(dev, rate, num_speculative_steps if rate is not None else None)
        seeds = conventions.request_seeds(seed, B) if noise is None else None
        generators = {} if seeds is None else {b: torch.Generator(dev).manual_seed(int(s))
                                               for b, s in enumerate(seeds.tolist())}
        metadata, sampling = self.metadata(batch, generators)
        bonus.batch, bonus.noise = batch, noise
        if batch.num_drafts == 0:        # the model runner calls the main Sampler alone
            tokens = bonus(batch.target_logits, sampling).sampled_token_ids.to(torch.int64)
            return SpecOutput(tokens, torch.zeros(B, dtype=torch.int64, device=dev))
        q = None if batch.draft_probs is None else batch.draft_probs.float().contiguous()
        if noise is None:
            out = self.forward(rejection, metadata, q, batch.target_logits.clone(), sampling)
        else:
            patch = NoisePatch(noise)
            with ExitStack() as stack:
                for point, value in (("uniform", patch.make_rand()), ("exponential", patch.make_fill())):
                    owner, attribute = PATCH_POINTS[point]
                    target = torch.Tensor if owner == "torch.Tensor" else torch
                    stack.enter_context(conventions.patch_points(target, {attribute: value}, owner))
                out = self.forward(rejection, metadata, q, batch.target_logits.clone(), sampling)
            missing = [p for p in needed_points(batch, method) if p not in patch.reached]
            if missing:
                names = ", ".join(PATCH_POINTS[p][1] for p in missing)
                raise RuntimeError(f"vLLM never reached the patch point(s) {names}: the injected noise did not "
                                   f"reach it; {SAMPLER} draws otherwise since {COMMIT[:12]}")
        tokens = out.sampled_token_ids.to(torch.int64)
        return SpecOutput(tokens, conventions.num_accepted_from_emitted(tokens))

    def forward(self, rejection, metadata, draft_probs, logits, sampling):
        return rejection.forward(metadata, draft_probs, logits, sampling)

    def metadata(self, batch: SpecBatch, generators: dict):
        """SpecDecodeMetadata and SamplingMetadata as vLLM's model runner builds them."""
        mods, dev, B = self.modules(), batch.device, batch.num_requests
        k = batch.num_draft_tokens
        spec = mods["vllm.v1.spec_decode.metadata"].SpecDecodeMetadata(
            draft_token_ids=conventions.int32_ids(batch.draft_token_ids).contiguous(),
            num_draft_tokens=k.tolist(),
            cu_num_draft_tokens=conventions.cumulative_offsets(k, with_zero=False),
            cu_num_sampled_tokens=conventions.cumulative_offsets(k + 1, with_zero=False),
            target_logits_indices=conventions.int32_ids(conventions.draft_logit_rows(batch)),
            bonus_logits_indices=conventions.int32_ids(conventions.bonus_rows(batch)),
            logits_indices=torch.arange(batch.target_logits.shape[0], dtype=torch.int32, device=dev))
        greedy = batch.temperature == 0
        all_greedy, all_random = bool(greedy.all()), not bool(greedy.any())
        temperature = None if all_greedy else torch.where(greedy, 0.0, batch.temperature).float().contiguous()
        sampling = mods["vllm.v1.sample.metadata"].SamplingMetadata(
            temperature=temperature, all_greedy=all_greedy, all_random=all_random, top_p=None, top_k=None,
            generators=generators, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
            frequency_penalties=torch.zeros(B, device=dev), presence_penalties=torch.zeros(B, device=dev),
            repetition_penalties=torch.ones(B, device=dev), output_token_ids=[[] for _ in range(B)],
            allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=logits_processors(mods))
        return spec, sampling


def needed_points(batch: SpecBatch, method: str) -> list:
    """The patch points an injected call with drafts must reach: the uniforms unless every request is
    greedy under the standard rule; the exponentials whenever a request is random."""
    any_random = bool((batch.temperature > 0).any())
    return [p for p, need in (("uniform", method == "synthetic" or any_random), ("exponential", any_random)) if need]


def logits_processors(modules: dict):
    """vLLM's empty LogitsProcessors (no min-tokens or other non-argmax-invariant processor)."""
    module = modules.get("vllm.v1.sample.logits_processor") or load_module("vllm.v1.sample.logits_processor",
                                                                           "SamplingMetadata.logitsprocs")
    return module.LogitsProcessors()


def resolve_rates(steps: int, rates: list) -> list:
    """vLLM's own resolver of synthetic_acceptance_rates (range, length, monotonicity) where vllm.config
    imports; else the rates as computed (conventions.unconditional_rates checks the same)."""
    try:
        config = importlib.import_module("vllm.config.speculative")
    except ImportError:
        return rates
    return config.SpeculativeConfig._resolve_synthetic_acceptance_rates(steps, rates, None)


# CPUModelRunner._postprocess_triton swaps these kernels of the sampler module for the C++ wrappers of
# CPU_WRAPPERS (at COMMIT); the CPU entry swaps the same ones around each call.
CPU_WRAPPERS = "vllm.utils.cpu_triton_utils"
CPU_KERNELS = ("rejection_greedy_sample_kernel", "rejection_random_sample_kernel", "expand_kernel",
               "sample_recovered_tokens_kernel")


class CpuKernel:
    """One of the CPU worker's kernel wrappers, launched as the sampler launches the Triton kernel it
    replaces (``kernel[grid](*args, **kwargs)``). Each call is first bound to the wrapper's signature, so
    a wrapper lagging the sampler's arguments raises TypeError naming it (seed 003's class). The wrapper's
    C++ op then runs; where vLLM is not built for the CPU, vLLM's Triton kernel runs instead, under the
    interpreter: the signatures are still checked, the C++ ops are not."""

    def __init__(self, name: str, wrapper, kernel, built: bool) -> None:
        self.name, self.wrapper, self.kernel, self.built = name, wrapper, kernel, built

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            func = self.wrapper[grid]
            try:
                inspect.signature(func).bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"vLLM's CPU wrapper {CPU_WRAPPERS}.{self.name} does not take the arguments "
                                f"{SAMPLER} launches its kernel with: {e}") from None
            return (func if self.built else self.kernel[grid])(*args, **kwargs)
        return launch


def cpu_ops_built() -> bool:
    """Whether vLLM's C++ ops that the CPU wrappers call are registered (a CPU build of vLLM)."""
    try:
        return all(hasattr(torch.ops._C, f"{name}_impl") for name in CPU_KERNELS)
    except (AttributeError, RuntimeError):
        return False


class VllmV1Cpu(VllmV1):
    """V1's RejectionSampler as vLLM's CPU worker runs it: the sampler's Triton kernels replaced by the
    wrappers of vLLM's C++ ops, as ``CPUModelRunner`` replaces them (``CpuKernel``). Without a CPU build
    of vLLM it needs ``TRITON_INTERPRET=1``. Synthetic mode is not declared (the C++ kernels assert it
    off)."""

    name = "vllm-v1-cpu"
    capabilities = dataclasses.replace(
        VllmV1.capabilities, methods=frozenset({"standard"}), devices=frozenset({"cpu"}), deviations=(),
        notes=(f"vLLM {COMMIT[:12]}: V1 RejectionSampler.forward with the kernels CPUModelRunner swaps in "
               f"({CPU_WRAPPERS}), each call bound to the wrapper's signature",
               "the wrappers' C++ ops where vLLM is built for the CPU, else vLLM's Triton kernels interpreted",
               "the bonus token: the adapter's stand-in for vLLM's main Sampler (the reference's law)"))

    def forward(self, rejection, metadata, draft_probs, logits, sampling):
        built = cpu_ops_built()
        if not built and not INTERPRETED:
            raise RuntimeError(f"{self.name}: vLLM is not built for the CPU (torch.ops._C lacks its sampler "
                               f"ops); set TRITON_INTERPRET=1 to check the CPU wrappers' signatures with vLLM's "
                               f"Triton kernels")
        wrappers, module = load_module(CPU_WRAPPERS, "V1 on vLLM's CPU worker"), self.modules()[SAMPLER]
        swapped = {name: CpuKernel(name, resolve(wrappers, name), resolve(module, name), built)
                   for name in CPU_KERNELS}
        with conventions.patch_points(module, swapped, SAMPLER):
            return rejection.forward(metadata, draft_probs, logits, sampling)


def v1() -> VllmV1:
    return VllmV1()


def v1_fp64() -> VllmV1:
    """The same with the float64 race of sample_recovered_tokens (vLLM's use_fp64_gumbel)."""
    backend = VllmV1(use_fp64_gumbel=True)
    backend.name = "vllm-v1-fp64"
    return backend


def v1_cpu() -> VllmV1Cpu:
    """V1 on vLLM's CPU worker (a CPU build of vLLM)."""
    return VllmV1Cpu()

