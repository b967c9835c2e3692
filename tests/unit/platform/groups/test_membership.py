"""groups.membership: the state machine with a fake clock (plain numbers), no threads, no storage."""

from __future__ import annotations

import pytest

from lakelog.platform.groups.errors import FencedInstanceId, InconsistentGroupProtocol, UnknownMemberId
from lakelog.platform.groups.membership import JoinOptions, Membership

COUNTS = {"orders": 4, "audit": 2}


def opts(**kw: object) -> JoinOptions:
    return JoinOptions(**{"topics": ("orders",), "session_timeout_ms": 10_000, **kw})  # type: ignore[arg-type]


def owned(m: Membership, group: str, member: str) -> list:
    return sorted(m.groups[group].members[member].assignment)


def test_the_first_assignment_waits_for_the_group_to_fill() -> None:
    m = Membership(initial_rebalance_delay_ms=3000)
    m.join("g", opts(), "a", now=0.0, counts=COUNTS)
    m.join("g", opts(), "b", now=1.0, counts=COUNTS)
    assert m.groups["g"].state == "PreparingRebalance" and owned(m, "g", "a") == []
    m.tick(now=2.9, counts=COUNTS)
    assert owned(m, "g", "a") == []
    m.tick(now=4.1, counts=COUNTS)  # 3 s after the last join
    assert owned(m, "g", "a") == [("orders", 0), ("orders", 1)] and owned(m, "g", "b") == [("orders", 2), ("orders", 3)]
    assert m.groups["g"].state == "Stable"


def test_a_silent_member_is_expired_and_its_partitions_move() -> None:
    m = Membership(initial_rebalance_delay_ms=0)
    m.join("g", opts(), "a", 0.0, COUNTS)
    m.join("g", opts(), "b", 0.0, COUNTS)
    generation = m.groups["g"].generation
    m.heartbeat("g", "a", now=9.0)
    m.groups["g"].members["a"].last_poll = 9.0
    m.tick(now=10.5, counts=COUNTS)  # b said nothing for 10.5 s > session.timeout.ms
    assert list(m.groups["g"].members) == ["a"] and len(owned(m, "g", "a")) == 4
    assert m.groups["g"].generation > generation
    with pytest.raises(UnknownMemberId):
        m.heartbeat("g", "b", 11.0)


def test_a_static_member_returns_without_a_rebalance() -> None:
    m = Membership(initial_rebalance_delay_ms=0)
    m.join("g", opts(group_instance_id="i1"), "old", 0.0, COUNTS)
    m.join("g", opts(group_instance_id="i2"), "other", 0.0, COUNTS)
    before, generation = owned(m, "g", "old"), m.groups["g"].generation
    m.join("g", opts(group_instance_id="i1"), "new", 5.0, COUNTS)
    assert owned(m, "g", "new") == before and m.groups["g"].generation == generation
    with pytest.raises(FencedInstanceId):
        m.heartbeat("g", "old", 6.0)


def test_cooperative_rebalancing_revokes_before_it_moves() -> None:
    m = Membership(initial_rebalance_delay_ms=0)
    sticky = opts(assignor="cooperative-sticky")
    m.join("g", sticky, "a", 0.0, COUNTS)
    m.heartbeat("g", "a", 0.1)
    assert len(owned(m, "g", "a")) == 4
    m.join("g", sticky, "b", 1.0, COUNTS)
    assert owned(m, "g", "b") == []  # nothing moves before a gives it up
    beat = m.heartbeat("g", "a", 1.1)
    assert len(beat.revoke) == 2 and len(beat.assignment) == 2  # a keeps two, flowing
    m.heartbeat("g", "a", 1.2)  # a heartbeats again: it released them
    assert sorted(owned(m, "g", "b")) == sorted(beat.revoke)
    assert m.groups["g"].state == "Stable"


def test_a_leaving_member_rebalances_the_rest() -> None:
    m = Membership(initial_rebalance_delay_ms=0)
    m.join("g", opts(), "a", 0.0, COUNTS)
    m.join("g", opts(), "b", 0.0, COUNTS)
    m.leave("g", "b", COUNTS)
    assert len(owned(m, "g", "a")) == 4


def test_new_partitions_are_followed() -> None:
    m = Membership(initial_rebalance_delay_ms=0)
    m.join("g", opts(), "a", 0.0, COUNTS)
    m.heartbeat("g", "a", 0.5)
    m.groups["g"].members["a"].last_poll = 0.5
    m.tick(now=1.0, counts={**COUNTS, "orders": 6}, check_metadata=True)
    assert len(owned(m, "g", "a")) == 6


def test_patterns_follow_new_topics() -> None:
    m = Membership(initial_rebalance_delay_ms=0)
    m.join("g", opts(topics=(), pattern="au.*"), "a", 0.0, COUNTS)
    assert owned(m, "g", "a") == [("audit", 0), ("audit", 1)]
    m.tick(now=0.5, counts={**COUNTS, "auth": 1}, check_metadata=True)
    assert ("auth", 0) in owned(m, "g", "a")


def test_one_assignor_per_group() -> None:
    m = Membership(initial_rebalance_delay_ms=0)
    m.join("g", opts(), "a", 0.0, COUNTS)
    with pytest.raises(InconsistentGroupProtocol):
        m.join("g", opts(assignor="roundrobin"), "b", 0.0, COUNTS)


def test_the_poll_interval_expires_a_member_that_only_heartbeats() -> None:
    m = Membership(initial_rebalance_delay_ms=0)
    m.join("g", opts(max_poll_interval_ms=5_000), "a", 0.0, COUNTS)
    m.heartbeat("g", "a", 5.5)
    m.tick(now=5.6, counts=COUNTS)
    assert m.groups["g"].members == {} and m.groups["g"].state == "Empty"
