"""transformers' assisted generation as an engine (SPEC 8): ``specverify.adapters.transformers:assisted``.

The target and the drafters are tiny random Llama models built from configs with fixed seeds (V = 8,
nothing downloaded: CI has no model hub). ``generate`` is what a user calls:
``target.generate(prompt, attention_mask=..., assistant_model=drafter, do_sample=True, ...)``. The mask
is always passed: generate infers it from ``pad_token_id`` otherwise, and a prompt holding that id
silently changes the law. ``target_law`` is one plain forward pass of the target followed by the
processors generate itself builds (``_get_logits_processor``), softmaxed in float64.

transformers is imported on first use (the ``specverify[transformers]`` extra; checked with 5.24.0).
"""

from __future__ import annotations

import numpy as np
import torch

from specverify.adapters import conventions
from specverify.adapters.transformers_kernel import ZERO_UNIFORM
from specverify.backends import Deviation
from specverify.engines import EngineCase, Sampling

V = 8
SPEC = "specverify.adapters.transformers:assisted"

# Models: (seed, layers, scale of the output head). The target's laws are spread over a few tokens;
# "flat" is a drafter flatter than the target, "sharp" one sharper (both disagree with it, so a wrong q
# moves the emitted law). One layer each: a forward pass is mostly transformers' own overhead, and a
# second target layer cost 10% of the run for nothing the check needs.
MODELS = {"target": (0, 1, 12.0), "flat": (1, 1, 10.0), "sharp": (2, 1, 40.0)}

# Draft schedules: "constant" (k drafts a step), "heuristic" (transformers': k, then +2 after a step that
# accepts every draft, -1 otherwise), "confidence" (transformers' default: up to k, stopping after a draft
# the drafter gives less than CONFIDENCE, its assistant_confidence_threshold). The first two turn that
# threshold off, so that they draft k.
CONFIDENCE = 0.4

# transformers 5.24.0: the candidate generator hands the assistant's generate the target's processors as
# ``logits_processor``, and generate appends the warpers its generation config asks for after merging the
# custom ones (``_get_logits_processor``): temperature, top-k, top-p and min-p reach the drafter twice. It
# drafts from, and hands over, that law: lossless, but the drafter is not the one asked for (at T = 0.25 the
# first draft is accepted 1.7% of the time instead of 30%). docs/kernels.md, "transformers engine".
TWICE = "transformers 5.24.0 applies the target's warpers to the assistant twice: docs/kernels.md"
# The verifier's `r_i <= p_i / q_i` accepts a draft of probability 0 at r_i = 0 (the kernel adapter's ZERO_UNIFORM):
# through the whole loop, a sequence the target's processors cut is emitted (engine_boundary_coins); declared for
# the filtered cases only: without a filter (temperature_alone) no token has probability 0.
DEVIATIONS = (Deviation("engine_draft_law", "*", TWICE, r"its processors applied twice"),
              *(Deviation("engine_boundary_coins", case, ZERO_UNIFORM,
                          r"^every uniform at 0: seed \d+ emitted \[[\d, ]*\], of probability 0")
                for case in ("top_p_min_p", "sharp_drafter")))
PROMPT_LOOKUP = "prompt_lookup"    # transformers' prompt-lookup candidate generator: no drafter model
GREEDY_PROMPTS = tuple(tuple((7 * i + 3 * j + 1) % V for j in range(1 + i % 4)) for i in range(24))

