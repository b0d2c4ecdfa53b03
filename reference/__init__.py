"""The pure-PyTorch reference of the acceptance rules (SPEC sections 1-3).

It imports nothing of specverify: it is the contract every backend is checked against.
"""

from reference import alignment, block, exact, filters, greedy, leviathan, philox, race, synthetic, tree
from reference.alignment import align_draft_probs
from reference.batch import Noise, SpecBatch, SpecOutput, select_requests
from reference.sample import METHODS, sample, target_probs
from reference.synthetic import synthetic_params

__all__ = [
    "METHODS", "Noise", "SpecBatch", "SpecOutput", "align_draft_probs", "alignment", "block", "exact", "filters",
    "greedy", "leviathan", "philox", "race", "sample", "select_requests", "synthetic", "synthetic_params",
    "target_probs", "tree",
]
