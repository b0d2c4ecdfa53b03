"""transformers' ``transformers.generation.utils._speculative_sampling`` behind specverify's convention.

    specverify check specverify.adapters.transformers:speculative_sampling --profile ci

The function verifies one request: ``_speculative_sampling(candidate_input_ids [1, n + k],
candidate_logits [1, k, V], candidate_length k, new_logits [1, k + 1, V])`` softmaxes both logits, accepts
draft j while ``r_j <= p_j(x) / q_j(x)`` with ``r = torch.rand_like(ratio)``, and draws the extra token
with ``torch.multinomial`` from ``max(p - q, 0)`` normalised at the first rejection, or from ``p`` at the
bonus row. It returns the emitted tokens [1, a + 1] and a, the accepted count. The adapter calls it once
per request, as the assisted loop does, with what that loop hands it:

- ``new_logits``: the request's k + 1 target rows cast to float32 (the loop's ``.to(torch.float32)``),
  then transformers' own ``TemperatureLogitsWarper``. A greedy request is never verified by this
  function in transformers (its greedy path compares argmaxes); the adapter gives it a one-hot target at
  the first argmax and one-hot drafts, so the rule accepts exactly the argmax and emits it at a mismatch,
  and no noise (SPEC 3): r = 1 at every draft and exponentials of 1, on both noise paths.
- ``candidate_logits``: ``log q`` in float32 (softmax gives q back, renormalised); ``-inf`` but at the
  draft for a one-hot drafter (``draft_probs`` None).
- ``candidate_input_ids``: the drafts alone, [1, k]; the function reads only the last k ids. (It slices
  ``[:, -k:]``: with k = 0 that is the whole sequence, which the drafts alone make empty. transformers
  never calls it with no candidates: a drafter that proposes none gives ``candidate_logits`` None.)

Noise. Injected: ``torch.rand_like`` and ``torch.multinomial`` are replaced for the call (``PATCH_POINTS``):
the first returns the request's uniforms in the dtype the function draws (float32, as its own draw would
be), the second runs the exponential race over the probabilities it is given with the request's
exponentials (in float64, lowest index on ties), after refusing what ``torch.multinomial`` refuses, with
its messages: a stand-in that sampled a NaN row would hide what the function does with one. Every
injected call checks that the draws it needed were reached. Seeded: transformers' own draws, from the
global generator seeded with the request's seed for the call (``torch.random.fork_rng``: the caller's
state is restored), which is how a user seeds transformers: its own stream, checked statistically; a
request draws from its own seed only, so the stream is batch invariant.

Filters (top-k, top-p, min-p) are transformers' logits processors, applied before this function:
``target_filters`` is not declared. transformers is imported on first use (``specverify[transformers]``);
written against 5.24.0, whose signature is checked on load.
"""

from __future__ import annotations

import importlib.metadata
import inspect

import torch

from reference import Noise, SpecBatch, SpecOutput, greedy, race
from specverify.adapters import conventions
from specverify.backends import ALL_LOGIT_DTYPES, Backend, Capabilities, Deviation

VERSION = "5.24.0"
FUNCTION = "transformers.generation.utils._speculative_sampling"
PARAMETERS = ("candidate_input_ids", "candidate_logits", "candidate_length", "new_logits",
              "assistant_ensemble_weight")
# Where injected noise enters: the torch functions the verifier draws with, replaced for one call.
PATCH_POINTS = {"uniform": "rand_like", "exponential": "multinomial"}
NAN_ROW = "probability tensor contains either `inf`, `nan` or element < 0"
ZERO_ROW = "invalid multinomial distribution (sum of probabilities <= 0)"

ZERO_UNIFORM = ("real defect: `r_i <= p_i / q_i` with r_i from torch.rand_like (float32, [0, 1)) accepts a draft with "
                "p(x) = 0 when r_i is 0 (probability 2^-24 per draft; any injected uniform below 2^-150 rounds "
                "there), emitting a token outside the target's support: docs/kernels.md")
