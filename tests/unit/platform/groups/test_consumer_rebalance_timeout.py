"""KIP-848's rebalance timeout on the pure state machine (consumer_group.py, membership.py): a member told to
give partitions up has its RebalanceTimeoutMs, from the answer that told it, to report them revoked; past it
the member is fenced (removed, its next heartbeat refused) and the partitions go to their new owner. A member
that revokes in time, or has nothing to revoke, is kept however long it runs."""

from __future__ import annotations

import pytest

from lakelog.platform.groups import consumer_group as cg
from lakelog.platform.groups.errors import UnknownMemberId
from lakelog.platform.groups.membership import Membership

COUNTS = {"t": 4}
SESSION_MS, REBALANCE_MS = 45_000, 10_000
ALL = {("t", p) for p in range(4)}


def beat(m: Membership, member: str, epoch: int, now: float, owned: set | None = None,
         rebalance_ms: int | None = None) -> cg.ConsumerAnswer:
    request = cg.ConsumerHeartbeat(member, epoch, SESSION_MS, topics=("t",) if epoch == 0 else None,
                                   owned=None if owned is None else frozenset(owned), rebalance_timeout_ms=rebalance_ms)
    return cg.heartbeat(m, "g", request, now, COUNTS)


def two_members(m: Membership) -> tuple[cg.ConsumerAnswer, cg.ConsumerAnswer, set]:
    """a owns everything, b joins at t=1, a is told at t=2 to give half up: (a's answer, b's, what a keeps)."""
    a = beat(m, "a", 0, 0.0, rebalance_ms=REBALANCE_MS)
    assert set(a.assignment or ()) == ALL
    b = beat(m, "b", 0, 1.0, rebalance_ms=REBALANCE_MS)
    assert b.assignment == []
    a = beat(m, "a", a.epoch, 2.0, owned=ALL)  # told: its assignment shrinks
    assert a.assignment is not None and len(a.assignment) == 2
    return a, b, set(a.assignment)


def test_a_member_that_does_not_revoke_in_time_is_fenced_and_its_partitions_move() -> None:
    m = Membership()
    a, b, kept = two_members(m)
    for now in (3.0, 6.0, 9.0, 11.9):  # heartbeats still claiming everything: alive, but not revoking
        beat(m, "a", a.epoch, now, owned=ALL)
        beat(m, "b", b.epoch, now, owned=set())
        m.tick(now, COUNTS)
    assert set(m.groups["g"].members) == {"a", "b"}  # within 10 s of being told (at 2.0): kept
    m.tick(12.1, COUNTS)
    assert set(m.groups["g"].members) == {"b"}  # fenced
    with pytest.raises(UnknownMemberId):
        beat(m, "a", a.epoch, 12.2, owned=ALL)
    b = beat(m, "b", b.epoch, 12.3, owned=set())
    assert set(b.assignment or ()) == ALL  # every partition, the fenced member's included
    assert m.groups["g"].members["b"].revoke_deadline is None


def test_a_member_that_revokes_in_time_is_kept() -> None:
    m = Membership()
    a, b, kept = two_members(m)
    beat(m, "a", a.epoch, 11.0, owned=kept)  # just in time
    assert m.groups["g"].members["a"].revoke_deadline is None
    b = beat(m, "b", b.epoch, 11.5, owned=set())
    assert set(b.assignment or ()) == ALL - kept
    for now in range(12, 200, 5):  # long after: nothing more to revoke, nobody is fenced
        beat(m, "a", a.epoch, float(now), owned=kept)
        beat(m, "b", b.epoch, float(now), owned=ALL - kept)
        m.tick(float(now), COUNTS)
    assert set(m.groups["g"].members) == {"a", "b"}


def test_the_timeout_is_the_members_own_and_counts_from_when_it_was_told() -> None:
    m = Membership()
    a = beat(m, "a", 0, 0.0, rebalance_ms=60_000)
    b = beat(m, "b", 0, 10.0, rebalance_ms=1_000)  # a is told only at its next heartbeat, at 30
    m.tick(29.0, COUNTS)
    assert m.groups["g"].members["a"].revoke_deadline is None
    beat(m, "a", a.epoch, 30.0, owned=ALL)
    assert m.groups["g"].members["a"].revoke_deadline == pytest.approx(30.0 + 60.0)  # a's own timeout, not b's
    beat(m, "a", a.epoch, 60.0, owned=ALL, rebalance_ms=-1)  # -1: unchanged; the timer runs on
    beat(m, "b", b.epoch, 60.0, owned=set())
    m.tick(89.0, COUNTS)
    assert set(m.groups["g"].members) == {"a", "b"}
    beat(m, "b", b.epoch, 89.5, owned=set())
    m.tick(90.5, COUNTS)
    assert set(m.groups["g"].members) == {"b"}


def test_a_member_with_no_timeout_named_gets_kafkas_default() -> None:
    m = Membership()
    a = beat(m, "a", 0, 0.0)
    beat(m, "b", 0, 1.0)
    beat(m, "a", a.epoch, 2.0, owned=ALL)
    assert m.groups["g"].members["a"].revoke_deadline == pytest.approx(2.0 + 300.0)
