"""ci/sglang_fallback_probe.py on the CPU stand-in of SGLang's kernel (tests/test_sglang_adapter.py): the probe
builds the rounding case it claims to, and reports what it meets. The real kernel runs on the device
(docs/kernels.md); the stand-in follows the source as read, which emits V - 1 where the residual is zero everywhere."""

import sys
from pathlib import Path
from types import SimpleNamespace

import torch

import reference
from reference import Noise

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ci"))
import sglang_fallback_probe as probe  # noqa: E402
import test_sglang_adapter as stand_in  # noqa: E402

STAND_IN = SimpleNamespace(tree_speculative_sampling_target_only=stand_in.tree_speculative_sampling_target_only,
                           verify_tree_greedy=stand_in.verify_tree_greedy)


def test_the_siblings_float32_sum_lies_below_the_top_coin_and_the_reference_never_emits_probability_zero():
    """The probe's premise: the root's support is its siblings, their float32 running sum in sibling order is at
    most 1 - 2^-23, under torch.rand's largest coin; in exact arithmetic one sibling is always accepted, so the
    reference (any noise) emits only support tokens."""
    batch = probe.star_batch(64, "cpu")
    p = torch.softmax(batch.target_logits[0].double(), 0).float()
    mass = torch.zeros((), dtype=torch.float32)
    for x in range(1, probe.SIBLINGS + 1):
        mass = mass + p[x]
    assert float(mass) <= 1 - 2 ** -23 < probe.TOP_COIN < 1
    assert set(torch.nonzero(p > 0).flatten().tolist()) == set(range(1, probe.SIBLINGS + 1))
    out = reference.sample(batch, noise=Noise.draw(batch, torch.Generator().manual_seed(0)), method="tree")
    assert bool((out.num_accepted == 1).all()) and bool((out.token_ids[:, 0] > 0).all())


def test_on_the_stand_in_the_top_coin_rejects_every_sibling_and_emits_the_last_id():
    """At the top coin no sibling is accepted and the stand-in emits V - 1, of probability 0: the probe names it.
    At the half coin every request accepts a sibling and nothing of probability 0 is emitted."""
    top, half = probe.probe(32, "cpu", STAND_IN)
    assert top["accepted"] == 0 and top["probability_zero"] == {probe.V - 1: 32}, top
    assert half["accepted"] == 32 and half["probability_zero"] == {} and half["emitted_at_rejections"] == {}, half
