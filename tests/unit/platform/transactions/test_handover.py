"""The hand-over of transactional ids between nodes (transactions/handover.py): who may act on an id while
views change, judged from the other nodes' published views."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakelog.platform.cluster.errors import NotCoordinator
from lakelog.platform.cluster.ownership import owner, transaction_key
from lakelog.platform.transactions.handover import Handover, Takeover
from patience import STUCK_S

NODES = ["a", "b", "c"]


def owns(node: str, nodes: list[str]):  # type: ignore[no-untyped-def]
    return lambda tid: owner(transaction_key(tid), nodes) == node


@given(st.text(min_size=1, max_size=8), st.sampled_from([["a"], ["a", "b"], ["a", "c"], ["a", "b", "c"]]))
def test_an_id_taken_over_is_claimed_exactly_while_another_node_owns_it_in_its_published_view(
        tid: str, published_a: list[str]) -> None:
    """Node b joined (view a, b, c): an id it owns now is held back while node a's published view makes a
    its owner; node c (already in b's view) publishes the new view."""
    takeover = Takeover(1, lambda t: owns("b", NODES)(t) and not owns("b", ["a", "c"])(t), frozenset(NODES), 1e18,
                        claims={"a": published_a, "c": NODES})
    expected = takeover.taken(tid) and owner(transaction_key(tid), published_a) == "a"
    assert takeover.claimed(tid) == expected
    assert takeover.settled() == (published_a == NODES)


def test_an_unknown_view_claims_every_id_taken_and_nothing_else() -> None:
    takeover = Takeover(1, lambda t: t == "mine", frozenset(NODES), 1e18, claims={"a": None})
    assert takeover.claimed("mine") and not takeover.claimed("other") and not takeover.settled()
    assert Takeover(1, lambda t: True, frozenset(NODES), 1e18).claimed("x")  # not read yet


def test_lost_ids_are_refused_at_once_and_reassign_waits_for_calls_in_progress() -> None:
    handover = Handover()
    handover.reassign(lambda t: False, lambda t: True, ["a"], lambda: {}, poll_s=0.01, wait_s=STUCK_S)
    deadline = time.monotonic() + STUCK_S
    while not handover.serving("x"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    entered, leave = threading.Event(), threading.Event()

    def call() -> None:
        with handover.acting("x"):
            entered.set()
            leave.wait(STUCK_S)

    worker = threading.Thread(target=call)
    worker.start()
    entered.wait(STUCK_S)
    moving = threading.Thread(target=handover.reassign, args=(lambda t: True, lambda t: t != "x", ["a", "b"],
                                                              lambda: {"b": ["a", "b"]}, 0.01, STUCK_S))
    moving.start()
    deadline = time.monotonic() + STUCK_S
    while handover.serving("x"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(NotCoordinator):
        with handover.acting("x"):
            pass
    time.sleep(0.1)
    assert moving.is_alive()  # the call on the lost id is still in progress
    leave.set()
    worker.join(STUCK_S)
    moving.join(STUCK_S)
    assert not moving.is_alive() and handover.serving("y")
    handover.close()


def test_a_state_read_before_a_takeover_of_its_id_is_stale() -> None:
    handover = Handover()
    before = handover.generation
    handover.reassign(lambda t: False, lambda t: t == "x", ["a"], lambda: {}, poll_s=0.01, wait_s=STUCK_S)
    assert handover.taken_since("x", before) and not handover.taken_since("y", before)
    assert not handover.taken_since("x", handover.generation)
    handover.close()
