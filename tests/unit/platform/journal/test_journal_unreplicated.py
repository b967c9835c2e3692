"""A replicated topic's commits the in-sync copies may lack: held (without their journal object) from the
leader's table commit until a copy reaches their table version, so a replica election can carry them."""

from __future__ import annotations

import pyarrow as pa

from lakelog.platform.journal import topic_state
from lakelog.platform.journal.objects import Entry
from lakelog.platform.journal.planner import plan_commit
from lakelog.platform.journal.topic_state import NO_OBJECT, Acknowledged, JournalTopic


def acknowledged(base: int, count: int, payload: int = 8) -> Acknowledged:
    records = pa.table({"offset": pa.array(range(base, base + count), pa.int64()),
                        "value": pa.array([b"x" * payload] * count, pa.binary())})
    return Acknowledged(("r1", 7), Entry("t", 0, base, count), records)


def test_commits_are_held_until_a_copy_reaches_their_version() -> None:
    topic = JournalTopic("t", lambda partition: 0)
    topic.committed_unreplicated([acknowledged(0, 3)], version=4)
    topic.committed_unreplicated([acknowledged(3, 2)], version=5)
    assert [i.entry.base for i in topic.unreplicated()] == [0, 3]
    assert {i.generation for i in topic.unreplicated()} == {NO_OBJECT}  # their objects are not the election's
    topic.replicated(4)
    assert [i.entry.base for i in topic.unreplicated()] == [3]
    topic.replicated(9)
    assert topic.unreplicated() == []


def test_a_follower_lacking_the_last_commit_fits_the_entries_after_it_once_it_is_carried() -> None:
    topic = JournalTopic("t", lambda partition: 0)
    topic.committed_unreplicated([acknowledged(21, 1)], version=12)  # in the lost leader's table only
    waiting = [acknowledged(22, 2)]
    assert plan_commit({0: 21}, [i.entry for i in waiting]).misfit is not None
    carried = topic.unreplicated() + waiting
    plan = plan_commit({0: 21}, [i.entry for i in carried])
    assert plan.misfit is None and [e.base for e in plan.commit] == [21, 22]
    assert [e.base for e in plan_commit({0: 22}, [i.entry for i in carried]).skip] == [21]  # a site holding it


def test_the_oldest_go_when_the_copies_fall_far_behind(monkeypatch) -> None:
    monkeypatch.setattr(topic_state, "UNREPLICATED_MAX_BYTES", 2_500)
    topic = JournalTopic("t", lambda partition: 0)
    for base in range(0, 30, 10):
        topic.committed_unreplicated([acknowledged(base, 10, payload=100)], version=base)
    assert [i.entry.base for i in topic.unreplicated()] == [10, 20]
