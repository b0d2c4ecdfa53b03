"""The suite's order under pytest-xdist (``specverify.schedule``): the production-vocabulary draws start
first and no unit waits behind one, so the nightly's suite ends when its longest draw does."""

from types import SimpleNamespace

import pytest

from specverify.schedule import make_scheduler, order_items, running_long

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


def _config(dist="loadgroup", workers=2):
    option = SimpleNamespace(loadscopereorder=True, dist=dist)
    return SimpleNamespace(option=option, getoption=lambda name, default=None: getattr(option, name, default),
                           getvalue=lambda name: [f"{workers}*popen"] if name == "tx" else None)


def _ids(names):
    return [f"{SUITE}[{n}]" + (f"@{n.split('[')[1][:-1]}" if n.startswith(("token", "acceptance")) else "")
            for n in names]


def test_no_unit_is_queued_behind_a_running_long_draw():
    """xdist queues more units on a worker while it has at most two tests pending: behind a draw of
    minutes they would wait it out while other workers run dry. The long draws go to two workers with
    nothing behind them; the short units go to the others; a long worker takes more work once its
    draw is done."""
    collection = _ids(["token_distribution[large_vocab_262k]", "token_distribution[large_vocab_tiles]",
                       "differential_injected[standard]", "differential_injected[block]",
                       "token_distribution[dense_q]", "acceptance_rate[dense_q]", "empty_batch[none]",
                       "repeated_calls[random]"])
    sched = make_scheduler(_config(workers=4), None)
    nodes = [_Node(f"gw{i}") for i in range(4)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, collection)
    sched.schedule()
    assert nodes[0].sent == [0] and nodes[1].sent == [1]      # a long draw each, nothing behind it
    assert sorted(nodes[2].sent + nodes[3].sent) == [2, 3, 4, 5, 6]
    assert running_long(sched.assigned_work[nodes[0]])
    sched.mark_test_complete(nodes[0], 0)
    assert not running_long(sched.assigned_work[nodes[0]])
    assert nodes[0].sent == [0, 7]                              # free again: it takes the last unit


def test_other_distribution_modes_keep_xdist_scheduler():
    """Only --dist loadgroup is reordered: a plain ``pytest -n auto`` keeps xdist's own load scheduler."""
    assert make_scheduler(_config(dist="load"), None) is None
