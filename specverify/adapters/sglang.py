"""SGLang's tree verifiers (sgl-kernel) behind specverify's convention (SPEC 3.8, token trees).

    specverify check specverify.adapters.sglang:tree_target_only --profile nightly --device cuda
    specverify check specverify.adapters.sglang:tree_greedy --profile nightly --device cuda

Two entries of ``sgl_kernel`` (sgl-kernel/python/sgl_kernel/speculative.py), both on SGLang's linked-list
trees: ``[B, W]`` int64 ``candidates``, ``retrive_index``, ``retrive_next_token``, ``retrive_next_sibling``
with W = max N_b + 1 slots per request, slot 0 the root (``specverify.adapters.tree_layout``):

- ``tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates,
  retrive_index, retrive_next_token, retrive_next_sibling, uniform_samples [B, W],
  uniform_samples_for_final_sampling [B], target_probs [B, W, V], draft_probs [B, W, V],
  threshold_single, threshold_acc, deterministic)``. A target-only rule: the drafter is one-hot (EAGLE's
  top-k tokens): the adapter declares ``dense_draft_probs=False``, so a batch whose random requests carry
  ``draft_probs`` is refused (UnsupportedError) and the dense-drafter cases are n/a;
  ``draft_probs`` is the kernel's scratch (it writes the rejected siblings' target probabilities there),
  fresh zeros per call, and passed only to an entry that takes it (later releases dropped it).
  At a node the kernel draws one coin (``uniform_samples`` at the node's slot) and accepts the first
  child c, in sibling order, with coin <= p(x_1) + ... + p(x_c): inverse-CDF sampling of p over the
  siblings' tokens; where no child is accepted it samples relu(p - rejected) with the final coin by
  inverse CDF. The thresholds are fixed at 1.0: below 1 the rule accepts drafts the target would
  reject (lossy, SPEC 3.8), and this adapter never calls it that way.
- ``verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrive_index,
  retrive_next_token, retrive_next_sibling, target_predict [B, W])``: descend into the first child whose
  token is the target's argmax at its parent's slot, else emit that argmax. SGLang calls it when every
  request of the batch is greedy and the sampling kernel otherwise; ``tree_greedy`` makes the same choice.

Outputs, as the engine reads them: ``accept_token_num[b]`` accepted nodes, ``accept_index[b, 0..a]``
the flat slots (b * W + slot) of the root and the accepted path, and the emitted tokens
``predicts[accept_index[b, j]]`` for j = 0..a (the last one the final token). The adapter rebuilds
token_ids, num_accepted and accepted_nodes (slot - 1) from those three tensors, never from its inputs.

Noise: the kernel takes its uniforms from the caller; the adapter draws them per request from a
counter-based stream keyed by the request's seed (reference.philox's Philox4x32-10 on streams of its
own), so a request's draw does not depend on the batch around it. The final token is drawn by inverse
CDF, which the reference's exponential race cannot reproduce: the seeded stream is declared "own" and
checked statistically. The kernel module is ``$SPECVERIFY_SGLANG_MODULE`` (default ``sgl_kernel``),
imported on first use, or one given to the backend (a stand-in with the same signatures, in the tests).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os

import numpy as np
import torch

from reference import SpecBatch, SpecOutput, greedy, philox, tree
from specverify.adapters import conventions
from specverify.adapters.tree_layout import to_linked_lists
from specverify.backends import ALL_LOGIT_DTYPES, Backend, Capabilities, Deviation

MODULE_VARIABLE = "SPECVERIFY_SGLANG_MODULE"
DEFAULT_MODULE = "sgl_kernel"
# Philox streams of this adapter's own noise (the reference's are 0 and 1): a coin per slot, and the
# final coin at counter 0 of its stream.
STREAM_COINS, STREAM_FINAL = 0x5617, 0x5618
THRESHOLD = 1.0     # threshold_single and threshold_acc: the lossless setting, the only one this adapter uses

def kernel_module(module=None):
    """The module holding SGLang's entry points: ``module`` itself, or ``$SPECVERIFY_SGLANG_MODULE``."""
    if module is not None:
        return module
    name = os.environ.get(MODULE_VARIABLE, DEFAULT_MODULE)
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ImportError(f"the SGLang adapter needs {name!r} (pip install sgl-kernel, or set {MODULE_VARIABLE} "
                          f"to a module with its entry points; import failed: {e})") from e


