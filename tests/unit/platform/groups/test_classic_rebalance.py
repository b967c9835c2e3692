"""groups.classic: the rebalance phases of Kafka's classic protocol (JoinGroup and SyncGroup, then
heartbeats, sessions and the join and initial-delay deadlines), time passed in as plain numbers."""

from __future__ import annotations

import pytest

from lakelog.platform.groups.classic import ClassicGroup, SyncResult
from lakelog.platform.groups.errors import (
    IllegalGeneration,
    InconsistentGroupProtocol,
    RebalanceInProgress,
    UnknownMemberId,
)
from tests.unit.platform.groups.classic_group_calls import error, formed, req, result


# ---- join and sync -----------------------------------------------------------------------------------------


def test_a_join_phase_completes_when_the_last_member_rejoins() -> None:
    g = ClassicGroup("g", initial_rebalance_delay_s=0)
    first = result(g.join(req(names=("range", "roundrobin")), 0.0, "a"))  # no delay: alone, at once
    assert (first.generation, first.leader, g.state) == (1, "a", "CompletingRebalance")
    result(g.sync("a", 1, None, "consumer", "range", {"a": b"A"}, 0.0))

    b = g.join(req(names=("roundrobin", "range")), 1.0, "b")
    assert not b.done() and g.state == "PreparingRebalance"
    with pytest.raises(RebalanceInProgress):
        g.heartbeat("a", 1, None, 1.5)
    a = g.join(req("a", names=("range", "roundrobin")), 2.0, "unused")

    ra, rb = result(a), result(b)
    assert ra.generation == rb.generation == g.generation == 2
    assert ra.leader == rb.leader == "a" and rb.member_id == "b"
    assert ra.members == [("a", None, b"range-meta"), ("b", None, b"range-meta")]  # a tie: a's preference
    assert rb.members == [] and ra.protocol_name == rb.protocol_name == "range"
    assert g.state == "CompletingRebalance"


def test_a_follower_sync_waits_for_the_leader_assignment() -> None:
    g = ClassicGroup("g", initial_rebalance_delay_s=1.0)
    fa, fb, fc = (g.join(req(), 0.0, m) for m in "abc")
    g.tick(1.0)
    assert not fa.done()  # b and c arrived in the first window: one more
    g.tick(2.0)
    ra = result(fa)
    assert result(fb).generation == result(fc).generation == ra.generation == 1 and ra.leader == "a"

    sb = g.sync("b", 1, None, "consumer", "range", {"b": b"forged"}, 2.5)  # a follower's list counts for nothing
    assert not sb.done()
    sa = g.sync("a", 1, None, "consumer", "range", {"a": b"A", "b": b"B"}, 3.0)
    assert result(sb).assignment == b"B" and result(sa).assignment == b"A"
    assert g.state == "Stable" and g.members["c"].assignment == b""  # the leader left c out
    assert result(g.sync("c", 1, None, "consumer", "range", {}, 3.0)).assignment == b""  # Stable: at once
    assert result(g.sync("b", 1, None, None, None, {}, 3.0)) == SyncResult("consumer", "range", b"B")


def test_sync_checks_member_generation_protocol_and_state() -> None:
    g = formed("a", "b")
    assert isinstance(error(g.sync("zz", 1, None, None, None, {}, 100.0)), UnknownMemberId)
    assert isinstance(error(g.sync("a", 7, None, None, None, {}, 100.0)), IllegalGeneration)
    assert isinstance(error(g.sync("a", 1, None, "consumer", "roundrobin", {}, 100.0)), InconsistentGroupProtocol)
    g.join(req("a"), 101.0, "unused")  # the leader rejoins: a rebalance
    assert isinstance(error(g.sync("b", 1, None, None, None, {}, 101.0)), RebalanceInProgress)


def test_a_follower_rejoining_with_the_same_protocols_gets_the_current_generation() -> None:
    g = formed("a", "b")
    again = result(g.join(req("b"), 101.0, "unused"))
    assert (again.generation, again.leader, again.members, g.state) == (1, "a", [], "Stable")
    changed = g.join(req("b", names=("range", "roundrobin")), 102.0, "unused")
    assert not changed.done() and g.state == "PreparingRebalance"


# ---- heartbeats, sessions and deadlines ----------------------------------------------------------------------


def test_heartbeat_errors() -> None:
    g = formed("a", "b")
    g.heartbeat("a", 1, None, 101.0)
    with pytest.raises(UnknownMemberId):
        g.heartbeat("zz", 1, None, 101.0)
    with pytest.raises(IllegalGeneration):
        g.heartbeat("a", 0, None, 101.0)
    g.join(req(), 102.0, "c")
    with pytest.raises(RebalanceInProgress):
        g.heartbeat("b", 1, None, 108.0)
    g.tick(115.0)  # that heartbeat renewed b's session; a's last one (101) is too old
    assert set(g.members) == {"b", "c"}


