"""The fused Triton sampler as a Backend: the common calling convention (specverify.backends) over
``triton_kernels.triton_sample_into``.

    TritonBackend(block_v=None, splits=None)      launch-plan overrides (None: the default plan)
    __call__(batch, method=, noise=, seed=, ...)  -> SpecOutput; SPEC section 1 shapes:
        batch.num_draft_tokens [B] int64, batch.draft_token_ids [T] int64,
        batch.target_logits [T + B, V] float32 / bfloat16 / float16, batch.draft_probs [T, V] float32 or None,
        batch.temperature [B] float32; noise.uniform [T] float32, noise.exponential [B, V] float32, or
        seed (int or [B] int64 tensor) for the in-kernel Philox stream (reference.philox's);
        batch.top_k / top_p / min_p [B] or None: SPEC 3.4 in float32 (``triton_filter``): pass 1, the cut
            launches, then pass 2 reading the cut; the block and tree rules run on ``filtered_logits``
        -> token_ids [B, max k_b + 1] int64, num_accepted [B] int64, on the batch's device
    sample_into(out, batch, method=, noise=, seed_tensor=, rates=)   the graph-capturable entry: writes out
        in place; seed_tensor [B] int64 request seeds, rates [n >= K] float32 synthetic conditional rates;
        method "tree" (SPEC 3.8) also writes out.accepted_nodes [B, K] and reads batch.tree_parents

CUDA tensors, or CPU tensors when the kernels run under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import functools
from contextlib import nullcontext

import torch

from reference import Noise, SpecBatch, SpecOutput
from reference import philox as ref_philox
from reference.sample import synthetic_rates_f32
from specverify.backends import ALL_LOGIT_DTYPES, Backend, Capabilities, UnsupportedError
from specverify.kernels.triton_chain import with_cut
from specverify.kernels.triton_filter import cut_launches, cut_splits
from specverify.kernels.triton_mask import mask_launch
from specverify.kernels.triton_kernels import interpreted, launches, triton_sample_into
from specverify.kernels.triton_launch import launch


@functools.lru_cache(maxsize=64)
def _rates_cpu(rate: float, num_speculative_steps: int) -> torch.Tensor:
    # The bisection runs in Python; a serving loop calls with the same setting every step.
    return synthetic_rates_f32(rate, num_speculative_steps)


def _cut(batch: SpecBatch, token_ids: torch.Tensor, num_accepted: torch.Tensor, options: dict,
         lazy: bool = False) -> tuple:
    """Pass 1 and the cut launch for ``batch``'s filters: (the pass-2 step reading the cut, the pass-1 step,
    the records), or None for an empty batch. ``options``: the caller's own dict of triton_sample_into's keyword
    arguments (noise or seeds, rates, block_v, splits), taken as it is, where a missing or None ``splits`` is
    set to ``cut_splits``' (a dict a few rows' host would otherwise copy twice); lazy: the cut may leave the
    rows uncut whose cut pass 2 does not need (``triton_filter.cut_launches``)."""
    logits = batch.target_logits
    if options.get("splits") is None:
        options["splits"] = cut_splits(batch.top_k, token_ids, logits)
    steps = launches(token_ids, num_accepted, batch.num_draft_tokens, batch.draft_token_ids, logits,
                     batch.draft_probs, batch.temperature, **options)
    if not steps:
        return None
    cut, record = cut_launches(steps[0], batch.top_k, batch.top_p, batch.min_p, steps[-1] if lazy else None)
    for step in cut:
        launch(*step)
    return with_cut(steps[-1], record), steps[0], record


def filtered_sample_into(token_ids: torch.Tensor, num_accepted: torch.Tensor, batch: SpecBatch, **kwargs) -> None:
    """The standard or synthetic rule on a filtered batch (SPEC 3.4): pass 1, the cut launch, pass 2 reading
    the cut. kwargs as triton_sample_into takes them (noise or seeds, rates, block_v, splits)."""
    cut = _cut(batch, token_ids, num_accepted, kwargs, True)
    if cut is not None:
        launch(*cut[0])


def filtered_logits(batch: SpecBatch) -> torch.Tensor:
    """[T + B, V] target logits with -inf outside each random request's filtered support (SPEC 3.4), decided
    in float32 on the device by ``triton_filter``: softmax over the kept logits is p', so the block and tree
    kernels, unchanged, compute p' from these rows. Greedy requests keep their rows."""
    B, dev = batch.num_requests, batch.device
    token_ids = torch.empty((B, batch.max_draft + 1), dtype=torch.int64, device=dev)
    cut = _cut(batch, token_ids, torch.empty(B, dtype=torch.int64, device=dev),
               {"seeds": torch.zeros(B, dtype=torch.int64, device=dev)})
    if cut is None:
        return batch.target_logits.clone()
    step, out = mask_launch(cut[1], cut[2])
    launch(*step)
    return out


def _interpreted() -> bool:
    """True when the kernels run under the Triton interpreter (TRITON_INTERPRET=1 at their import)."""
    return interpreted()


