"""The pure-PyTorch reference of the three acceptance rules (SPEC sections 1-3).

It imports nothing of specverify: it is the contract every backend is checked against.
"""

from reference import alignment, exact, greedy, leviathan, philox, race, synthetic
from reference.alignment import align_draft_probs
from reference.batch import Noise, SpecBatch, SpecOutput, select_requests
from reference.sample import METHODS, sample, target_probs
from reference.synthetic import synthetic_params

# reference.philox gives the seeded stream as plain tensors and imports nothing of this package;
# ``philox.seeded_noise`` keeps its old meaning, the stream as a Noise, for callers that import it there.
philox.seeded_noise = Noise.from_seeds

__all__ = [
    "METHODS", "Noise", "SpecBatch", "SpecOutput", "align_draft_probs", "alignment", "exact", "greedy",
    "leviathan", "philox", "race", "sample", "select_requests", "synthetic", "synthetic_params", "target_probs",
]
