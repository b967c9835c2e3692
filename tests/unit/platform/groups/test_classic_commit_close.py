"""groups.classic: which offset commits a classic group accepts in each state, and closing the group
(its coordinator moved), which fails every request still parked in it."""

from __future__ import annotations

import pytest

from lakelog.platform.cluster.errors import NotCoordinator
from lakelog.platform.groups.classic import ClassicGroup
from lakelog.platform.groups.errors import IllegalGeneration, RebalanceInProgress, UnknownMemberId
from tests.unit.platform.groups.classic_group_calls import error, formed, req, result


# ---- offset commits and closing ---------------------------------------------------------------------------------


def test_check_commit() -> None:
    ClassicGroup("g").check_commit("", -1, None)  # Empty: a consumer that assigns itself may commit
    g = formed("a", "b")
    g.check_commit("a", 1, None)
    with pytest.raises(UnknownMemberId):  # Kafka's answer to a simple commit into a group with members
        g.check_commit("", -1, None)
    with pytest.raises(UnknownMemberId):
        g.check_commit("zz", 1, None)
    with pytest.raises(IllegalGeneration):
        g.check_commit("a", 0, None)
    g.join(req("a"), 101.0, "unused")
    g.check_commit("b", 1, None, now=105.0)  # PreparingRebalance: consumers commit right before they rejoin
    assert g.members["b"].last_heartbeat == 105.0
    g.join(req("b"), 106.0, "unused")
    assert g.state == "CompletingRebalance"
    with pytest.raises(RebalanceInProgress):
        g.check_commit("a", 2, None)
    with pytest.raises(IllegalGeneration):
        g.check_commit("a", 1, None)


def test_close_fails_every_parked_request() -> None:
    moved = NotCoordinator("the group moved")
    g = formed("a", "b")
    b = g.join(req("b", names=("range", "roundrobin")), 100.0, "unused")  # parked in a join phase
    g.close(moved)
    assert error(b) is moved and g.state == "Dead"
    with pytest.raises(NotCoordinator):
        g.heartbeat("a", 1, None, 101.0)
    assert error(g.join(req(), 101.0, "d")) is moved
    g.tick(1000.0)
    assert set(g.members) == {"a", "b"}  # nothing happens any more

    g = formed("a", "b")
    g.join(req("b", names=("range", "roundrobin")), 100.0, "unused")
    result(g.join(req("a"), 100.0, "unused"))
    sb = g.sync("b", 2, None, None, None, {}, 100.0)  # parked until the leader syncs
    g.close(moved)
    assert error(sb) is moved
    assert error(g.sync("a", 2, None, None, None, {}, 100.0)) is moved
