"""groups.classic: who is a member of a classic group: MEMBER_ID_REQUIRED's round trip, leaving, the
protocol the members agree on, and static membership (group.instance.id: a restarted instance replaces
its old member id and fences it)."""

from __future__ import annotations

import pytest

from lakelog.platform.groups.classic import ClassicGroup
from lakelog.platform.groups.errors import (
    FencedInstanceId,
    IllegalGeneration,
    InconsistentGroupProtocol,
    MemberIdRequired,
    RebalanceInProgress,
    UnknownMemberId,
)
from tests.unit.platform.groups.classic_group_calls import error, formed, req, result


# ---- MEMBER_ID_REQUIRED, leave, protocols --------------------------------------------------------------------


def test_member_id_required_round_trip() -> None:
    g = ClassicGroup("g", initial_rebalance_delay_s=0)
    first = error(g.join(req(require_known=True), 0.0, "m1"))
    assert isinstance(first, MemberIdRequired) and first.member_id == "m1" and first.code == "MEMBER_ID_REQUIRED"
    assert g.members == {} and "m1" in g.pending_members and not g.empty
    joined = result(g.join(req("m1", require_known=True), 1.0, "unused"))
    assert (joined.member_id, joined.generation, joined.leader) == ("m1", 1, "m1") and not g.pending_members

    assert isinstance(error(g.join(req(require_known=True), 2.0, "m2")), MemberIdRequired)
    g.heartbeat("m1", 1, None, 12.0)
    result(g.sync("m1", 1, None, None, None, {"m1": b"x"}, 12.0))
    g.tick(12.5)  # m2's id lived as long as its session (10 s)
    assert "m2" not in g.pending_members and g.state == "Stable"
    assert isinstance(error(g.join(req("m2"), 13.0, "unused")), UnknownMemberId)


def test_a_pending_member_id_holds_the_join_phase() -> None:
    g = formed("a")
    assert isinstance(error(g.join(req(require_known=True), 100.0, "p")), MemberIdRequired)
    assert g.state == "Stable"  # an id handed out is no member yet
    a = g.join(req("a"), 100.0, "unused")  # the leader's join starts a rebalance
    assert not a.done()  # everyone joined but p, which is expected back
    p = g.join(req("p"), 100.5, "unused")
    assert result(a).generation == result(p).generation == 2


def test_leave_rebalances_and_the_last_leave_empties_the_group() -> None:
    g = formed("a", "b")
    g.leave("a", None, 101.0)
    assert list(g.members) == ["b"] and g.state == "PreparingRebalance" and g.leader_id == "b"
    with pytest.raises(UnknownMemberId):
        g.leave("a", None, 101.0)
    assert result(g.join(req("b"), 102.0, "unused")).generation == 2
    g.leave("b", None, 103.0)
    assert g.state == "Empty" and g.generation == 3 and g.members == {} and g.empty and g.leader_id is None


def test_leave_answers_the_parked_join_of_the_leaving_member() -> None:
    g = formed("a", "b")
    b = g.join(req("b", names=("roundrobin", "range")), 100.0, "unused")
    g.leave("b", None, 100.5)
    assert isinstance(error(b), UnknownMemberId)


def test_the_protocol_with_most_votes_is_chosen() -> None:
    g = ClassicGroup("g", initial_rebalance_delay_s=1.0)
    fs = [g.join(req(names=n), 0.0, m) for m, n in (("a", ("sticky", "range", "roundrobin")),
                                                    ("b", ("roundrobin", "range")),
                                                    ("c", ("roundrobin", "range", "sticky")))]
    g.tick(10.0)
    # b does not support sticky, so a votes for range; b and c vote for roundrobin.
    assert {result(f).protocol_name for f in fs} == {"roundrobin"} and g.protocol_name == "roundrobin"
    assert result(fs[0]).members[0] == ("a", None, b"roundrobin-meta")


def test_inconsistent_protocols_are_refused() -> None:
    g = formed("a")
    for bad in (req(names=("roundrobin",)), req(protocol_type="connect"), req(names=())):
        assert isinstance(error(g.join(bad, 101.0, "b")), InconsistentGroupProtocol)
    assert list(g.members) == ["a"] and g.state == "Stable"
    # The only member may change to anything: nobody else has to agree.
    changed = result(g.join(req("a", names=("roundrobin",)), 101.0, "unused"))
    assert changed.protocol_name == "roundrobin" and changed.generation == 2


# ---- static membership ------------------------------------------------------------------------------------------


def test_a_static_replacement_in_a_stable_group_fences_the_old_id_and_keeps_the_assignment() -> None:
    g = formed("a1", "b1", instances={"b1": "ib"})
    new = result(g.join(req(instance="ib"), 101.0, "b2"))
    assert (new.generation, new.member_id, new.leader, new.members) == (1, "b2", "a1", [])
    assert g.state == "Stable" and set(g.members) == {"a1", "b2"} and g.static_members == {"ib": "b2"}
    assert result(g.sync("b2", 1, "ib", None, None, {}, 101.0)).assignment == b"b1"  # kept
    with pytest.raises(FencedInstanceId):
        g.heartbeat("b1", 1, "ib", 102.0)
    with pytest.raises(FencedInstanceId):
        g.heartbeat("b1", 1, None, 102.0)
    with pytest.raises(FencedInstanceId):
        g.check_commit("b1", 1, "ib")
    g.heartbeat("b2", 1, "ib", 102.0)


def test_a_static_replacement_fences_the_parked_requests_of_the_old_id() -> None:
    g = formed("a1", "b1", instances={"b1": "ib"})
    parked = g.join(req("b1", instance="ib", names=("range", "roundrobin")), 100.0, "unused")  # a rebalance
    new = g.join(req(instance="ib"), 101.0, "b2")  # the same instance restarts meanwhile
    assert isinstance(error(parked), FencedInstanceId) and not new.done()
    a = g.join(req("a1"), 102.0, "unused")
    assert result(new).generation == result(a).generation == 2
    assert [m for m, _, _ in result(a).members] == ["a1", "b2"]


def test_a_static_leader_replaced_in_a_stable_group() -> None:
    for skip in (False, True):
        g = formed("a1", "b1", instances={"a1": "ia"})
        new = result(g.join(req(instance="ia", skip=skip), 101.0, "a2"))
        assert g.leader_id == "a2" and g.state == "Stable" and new.generation == 1
        if skip:  # KIP-814: it learns that it leads, and that it must not assign
            assert new.leader == "a2" and new.skip_assignment and [m for m, _, _ in new.members] == ["b1", "a2"]
        else:  # older clients: the old id, so it does not think it leads
            assert new.leader == "a1" and not new.skip_assignment and new.members == []


def test_a_static_member_that_does_not_rejoin_stays_in_the_next_generation() -> None:
    g = formed("a", "s1", instances={"s1": "s"})
    a = g.join(req("a"), 101.0, "unused")  # a rebalance: deadline 131
    for t in (105.0, 114.0, 123.0):
        with pytest.raises(RebalanceInProgress):
            g.heartbeat("s1", 1, "s", t)
    g.tick(131.0)
    assert result(a).members == [("a", None, b"range-meta"), ("s1", "s", b"range-meta")]
    with pytest.raises(IllegalGeneration):  # it learns of the new generation and rejoins
        g.heartbeat("s1", 1, "s", 132.0)
