"""vLLM's MRV2 rejection sampler (``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.rejection_sample``)
behind specverify's convention.

    PYTHONPATH=/path/to/vllm specverify check specverify.adapters.vllm_mrv2:mrv2

Written against the same vLLM commit as ``specverify.adapters.vllm`` (``COMMIT``); vLLM is imported from
``sys.path`` on first use and every function called is checked against its parameters there.

MRV2's sampler decides a whole step in three Triton launches (block statistics, the rejection walk, the
Gumbel resample of the rejected or bonus token), drawing every random number in-kernel from the request's
seed and the token's position (``tl_rand64(seed, pos)`` for the acceptance test; Gumbel noise keyed by
``randint(seed, pos)``). No noise can be placed from outside, so the adapter declares the seeded path
only, with vLLM's own stream (checked statistically); it depends only on the request's seed and its
positions, so it is batch invariant. The bonus token is sampled inside the same call: nothing is
sampled by the adapter.

The call, as MRV2's ``RejectionSampler.__call__`` makes it:

- ``target_logits`` [T + B, V]: float32 logits with the temperature applied by vLLM's own
  ``gumbel.apply_temperature`` (the sampling step MRV2 runs before; no penalties, no filters);
- ``draft_logits`` [max_num_reqs, n, V]: ``log q`` per request state and step (None for a deterministic
  drafter: one-hot q);
- ``draft_sampled`` [T + B]: the input ids at the logit positions, so that the draft of step i is entry
  ``start + i + 1`` (entry ``start`` is the request's last verified token; the adapter puts 0);
- request states in reverse batch order (``idx_mapping``), positions ``pos`` counting from 0 within a
  request, temperature 0.0 for greedy requests, one seed per request;
- ``num_speculative_steps``: the synthetic setting's, else the batch's largest draft count (at least 1).

The output ``sampled`` [B, n + 1] is written only up to ``num_sampled`` (accepted + 1) per request: the
model runner reads no further, and the adapter pads the rest with -1. At the pinned commit MRV2 has no
block verification: the backend declares the standard and synthetic rules. At a rejection forced by the
synthetic rule MRV2, like V1, resamples the residual where SPEC 3 samples p (declared). On a GPU, a
target row that is NaN everywhere emits an id outside the vocabulary (declared on CUDA: a defect of
MRV2's Gumbel argmax, reported as a known deviation so that the run stays readable, never as a pass), and
past 8,192 logit rows at V = 262,144 its row offsets wrap in 32 bits (declared: docs/kernels.md).
"""

from __future__ import annotations

import torch

from reference import SpecBatch, SpecOutput
from specverify.adapters import conventions
from specverify.adapters.vllm import (COMMIT, DEVICES, IN_THE_2_32_CONTROL, INTERPRETED, PAST_THE_CONTROL,
                                      SYNTHETIC_LAW, SYNTHETIC_RESIDUAL, SYNTHETIC_SUPPORT, check_signatures)
from specverify.backends import ALL_LOGIT_DTYPES, Backend, Capabilities, Deviation
from specverify.checks.deviations import MethodDeviation

UTILS = "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils"
GUMBEL = "vllm.v1.worker.gpu.sample.gumbel"
RATES = "vllm.v1.spec_decode.utils"
SIGNATURES = {
    (UTILS, "rejection_sample"): ("target_logits", "draft_logits", "draft_sampled", "cu_num_logits", "pos",
                                  "idx_mapping", "expanded_idx_mapping", "expanded_local_pos", "temperature",
                                  "seed", "num_speculative_steps", "synthetic_conditional_rates", "use_fp64"),
    (GUMBEL, "apply_temperature"): ("logits", "expanded_idx_mapping", "temperature"),
    (RATES, "unconditional_to_conditional_rates"): ("rates",),
}
NAN_ROW_ARGMAX = ("gumbel_block_argmax on a GPU: with every real lane NaN, tl.max skips the NaNs and returns a "
                  "padded lane, so a NaN target row emits id >= V (docs/kernels.md)")
# The GPU's max skips NaN where the interpreter's NumPy argmax returns it: the defect shows on CUDA only,
# so the interpreter run does not declare it (a declared deviation that does not occur is reported).
NAN_ROW_IDS = r"emitted ids \[[0-9, ]+\] outside \[0, "
INT32_ROWS = ("real defect: _compute_block_stats_kernel and _rejection_kernel address the logits' rows as "
              "logit_idx * target_logits_stride, logit_idx an int32 program id or offset: past 2^31 elements (8,192 "
              "rows at V = 262,144) the offset wraps, and the launch faults on an H200: docs/kernels.md")
