"""Deliberately buggy samplers: each is the correct CpuBackend with one step replaced.

Every class docstring names the bug and the seed report it reproduces (SPEC section 6); ``name`` is the
mutant's registry name. They exist to prove the harness catches each bug class; never use them.
"""

from __future__ import annotations

import torch

from reference import Noise, SpecBatch, SpecOutput
from reference.batch import FIELDS
from reference.sample import resolve_noise
from reference.synthetic import synthetic_params
from specverify.kernels.cpu import CpuBackend, Layout

VOCAB_TILE = 128  # the vocabulary block of the simulated tiled kernels


# ---- seed 002: draft probabilities ------------------------------------------------------------------------
class DraftProbsDropped(CpuBackend):
    """Draft probabilities never reach the sampler (q taken as one-hot) while drafts came from a real q (seed 002)."""

    name = "draft_probs_dropped"

    def draft_probs_for(self, batch):
        return None


# ---- seed 004: draft probability precision and stale state ----------------------------------------------
class DraftProbsBf16(CpuBackend):
    """Draft probabilities stored in bf16 instead of float32 (seed 004)."""

    name = "draft_probs_bf16"

    def draft_probs_for(self, batch):
        q = super().draft_probs_for(batch)
        return None if q is None else q.to(torch.bfloat16).to(torch.float32)


class StaleDraftProbs(CpuBackend):
    """Draft probabilities of the first call reused while shapes match, as a CUDA-graph replay that did not
    capture the draft-probs copy (seed 004)."""

    name = "stale_draft_probs"

    def __init__(self) -> None:
        self._captured: torch.Tensor | None = None

    def draft_probs_for(self, batch):
        q = super().draft_probs_for(batch)
        if q is None:
            return None
        if self._captured is None or self._captured.shape != q.shape:
            self._captured = q.clone()  # "capture": the static buffer is filled once
        return self._captured


# ---- seed 001: uninitialised memory and greedy argmax ---------------------------------------------------
class UnwrittenOutputSlots(CpuBackend):
    """Output slots after the emitted tokens are never written (no -1 fill of a torch.empty output) (seed 001)."""

    name = "unwritten_output_slots"

    def assemble_output(self, draft_padded, num_accepted, extra, K):
        B, device = num_accepted.shape[0], num_accepted.device
        token_ids = torch.empty((B, K + 1), dtype=torch.int64, device=device)
        slot = torch.arange(K + 1, device=device)[None, :]
        n = num_accepted[:, None]
        drafts = torch.cat([draft_padded, extra[:, None]], dim=1)  # width K + 1 for the mask below
        emitted = slot <= n
        token_ids[emitted] = torch.where(slot == n, extra[:, None], drafts)[emitted]
        return SpecOutput(token_ids, num_accepted.clone())


