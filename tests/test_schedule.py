"""The suite's order under pytest-xdist (``specverify.schedule``): the production-vocabulary draws start
first and no unit waits behind one, so the nightly's suite ends when its longest draw does."""

from types import SimpleNamespace

import pytest

from specverify.schedule import keep_collection_order, order_items

pytest.importorskip("xdist")

SUITE = "specverify/suite/test_conformance.py::test_backend_satisfies_property"


def _item(check: str, case: str):
    return SimpleNamespace(name=f"{check}[{case}]", callspec=SimpleNamespace(params={"check": check, "case": case}))


def test_long_draws_come_first_longest_first_and_the_rest_keep_their_order():
    """The 262,144 draw outlasts the 151,936 one, so it starts first; every other pair keeps the
    collection's order (a stable sort), so the suite's own grouping is untouched."""
    items = [_item("differential_injected", "standard"), _item("token_distribution", "large_vocab_tiles"),
             _item("token_distribution", "dense_q"), _item("token_distribution", "large_vocab_262k"),
             _item("acceptance_rate", "dense_q"), SimpleNamespace(name="test_helper")]
    order_items(items)
    assert [i.name for i in items] == [
        "token_distribution[large_vocab_262k]", "token_distribution[large_vocab_tiles]",
        "differential_injected[standard]", "token_distribution[dense_q]", "acceptance_rate[dense_q]", "test_helper"]


class _Node:
    def __init__(self, name):
        self.name, self.shutting_down, self.sent = name, False, []
        self.gateway = SimpleNamespace(id=name)

    def send_runtest_some(self, indexes):
        self.sent.extend(indexes)

    def shutdown(self):
        self.shutting_down = True


def _ids(names):
    """Node ids as the suite collects them: a statistical pair carries its case as its xdist group."""
    return [f"{SUITE}[{n}]" + (f"@{n.split('[')[1][:-1]}" if n.startswith(("token", "acceptance")) else "")
            for n in names]


def _scheduled(names, workers, reorder):
    """xdist's loadgroup scheduler after its first hand-out of the suite's ``names`` to ``workers`` nodes."""
    from xdist.scheduler import LoadGroupScheduling

    config = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True, dist="loadgroup"),
                             getvalue=lambda name: [f"{workers}*popen"] if name == "tx" else None)
    if not reorder:
        assert keep_collection_order(config) and config.option.loadscopereorder is False
    sched = LoadGroupScheduling(config)
    nodes = [_Node(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, _ids(names))
    sched.schedule()
    return sched, nodes


def test_xdist_hands_out_the_long_draws_first_with_one_unit_behind_each():
    """xdist sorts loadgroup units by test count unless told not to, which sends the single-test draws
    of minutes out last. With the suite's setting the first units out are the long draws, on two
    workers, and each holds exactly one unit behind it: a worker runs an item only once it holds the
    next, so a draw with nothing behind it would wait for the run's shutdown."""
    names = ["token_distribution[large_vocab_262k]", "token_distribution[large_vocab_tiles]",
             "differential_injected[standard]", "differential_injected[block]", "token_distribution[dense_q]",
             "acceptance_rate[dense_q]", "empty_batch[none]", "repeated_calls[random]", "output_structure[random]"]
    sched, nodes = _scheduled(names, 4, reorder=False)
    assert [node.sent[0] for node in nodes][:2] == [0, 1]                # the long draws start at once
    assert [len(sched.assigned_work[n]) for n in nodes[:2]] == [2, 2]   # one unit queued behind each


def test_without_the_setting_xdist_sends_the_long_draws_out_late():
    """The control: xdist's default order (units by test count) starts a grouped case first, so the
    test above fails where the setting is lost."""
    names = ["token_distribution[large_vocab_262k]", "token_distribution[dense_q]", "acceptance_rate[dense_q]"]
    _, nodes = _scheduled(names, 2, reorder=True)
    assert nodes[0].sent[:2] == [1, 2]


def _worker(workers=None, profile="ci", device=None):
    options = {"--specverify-profile": profile, "--specverify-device": device}
    return SimpleNamespace(workerinput={} if workers is None else {"workercount": workers},
                           getoption=lambda name: options[name])


def test_a_suite_worker_takes_its_share_of_the_cores_on_a_cpu_profile(monkeypatch):
    """Each xdist worker taking every core for torch's threads oversubscribes a small machine, and the
    V = 151,936 draw then measures itself over its budget (an n/a). On a CPU profile a worker of n
    takes cores / n threads (at least one), as the CLI's workers do; the controller, and a worker of a
    GPU profile (whose cores only do the host's work), keep theirs."""
    import os

    import torch

    from specverify.plugin import _share_cores

    before = torch.get_num_threads()
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    try:
        _share_cores(_worker(4))
        assert torch.get_num_threads() == 2
        _share_cores(_worker(16))
        assert torch.get_num_threads() == 1
        torch.set_num_threads(3)
        _share_cores(_worker())                       # the controller, or a run without xdist
        _share_cores(_worker(4, profile="nightly"))   # CUDA
        _share_cores(_worker(4, profile="ci", device="cuda"))
        assert torch.get_num_threads() == 3
        _share_cores(_worker(2, profile="nightly", device="cpu"))
        assert torch.get_num_threads() == 4
    finally:
        torch.set_num_threads(before)
