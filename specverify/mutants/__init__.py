"""The mutant zoo: deliberately buggy samplers the harness must catch, one bug class each.

``MUTANTS[name]`` records how to build the mutant (``factory``: a zero-argument callable giving a backend,
or for ``kind == "alignment"`` the buggy alignment function itself, same signature as
``reference.align_draft_probs``), its bug class, the seed report it reproduces ("000".."004", "public"
for the public advisory/precision issues, "classic" for textbook kernel bugs), and ``expected_checks``:
the harness checks expected to catch it (at least one must, in the ci profile). ``requires`` names what a
mutant needs to run ("cuda": a GPU; "cuda2": two GPUs of one host; tests select it only where that many
are visible, the test id says so) and ``control`` the correct built-in backend it is a variation of.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

from specverify.checks import CHECKS
from specverify.mutants import block, filters, nonfinite, samplers
from specverify.mutants.tree import TREE_MUTANTS, TreeEmptyResidualNotKept
from specverify.mutants.alignment import align_draft_probs_skipping_nothing
from specverify.mutants.statistical_only import (DraftProbsBf16OwnStream, GreedyHighestIndexTieOwnStream,
                                                 GreedySampledOwnStream, PaddedTileOwnStream,
                                                 ResidualAgainstScaledQOwnStream, ResidualFallbackToArgmaxOwnStream,
                                                 ResidualFallbackToLastIdOwnStream, ResidualWithoutFallbackOwnStream,
                                                 SplitVocabOutOfRangeOwnStream, ZeroCoinAcceptsOwnStream)

# The names a mutant may list: every declared check, and the alignment check that takes a function.
CHECK_NAMES = frozenset(CHECKS) | {"request_alignment"}
KINDS = ("sampler", "alignment", "graph", "placement")
# What a mutant may need to run: nothing, a GPU, two GPUs of one host.
REQUIRES = (None, "cuda", "cuda2")
GPUS_REQUIRED = {None: 0, "cuda": 1, "cuda2": 2}


@dataclass(frozen=True)
class Mutant:
    name: str
    factory: Callable
    bug_class: str
    seed: str
    expected_checks: tuple[str, ...]
    # "sampler": factory() is a backend; "alignment": factory is the alignment function; "graph": factory()
    # is a backend whose bug lives only in its graph-capturable sample_into (its eager calls are correct);
    # "placement": factory() is a backend whose calls are correct wherever the caller's current device and
    # stream are the batch's (SPEC 7): only a call from another device or stream shows its bug
    kind: str = "sampler"
    profile: str = "ci"    # the profile whose sample sizes catch it
    cases: tuple[str, ...] = ()  # restrict the expected checks to these cases (all when empty)
    requires: str | None = None  # "cuda" / "cuda2": runs only where 1 / 2 GPUs are visible (tests say so in their id)
    control: str = "cpu"         # the correct built-in backend it is a variation of
    # replicated requests per statistical case where the profile plans per position for a GPU (the
    # nightly) but the mutant runs on the CPU: a fixed count whose power its test computes
    stat_copies: int | None = None

    def __post_init__(self) -> None:
        unknown = set(self.expected_checks) - CHECK_NAMES
        if unknown or not self.expected_checks:
            raise ValueError(f"mutant {self.name!r}: unknown or missing expected checks {sorted(unknown)}")
        if self.kind not in KINDS:
            raise ValueError(f"mutant {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.requires not in REQUIRES:
            raise ValueError(f"mutant {self.name!r}: requires must be one of {REQUIRES}, got {self.requires!r}")

    def build(self):
        """A fresh backend (sampler, graph, placement) or the alignment function."""
        return self.factory if self.kind == "alignment" else self.factory()


DIFF = ("differential_injected", "differential_seeded")


def _graph_mutant():
    from specverify.mutants.graphs import StaleDraftProbsGraph  # noqa: PLC0415
    return StaleDraftProbsGraph()


def _placement_mutant(name: str):
    from specverify.mutants.placement import PLACEMENT_MUTANTS  # noqa: PLC0415 (imports the Triton backend)
    return PLACEMENT_MUTANTS[name]()


def _sampler(cls, bug_class: str, seed: str, checks: tuple[str, ...]) -> Mutant:
    return Mutant(cls.name, cls, bug_class, seed, checks)


_ALL = [
    _sampler(samplers.DraftProbsDropped, "draft probabilities dropped (one-hot q) while drafts come from a real q",
             "002", DIFF + ("token_distribution", "acceptance_rate")),
    _sampler(samplers.DraftProbsBf16, "draft probabilities stored in bf16", "004",
             DIFF + ("token_distribution",)),
    _sampler(samplers.StaleDraftProbs, "stale draft probabilities reused (CUDA-graph replay did not capture them)",
             "004", ("repeated_calls",) + DIFF),
    _sampler(samplers.UnwrittenOutputSlots, "output slots after the emitted tokens left unwritten", "001",
             ("uninitialized_memory", "output_structure")),
    _sampler(samplers.UninitializedScratch, "result depends on uninitialised scratch memory", "001",
             ("uninitialized_memory", "output_structure")),
    _sampler(samplers.GreedyHighestIndexTie, "greedy argmax breaks ties at the highest index", "001",
             DIFF + ("greedy_agreement",)),
    _sampler(samplers.GreedyLowPrecisionArgmax, "greedy argmax of probabilities rounded to bf16", "001",
             DIFF + ("greedy_agreement",)),
    _sampler(samplers.SyntheticRateDefaultsToZero, "unset synthetic rate defaults to 0.0 instead of an error",
             "000", ("synthetic_validation",)),
    _sampler(samplers.SyntheticDecayIgnored, "synthetic decay ignored (c_j = a0 at every position)", "000",
             ("synthetic_rate",) + DIFF),
    _sampler(samplers.SignatureLag, "signature lags the convention (no synthetic keywords): TypeError", "003",
             ("interface_parity",)),
    Mutant("alignment_skipping_nothing", align_draft_probs_skipping_nothing,
           "cached draft probabilities mis-aligned when a zero-draft request precedes", "002",
           ("request_alignment",), kind="alignment"),
    _sampler(samplers.PaddedVocabArgmax, "padded lane of the last vocabulary tile wins the argmax (id >= V)",
             "public", ("output_structure",) + DIFF),
    _sampler(samplers.RaceLowPrecision, "exponential race computed in float16", "public",
             DIFF + ("token_distribution",)),
    _sampler(samplers.OffByOneLogitsRow, "off-by-one logits row (bonus row used for a draft position)", "classic",
             DIFF + ("token_distribution", "acceptance_rate")),
    _sampler(samplers.ResidualUnclamped, "residual p - q not clamped at 0", "classic",
             DIFF + ("token_distribution",)),
    _sampler(samplers.ResidualFromP, "residual sampled from p instead of max(p - q, 0)", "classic",
             DIFF + ("token_distribution",)),
    Mutant(samplers.ResidualWithoutFallback.name, samplers.ResidualWithoutFallback,
           "a residual zero everywhere (p == q up to rounding) raced as it is, not p", "classic",
           ("differential_injected", "token_distribution"), cases=("boundary", "residual_fallback")),
    Mutant(samplers.FusedScaledLogit.name, samplers.FusedScaledLogit,
           "p(x) from a fused l * (1 / T) - max against a row normalised over the rounded product", "classic",
           ("differential_injected",), cases=("boundary",)),
    _sampler(samplers.AcceptWithZeroUniform, "acceptance uniform can be 0: accepts drafts with p = 0", "classic",
             DIFF + ("token_distribution", "acceptance_rate")),
    _sampler(samplers.BonusAfterRejection, "bonus token emitted after a rejection", "classic",
             ("output_structure",) + DIFF),
    _sampler(samplers.NumAcceptedOffByOne, "num_accepted off by one after a rejection", "classic",
             ("output_structure",) + DIFF),
    _sampler(samplers.TemperatureIgnored, "temperature ignored (sampled at temperature 1)", "classic",
             DIFF + ("token_distribution",)),
    _sampler(samplers.InputsIndexedAsContiguous, "target logits and temperatures indexed as if contiguous "
             "(row * V + v): a strided view's padding and next rows read", "classic", ("strided_inputs",)),
    _sampler(samplers.SharedNoiseVector, "the same exponential noise vector shared by all requests", "classic",
             DIFF + ("batch_invariance", "token_distribution")),
    _sampler(samplers.AcceptAgainstP, "acceptance compared against p instead of p / q", "classic",
             DIFF + ("acceptance_rate", "token_distribution")),
    Mutant(samplers.RowOffsetsInInt32.name, samplers.RowOffsetsInInt32, "logits row offsets computed in 32 bits "
           "(row * V wraps past 2^31 elements: another row read)", "classic", ("int64_offsets",), requires="cuda"),
    Mutant(samplers.RowOffsetsInUint32.name, samplers.RowOffsetsInUint32, "logits row offsets computed in unsigned "
           "32 bits (row * V wraps past 2^32 elements only)", "classic", ("int64_offsets",),
           cases=("rows_past_2_32",), requires="cuda"),
    # imported lazily: the Triton module compiles nothing at import, but keeps the zoo importable without it
    Mutant("stale_draft_probs_graph", lambda: _graph_mutant(), "draft probabilities not written during CUDA-graph "
           "replay (stale state in the captured graph)", "004", ("cuda_graphs",), kind="graph", requires="cuda",
           control="triton"),
]

_ALL.append(Mutant(DraftProbsBf16OwnStream.name, DraftProbsBf16OwnStream,
                   "draft probabilities stored in bf16, own noise stream: only statistics can see it", "004",
                   ("acceptance_rate",), profile="dev", cases=("bf16_sensitive",)))
_ALL += [Mutant(cls.name, cls, bug, "classic", DIFF, cases=("filters",)) for cls, bug in (
    (filters.FilterMissingFromRecovered, "target filters missing from the recovered token"),
    (filters.FilterMissingFromBonus, "target filters missing from the bonus token"),
    (filters.TopKWithoutTies, "top-k keeps exactly k tokens, dropping ties at the k-th value"),
    (filters.TopPUnsorted, "top-p prefix taken in vocabulary order, probabilities unsorted"),
    (filters.FiltersAppliedToQ, "target filters applied to the draft distribution q as well"))]
# at the cut itself (issue 29): the filter checks of both kinds, exact and statistical; the tie mutant lists the
# statistics first, the only ones that see it at ci sizes (its tie sits at the k-th value of filtered_target)
_ALL += [Mutant(cls.name, cls, bug, "classic", checks, cases=("filters", "filtered_target")) for cls, bug, checks in (
    (filters.TopPOneTokenLate, "top-p cut one token late: the token after the crossing kept",
     DIFF + ("token_distribution", "acceptance_rate")),
    (filters.TopKTiesCountedTwice, "top-k counts the tokens equal to a candidate twice: ties at the k-th value cut",
     ("token_distribution", "acceptance_rate") + DIFF),
    (filters.MinPUnscaledMax, "min-p floor against the unscaled (temperature 1) maximum",
     DIFF + ("token_distribution", "acceptance_rate")),
    (filters.CutAppliedToQ, "the target's filtered support applied to q as well (q restricted, renormalised)",
     DIFF + ("token_distribution", "acceptance_rate")))]
_ALL += [Mutant(cls.name, cls, bug, "public", ("differential_injected",), cases=("boundary",)) for cls, bug in (
    (samplers.UniformRoundedToFloat32, "float32 acceptance uniform rounds to 0 and accepts a draft with p = 0"),
    (samplers.ExponentialFloor, "exponential noise clamped at the float32 floor 2^-24: tail tokens never drawn"))]
_ALL += [Mutant(cls.name, cls, bug, "public", DIFF, cases=("placeholders",)) for cls, bug in (
    (filters.PlaceholderReadAsZero, "placeholder draft (-1) read as token 0"),
    (filters.PlaceholderReadAsLast, "placeholder draft (-1) read as token V - 1"),
    (filters.PlaceholderAccepted, "placeholder draft accepted (q(x) = 0 passes the test)"))]
_ALL.append(Mutant(GreedySampledOwnStream.name, GreedySampledOwnStream,
                   "greedy requests sampled at temperature 1, own noise stream: only statistics can see it",
                   "001", ("token_distribution",), cases=("mixed_greedy",)))

# greedy ties with no shared noise: all-greedy batches, which use none
_ALL.append(Mutant(GreedyHighestIndexTieOwnStream.name, GreedyHighestIndexTieOwnStream,
                   "greedy argmax breaks ties at the highest index, own noise stream: no noise to share", "001",
                   ("greedy_agreement",)))
# a tie across a split of the vocabulary: only rows above one tile hold one
_ALL.append(Mutant(samplers.GreedySplitTieToLaterPart.name, samplers.GreedySplitTieToLaterPart,
                   "greedy argmax merged across a vocabulary split with >=: a tie across the split goes to the higher "
                   "index", "classic", ("greedy_agreement",), cases=("split_vocab",)))
# the residual's fallback with no shared noise: only the statistical case whose every rejection empties it
_ALL += [Mutant(cls.name, cls, bug, "classic", ("token_distribution",), cases=("residual_fallback",)) for cls, bug in (
    (ResidualWithoutFallbackOwnStream, "a residual zero everywhere raced as it is (token 0), own noise stream only"),
    (ResidualFallbackToLastIdOwnStream, "a residual zero everywhere gives the last id, V - 1, own noise stream only"))]
# a valid token at the fallback: seen among the rejections alone, at nightly sizes (about 100 rejections a position)
_ALL.append(Mutant(ResidualFallbackToArgmaxOwnStream.name, ResidualFallbackToArgmaxOwnStream,
                   "a residual zero everywhere gives p's most likely token, own noise stream only", "classic",
                   ("recovered_distribution",), profile="nightly", cases=("residual_fallback",), stat_copies=200_000))
# a residual that is wrong only where the rejections land: the token at each position dilutes it
_ALL.append(Mutant(ResidualAgainstScaledQOwnStream.name, ResidualAgainstScaledQOwnStream,
                   "residual taken against q scaled by 0.8, own noise stream only", "classic",
                   ("recovered_distribution",), cases=("dense_q",)))
_ALL.append(Mutant(PaddedTileOwnStream.name, PaddedTileOwnStream,
                   "vocabulary padded to whole tiles and the pad read as valid, own noise stream only", "public",
                   ("large_vocab_structure",)))
_ALL.append(Mutant(SplitVocabOutOfRangeOwnStream.name, SplitVocabOutOfRangeOwnStream,
                   "an id >= V emitted only above V = 100,000 (a split-V path), own noise stream only", "public",
                   ("large_vocab_structure",)))
# a coin of 0 from the backend's own stream: 2^-24 a draw, too rare for statistics; fixed coins place it
_ALL.append(Mutant(ZeroCoinAcceptsOwnStream.name, ZeroCoinAcceptsOwnStream,
                   "a coin of 0 accepts a draft of probability 0 (u q(x) <= p(x) alone), own noise stream only",
                   "public", ("boundary_coins",), cases=("zero_mass_drafts",)))

_ALL += [Mutant(cls.name, cls, bug, "public", ("nonfinite_rows",)) for cls, bug in (
    (nonfinite.NanRowEmitsIdPastV, "a request with a NaN row emits id V"),
    (nonfinite.NanLeaksAcrossRequests, "NaN in one request's logits changes other requests' tokens"))]

_ALL += [Mutant(cls.name, cls, bug, "public", ("accepted_length", "token_distribution", "acceptance_rate",
                                              "sequence_distribution") + DIFF,
                cases=("block",)) for cls, bug in (
    (block.TokenwiseAsBlock, "token-wise acceptance labelled as block verification"),
    (block.BlockRatioUnclamped, "block verification's running ratio not clamped at 1"),
    (block.BlockStopFromStart, "block acceptance point searched from the start of the block, not the end"),
    (block.BlockResidualWrongPosition, "block residual taken at the position after the stop"))]
# reached only where the residual empties (every draft's q = p (1 + 5e-4)): the differential block case's requests
_ALL.append(Mutant(block.BlockResidualWithoutFallback.name, block.BlockResidualWithoutFallback,
                   "block: a residual zero everywhere at the stop raced as it is, not p_tau", "classic", DIFF,
                   cases=("block",)))

# SPEC 3.8: each caught by the differential tree case; the random-rule ones also by the tree statistics, the greedy
# one by all-greedy trees
_ALL += [Mutant(cls.name, cls, bug, "public", DIFF + ("greedy_agreement",) if "greedy" in cls.name else
                DIFF + ("sequence_distribution", "token_distribution"), cases=("tree", "tree_dense_q"))
         for cls, bug in TREE_MUTANTS]
# reached only where the residual empties (q = p (1 + 5e-4)): the single-path trees of tree_path_equals_chain
_ALL.append(Mutant(TreeEmptyResidualNotKept.name, TreeEmptyResidualNotKept,
                   "tree: a residual zero everywhere taken as the new residual, not the one before it", "classic",
                   ("differential_injected",), cases=("tree_path_equals_chain",)))

# SPEC 7 placement, on the Triton sampler (vllm-project/vllm #7183): right wherever the caller's device and
# stream are the batch's, so seen only on a GPU: the stream case on one, the other_device case on two
_ALL += [Mutant(name, partial(_placement_mutant, name), bug, "public", ("device_placement",), kind="placement",
                cases=(case,), requires=needs, control="triton") for name, bug, case, needs in (
    ("outputs_on_current_device", 'outputs allocated on "cuda" (the current device), not on the batch\'s device',
     "other_device", "cuda2"),
    ("launch_without_device_guard", "a Triton launch without the device guard: on the caller's current device "
     "and stream", "other_device", "cuda2"),
    ("work_on_default_stream", "work queued on the default stream while the caller's stream is current", "stream",
     "cuda"))]

MUTANTS: dict[str, Mutant] = {m.name: m for m in _ALL}

def cpu_plan(mutant: Mutant) -> list[tuple[str, str]]:
    """The (check, case) pairs a CPU run tries a mutant on, in order: its expected checks' cases, within its own
    cases where it names them, but the statistical and differential production-vocabulary cases (the GPU's)."""
    return [(check, case) for check in mutant.expected_checks for case in CHECKS[check].cases
            if not case.startswith("large_vocab")
            and not (mutant.cases and case not in mutant.cases)]


__all__ = ["CHECK_NAMES", "GPUS_REQUIRED", "KINDS", "MUTANTS", "REQUIRES", "Mutant", "cpu_plan"]
