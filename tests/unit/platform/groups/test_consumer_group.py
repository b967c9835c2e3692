"""KIP-848's consumer groups on the membership state machine (consumer_group.py), pure: join, epochs,
incremental hand-over whatever the assignor, leaves, expiry without the poll rule, and groups of one kind."""

from __future__ import annotations

import pytest

from lakelog.platform.groups import consumer_group as cg
from lakelog.platform.groups.classic import ClassicGroup, JoinRequest, Protocol
from lakelog.platform.groups.errors import (
    FencedMemberEpoch,
    GroupIdNotFound,
    InconsistentGroupProtocol,
    StaleMemberEpoch,
    UnknownMemberId,
    UnsupportedAssignor,
)
from lakelog.platform.groups.membership import Group, JoinOptions, Membership

COUNTS = {"t": 4}
SESSION_MS = 45_000


def beat(membership: Membership, member: str, epoch: int, now: float = 0.0, owned: set | None = None,
         assignor: str | None = None, topics: tuple[str, ...] | None = ("t",)) -> cg.ConsumerAnswer:
    request = cg.ConsumerHeartbeat(member, epoch, SESSION_MS, topics=topics if epoch == 0 else None,
                                   assignor=assignor, owned=None if owned is None else frozenset(owned))
    return cg.heartbeat(membership, "g", request, now, COUNTS)


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_partitions_move_only_after_their_owner_gave_them_up(assignor: str) -> None:
    m = Membership(initial_rebalance_delay_ms=3000)
    a = beat(m, "a", 0, assignor=assignor)
    assert a.epoch > 0 and a.assignment == [("t", p) for p in range(4)]  # no first delay for these groups
    b = beat(m, "b", 0, assignor=assignor)
    assert b.assignment == []  # a still owns everything
    a = beat(m, "a", a.epoch, owned={("t", p) for p in range(4)})
    assert a.assignment is not None and len(a.assignment) == 2  # a is told to give two up
    kept = set(a.assignment)
    assert beat(m, "b", b.epoch, owned=set()).assignment is None  # not before a reported it
    beat(m, "a", a.epoch, owned=kept)
    b = beat(m, "b", b.epoch, owned=set())
    assert b.assignment is not None and set(b.assignment) == {("t", p) for p in range(4)} - kept
    assert beat(m, "a", a.epoch, owned=kept).assignment is None  # unchanged: not answered again


def test_epochs_fence_and_commits_check_them() -> None:
    m = Membership()
    a = beat(m, "a", 0)
    with pytest.raises(FencedMemberEpoch):
        beat(m, "a", a.epoch + 1)
    with pytest.raises(UnknownMemberId):
        beat(m, "nobody", 3)
    group = m.groups["g"]
    assert cg.check_commit(group, "a", a.epoch).member_id == "a"
    with pytest.raises(StaleMemberEpoch):
        cg.check_commit(group, "a", a.epoch - 1)
    with pytest.raises(FencedMemberEpoch):
        cg.check_commit(group, "a", a.epoch + 1)
    lagging = beat(m, "a", a.epoch - 1)  # an answer was lost: the assignment comes again
    assert lagging.assignment == [("t", p) for p in range(4)]


def test_leave_expiry_and_no_poll_rule() -> None:
    m = Membership()
    a = beat(m, "a", 0)
    beat(m, "b", 0)
    assert beat(m, "b", -1).epoch == -1
    assert set(m.groups["g"].members) == {"a"}
    for now in range(40, 1000, 40):  # heartbeats only, far past HTTP members' max.poll.interval.ms: kept
        beat(m, "a", a.epoch, now=float(now))
        m.tick(float(now), COUNTS)
    assert set(m.groups["g"].members) == {"a"}
    m.tick(960.0 + SESSION_MS / 1000 + 1, COUNTS)
    assert m.groups["g"].members == {}


def test_groups_of_one_kind_and_types() -> None:
    m = Membership(initial_rebalance_delay_ms=0)
    beat(m, "a", 0)
    assert m.groups["g"].group_type == "consumer"
    with pytest.raises(InconsistentGroupProtocol):
        m.join("g", JoinOptions(topics=("t",)), "http-1", 0.0, COUNTS)
    m.join("h", JoinOptions(topics=("t",)), "http-1", 0.0, COUNTS)
    assert m.groups["h"].group_type == "classic"
    with pytest.raises(InconsistentGroupProtocol):
        cg.heartbeat(m, "h", cg.ConsumerHeartbeat("x", 0, SESSION_MS, topics=("t",)), 0.0, COUNTS)
    with pytest.raises(UnsupportedAssignor):
        beat(m, "c", 0, assignor="sticky-ish")


def test_a_classic_group_is_not_found() -> None:
    m = Membership()
    group = m.groups.setdefault("g", Group("g"))
    group.classic = ClassicGroup("g", 0)
    group.classic.join(JoinRequest(member_id="", group_instance_id=None, session_timeout_ms=10_000,
                                   rebalance_timeout_ms=10_000, protocol_type="consumer",
                                   protocols=(Protocol("range", b""),), client_id="c", client_host="h",
                                   require_known_member_id=False), 0.0, "classic-1")
    with pytest.raises(GroupIdNotFound):
        beat(m, "a", 0)
