"""Engine mutants (SPEC 8): known bug classes re-planted in the installed transformers for the run.

Each mutant wraps a correct engine (``specverify.adapters.transformers.TransformersEngine``) and patches
the library only while its speculative loop runs (``generate``); ``target_law`` and the plain loop stay
the library's own, so the exact law the check uses is the correct one. ``ENGINE_MUTANTS`` is a registry
of its own: these are engines, not kernel backends, and the kernel mutant tests never see them.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import Callable

import torch


@contextlib.contextmanager
def _patched(owner, name: str, value):
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def greedy_drafter():
    """transformers #32867: the drafter decodes greedily while the target samples; q is still the
    processed softmax the verifier expects, but the drafts were not drawn from it."""
    from transformers.generation.candidate_generator import AssistedCandidateGenerator as G  # noqa: PLC0415
    original = G._prepare_generation_args

    def prepare(self, input_ids, min_new_tokens, max_new_tokens):
        args = original(self, input_ids, min_new_tokens, max_new_tokens)
        args["generation_config"] = copy.copy(args["generation_config"])
        args["generation_config"].do_sample = False
        return args
    return _patched(G, "_prepare_generation_args", prepare)


def _around_speculative_sampling(change: Callable):
    """Patch ``_speculative_sampling`` as the assisted loop calls it, changing the drafter's logits."""
    import transformers.generation.utils as utils  # noqa: PLC0415
    original = utils._speculative_sampling

    def sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits, **kw):
        return original(candidate_input_ids, change(candidate_input_ids, candidate_logits, candidate_length),
                        candidate_length, new_logits, **kw)
    return _patched(utils, "_speculative_sampling", sampling)


def q_dropped():
    """vLLM #40269 class: the drafter's probabilities never reach the sampler; q is taken as 1 at the
    draft (one-hot) while the drafts were sampled from a real q."""
    def one_hot(ids, logits, k):
        out = torch.full_like(logits, -float("inf"))
        out[0, torch.arange(k), ids[0, -k:]] = 0.0
        return out
    return _around_speculative_sampling(one_hot)


_STALE: dict = {}


def q_stale():
    """vLLM #37639 class: q is the one of the previous step (a buffer not rewritten), where it has the
    row: the previous step of this generation, or of the previous one (the buffer outlives a request).
    With samples split over forked workers each worker has its own buffer."""
    state = _STALE

    def stale(ids, logits, k):
        previous = state.get("q")
        state["q"] = logits.clone()
        if previous is None:
            return logits
        out = logits.clone()
        rows = min(k, previous.shape[1])
        out[:, :rows] = previous[:, :rows]
        return out
    return _around_speculative_sampling(stale)


def q_before_processors():
    """transformers #47932 class: q is taken from the drafter's raw logits, before the processors
    (temperature, top-k, top-p) it sampled with."""
    from transformers.generation.candidate_generator import AssistedCandidateGenerator as G  # noqa: PLC0415

    def generate_candidates(self, generation_args):
        config = copy.copy(generation_args["generation_config"])
        config.output_logits = True
        output = self.assistant_model.generate(**{**generation_args, "generation_config": config},
                                               **self.assistant_kwargs)
        self.assistant_kwargs["cache"] = output.cache
        return output.sequences, torch.stack(output.logits, dim=1)
    return _patched(G, "_generate_candidates", generate_candidates)


class MutantEngine:
    """A correct engine whose speculative loop runs with the library patched by ``patch()``."""

    def __init__(self, engine, patch: Callable, name: str):
        self.engine, self.patch = engine, patch
        self.name = f"{engine.name}+{name}"
        self.vocab_size, self.cases = engine.vocab_size, engine.cases
        self.deviations = engine.deviations     # the library's own, declared: a mutant's failure must differ
        self.describe = lambda: f"{engine.describe()}; MUTANT {name}: the library patched for the run"

    def generate(self, case, prompt, seed):
        with self.patch():
            return self.engine.generate(case, prompt, seed)

    def first_accepted(self):
        return self.engine.first_accepted()

    def first_q(self):
        return self.engine.first_q()

    def diagnose_q(self, case, prefix, q):
        return self.engine.diagnose_q(case, prefix, q)

    def draft_law(self, case, prefix):
        return self.engine.draft_law(case, prefix)

    def generate_plain(self, case, prompt, seed):
        return self.engine.generate_plain(case, prompt, seed)

    def target_law(self, prefix, sampling):
        return self.engine.target_law(prefix, sampling)


@dataclass(frozen=True)
class EngineMutant:
    name: str
    patch: Callable
    bug_class: str
    cases: tuple          # the cases of the ci plan expected to catch it
    check: str = "engine_sequences"   # the engine check expected to catch it

    def wrap(self, engine) -> MutantEngine:
        return MutantEngine(engine, self.patch, self.name)


# q dropped (one-hot at the draft) is lossless in law: P(emit v) = q(v) p(v) + p(v) (1 - q(v)) = p(v) at
# every position, whatever q the drafts came from; only the acceptance drops, to sum p q from sum min(p, q).
# q stale is not listed for temperature_alone: with L = 1 every call is one step at the same prompt, so the q
# of the previous step is the same law.
ENGINE_MUTANTS = {m.name: m for m in (
    EngineMutant("greedy_drafter", greedy_drafter, "transformers #32867: greedy drafter, sampling target",
                 ("top_p_min_p", "sharp_drafter", "temperature_alone")),
    EngineMutant("q_dropped", q_dropped, "vLLM #40269: draft probabilities taken as 1",
                 ("top_p_min_p", "sharp_drafter", "temperature_alone"), "engine_acceptance"),
    EngineMutant("q_stale", q_stale, "vLLM #37639: q from the previous step", ("top_p_min_p", "sharp_drafter")),
    EngineMutant("q_before_processors", q_before_processors,
                 "transformers #47932: q before the drafter's processors",
                 ("top_p_min_p", "sharp_drafter", "temperature_alone")),
)}


def _factory(mutant: EngineMutant):
    def build() -> MutantEngine:
        from specverify.adapters.transformers import assisted  # noqa: PLC0415 - the optional extra
        engine = mutant.wrap(assisted())
        engine.spec = f"{__name__}:{mutant.name}_engine"
        return engine
    build.specverify_engine = True
    return build


# ``specverify check specverify.mutants.engines:q_stale_engine`` runs the engine checks on a mutant
greedy_drafter_engine = _factory(ENGINE_MUTANTS["greedy_drafter"])
q_dropped_engine = _factory(ENGINE_MUTANTS["q_dropped"])
q_stale_engine = _factory(ENGINE_MUTANTS["q_stale"])
q_before_processors_engine = _factory(ENGINE_MUTANTS["q_before_processors"])
