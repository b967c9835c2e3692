"""Share-group membership and the assignment of partitions to members."""

from __future__ import annotations

import pytest

from lakelog.platform.groups.errors import UnknownMemberId
from lakelog.platform.share.errors import FencedMemberEpoch
from lakelog.platform.share.group import ShareGroup, ShareMember, assign


def counts(topics: set[str]) -> dict[str, int]:
    return {t: {"one": 1, "four": 4}.get(t, 2) for t in topics}


def member(member_id: str, *topics: str) -> ShareMember:
    return ShareMember(member_id, 1, topics, 0.0)


def test_more_members_than_partitions_share_the_partition():
    members = {m: member(m, "one") for m in "abcd"}
    assert {m: sorted(p) for m, p in assign(members, {"one": 1}).items()} == {m: [("one", 0)] for m in "abcd"}


def test_fewer_members_than_partitions_split_them_and_cover_every_one():
    members = {m: member(m, "four") for m in "ab"}
    assigned = assign(members, {"four": 4})
    assert assigned["a"].isdisjoint(assigned["b"])
    assert assigned["a"] | assigned["b"] == {("four", p) for p in range(4)}


def test_a_member_gets_only_the_topics_it_subscribed_to():
    assigned = assign({"a": member("a", "one"), "b": member("b", "four")}, {"one": 1, "four": 4})
    assert {t for t, _ in assigned["a"]} == {"one"} and {t for t, _ in assigned["b"]} == {"four"}


def test_join_heartbeat_and_leave_move_the_epoch_and_answer_new_assignments_once():
    group = ShareGroup("g")
    a = group.heartbeat("a", 0, ("four",), 0.0, counts)
    assert a is not None and a.epoch == 1 and len(a.assignment) == 4
    b = group.heartbeat("b", 0, ("four",), 0.0, counts)
    assert b is not None and group.epoch == 2 and len(b.assignment) == 2
    assert group.members["a"].epoch == 2 and len(group.members["a"].assignment) == 2
    assert group.heartbeat("b", -1, None, 1.0, counts) is None
    assert group.epoch == 3 and len(group.members["a"].assignment) == 4


def test_an_unknown_member_or_a_wrong_epoch_is_refused():
    group = ShareGroup("g")
    group.heartbeat("a", 0, ("one",), 0.0, counts)
    with pytest.raises(UnknownMemberId):
        group.heartbeat("x", 1, None, 0.0, counts)
    with pytest.raises(FencedMemberEpoch):
        group.heartbeat("a", 7, None, 0.0, counts)


def test_silent_members_expire():
    group = ShareGroup("g")
    group.heartbeat("a", 0, ("one",), 0.0, counts)
    group.heartbeat("b", 0, ("one",), 10.0, counts)
    assert group.expire(50.0, 45.0, counts) == ["a"]
    assert list(group.members) == ["b"]


def test_a_member_told_an_epoch_before_another_joined_is_not_fenced_and_learns_the_new_one():
    group = ShareGroup("g")
    a = group.heartbeat("a", 0, ("four",), 0.0, counts)
    assert a is not None and a.epoch == 1
    group.heartbeat("b", 0, ("four",), 0.0, counts)  # moves a to epoch 2 before a hears of it
    again = group.heartbeat("a", 1, None, 1.0, counts)
    assert again is not None and again.epoch == 2 and len(again.assignment) == 2
    with pytest.raises(FencedMemberEpoch):  # told 2 now: 1 is stale
        group.heartbeat("a", 1, None, 2.0, counts)