DEVIATIONS = (
    Deviation("differential_injected", "boundary", ZERO_UNIFORM, r"REAL: acceptance u\*q\(x\) <= p\(x\) margin inf\)"),
    Deviation("boundary_coins", "zero_mass_drafts", ZERO_UNIFORM,
              r"^every uniform at 0 \(injected\): request \d+: accepted draft \d+ at position \d+ is outside the "
              r"target's support$"),
    Deviation("nonfinite_rows", "*", "a NaN or +inf target row makes the residual NaN and torch.multinomial "
              "raises RuntimeError, where SPEC 3.6 asks for ValueError or a well-formed output: docs/kernels.md",
              r"RuntimeError: probability tensor contains either `inf`, `nan` or element < 0"),
)


def load_function():
    """transformers' ``_speculative_sampling``, its parameters checked against those of VERSION."""
    try:
        import transformers.generation.utils as utils  # noqa: PLC0415 - the optional extra
    except ImportError as e:
        raise ImportError(f"the transformers kernel adapter needs transformers: pip install "
                          f"specverify[transformers] (import failed: {e})") from e
    function = getattr(utils, "_speculative_sampling", None)
    if function is None:
        raise ImportError(f"transformers changed: {FUNCTION} does not exist (the adapter was written against "
                          f"transformers {VERSION})")
    have = tuple(inspect.signature(function).parameters)
    if have != PARAMETERS:
        raise ImportError(f"transformers changed: {FUNCTION} takes ({', '.join(have)}); the adapter calls it as in "
                          f"transformers {VERSION}: ({', '.join(PARAMETERS)})")
    return function


