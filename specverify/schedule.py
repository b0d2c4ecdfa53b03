"""The suite's order under pytest-xdist: the production-vocabulary draws first, each alone on its worker.

Under ``--dist loadgroup`` xdist hands out work units (a statistical case's checks are one unit) in
collection order, larger units first, and queues more units behind a worker's running one while it has
at most two tests pending. A production-vocabulary draw runs for minutes on the nightly profile, so one
that starts late ends the run late, and a unit queued behind it waits out the draw. ``LongFirst`` keeps
the collection order, in which ``order_items`` puts the long units first, and queues nothing behind a
long unit while other work is left.

    order_items(items)                 in place: the long pairs first, longest first, the rest as collected
    make_scheduler(config, log)        a LongFirst scheduler under --dist loadgroup, else None (xdist's own)
"""

from __future__ import annotations

from specverify.checks.cases import long_draw


def _case(item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return None if callspec is None else callspec.params.get("case")


def order_items(items: list) -> None:
    """Sort the collected items in place, the longest draws first (a stable sort: the rest keep their
    order)."""
    items.sort(key=lambda item: -long_draw(_case(item) or ""))


def make_scheduler(config, log):
    """xdist's loadgroup scheduler, with the long units started first and nothing queued behind them."""
    if config.getoption("dist", None) != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling  # noqa: PLC0415 - only under xdist

    class LongFirst(LoadGroupScheduling):
        def __init__(self, config, log=None) -> None:
            super().__init__(config, log)
            # xdist sorts units by their test count unless told not to; the collection's order is ours
            if hasattr(config.option, "loadscopereorder"):
                config.option.loadscopereorder = False

        def _reschedule(self, node) -> None:
            if self.workqueue and running_long(self.assigned_work.get(node, {})):
                return
            super()._reschedule(node)

    return LongFirst(config, log)


def running_long(assigned: dict) -> bool:
    """Whether a worker's assigned units ({scope: {nodeid: done}}) hold a long unit not yet done. Under
    loadgroup a statistical case's scope is its group, the case's name."""
    return any(long_draw(scope) and not all(done.values()) for scope, done in assigned.items())