def test_an_expired_session_starts_a_rebalance_the_survivor_completes() -> None:
    g = formed("a", "b")
    g.heartbeat("a", 1, None, 108.0)
    g.tick(110.0)
    assert set(g.members) == {"a", "b"}  # b: exactly its 10 s, not more
    g.tick(110.5)
    assert list(g.members) == ["a"] and g.state == "PreparingRebalance"
    with pytest.raises(UnknownMemberId):
        g.heartbeat("b", 1, None, 111.0)
    with pytest.raises(RebalanceInProgress):
        g.heartbeat("a", 1, None, 111.0)
    rejoined = result(g.join(req("a"), 111.0, "unused"))
    assert (rejoined.generation, rejoined.leader, rejoined.members) == (2, "a", [("a", None, b"range-meta")])


def test_the_join_deadline_removes_a_member_that_never_rejoined() -> None:
    g = formed("a", "b")
    a = g.join(req("a"), 100.0, "unused")  # the leader asks for a rebalance: deadline 100 + 30
    for t in (109.0, 118.0, 127.0):  # b stays alive, but never rejoins
        with pytest.raises(RebalanceInProgress):
            g.heartbeat("b", 1, None, t)
    g.tick(129.9)
    assert not a.done()
    g.tick(130.0)
    assert result(a).generation == 2 and result(a).members == [("a", None, b"range-meta")]
    with pytest.raises(UnknownMemberId):
        g.heartbeat("b", 2, None, 130.0)


def test_a_parked_join_outlives_its_session() -> None:
    g = formed("a", "b")
    a = g.join(req("a"), 100.0, "unused")
    with pytest.raises(RebalanceInProgress):
        g.heartbeat("b", 1, None, 109.0)
    g.tick(115.0)  # a said nothing for 15 s, but it waits in its JoinGroup
    assert set(g.members) == {"a", "b"} and not a.done()
    b = g.join(req("b"), 116.0, "unused")
    assert result(a).generation == result(b).generation == 2


def test_members_that_never_sync_are_removed() -> None:
    g = ClassicGroup("g", initial_rebalance_delay_s=0)
    fa, fb = g.join(req(), 0.0, "a"), g.join(req(), 0.0, "b")
    assert result(fa).generation == 1 and not fb.done()  # no delay: a alone made generation 1
    fa = g.join(req("a"), 0.0, "unused")
    assert result(fa).generation == result(fb).generation == 2 and result(fa).leader == "a"
    sb = g.sync("b", 2, None, None, None, {}, 1.0)  # parked: alive while it waits
    g.tick(10.5)  # the leader neither synced nor heartbeat
    assert list(g.members) == ["b"] and isinstance(error(sb), RebalanceInProgress)
    rb = result(g.join(req("b"), 11.0, "unused"))
    assert (rb.generation, rb.leader) == (3, "b")

    for t in (20.0, 29.0, 38.0):  # alive, but it never syncs: removed at the rebalance timeout (11 + 30)
        g.heartbeat("b", 3, None, t)
    g.tick(40.9)
    assert "b" in g.members
    g.tick(41.0)
    assert g.state == "Empty" and g.generation == 4


def test_the_first_rebalance_waits_for_the_initial_delay() -> None:
    g = ClassicGroup("g", initial_rebalance_delay_s=3.0)
    a = g.join(req(), 0.0, "a")
    g.tick(2.9)
    assert not a.done() and g.state == "PreparingRebalance"
    g.tick(3.0)
    assert result(a).generation == 1

    g = ClassicGroup("g", initial_rebalance_delay_s=3.0)
    a = g.join(req(), 0.0, "a")
    b = g.join(req(), 2.0, "b")  # arrived in the first window: one more window
    g.tick(3.0)
    assert not a.done() and not b.done()
    g.tick(6.0)
    assert result(a).generation == result(b).generation == 1 and len(result(a).members) == 2


def test_the_initial_delay_is_capped_by_the_rebalance_timeout() -> None:
    g = ClassicGroup("g", initial_rebalance_delay_s=3.0)
    a = g.join(req(rebalance_ms=5_000), 0.0, "a")
    g.join(req(rebalance_ms=5_000), 1.0, "b")
    g.tick(3.0)  # extended, but only to 5
    g.join(req(rebalance_ms=5_000), 4.0, "c")
    g.tick(5.0)
    assert result(a).generation == 1 and len(result(a).members) == 3