class Draws:
    """The harness's noise for one request's call, standing in for the function's two draws."""

    def __init__(self, uniform: torch.Tensor, exponential: torch.Tensor) -> None:
        self.uniform, self.exponential, self.reached = uniform, exponential, set()

    def rand_like(self, like: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if like.numel() != self.uniform.numel():
            raise RuntimeError(f"rand_like of shape {tuple(like.shape)}: {self.uniform.numel()} uniforms injected")
        self.reached.add("uniform")
        return self.uniform.to(like.device, like.dtype).reshape(like.shape)

    def multinomial(self, probs: torch.Tensor, num_samples: int, *args, **kwargs) -> torch.Tensor:
        if num_samples != 1 or probs.dim() != 2:
            raise RuntimeError(f"multinomial({tuple(probs.shape)}, {num_samples}): the stand-in draws one per row")
        if bool((~torch.isfinite(probs) | (probs < 0)).any()):
            raise RuntimeError(NAN_ROW)
        if bool((probs.sum(dim=-1) <= 0).any()):
            raise RuntimeError(ZERO_ROW)
        self.reached.add("exponential")
        exponential = self.exponential.to(probs.device, torch.float64).expand(probs.shape)
        return race.winners(probs.double(), exponential)[:, None]


def one_hot_logits(ids: torch.Tensor, V: int) -> torch.Tensor:
    """[n, V] float32: 0 at each id, -inf elsewhere (softmax: one-hot)."""
    logits = torch.full((ids.shape[0], V), -float("inf"), dtype=torch.float32, device=ids.device)
    logits[torch.arange(ids.shape[0], device=ids.device), ids] = 0.0
    return logits


class SpeculativeSampling(Backend):
    """``_speculative_sampling``, one call per request."""

    name = "transformers:speculative_sampling"
    capabilities = Capabilities(
        methods=frozenset({"standard"}), noise=frozenset({"injected", "seeded"}), devices=frozenset({"cpu"}),
        logit_dtypes=ALL_LOGIT_DTYPES, seeded_stream="own", deviations=DEVIATIONS, draft_probs_up_to_scale=True,
        notes=(f"transformers {VERSION}: {FUNCTION}, one request per call, drafts alone as candidate_input_ids",
               "target rows cast to float32 and divided by transformers' TemperatureLogitsWarper",
               "greedy requests: one-hot target at the argmax, one-hot drafts, no noise (transformers verifies "
               "greedy requests elsewhere)",
               "injected noise at torch.rand_like (float32, as drawn) and torch.multinomial (exponential race)",
               "seeded: the global generator seeded with the request's seed for its call"))

    def __init__(self, function=None) -> None:
        self._function = function      # a stand-in with the same signature; None: transformers' own
        try:                           # the installed version names the backend in every report
            self.name = f"transformers-{importlib.metadata.version('transformers')}:speculative_sampling"
        except importlib.metadata.PackageNotFoundError:
            pass

    def function(self):
        if self._function is None:
            self._function = load_function()
        return self._function

    def inputs(self, batch: SpecBatch, b: int) -> tuple:
        """(candidate_input_ids [1, k], candidate_logits [1, k, V], k, new_logits [1, k + 1, V]) of request b."""
        from transformers import TemperatureLogitsWarper  # noqa: PLC0415
        d0, d1 = (int(x) for x in batch.draft_offsets()[b:b + 2])
        l0, l1 = (int(x) for x in batch.logit_offsets()[b:b + 2])
        drafts, logits, V = batch.draft_token_ids[d0:d1], batch.target_logits[l0:l1].float(), batch.vocab_size
        temperature = float(batch.temperature[b])
        if temperature == 0:
            new = one_hot_logits(greedy.first_argmax(logits.double()), V)
            candidate = one_hot_logits(drafts, V)
        else:
            new = TemperatureLogitsWarper(temperature)(None, logits)
            q = batch.draft_probs
            candidate = one_hot_logits(drafts, V) if q is None else torch.log(q[d0:d1].float())
        return drafts[None], candidate[None], d1 - d0, new[None]

    def _sample(self, batch: SpecBatch, *, method, noise: Noise | None, seed, synthetic_acceptance_rate,
                num_speculative_steps) -> SpecOutput:
        function, B, dev = self.function(), batch.num_requests, batch.device
        token_ids = torch.full((B, batch.max_draft + 1), -1, dtype=torch.int64, device=dev)
        num_accepted = torch.zeros(B, dtype=torch.int64, device=dev)
        seeds = conventions.request_seeds(seed, B).tolist() if noise is None else None
        offsets = batch.draft_offsets().tolist()
        for b in range(B):
            args = self.inputs(batch, b)
            if float(batch.temperature[b]) == 0:     # no noise (SPEC 3): r = 1 and a race over one-hot rows
                tokens, accepted = self.injected(function, args, torch.ones(args[2]), torch.ones(batch.vocab_size))
            elif noise is None:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seeds[b])
                    tokens, accepted = function(*args)
            else:
                tokens, accepted = self.injected(function, args, noise.uniform[offsets[b]:offsets[b + 1]],
                                                 noise.exponential[b])
            tokens = tokens.reshape(-1).to(dev, torch.int64)
            token_ids[b, :tokens.numel()] = tokens
            num_accepted[b] = int(accepted)
        return SpecOutput(token_ids, num_accepted)

    @staticmethod
    def injected(function, args: tuple, uniform: torch.Tensor, exponential: torch.Tensor) -> tuple:
        """One call with the given noise standing in for ``torch.rand_like`` and ``torch.multinomial``;
        RuntimeError when the function did not reach both."""
        draws = Draws(uniform, exponential)
        with conventions.patch_points(torch, {PATCH_POINTS["uniform"]: draws.rand_like,
                                              PATCH_POINTS["exponential"]: draws.multinomial}, "torch"):
            out = function(*args)
        if draws.reached != set(PATCH_POINTS):
            missing = ", ".join(PATCH_POINTS[p] for p in sorted(set(PATCH_POINTS) - draws.reached))
            raise RuntimeError(f"{FUNCTION} never reached torch.{missing}: the injected noise did not reach it; "
                               f"it draws otherwise than in transformers {VERSION}")
        return out


def speculative_sampling() -> SpeculativeSampling:
    return SpeculativeSampling()
