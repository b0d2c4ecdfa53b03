"""The harness reads token trees (SPEC 3.8) as it reads chains: the output guard, the ambiguity rule that
excuses a float32 tree decision, and a reproducer of a failing tree call.

A tree call's accepted tokens are those of its accepted path, so the guard must check the path itself;
the ambiguity rule is the only thing standing between a float32 tree kernel and a false failure (or a
bug excused), so its boundary is pinned on both sides; a reproducer that dropped the tree would replay
a chain and show nothing."""

from dataclasses import replace

import pytest
import torch

import reference
from reference import Noise, SpecBatch, SpecOutput, tree
from reference.sample import filtered_target
from specverify.checks import FAIL, run_check
from specverify.checks.differential import compare_to_reference
from specverify.checks.repro import load, write_reproducer
from specverify.checks.rounding import Residual, scaled_logit_error
from specverify.checks.runner import CheckFailure, GuardedBackend, output_problems
from specverify.cli import main
from specverify.kernels.cpu import CpuBackend
from specverify.mutants.tree import TreeResidualNotUpdated
from specverify.strategies import get_profile

MUTANT = "specverify.mutants.tree:TreeResidualNotUpdated"


def _two_siblings(u_second: float) -> tuple[SpecBatch, Noise]:
    """One request, two children of the root with dense q: the first is rejected (u = 0.9, q(x) > p(x)),
    the second is tested against the renormalised residual with uniform ``u_second``."""
    p = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    q = torch.tensor([[0.1, 0.7, 0.1, 0.1], [0.1, 0.1, 0.5, 0.3]], dtype=torch.float64)
    batch = SpecBatch(torch.tensor([2]), torch.tensor([1, 2]), p.log(), q, torch.ones(1, dtype=torch.float64),
                      tree_parents=torch.tensor([-1, -1]))
    return batch, Noise(torch.tensor([0.9, u_second], dtype=torch.float64), torch.ones(1, 4, dtype=torch.float64))


def _second_test_threshold(batch: SpecBatch) -> tuple[float, float]:
    """The uniform at which the second sibling's test u q(x) <= r(x) / m is an equality, in the reference's
    float64 numbers (r after the first sibling's rejection), and what l / T's rounding allows that test beyond
    the tolerance (SPEC 4.1: here |l / T| is up to 2.3, about 2e-6)."""
    p = filtered_target(batch, torch.tensor([0, 0, 0]), batch.target_logits.double(), 1.0)
    q = batch.draft_probs.double()
    r, m = tree.after_rejection(p[0], 1.0, q[0])
    rounding = Residual.of(p[0], scaled_logit_error(batch.target_logits, 1.0, p)[0]).after_rejection(q[0])
    return float(r[2] / m / q[1, 2]), rounding.ratio_error(2)


def test_a_path_that_is_not_root_to_node_is_flagged_naming_the_request():
    """accepted_nodes must be a root-to-node path whose tokens are the accepted ones: a path starting below
    the root, one missing, and one not padded with -1 are each named by their request."""
    batch = SpecBatch(torch.tensor([0, 3]), torch.tensor([1, 2, 3]), torch.zeros(5, 4), None, torch.ones(2),
                      tree_parents=torch.tensor([-1, 0, 0]))
    good = reference.sample(batch, noise=Noise(torch.full((3,), 1e-9), torch.ones(2, 4)), method="tree")
    assert good.emitted()[1][:2] == [1, 2] and output_problems(batch, good) == []
    skipped_root = good.accepted_nodes.clone()
    skipped_root[1, :2] = torch.tensor([1, 0])
    problems = output_problems(batch, SpecOutput(good.token_ids, good.num_accepted, skipped_root))
    assert problems and problems[0].startswith("request 1: accepted_nodes [1, 0] is not a root-to-node path")
    unpadded = good.accepted_nodes.clone()
    unpadded[0, 1] = 2
    assert output_problems(batch, SpecOutput(good.token_ids, good.num_accepted, unpadded))[0].startswith("request 0:")
    assert "accepted_nodes is NoneType" in output_problems(batch, SpecOutput(good.token_ids, good.num_accepted))[0]