DEVIATIONS = (Deviation("token_distribution", "synthetic_rate", SYNTHETIC_RESIDUAL, SYNTHETIC_LAW),
              Deviation("int64_offsets", "rows_past_2_31", INT32_ROWS, PAST_THE_CONTROL),
              Deviation("int64_offsets", "rows_past_2_32", INT32_ROWS, IN_THE_2_32_CONTROL),
              # the nightly's examples meet a synthetic rejection with q = p; the ci profile's do not
              MethodDeviation("output_structure", "random", SYNTHETIC_RESIDUAL, SYNTHETIC_SUPPORT,
                              method="synthetic", intermittent=True)) + (
    () if INTERPRETED else (Deviation("nonfinite_rows", "rows", NAN_ROW_ARGMAX, NAN_ROW_IDS),))


class VllmMrv2(Backend):
    """MRV2's rejection_sample, with vLLM's own seeded stream."""

    name = "vllm-mrv2"
    capabilities = Capabilities(
        methods=frozenset({"standard", "synthetic"}), noise=frozenset({"seeded"}), devices=DEVICES,
        logit_dtypes=ALL_LOGIT_DTYPES, seeded_stream="own", empty_batches=False, deviations=DEVIATIONS,
        draft_probs_up_to_scale=True,
        notes=(f"vLLM {COMMIT[:12]}: MRV2 rejection_sample, noise drawn in-kernel from (seed, position)",
               "target logits: float32 with vLLM's apply_temperature; draft logits: log q",
               "no block verification at this commit", "cpu: vLLM's Triton kernels need TRITON_INTERPRET=1"))

    def __init__(self, modules: dict | None = None, use_fp64: bool = False) -> None:
        self._modules = modules          # tests pass stand-in modules; None: import vLLM on first use
        self.use_fp64 = use_fp64

    def modules(self) -> dict:
        if self._modules is None:
            self._modules = check_signatures(SIGNATURES, {}, "MRV2 rejection sampler")
        return self._modules

    def _sample(self, batch: SpecBatch, *, method, noise, seed, synthetic_acceptance_rate,
                num_speculative_steps) -> SpecOutput:
        mods, dev, B = self.modules(), batch.device, batch.num_requests
        k = batch.num_draft_tokens
        rates = None
        if method == "synthetic":
            steps = num_speculative_steps
            conditional = mods[RATES].unconditional_to_conditional_rates(
                conventions.unconditional_rates(synthetic_acceptance_rate, steps))
            rates = torch.tensor(conditional, dtype=torch.float32, device=dev)
        else:
            steps = max(batch.max_draft, 1)
        state = torch.arange(B - 1, -1, -1, device=dev)               # request b lives in state slot B - 1 - b
        rows = k + 1
        expanded_state = torch.repeat_interleave(state, rows)
        local = torch.arange(int(rows.sum()), device=dev) - torch.repeat_interleave(batch.logit_offsets()[:-1], rows)
        temperature = torch.empty(B, dtype=torch.float32, device=dev)
        temperature[state] = batch.temperature.float()
        seeds = torch.empty(B, dtype=torch.int64, device=dev)
        seeds[state] = conventions.request_seeds(seed, B).to(dev)
        logits = batch.target_logits.float().clone()
        mods[GUMBEL].apply_temperature(logits, conventions.int32_ids(expanded_state), temperature)
        draft_sampled = torch.zeros(logits.shape[0], dtype=torch.int32, device=dev)
        draft_sampled[conventions.draft_logit_rows(batch) + 1] = conventions.int32_ids(batch.draft_token_ids)
        draft_logits = None
        if batch.draft_probs is not None:
            draft_logits = torch.zeros(B, steps, batch.vocab_size, dtype=torch.float32, device=dev)
            request = torch.repeat_interleave(torch.arange(B, device=dev), k)
            step = local[conventions.draft_logit_rows(batch)]
            draft_logits[state[request], step] = batch.draft_probs.float().log()
        sampled, num_sampled = mods[UTILS].rejection_sample(
            logits, draft_logits, draft_sampled, conventions.cumulative_offsets(rows),
            local.to(torch.int64), conventions.int32_ids(state), conventions.int32_ids(expanded_state),
            conventions.int32_ids(local), temperature, seeds, steps, rates, use_fp64=self.use_fp64)
        count = num_sampled.to(torch.int64)
        width = batch.max_draft + 1
        keep = torch.arange(width, device=dev)[None, :] < count[:, None]
        tokens = torch.where(keep, sampled[:, :width].to(torch.int64), torch.full_like(keep, -1, dtype=torch.int64))
        return SpecOutput(tokens, count - 1)


def mrv2() -> VllmMrv2:
    return VllmMrv2()