class TritonBackend(Backend):
    """The fused kernels behind the common calling convention (specverify.backends)."""

    name = "triton"
    capabilities = Capabilities(
        methods=frozenset({"standard", "synthetic", "block", "tree"}),
        noise=frozenset({"injected", "seeded"}),
        devices=frozenset({"cuda", "cpu"} if _interpreted() else {"cuda"}),
        logit_dtypes=ALL_LOGIT_DTYPES,
        seeded_stream="philox",
        cuda_graphs=True,
        target_filters=True,
        placeholders=True,
        notes=("float32 math; exp through ex2.approx, -log(u) of the seeded stream to a few ulps; no fused "
               "multiply-adds (every product rounded, as in the interpreter)",
               "draft_probs read only at the draft token and along the rejected row",
               "tree: one program per request walks the tree; one pass over the row per rejected sibling "
               "that another sibling follows (the residual's mass), then a split race",
               "target filters: float32 cuts by a search over values or a rank of a few candidates, no sort "
               "(not in sample_into); block and tree rules on -inf-masked logits",
               "cpu only under TRITON_INTERPRET=1"),
    )

    def __init__(self, *, block_v: int | None = None, splits: tuple[int, int] | None = None) -> None:
        self.block_v, self.splits = block_v, splits

    def _outputs(self, batch: SpecBatch, method: str) -> tuple:
        """(token_ids [B, K + 1], num_accepted [B], accepted_nodes [B, K] for "tree" else None), int64 and
        unwritten, on the batch's device: never on "cuda", which means whichever device is current."""
        B, K, dev = batch.num_requests, batch.max_draft, batch.device
        nodes = torch.empty((B, K), dtype=torch.int64, device=dev) if method == "tree" else None
        token_ids = torch.empty((B, K + 1), dtype=torch.int64, device=dev)
        return token_ids, torch.empty(B, dtype=torch.int64, device=dev), nodes

    @staticmethod
    def _device_guard(device: torch.device):
        """The batch's device made current around the launches: Triton launches on the current device and
        its current stream, whatever device the tensors live on, and the caller's current device may be
        another GPU (SPEC 7, placement)."""
        return torch.cuda.device(device) if device.type == "cuda" else nullcontext()

    def _sample(self, batch: SpecBatch, *, method: str, noise: Noise | None, seed,
                synthetic_acceptance_rate: float | None, num_speculative_steps: int | None) -> SpecOutput:
        outputs = self._outputs(batch, method)
        with self._device_guard(batch.device):
            self._launch(outputs, batch, method, noise, seed, synthetic_acceptance_rate, num_speculative_steps)
        return SpecOutput(*outputs)

    def _launch(self, outputs: tuple, batch: SpecBatch, method: str, noise: Noise | None, seed,
                synthetic_acceptance_rate: float | None, num_speculative_steps: int | None) -> None:
        """The launches of one call, writing ``outputs`` (``_outputs``) in place."""
        B, dev = batch.num_requests, batch.device
        token_ids, num_accepted, nodes = outputs
        tree = dict(accepted_nodes=nodes, tree_parents=batch.tree_parents) if method == "tree" else {}
        rates = None
        if method == "synthetic":
            rates = _rates_cpu(float(synthetic_acceptance_rate), num_speculative_steps).to(dev)
        kwargs = {}
        if noise is not None:
            kwargs.update(uniform=noise.uniform.to(dev), exponential=noise.exponential.to(dev))
        else:
            if seed is None:
                seed = int(torch.randint(0, 2**62, (1,)))
            kwargs.update(seeds=ref_philox.request_seeds(seed, B).to(dev))
        filtered = any(f is not None for f in (batch.top_k, batch.top_p, batch.min_p))
        if filtered and method in ("standard", "synthetic"):
            filtered_sample_into(token_ids, num_accepted, batch, rates=rates, block_v=self.block_v,
                                 splits=self.splits, **kwargs)
            return
        logits = filtered_logits(batch) if filtered else batch.target_logits
        triton_sample_into(token_ids, num_accepted, batch.num_draft_tokens, batch.draft_token_ids,
                           logits, batch.draft_probs, batch.temperature, rates=rates, block=method == "block",
                           block_v=self.block_v, splits=self.splits, **tree, **kwargs)

    def sample_into(self, out: SpecOutput, batch: SpecBatch, *, method: str = "standard", noise: Noise | None = None,
                    seed_tensor: torch.Tensor | None = None, rates: torch.Tensor | None = None) -> None:
        """Graph-capturable entry (Backend.sample_into): the kernels on the given tensors, nothing else."""
        if (method == "synthetic") != (rates is not None):
            raise ValueError("sample_into: rates must be given exactly when method='synthetic'")
        if batch.top_k is not None or batch.top_p is not None or batch.min_p is not None:
            # the cut launches sync nothing with the host, but their work space is cached per stream and
            # reused between calls, which a captured graph would freeze; capture is not tested yet
            raise UnsupportedError(self.name, "target filters in sample_into (CUDA-graph capture)", [])
        noise_kw = (dict(uniform=noise.uniform, exponential=noise.exponential) if noise is not None
                    else dict(seeds=seed_tensor))
        if method == "tree":    # out.accepted_nodes [B, K] is written too
            if out.accepted_nodes is None:
                raise ValueError("sample_into: method='tree' writes out.accepted_nodes [B, K]; it is None")
            noise_kw.update(accepted_nodes=out.accepted_nodes, tree_parents=batch.tree_parents)
        with self._device_guard(out.token_ids.device):
            triton_sample_into(out.token_ids, out.num_accepted, batch.num_draft_tokens, batch.draft_token_ids,
                               batch.target_logits, batch.draft_probs, batch.temperature, rates=rates,
                               block=method == "block", block_v=self.block_v, splits=self.splits, **noise_kw)