def test_the_guard_fails_a_backend_whose_tree_tokens_are_the_chain_slots():
    """Reading a tree as a chain (accepted tokens taken from the slots in order) fails at the guard, with the
    request and the path's own tokens in the message."""
    batch = SpecBatch(torch.tensor([3]), torch.tensor([5, 6, 7]), torch.zeros(4, 8), None, torch.ones(1),
                      tree_parents=torch.tensor([-1, -1, 1]))

    class SlotsAsChain(CpuBackend):
        def _tree_sample(self, batch, noise):
            return SpecOutput(torch.tensor([[5, 6, 0, -1]]), torch.tensor([2]), torch.tensor([[1, 2, -1]]))

    with pytest.raises(CheckFailure, match=r"request 0: accepted tokens \[5, 6\] are not the path's tokens \[6, 7\]"):
        GuardedBackend(SlotsAsChain())(batch, noise=Noise(torch.full((3,), 0.5), torch.ones(1, 8)), method="tree")


@pytest.mark.parametrize("fraction,ambiguous", [(0.99, True), (1.01, False)], ids=["inside-tol", "1%-outside"])
def test_a_flipped_sibling_test_is_excused_only_within_tolerance_of_the_residual(fraction, ambiguous):
    """SPEC 3.8: the second sibling's test, against r / m after the first sibling's rejection, decided the
    other way is ambiguous just inside its allowance (the tolerance and l / T's rounding of r / m, SPEC 4.1) and
    real 1% outside it."""
    tol = 1e-5
    batch, _ = _two_siblings(0.5)
    threshold, rounding = _second_test_threshold(batch)
    assert 0 < rounding < tol
    allowance = tol + rounding
    _, rejecting = _two_siblings(threshold * (1 + fraction * allowance))
    _, accepting = _two_siblings(threshold * (1 - fraction * allowance))
    expected = reference.sample(batch, noise=rejecting, method="tree")
    got = reference.sample(batch, noise=accepting, method="tree")
    assert expected.num_accepted.tolist() == [0] and got.accepted_nodes[0, 0] == 1
    (divergence,) = compare_to_reference(batch, got, rejecting, method="tree", tol=tol).divergences
    assert divergence.decision.startswith("tree test") and divergence.ambiguous is ambiguous
    assert divergence.margin == pytest.approx(fraction * allowance, rel=1e-6)
    assert divergence.rounding == pytest.approx(rounding, rel=1e-9)


def test_a_tree_reproducer_round_trips_with_its_paths_and_replays(tmp_path, capsys):
    """A failing tree call saves its tree_parents and both outputs' accepted paths, prints Python that
    rebuilds the tree, and replays: exit 1 on the mutant, 0 on the CPU backend."""
    profile = replace(get_profile("ci"), shrink=False)
    result = run_check(TreeResidualNotUpdated(), "differential_injected", "tree", profile)
    assert result.status == FAIL
    path = write_reproducer(result, tmp_path, spec=MUTANT)
    repro = load(path)
    batch = repro.call.batch
    assert batch.tree_parents is not None and repro.call.kwargs == {"method": "tree"}
    assert repro.outcome.expected.accepted_nodes is not None and repro.outcome.got.accepted_nodes is not None
    namespace = {}
    exec(result.counterexample, namespace)  # noqa: S102 - the printed source is ours
    assert torch.equal(namespace["batch"].tree_parents, batch.tree_parents)
    assert "along the paths" in result.counterexample
    assert main(["replay", path, MUTANT]) == 1
    assert main(["replay", path, "cpu"]) == 0
    assert "STILL FAILS" in capsys.readouterr().out