# The sampled cases are chosen for power at few samples: the law of their first L tokens is held by few
# sequences (the chi-square's degrees of freedom set the samples a det99 of 0.05 costs: about 4,500 at 3,
# 5,300 at 7, 10,000 at 63), and the drafters disagree with the target (the first draft accepted 30% to 50%
# of the time), so that a 5% shift of the q handed over moves the first token's law by 5% (``engines.
# q_shift_seen``). Every case has a temperature other than 1 but the prompt-lookup one (a q is then wrong
# before the processors). Temperature alone spreads the law over every token, so its case tests the first
# token only (L = 1, 8 sequences): two tokens would cost 10,000 samples. One draft, constant: a call is one
# step of one draft (2.9 ms a sample against 5.7 to 7.3 for the others). Four sampled cases are what the ci
# profile's minute on 2 cores holds at det99 0.05 (docs/benchmarks.md).
CASES = (
    EngineCase("top_p_min_p", (2, 7, 4), Sampling(temperature=0.7, top_p=0.8, min_p=0.3), "flat", 2, "confidence",
               doc="top-p and min-p below temperature 1, a flat drafter, transformers' default schedule (up to "
                   "two drafts, stopped by the drafter's confidence): every engine mutant moves it"),
    EngineCase("sharp_drafter", (1, 5, 2, 3, 1, 5), Sampling(temperature=1.5, top_k=2), "sharp", 4, "heuristic",
               doc="top-k above temperature 1, a drafter sharper than the target, four drafts, then the "
                   "heuristic's three after a rejection"),
    EngineCase("temperature_alone", (2, 7, 4), Sampling(temperature=0.6), "flat", 1, "constant", length=1,
               doc="temperature without filters, one draft a step, the constant schedule (issue 32 asks for "
                   "each); the first token's law: a q stale from an earlier step is the same law here, and "
                   "top_p_min_p and sharp_drafter see that one"),
    EngineCase("prompt_lookup", (1, 5, 2, 3, 1, 5), Sampling(temperature=1.0, top_k=2), PROMPT_LOOKUP, 3,
               doc="prompt-lookup candidates: no q, the target's samples are compared with them"),
    EngineCase("greedy", (1, 5, 2), Sampling(temperature=0.0), "sharp", 3, length=4, prompts=GREEDY_PROMPTS,
               doc="greedy: speculative == plain"),
    EngineCase("greedy_prompt_lookup", (1, 5, 2), Sampling(temperature=0.0), PROMPT_LOOKUP, 3, length=4,
               prompts=GREEDY_PROMPTS, doc="greedy prompt lookup: speculative == plain"),
)


def _model(seed: int, layers: int, scale: float):
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: PLC0415 - the optional extra
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


def _sampling_kwargs(s: Sampling) -> dict:
    if s.greedy:
        return {"do_sample": False}
    return {"do_sample": True, "temperature": s.temperature, "top_k": s.top_k or 0, "top_p": s.top_p,
            "min_p": s.min_p or None}


