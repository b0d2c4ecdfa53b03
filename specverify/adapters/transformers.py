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

from specverify.engines import EngineCase, Sampling

V = 8
SPEC = "specverify.adapters.transformers:assisted"

# Models: (seed, layers, scale of the output head). The target's laws are spread over a few tokens;
# "flat" is a drafter flatter than the target, "sharp" one sharper (both disagree with it, so a wrong q
# moves the emitted law).
MODELS = {"target": (0, 2, 12.0), "flat": (1, 1, 10.0), "sharp": (2, 1, 40.0)}

PROMPT = (1, 5, 2)
GREEDY_PROMPTS = tuple(tuple((7 * i + 3 * j + 1) % V for j in range(1 + i % 4)) for i in range(24))

CASES = (
    EngineCase("temperature", PROMPT, Sampling(temperature=0.5), "flat", 2, doc="temperature below 1"),
    EngineCase("top_k", PROMPT, Sampling(temperature=1.5, top_k=4), "flat", 3, doc="top-k after temperature"),
    EngineCase("top_p", PROMPT, Sampling(temperature=1.0, top_p=0.8), "flat", 4, doc="top-p"),
    EngineCase("sharp_drafter", PROMPT, Sampling(temperature=1.0), "sharp", 2, doc="a drafter sharper than the target"),
    EngineCase("one_draft", (4, 4), Sampling(temperature=1.0), "flat", 1,
               doc="one draft per step: a rejection leaves the second token to the next step"),
    EngineCase("heuristic", PROMPT, Sampling(temperature=0.8, min_p=0.05), "flat", 3, "heuristic",
               doc="the heuristic draft schedule, min-p"),
    EngineCase("greedy", PROMPT, Sampling(temperature=0.0), "sharp", 3, length=4, prompts=GREEDY_PROMPTS,
               doc="greedy: speculative == plain"),
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
        self._first = None

    def describe(self) -> str:
        return (f"engine: transformers assisted generation, tiny random Llama target and drafters (V = {V}); "
                f"{len(self.cases)} cases")

    def _drafter(self, case: EngineCase):
        drafter = self.models[case.drafter]
        drafter.generation_config.num_assistant_tokens = case.draft_tokens   # reset: the heuristic keeps state
        drafter.generation_config.num_assistant_tokens_schedule = case.schedule
        return drafter

    @torch.no_grad()
    def generate(self, case: EngineCase, prompt: tuple, seed: int) -> list:
        import transformers.generation.utils as utils  # noqa: PLC0415
        ids = torch.tensor([list(prompt)], dtype=torch.long)
        verify, self._first = utils._speculative_sampling, None   # whatever is installed (a mutant's patch)

        def traced(*args, **kw):
            tokens, n_matches = verify(*args, **kw)
            if self._first is None:
                self._first = int(n_matches)
            return tokens, n_matches
        utils._speculative_sampling = traced
        try:
            return self._generate(case, ids, seed)
        finally:
            utils._speculative_sampling = verify

    def first_accepted(self) -> int | None:
        """Drafts the verifier accepted at the first step of the last ``generate`` call."""
        return self._first

    def _generate(self, case: EngineCase, ids, seed: int) -> list:
        torch.manual_seed(seed)
        # one past L: the loop's last token is never drafted, so generating only L would leave the drafter out
        # of the last steps; the law of the first L tokens does not depend on what follows them
        new = case.length + 1
        out = self.target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=self._drafter(case),
                                   max_new_tokens=new, min_new_tokens=new, **_sampling_kwargs(case.sampling))
        return out[0, ids.shape[1]:ids.shape[1] + case.length].tolist()

    @torch.no_grad()
    def generate_plain(self, case: EngineCase, prompt: tuple, seed: int) -> list:
        ids = torch.tensor([list(prompt)], dtype=torch.long)
        torch.manual_seed(seed)
        out = self.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=case.length,
                                   min_new_tokens=case.length, **_sampling_kwargs(case.sampling))
        return out[0, ids.shape[1]:].tolist()

    def target_law(self, prefix: tuple, sampling: Sampling):
        return self._law(self.target, prefix, sampling)

    def draft_law(self, case: EngineCase, prefix: tuple):
        """The drafter's law for ``prefix`` after the same processors: the q its first draft is drawn from."""
        return self._law(self.models[case.drafter], prefix, case.sampling)

    @torch.no_grad()
    def _law(self, model, prefix: tuple, sampling: Sampling):
        from transformers import GenerationConfig  # noqa: PLC0415
        ids = torch.tensor([list(prefix)], dtype=torch.long)
        logits = model(ids, attention_mask=torch.ones_like(ids)).logits[:, -1, :].float()
        config = GenerationConfig(**_sampling_kwargs(sampling))
        processors = model._get_logits_processor(generation_config=config, input_ids_seq_length=ids.shape[1],
                                                       device="cpu", model_kwargs={})
        scores = processors(ids, logits)[0].double()
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
