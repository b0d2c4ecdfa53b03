"""The suite's order under pytest-xdist: the production-vocabulary draws first.

Under ``--dist loadgroup`` xdist hands out work units (a statistical case's checks are one unit) in
order, and by default sorts them by their test count first, so the two single-test draws of minutes
(V = 262,144 and 151,936) go out after every grouped case and end the run late. For the shipped
suite the plugin keeps the collection's order (``keep_collection_order``), in which ``order_items``
puts the long draws first, longest first.

Each worker then starts with a long draw and one unit queued behind it. That unit waits out the draw,
but it cannot be left out: an xdist worker runs an item only once it holds the next one (or the
shutdown), for fixture teardown, so a draw with nothing behind it would not start until the end.

    order_items(items)               in place: the long pairs first, longest first, the rest as collected
    keep_collection_order(config)    turn off xdist's sort of units by test count, where xdist has it
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


def keep_collection_order(config) -> bool:
    """Hand out xdist's loadscope and loadgroup units in collection order; False where this xdist has no
    such setting (it then sorts them by test count)."""
    if not hasattr(config.option, "loadscopereorder"):
        return False
    config.option.loadscopereorder = False
    return True
