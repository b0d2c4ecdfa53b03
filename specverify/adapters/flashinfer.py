"""FlashInfer's ``flashinfer.sampling.chain_speculative_sampling`` behind specverify's convention.

    specverify check specverify.adapters.flashinfer:chain --profile nightly --device cuda

The kernel takes draft_probs [R, n, V] float32, draft_token_ids [R, n] int32 and target_probs
[R, n + 1, V] float32 for a fixed n, draws its own noise (Philox keyed by seed and offset, with the
row's slot in the launch as subsequence), and returns int32 output ids [R, n + 1], -1 after the
emitted ones, and counters it adds into. The adapter launches once per distinct draft count, passes
p' (temperature and filters applied; one-hot at the argmax for greedy requests) and one-hot q for a
deterministic drafter, and gives each request its own seed. FlashInfer is imported on first use
(``pip install specverify[flashinfer]``), so this module loads without it.
"""

from __future__ import annotations

import torch

from reference import SpecBatch, SpecOutput
from specverify.adapters import conventions
from specverify.backends import ALL_LOGIT_DTYPES, Backend, Capabilities, Deviation


def _chain_speculative_sampling():
    try:
        from flashinfer.sampling import chain_speculative_sampling  # noqa: PLC0415
    except ImportError as e:
        raise ImportError("the FlashInfer adapter needs FlashInfer: pip install specverify[flashinfer] "
                          f"(import failed: {e})") from e
    return chain_speculative_sampling


# Both come from one uninitialised shared-memory word: where no id is valid (a residual zero everywhere, a NaN row),
# the kernel emits temp_storage.last_valid_id, which it never sets, so what another launch or request left there.
STALE_FALLBACK = ("real defect: where max(p - q, 0) is zero everywhere (p == q up to rounding, a rejection only "
                  "rounding allows, as when the drafter is the target model), flashinfer-python 0.7.2.post1 finds no "
                  "valid id and emits last_valid_id from shared memory it never initialises: the id another "
                  "request's sample left there, or another kernel's bits (an id outside [0, V)), not a sample of p "
                  "(SPEC 3): docs/kernels.md")

STALE_SYMPTOMS = (r"of probability 0 emitted \(token, count\): \[\(\d+, \d+\)(, \(\d+, \d+\))*\]$"
                  r"|^output structure: request \d+: emitted ids \[[-\d, ]+\] outside \[0, \d+\)"
                  r"(; request \d+: emitted ids \[[-\d, ]+\] outside \[0, \d+\))*$"
                  r"|^position \d+: emitted ids outside \[0, \d+\): "
                  r"|^recovered token distribution differs from the exact one: ")


class FlashInferChain(Backend):
    """chain_speculative_sampling, launched per draft count, with FlashInfer's own seeded stream."""

    name = "flashinfer-chain"
    capabilities = Capabilities(
        methods=frozenset({"standard"}), noise=frozenset({"seeded"}), devices=frozenset({"cuda"}),
        logit_dtypes=ALL_LOGIT_DTYPES, seeded_stream="own", seeded_batch_invariant=False, target_filters=True,
        # the ids of a NaN row come from memory the kernel never writes: some runs meet only ids in range
        deviations=(Deviation("nonfinite_rows", "rows", "flashinfer-python 0.7.2.post1 emits ids outside [0, V) "
                              "(1074285135 at V = 64) for a request whose target_probs row is NaN: docs/kernels.md",
                              r"emitted ids \[\d+\] outside \[0, \d+\)", intermittent=True),
                    # every rejection of this case meets an empty residual: a token of probability 0 there, an id
                    # outside [0, V) (what another kernel left in that shared memory), or, among the rejections
                    # alone, a law that is not p's, is a stale id
                    *(Deviation(check, "residual_fallback", STALE_FALLBACK, STALE_SYMPTOMS)
                      for check in ("token_distribution", "recovered_distribution"))),
        notes=("probabilities in, float32: the adapter applies temperature and filters (p' in float64, rounded)",
               "greedy requests: one-hot target at the argmax",
               "Philox subsequence = slot in the launch: the seeded stream depends on batch position"))

    def __init__(self, kernel=None) -> None:
        self._kernel = kernel       # a stand-in with FlashInfer's signature (tests); None: FlashInfer's

    def _sample(self, batch: SpecBatch, *, method, noise, seed, synthetic_acceptance_rate,
                num_speculative_steps) -> SpecOutput:
        kernel = self._kernel or _chain_speculative_sampling()
        if seed is None:
            seed = int(torch.randint(0, 2 ** 62, (1,)))
        dev = batch.device
        seeds = conventions.request_seeds(seed, batch.num_requests).to(dev)
        p, q = conventions.target_probs(batch), conventions.draft_probs(batch)
        parts = []
        for group in conventions.split_by_draft_count(batch):
            R = group.requests.numel()
            accepted = conventions.zeroed_counter(R, dev)
            emitted = conventions.zeroed_counter(R, dev)
            tokens = kernel(conventions.rows_of(q, group.draft_rows), conventions.int32_ids(group.drafts(batch)),
                            conventions.rows_of(p, group.logit_rows), accepted, emitted, True, None,
                            seed=seeds[group.requests], offset=torch.zeros_like(seeds[group.requests]))
            tokens = tokens[0] if isinstance(tokens, tuple) else tokens
            parts.append((group, conventions.from_kernel_padding(tokens, -1), emitted))
        return conventions.assemble(batch.num_requests, batch.max_draft, parts, device=dev)


def chain() -> FlashInferChain:
    return FlashInferChain()