class TransformersEngine:
    """transformers' assisted generation (speculative sampling with a drafter model), one prompt per call."""

    def __init__(self, threads: int | None = 1):
        import transformers  # noqa: PLC0415 - the optional extra
        transformers.logging.set_verbosity_error()
        if threads:
            torch.set_num_threads(threads)
        self.name = f"transformers-{transformers.__version__}:assisted"
        self.spec = SPEC
        self.vocab_size = V
        self.cases = CASES
        self.models = {name: _model(*args) for name, args in MODELS.items()}
        self.target = self.models["target"]
        self._first = self._first_q = None
        self._coin = None        # generate_at_coin's coin while it runs
        self.deviations = DEVIATIONS

        class StopAt(transformers.StoppingCriteria):
            """Stops a generation once it holds ``length`` tokens (``StoppingCriteria``, as a user writes one)."""

            def __init__(self, length: int) -> None:
                self.length = length

            def __call__(self, input_ids, scores, **kwargs):
                return torch.full((input_ids.shape[0],), input_ids.shape[1] >= self.length, dtype=torch.bool)
        self._stop_at = lambda length: transformers.StoppingCriteriaList([StopAt(length)])

    def describe(self) -> str:
        return (f"engine: transformers assisted generation, tiny random Llama target and drafters (V = {V}); "
                f"{len(self.cases)} cases")

    def _drafter(self, case: EngineCase):
        """The case's drafter, its schedule set (every call: the heuristic writes its draft count back)."""
        drafter, config = self.models[case.drafter], self.models[case.drafter].generation_config
        config.num_assistant_tokens = case.draft_tokens
        config.num_assistant_tokens_schedule = "heuristic" if case.schedule == "heuristic" else "constant"
        config.assistant_confidence_threshold = CONFIDENCE if case.schedule == "confidence" else 0.0
        return drafter

    @torch.inference_mode()
    def generate(self, case: EngineCase, prompt: tuple, seed: int) -> list:
        import transformers.generation.utils as utils  # noqa: PLC0415
        ids = torch.tensor([list(prompt)], dtype=torch.long)
        verify, self._first, self._first_q = utils._speculative_sampling, None, None   # a mutant's patch too

        def traced(candidate_input_ids, candidate_logits, *args, **kw):
            if self._first_q is None:      # as handed over, before a mutant's patch changes it
                self._first_q = candidate_logits[0, 0].double().softmax(-1).numpy()
            if self._coin is None:
                tokens, n_matches = verify(candidate_input_ids, candidate_logits, *args, **kw)
            else:       # the verifier's one draw of uniforms, torch.rand_like, at the coin
                coin = self._coin
                with conventions.patch_points(torch, {"rand_like": lambda like, *a, **k: torch.full_like(like, coin)},
                                              "torch"):
                    tokens, n_matches = verify(candidate_input_ids, candidate_logits, *args, **kw)
            if self._first is None:
                self._first = int(n_matches)
            return tokens, n_matches
        utils._speculative_sampling = traced
        try:
            return self._generate(case, ids, seed)
        finally:
            utils._speculative_sampling = verify

    def generate_at_coin(self, case: EngineCase, prompt: tuple, seed: int, coin: float) -> list:
        """``generate`` with every uniform the verifier draws (``torch.rand_like`` in ``_speculative_sampling``) equal
        to ``coin``; the drafter's and the target's own samples still come from ``seed``."""
        self._coin = coin
        try:
            return self.generate(case, prompt, seed)
        finally:
            self._coin = None

    def first_accepted(self) -> int | None:
        """Drafts the verifier accepted at the first step of the last ``generate`` call."""
        return self._first

    def first_q(self):
        """[V] the q the verifier was handed for the first draft of the last ``generate`` call."""
        return self._first_q

    def diagnose_q(self, case: EngineCase, prefix: tuple, q) -> str | None:
        """What a q that is not the drafter's law is, where this adapter knows (``engine_draft_law``)."""
        twice = self._law(self.models[case.drafter], prefix, case.sampling, times=2)
        if np.abs(np.asarray(q) - twice).max() <= 1e-5:
            return "it is the drafter's law with its processors applied twice (" + TWICE + ")"
        return None

    def _generate(self, case: EngineCase, ids, seed: int) -> list:
        # torch.manual_seed's generator, without the lazy seeding of absent CUDA, XPU and MTIA devices
        torch.random.default_generator.manual_seed(seed)
        # The loop drafts at most max_length - length - 1 tokens, so a budget of only L new tokens would cap the
        # drafts (at L - 1 in the first step, none in the last); L + max(k, 2) - 1 leaves every step before the
        # L-th token its k drafts, and the loop stops after the step that reaches L: the first L tokens do not
        # depend on what follows them.
        budget = case.length + max(case.draft_tokens, 2) - 1
        drafter = ({"prompt_lookup_num_tokens": case.draft_tokens} if case.drafter == PROMPT_LOOKUP
                   else {"assistant_model": self._drafter(case)})
        out = self.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=budget,
                                   stopping_criteria=self._stop_at(ids.shape[1] + case.length),
                                   **drafter, **_sampling_kwargs(case.sampling))
        return out[0, ids.shape[1]:ids.shape[1] + case.length].tolist()

    @torch.inference_mode()
    def generate_plain(self, case: EngineCase, prompt: tuple, seed: int) -> list:
        ids = torch.tensor([list(prompt)], dtype=torch.long)
        torch.manual_seed(seed)
        out = self.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=case.length,
                                   min_new_tokens=case.length, **_sampling_kwargs(case.sampling))
        return out[0, ids.shape[1]:].tolist()

    def target_law(self, prefix: tuple, sampling: Sampling):
        return self._law(self.target, prefix, sampling)

    def draft_law(self, case: EngineCase, prefix: tuple):
        """The drafter's law for ``prefix`` after the same processors: the q its first draft is drawn from;
        None for prompt lookup, whose candidates are copied from the prompt, not drawn."""
        if case.drafter == PROMPT_LOOKUP:
            return None
        return self._law(self.models[case.drafter], prefix, case.sampling)

    @torch.inference_mode()
    def _law(self, model, prefix: tuple, sampling: Sampling, times: int = 1):
        """[V] float64: ``model``'s next-token law for ``prefix`` after the processors generate builds for
        ``sampling`` (applied ``times`` times: ``diagnose_q``)."""
        from transformers import GenerationConfig  # noqa: PLC0415
        ids = torch.tensor([list(prefix)], dtype=torch.long)
        scores = model(ids, attention_mask=torch.ones_like(ids)).logits[:, -1, :].float()
        config = GenerationConfig(**_sampling_kwargs(sampling))
        processors = model._get_logits_processor(generation_config=config, input_ids_seq_length=ids.shape[1],
                                                 device="cpu", model_kwargs={})
        for _ in range(times):
            scores = processors(ids, scores)
        scores = scores[0].double()
        if sampling.greedy:
            law = np.zeros(V)
            law[int(scores.argmax())] = 1.0
            return law
        return torch.softmax(scores, dim=-1).numpy()


def assisted() -> TransformersEngine:
    """The engine entry: ``specverify check specverify.adapters.transformers:assisted``."""
    return TransformersEngine()


assisted.specverify_engine = True   # the registry builds it as an engine, not a kernel backend


def speculative_sampling():
    """The kernel entry (SPEC 1-7): ``specverify check specverify.adapters.transformers:speculative_sampling``,
    transformers' ``_speculative_sampling`` behind the kernel convention (``transformers_kernel``)."""
    from specverify.adapters.transformers_kernel import SpeculativeSampling  # noqa: PLC0415
    return SpeculativeSampling()