class UninitializedScratch(CpuBackend):
    """The race reads a vocabulary-padded scratch buffer whose padded lanes were never written: the result
    depends on whatever torch.empty returned (NaN garbage wins the argmax, an id >= V) (seed 001)."""

    name = "uninitialized_scratch"

    def race(self, w, exponential):
        R, V = w.shape
        Vp = -(-V // VOCAB_TILE) * VOCAB_TILE
        e_scratch = torch.empty((R, Vp), dtype=exponential.dtype, device=w.device)
        e_scratch[:, :V] = exponential                      # lanes V..Vp-1 are left as they were
        w_tiled = torch.zeros((R, Vp), dtype=w.dtype, device=w.device)
        w_tiled[:, :V] = w
        return (w_tiled / e_scratch).argmax(dim=1)


class GreedyHighestIndexTie(CpuBackend):
    """Greedy argmax resolves ties to the highest index, unlike the probabilistic path (seed 001)."""

    name = "greedy_highest_index_tie"

    def greedy_argmax(self, logits):
        V = logits.shape[1]
        return V - 1 - logits.flip(dims=(1,)).argmax(dim=1)


class GreedyLowPrecisionArgmax(CpuBackend):
    """Greedy argmax taken over probabilities rounded to bf16: near-ties collapse to the lowest index (seed 001)."""

    name = "greedy_low_precision_argmax"

    def greedy_argmax(self, logits):
        return torch.softmax(logits.to(torch.float32), dim=-1).to(torch.bfloat16).argmax(dim=1)


# ---- seed 000: synthetic mode ----------------------------------------------------------------------------
class SyntheticRateDefaultsToZero(CpuBackend):
    """An unset synthetic acceptance rate silently becomes 0.0 (every draft rejected) instead of a
    ValueError (seed 000); like the real bug, it fills the default before the shared validation sees it."""

    name = "synthetic_rate_defaults_to_zero"

    def __call__(self, batch, *, method="standard", noise=None, seed=None, synthetic_acceptance_rate=None,
                 num_speculative_steps=None):
        if method == "synthetic" and synthetic_acceptance_rate is None:
            synthetic_acceptance_rate = 0.0
        return super().__call__(batch, method=method, noise=noise, seed=seed,
                                synthetic_acceptance_rate=synthetic_acceptance_rate,
                                num_speculative_steps=num_speculative_steps)


class SyntheticDecayIgnored(CpuBackend):
    """Synthetic acceptance uses c_j = a0 at every position, dropping the decay g**j (seed 000)."""

    name = "synthetic_decay_ignored"

    def synthetic_rates(self, rate, num_speculative_steps):
        base_rate, _decay = synthetic_params(rate, num_speculative_steps)
        return torch.full((num_speculative_steps,), base_rate, dtype=torch.float32)


# ---- seed 003: interface ---------------------------------------------------------------------------------
class SignatureLag(CpuBackend):
    """Its __call__ lags the convention (no synthetic keywords): passing them is a TypeError (seed 003)."""

    name = "signature_lag"

    def __call__(self, batch, *, method="standard", noise=None, seed=None):  # noqa: D102 - the bug is the signature
        return super().__call__(batch, method=method, noise=noise, seed=seed)


# ---- public advisory and precision --------------------------------------------------------------------------
class PaddedVocabArgmax(CpuBackend):
    """Greedy argmax over the vocabulary padded to a multiple of 128 with 0.0 (a masked load's other=0.0)
    instead of -inf: a padded lane wins when every real logit is negative, emitting an id >= V
    (public advisory GHSA-8wr5-jm2h-8r4f)."""

    name = "padded_vocab_argmax"

    def greedy_argmax(self, logits):
        R, V = logits.shape
        Vp = -(-V // VOCAB_TILE) * VOCAB_TILE
        tiled = torch.zeros((R, Vp), dtype=torch.float32, device=logits.device)
        tiled[:, :V] = logits
        return tiled.argmax(dim=1)


class RaceLowPrecision(CpuBackend):
    """Exponential race scored in float16: tiny probabilities underflow to 0 and close scores tie to the
    lowest index (public: vLLM later added a float64 option)."""

    name = "race_low_precision"

    def residual(self, w, total, q):
        # Such a kernel holds the residual in probability units, max(p - q, 0), where it can be tiny.
        return super().residual(w / total[:, None], torch.ones_like(total), q).clamp_(min=0)

    def race(self, w, exponential):
        return (w.to(torch.float16) / exponential.to(torch.float16)).argmax(dim=1)


# ---- classic kernel bugs ------------------------------------------------------------------------------------
class OffByOneLogitsRow(CpuBackend):
    """Draft position j reads logit row j + 1, so the last draft is judged against the bonus row (classic)."""

    name = "off_by_one_logits_row"
    recover_while_deciding = False  # its draft rows are not the rows that emit the recovered token

    def draft_rows(self, lay: Layout):
        return super().draft_rows(lay) + 1


class ResidualUnclamped(CpuBackend):
    """Residual p - q not clamped at 0 before a log-space Gumbel race: log() of the negative entries is NaN,
    which argmax takes as the maximum, so a token with q > p is emitted (classic). (The correct backend's
    race divides instead, where an unclamped entry scores <= 0 and is never picked.)"""

    name = "residual_unclamped"

    def residual(self, w, total, q):
        return w - total[:, None] * q

    def race(self, w, exponential):
        return (torch.log(w) - torch.log(exponential)).argmax(dim=1)


class ResidualFromP(CpuBackend):
    """At a rejection the extra token is sampled from p instead of max(p - q, 0) (classic)."""

    name = "residual_from_p"

    def residual(self, w, total, q):
        return w


class ResidualWithoutFallback(CpuBackend):
    """A residual max(p - q, 0) that is zero everywhere (p == q up to rounding, a rejection that rounding alone
    allows) is raced as it is instead of falling back to p: every score ties at 0 and token 0 is emitted, whatever
    its probability (classic: a kernel that normalises or races the residual with no empty-row case)."""

    name = "residual_without_fallback"

    def empty_residual(self, w):
        return torch.zeros_like(w)


class FusedScaledLogit(CpuBackend):
    """A row's max and sum taken over the rounded float32 l * (1 / T), and each entry's exp(l * (1 / T) - max)
    with the product unrounded, as one fused multiply-add computes it: at temperature 0.001 the top token's p(x)
    exceeds 1 by up to half an ulp of l / T, about 5e-4 (classic: a GPU compiler contracts a multiply and a
    subtract into an FMA by default; the Triton interpreter never does)."""

    name = "fused_scaled_logit"

    def target_weights(self, logits, temperature):
        inv_t = (1.0 / temperature.to(torch.float32))[:, None]
        m = (logits.to(torch.float32) * inv_t).amax(dim=1, keepdim=True)
        # a float32 product is exact in float64: the fused multiply-add's unrounded l * (1 / T)
        w = torch.exp(logits.double() * inv_t.double() - m.double()).to(torch.float32)
        total = torch.exp(logits.to(torch.float32) * inv_t - m).sum(dim=1)
        return w, total


class AcceptWithZeroUniform(CpuBackend):
    """The acceptance uniform is floor-quantised to 8 bits, so u can be 0 and `u * q <= p` accepts drafts
    with p(x) = 0 (classic)."""

    name = "accept_with_zero_uniform"

    def accept_mask(self, u, p_x, q_x):
        u = torch.floor(u * 256) / 256
        return (q_x > 0) & (u * q_x <= p_x)


class BonusAfterRejection(CpuBackend):
    """The bonus slot k_b is written with the bonus token even when an earlier draft was rejected (classic)."""

    name = "bonus_after_rejection"

    def _sample(self, batch: SpecBatch, *, noise: Noise | None, seed, **kwargs) -> SpecOutput:
        if noise is None:
            noise = resolve_noise(batch, None, seed)
        out = super()._sample(batch, noise=noise, seed=None, **kwargs)
        device = batch.device
        bonus_rows = batch.target_logits.index_select(0, batch.logit_offsets()[1:] - 1)
        t = self.temperatures(batch)
        is_greedy = t == 0
        sampled = self.race(self.target_weights(bonus_rows, torch.where(is_greedy, torch.ones_like(t), t))[0],
                            noise.exponential.to(device=device, dtype=torch.float32))
        bonus = torch.where(is_greedy, self.greedy_argmax(bonus_rows), sampled)
        k = batch.num_draft_tokens
        rejected = out.num_accepted < k
        slot = torch.arange(out.token_ids.shape[1], device=device)[None, :]
        write = rejected[:, None] & (slot == k[:, None])
        return SpecOutput(torch.where(write, bonus[:, None], out.token_ids), out.num_accepted)


class NumAcceptedOffByOne(CpuBackend):
    """num_accepted counts the recovered token as accepted after a rejection (classic)."""

    name = "num_accepted_off_by_one"

    def _sample(self, batch, **kwargs):
        out = super()._sample(batch, **kwargs)
        rejected = out.num_accepted < batch.num_draft_tokens
        return SpecOutput(out.token_ids, out.num_accepted + rejected.to(torch.int64))


class TemperatureIgnored(CpuBackend):
    """Random requests are sampled at temperature 1 whatever their temperature (classic)."""

    name = "temperature_ignored"

    def temperatures(self, batch):
        t = super().temperatures(batch)
        return torch.where(t > 0, torch.ones_like(t), t)


class InputsIndexedAsContiguous(CpuBackend):
    """The target logits and the temperatures read by element index (``row * V + v``) from where each view
    starts, as a kernel that takes a data pointer and no strides does (classic): a caller's view, such as
    logits sliced from a vocabulary padded for tensor parallelism, is read with its padding and the rows
    after it."""

    name = "inputs_indexed_as_contiguous"

    def _sample(self, batch, **kwargs):
        fields = {f: getattr(batch, f) for f in FIELDS}
        for f in ("target_logits", "temperature"):
            t = fields[f]
            dense = torch.empty(t.shape, device="meta").stride()     # the strides t would have if contiguous
            fields[f] = torch.as_strided(t, t.shape, dense, t.storage_offset())
        return super()._sample(SpecBatch.assembled(fields, batch.allow_nonfinite, valid=True), **kwargs)


class RowOffsetsInInt32(CpuBackend):
    """Each logits row read at ``row * V`` computed in 32-bit integers (classic: an int32 program id or count
    times the row stride): past 2^31 elements the offset wraps, and the row read is another one, ``2^32``
    elements back, taken modulo the buffer as a kernel reading stale memory would. Runs on CUDA tensors
    (the CPU backend's torch ops), where such a batch fits."""

    name = "row_offsets_in_int32"
    offset_bits = 32
    signed = True

    def _sample(self, batch, **kwargs):
        logits = batch.target_logits
        rows, V = logits.shape
        wrap = 1 << self.offset_bits
        start = torch.arange(rows, dtype=torch.int64, device=logits.device) * V
        shift = wrap // 2 if self.signed else 0
        start = (start + shift) % wrap - shift          # the 32-bit product, signed or not
        start = (start % logits.numel()).clamp(max=logits.numel() - V)
        # every V-wide window of the buffer as a view: indexing it copies only the rows read
        read = logits.reshape(-1).unfold(0, V, 1)[start]
        fields = {f: getattr(batch, f) for f in FIELDS}
        fields["target_logits"] = read
        return super()._sample(SpecBatch.assembled(fields, batch.allow_nonfinite, valid=True), **kwargs)


class RowOffsetsInUint32(RowOffsetsInInt32):
    """The same offsets in unsigned 32-bit integers (classic in CUDA kernels: ``uint32_t`` block index times
    ``uint32_t d``): they wrap past 2^32 elements, so a batch under 2^32 is read right."""

    name = "row_offsets_in_uint32"
    signed = False


class SharedNoiseVector(CpuBackend):
    """Every request uses request 0's exponential vector (classic: one noise buffer for the batch)."""

    name = "shared_noise_vector"

    def exponential_for(self, noise):
        return noise.exponential[:1].expand_as(noise.exponential)


class AcceptAgainstP(CpuBackend):
    """The acceptance test compares u with p(x) instead of p(x) / q(x) (classic)."""

    name = "accept_against_p"

    def accept_mask(self, u, p_x, q_x):
        return u <= p_x


class GreedySplitTieToLaterPart(CpuBackend):
    """Greedy argmax over a vocabulary split in two at a 1024-wide tile (above one tile): each part's argmax, then the
    later part's where its value is at least the earlier one's. Right within a part; a tie across the split goes to
    the higher index (a split-V kernel's merge with >=)."""

    name = "greedy_split_tie_to_later_part"

    def greedy_argmax(self, logits):
        V = logits.shape[1]
        mid = V // 2 // 1024 * 1024
        if mid == 0:
            return super().greedy_argmax(logits)
        low = logits[:, :mid].max(dim=1)
        high = logits[:, mid:].max(dim=1)
        return torch.where(high.values >= low.values, high.indices + mid, low.indices)


# ---- public: noise at float32's boundaries ---------------------------------------------------------------
class UniformRoundedToFloat32(CpuBackend):
    """The acceptance uniform is used in float32 and p(x) = 0 is not excluded: a float64 uniform below
    float32's range rounds to 0, and 0 * q(x) <= 0 accepts a draft the target gives probability 0
    (vLLM #23803)."""

    name = "uniform_rounded_to_float32"

    def accept_mask(self, u, p_x, q_x):
        return (q_x > 0) & (u.to(torch.float32) * q_x <= p_x)


class ExponentialFloor(CpuBackend):
    """The race's exponential noise is clamped at float32's 2^-24 floor (as -log of a float32 uniform
    is), so a tail token that needs a smaller exponential is never drawn (vLLM #43150)."""

    name = "exponential_floor"

    def exponential_for(self, noise):
        return super().exponential_for(noise).clamp(min=2.0 ** -24)
