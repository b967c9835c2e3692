"""KIP-848 groups' durable state, pure (consumer_store.py's `snapshot` and `restore`): a group in the middle of
a revocation is restored with its members' ids, epochs, assignments, partitions being revoked and hand-overs;
its members go on with their epochs (no fencing, no new join), the hand-over completes, and a heartbeat that
changes nothing leaves the snapshot as it was (nothing to write)."""

from __future__ import annotations

import pytest

from lakelog.platform.groups import consumer_group as cg
from lakelog.platform.groups.consumer_store import has_members, restore, snapshot
from lakelog.platform.groups.errors import FencedMemberEpoch
from lakelog.platform.groups.membership import Group, Membership
from lakelog.platform.groups.offsets import CommittedOffset
from lakelog.platform.records import TopicPartition

COUNTS = {"t": 4, "u": 2}
ALL = {("t", p) for p in range(4)}


def beat(m: Membership, member: str, epoch: int, now: float, owned: set[TopicPartition] | None = None,
         topics: tuple[str, ...] | None = ("t",), regex: str | None = None) -> cg.ConsumerAnswer:
    request = cg.ConsumerHeartbeat(member, epoch, 45_000, topics=topics if epoch == 0 else None,
                                   regex=regex if epoch == 0 else None, rebalance_timeout_ms=20_000,
                                   owned=None if owned is None else frozenset(owned), instance_id=None)
    return cg.heartbeat(m, "g", request, now, COUNTS)


def test_a_group_mid_revocation_is_restored_and_goes_on() -> None:
    m = Membership()
    a = beat(m, "a", 0, 0.0)
    b = beat(m, "b", 0, 1.0)
    a = beat(m, "a", a.epoch, 2.0, owned=ALL)  # a is told to give two partitions up, b waits for them
    kept = set(a.assignment or ())
    c = beat(m, "c", 0, 3.0, topics=None, regex="^u$")
    group = m.groups["g"]
    group.committed[("t", 0)] = CommittedOffset(5, None, 1)
    state = snapshot(group)
    assert has_members(state)

    beat(m, "a", a.epoch, 4.0)  # a heartbeat that changes nothing: the same snapshot, nothing to write
    assert snapshot(group) == state

    fresh = Membership()
    restored = Group("g", committed=dict(group.committed))
    assert restore(restored, state, 100.0)
    fresh.groups["g"] = restored
    assert snapshot(restored) == state  # everything durable came back
    assert restored.committed == group.committed
    assert {i: (x.epoch, x.assignment, x.revoking) for i, x in restored.members.items()} == \
        {i: (x.epoch, x.assignment, x.revoking) for i, x in group.members.items()}
    assert restored.members["a"].revoke_deadline == pytest.approx(100.0 + 20.0)  # its timer starts again
    assert restored.members["a"].last_heartbeat == 100.0
    assert restored.members["c"].subscribed(COUNTS) == frozenset({"u"})  # the regex compiled again

    assert beat(fresh, "b", b.epoch, 101.0, owned=set()).assignment is None  # b goes on, still waiting
    beat(fresh, "a", a.epoch, 101.5, owned=kept)  # a gives them up on the new coordinator
    b = beat(fresh, "b", b.epoch, 102.0, owned=set())
    assert set(b.assignment or ()) == ALL - kept
    assert beat(fresh, "c", c.epoch, 102.0, owned={("u", 0), ("u", 1)}).epoch == c.epoch
    with pytest.raises(FencedMemberEpoch):  # epochs are checked as before
        beat(fresh, "a", a.epoch + 10, 103.0)


def test_a_group_without_members_is_not_restored() -> None:
    m = Membership()
    a = beat(m, "a", 0, 0.0)
    beat(m, "a", -1, 1.0)
    group = Group("g")
    assert not has_members(snapshot(m.groups["g"]))  # not even taken over: nothing to restore
    assert not restore(group, snapshot(m.groups["g"]), 5.0)
    assert group.members == {} and group.kind != "consumer"
    assert a.epoch > 0