def own_uniforms(seeds: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(coins [B, W] float32, final coins [B] float32) in (0, 1): Philox keyed by each request's seed, at
    counters (slot, STREAM_COINS) and (0, STREAM_FINAL). A request's coins depend only on its own seed."""
    keys = seeds.cpu().to(torch.int64).numpy().view(np.uint64)[:, None]
    k0, k1 = keys & np.uint64(philox.MASK32), keys >> np.uint64(32)
    slots = np.arange(max(width, 1), dtype=np.uint64)[None, :]
    bits, _, _, _ = philox.philox4x32_numpy(slots, STREAM_COINS, 0, 0, k0, k1)
    final, _, _, _ = philox.philox4x32_numpy(np.zeros((1, 1), dtype=np.uint64), STREAM_FINAL, 0, 0, k0, k1)
    coins = philox.bits_to_uniform(torch.from_numpy(bits.astype(np.int64)))[:, :width]
    return coins, philox.bits_to_uniform(torch.from_numpy(final.astype(np.int64)))[:, 0]


@dataclasses.dataclass(frozen=True)
class Launch:
    """One batch in SGLang's layout: B requests, W slots each, S = deepest tree + 1 accept_index columns."""

    B: int
    W: int
    S: int
    candidates: torch.Tensor
    retrive_index: torch.Tensor
    retrive_next_token: torch.Tensor
    retrive_next_sibling: torch.Tensor
    slot_rows: torch.Tensor         # [T + B] the flat slot (b * W + slot) of each of the batch's target rows


def launch_layout(batch: SpecBatch) -> Launch:
    dev, k = batch.device, batch.num_draft_tokens
    B = batch.num_requests
    W = batch.max_draft + 1 if B else 1
    parents = tree.parents_of(batch)
    S = tree.max_depth(parents, k) + 1
    linked = to_linked_lists(k, batch.draft_token_ids, parents, width=W)
    # request b's rows: the root (slot 0), then node i at slot i + 1
    request = conventions.row_requests(batch)
    local = torch.arange(request.shape[0], device=dev) - batch.logit_offsets()[:-1][request]
    return Launch(B, W, S, linked.candidates.contiguous(), linked.retrive_index.contiguous(),
                  linked.retrive_next_token.contiguous(), linked.retrive_next_sibling.contiguous(),
                  request * W + local)


def outputs(batch: SpecBatch, launch: Launch, predicts: torch.Tensor, accept_index: torch.Tensor,
            accept_token_num: torch.Tensor) -> SpecOutput:
    """SpecOutput from the kernel's outputs, read as SGLang's engine reads them: the emitted tokens are
    predicts[accept_index[b, j]] for j <= accept_token_num[b]. A slot index outside [0, B * W) reads as -1
    (an invalid id the output checks report), never as a clamped neighbour."""
    dev, B, W, S = batch.device, launch.B, launch.W, launch.S
    K = batch.max_draft
    a = accept_token_num.to(device=dev, dtype=torch.int64)
    index = accept_index.to(device=dev, dtype=torch.int64)
    j = torch.arange(S, device=dev)
    emitted = j[None, :] <= a[:, None]
    inside = (index >= 0) & (index < B * W)
    tokens = torch.where(emitted & inside, predicts.to(dev, torch.int64)[index.clamp(0, max(B * W - 1, 0))], -1)
    token_ids = torch.full((B, K + 1), -1, dtype=torch.int64, device=dev)
    width = min(S, K + 1)
    token_ids[:, :width] = tokens[:, :width]
    nodes = index[:, 1:] - torch.arange(B, device=dev)[:, None] * W - 1
    nodes = torch.where((j[None, 1:] <= a[:, None]) & inside[:, 1:], nodes, -1)
    accepted_nodes = torch.full((B, K), -1, dtype=torch.int64, device=dev)
    accepted_nodes[:, :min(S - 1, K)] = nodes[:, :min(S - 1, K)]
    return SpecOutput(token_ids, a, accepted_nodes)


DUPLICATE_SIBLINGS = ("real defect: the kernel tests each sibling against a running sum of the siblings' target "
                      "probabilities that adds a token once per copy, so a token drafted twice under one parent is "
                      "accepted again where SPEC 3.8 gives its second copy nothing; SGLang's own tree builder gives "
                      "a parent distinct tokens and never meets it: docs/kernels.md")
DUPLICATE_SYMPTOM = r"^sequence\(s\) of probability 0 emitted \(sequence, count\): "
ZERO_COIN = ("real defect: a child is accepted when its coin is at most the running sum of its siblings' target "
             "probabilities, so a coin of 0 (torch.rand draws it once in 2^24) accepts a first child of "
             "probability 0, which SPEC 3.8's u q(x) <= r(x) with u > 0 never does: docs/kernels.md")
ZERO_COIN_SYMPTOM = (r"^every uniform at 0 \(coins\): request \d+: accepted node \d+'s token \d+ at depth \d+ has "
                     r"probability 0 under the residual it came from$")
TOP_COIN = ("real defect: where a node's children cover its row's support, their float32 running sum can end below "
            "a coin of 1 - 2^-24 (torch.rand's largest), every child is rejected, the residual is zero, and the "
            "inverse-CDF fallback emits V - 1 whatever its probability; SPEC 3.8 accepts the last child: "
            "docs/kernels.md")
TOP_COIN_SYMPTOM = (r"^every uniform at 1 - 2\^-24 \(coins\): request \d+: final token \d+ at depth \d+ has "
                    r"probability 0 under the residual it came from$")


class SGLangTree(Backend):
    """SGLang's tree verification, one kernel entry or the engine's choice between the two."""

    name = "sglang-tree"
    capabilities = Capabilities(
        methods=frozenset({"tree"}), noise=frozenset({"seeded", "coins"}), devices=frozenset({"cuda"}),
        logit_dtypes=ALL_LOGIT_DTYPES, seeded_stream="own", seeded_batch_invariant=True, target_filters=True,
        dense_draft_probs=False,   # the target-only rule: its test reads p alone, draft_probs is scratch
        deviations=(Deviation("sequence_distribution", "tree_duplicate_siblings", DUPLICATE_SIBLINGS,
                              DUPLICATE_SYMPTOM),
                    Deviation("boundary_coins", "tree_zero_mass_siblings", ZERO_COIN, ZERO_COIN_SYMPTOM),
                    Deviation("boundary_coins", "tree_covered_support", TOP_COIN, TOP_COIN_SYMPTOM)),
        notes=("probabilities in, float32: the adapter applies temperature and filters (p' in float64, rounded)",
               "one-hot drafter only (target-only rule): draft_probs with a random request is UnsupportedError",
               "threshold_single = threshold_acc = 1.0 (lossless); lower thresholds are never called",
               "own seeded stream: coins per slot and a final coin per request, Philox keyed by the request seed",
               "fixed coins (coin=c): every node coin and every final coin c"))

    def __init__(self, module=None, *, greedy_entry: bool = False, devices=None) -> None:
        self._module = module           # a stand-in with sgl_kernel's signatures (tests); None: the env's module
        self._greedy_entry = greedy_entry
        if greedy_entry:
            self.name = "sglang-tree-greedy"
        else:
            self.name = "sglang-tree-target-only"
        if devices is not None:
            self.capabilities = dataclasses.replace(self.capabilities, devices=frozenset(devices))

    def _sample(self, batch: SpecBatch, *, method, noise, seed, synthetic_acceptance_rate,
                num_speculative_steps) -> SpecOutput:
        return self._verify(batch, seed, None)

    def _sample_at_coin(self, batch: SpecBatch, coin: float, *, seed, method, synthetic_acceptance_rate,
                        num_speculative_steps) -> SpecOutput:
        """Every node coin and final coin at ``coin`` (SPEC 2, fixed coins): the kernel's uniforms, as
        SGLang's engine draws them with torch.rand, can be 0 and 1 - 2^-24. The greedy entry draws none."""
        return self._verify(batch, seed, coin)

    def _verify(self, batch: SpecBatch, seed, coin: float | None) -> SpecOutput:
        """The engine's choice of entry on ``batch``; the sampling entry's coins from the adapter's own stream
        under ``seed``, or all equal to ``coin``."""
        module = kernel_module(self._module)
        launch = launch_layout(batch)
        B, W, dev = launch.B, launch.W, batch.device
        predicts, accept_index, accept_token_num = _kernel_outputs(launch, dev)
        links = (launch.candidates, launch.retrive_index, launch.retrive_next_token, launch.retrive_next_sibling)
        if B == 0:
            return outputs(batch, launch, predicts, accept_index, accept_token_num)
        if self._greedy_entry and bool((batch.temperature == 0).all()):
            # SGLang's engine: verify_tree_greedy when every request is greedy; target_predict is the
            # argmax of each slot's target logits (torch.argmax: the first maximal index)
            target_predict = torch.zeros(B * W, dtype=torch.int64, device=dev)
            target_predict[launch.slot_rows] = greedy.first_argmax(batch.target_logits.double())
            module.verify_tree_greedy(predicts=predicts, accept_index=accept_index, accept_token_num=accept_token_num,
                                      candidates=links[0], retrive_index=links[1], retrive_next_token=links[2],
                                      retrive_next_sibling=links[3], target_predict=target_predict.view(B, W))
            return outputs(batch, launch, predicts, accept_index, accept_token_num)
        if coin is not None:
            return target_only(module, batch, launch, torch.full((B, W), coin, dtype=torch.float32),
                               torch.full((B,), coin, dtype=torch.float32))
        if seed is None:
            seed = int(torch.randint(0, 2 ** 62, (1,)))
        coins, final = own_uniforms(conventions.request_seeds(seed, B), W)
        return target_only(module, batch, launch, coins, final)


def _kernel_outputs(launch: Launch, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(predicts [B * W], accept_index [B, S], accept_token_num [B]) int32, as SGLang's engine allocates them, with
    -1 and 0 where the kernel writes nothing."""
    return (torch.full((launch.B * launch.W,), -1, dtype=torch.int32, device=device),
            torch.full((launch.B, launch.S), -1, dtype=torch.int32, device=device),
            torch.zeros(launch.B, dtype=torch.int32, device=device))


def target_only(module, batch: SpecBatch, launch: Launch, coins: torch.Tensor, final: torch.Tensor) -> SpecOutput:
    """``module.tree_speculative_sampling_target_only`` on ``batch`` laid out as ``launch``, with the node coins
    ``coins`` [B, W] and the final coins ``final`` [B] (float32), its outputs read as the engine reads them."""
    B, W, V, dev = launch.B, launch.W, batch.vocab_size, batch.device
    predicts, accept_index, accept_token_num = _kernel_outputs(launch, dev)
    target_probs = torch.zeros(B * W, V, dtype=torch.float32, device=dev)
    target_probs[launch.slot_rows] = conventions.target_probs(batch)
    call = dict(predicts=predicts, accept_index=accept_index, accept_token_num=accept_token_num,
                candidates=launch.candidates, retrive_index=launch.retrive_index,
                retrive_next_token=launch.retrive_next_token, retrive_next_sibling=launch.retrive_next_sibling,
                uniform_samples=coins.to(dev).contiguous(),
                uniform_samples_for_final_sampling=final.to(dev).contiguous(), target_probs=target_probs.view(B, W, V),
                draft_probs=torch.zeros(B, W, V, dtype=torch.float32, device=dev),
                threshold_single=THRESHOLD, threshold_acc=THRESHOLD, deterministic=True)
    entry = module.tree_speculative_sampling_target_only
    if not _takes(entry, "draft_probs"):    # later sgl-kernel releases dropped the scratch argument
        del call["draft_probs"]
    entry(**call)
    return outputs(batch, launch, predicts, accept_index, accept_token_num)


def _takes(fn, name: str) -> bool:
    """Whether ``fn`` has a parameter ``name`` (True when its signature cannot be read)."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True


def tree_target_only(module=None, devices=None) -> SGLangTree:
    """``tree_speculative_sampling_target_only`` for every request (greedy ones with a one-hot target)."""
    return SGLangTree(module, devices=devices)


def tree_greedy(module=None, devices=None) -> SGLangTree:
    """SGLang's verify step: ``verify_tree_greedy`` when the whole batch is greedy, else the sampling kernel."""
    return SGLangTree(module, greedy_entry=True, devices=devices)
