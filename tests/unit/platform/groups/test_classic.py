"""groups.classic: Kafka's classic rebalance protocol as a state machine, time passed in as plain numbers."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.platform.cluster.errors import NotCoordinator
from lakelog.platform.errors import LakelogError
from lakelog.platform.groups.classic import ClassicGroup, JoinRequest, JoinResult, Protocol, SyncResult
from lakelog.platform.groups.errors import (
    FencedInstanceId,
    IllegalGeneration,
    InconsistentGroupProtocol,
    MemberIdRequired,
    RebalanceInProgress,
    UnknownMemberId,
)

SESSION_MS = 10_000
REBALANCE_MS = 30_000


def protocols(*names: str) -> tuple[Protocol, ...]:
    return tuple(Protocol(name, f"{name}-meta".encode()) for name in names)


def req(member_id: str = "", *, instance: str | None = None, names: tuple[str, ...] = ("range",),
        session_ms: int = SESSION_MS, rebalance_ms: int = REBALANCE_MS, require_known: bool = False,
        protocol_type: str = "consumer", skip: bool = False) -> JoinRequest:
    return JoinRequest(member_id, instance, session_ms, rebalance_ms, protocol_type, protocols(*names),
                       client_id="c", client_host="/10.0.0.1", require_known_member_id=require_known,
                       supports_skip_assignment=skip)


def result(future: Future[Any]) -> Any:
    assert future.done(), "the answer is still pending"
    return future.result(timeout=0)


def error(future: Future[Any]) -> BaseException | None:
    assert future.done(), "the answer is still pending"
    return future.exception(timeout=0)


def formed(*ids: str, instances: dict[str, str] | None = None) -> ClassicGroup:
    """A Stable group of generation 1: `ids` join at 0, the first phase ends at a late tick (100), the
    first member leads and assigns each member its own id as bytes. Every session restarts at 100."""
    instances = instances or {}
    group = ClassicGroup("g", initial_rebalance_delay_s=1.0)
    futures = {i: group.join(req(instance=instances.get(i)), 0.0, i) for i in ids}
    group.tick(100.0)
    joined = {i: result(f) for i, f in futures.items()}
    leader = ids[0]
    assert all(r.generation == 1 and r.leader == leader for r in joined.values())
    for i in [*ids[1:], leader]:  # the followers wait for the leader
        assignments = {m: m.encode() for m, _, _ in joined[i].members}
        group.sync(i, 1, instances.get(i), "consumer", "range", assignments, 100.0)
    assert group.state == "Stable" and all(m.assignment == m.member_id.encode() for m in group.members.values())
    return group


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


# ---- a property ---------------------------------------------------------------------------------------------------

SLOTS = 4
PROTOCOL_CHOICES = [("range",), ("range", "roundrobin"), ("roundrobin", "range"), ("sticky",)]
steps = st.lists(st.one_of(
    st.tuples(st.just("join"), st.integers(0, SLOTS - 1), st.sampled_from(PROTOCOL_CHOICES), st.booleans()),
    st.tuples(st.just("sync"), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("heartbeat"), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("leave"), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 2.0, 6.0, 12.0, 40.0])),
), max_size=40)


class Client:
    """What a consumer knows: its member id, generation and (when it leads) the members to assign."""

    def __init__(self) -> None:
        self.member_id = ""
        self.generation = -1
        self.members: list[tuple[str, str | None, bytes]] = []


class Consumers:
    """Clients driving one group, and every answer they were promised."""

    def __init__(self, eager_sync: bool) -> None:
        self.group = ClassicGroup("g", initial_rebalance_delay_s=1.0)
        self.clients = [Client() for _ in range(SLOTS)]
        self.eager_sync = eager_sync  # clients send SyncGroup as soon as their JoinGroup is answered
        self.now = 0.0
        self.joins: list[tuple[Client, Future[JoinResult]]] = []
        self.syncs: list[tuple[str, Future[SyncResult]]] = []  # (member id that asked, answer)
        self.answered: set[int] = set()
        self.generation = 0

    def step(self, op: tuple[Any, ...]) -> None:
        g = self.group
        if op[0] == "tick":
            self.now += op[1]
            g.tick(self.now)
            return
        client = self.clients[op[1]]
        if op[0] == "join":
            request = req(client.member_id, names=op[2], require_known=op[3], rebalance_ms=5_000)
            self.joins.append((client, g.join(request, self.now, f"m{len(self.joins)}")))
        elif op[0] == "sync":
            self.sync(client.member_id, client.generation, client.members)
        else:
            try:
                if op[0] == "heartbeat":
                    g.heartbeat(client.member_id, client.generation, None, self.now)
                else:
                    g.leave(client.member_id, None, self.now)
            except LakelogError:
                pass

    def sync(self, member_id: str, generation: int, members: list[tuple[str, str | None, bytes]]) -> None:
        assignments = {m: m.encode() for m, _, _ in members}  # the leader gives each member its id
        self.syncs.append((member_id, self.group.sync(member_id, generation, None, "consumer", None,
                                                      assignments, self.now)))

    def take_answers(self) -> list[JoinResult]:
        """Join answers given since the last call; clients learn from them as Kafka clients do."""
        results = []
        for client, future in self.joins:
            if not future.done() or id(future) in self.answered:
                continue
            self.answered.add(id(future))
            exc = future.exception()
            if exc is None:
                answer = future.result()
                results.append(answer)
                client.member_id, client.generation, client.members = \
                    answer.member_id, answer.generation, answer.members
            elif isinstance(exc, MemberIdRequired):
                client.member_id = exc.member_id
            elif isinstance(exc, UnknownMemberId):
                client.member_id, client.generation, client.members = "", -1, []
        return results

    def check(self) -> None:
        g = self.group
        results = self.take_answers()
        # Answers given together: one generation, one leader, and only the leader sees the members.
        assert {r.generation for r in results} <= {g.generation}
        assert {r.leader for r in results} <= {g.leader_id}
        for r in results:
            assert r.member_id in g.members
            assert not r.members or (r.member_id == g.leader_id and [m for m, _, _ in r.members] == list(g.members))
        if self.eager_sync:
            for r in results:
                self.sync(r.member_id, r.generation, r.members)
        for member_id, future in self.syncs:
            if future.done() and future.exception() is None:
                assert future.result().assignment == member_id.encode()  # what the leader gave it
        # Every request still waiting waits in the group, where the phase parks it.
        parked = {id(f) for m in g.members.values() for f in (m.join_future, m.sync_future) if f is not None}
        waiting = [f for _, f in self.joins if not f.done()] + [f for _, f in self.syncs if not f.done()]
        assert all(id(f) in parked for f in waiting)
        if g.state != "PreparingRebalance":
            assert all(m.join_future is None for m in g.members.values())
        if g.state != "CompletingRebalance":
            assert all(m.sync_future is None for m in g.members.values())
        assert (g.state == "Empty") == (not g.members)
        assert g.leader_id in g.members if g.members else g.leader_id is None
        assert g.generation >= self.generation
        self.generation = g.generation


@settings(max_examples=300, deadline=None)
@given(steps, st.booleans())
def test_no_answer_is_lost_and_every_phase_agrees(script: list[tuple[Any, ...]], eager_sync: bool) -> None:
    run = Consumers(eager_sync)
    for op in script:
        run.step(op)
        run.check()
    for later in (1000.0, 2000.0, 3000.0):  # everyone falls silent: the group empties, every answer is given
        run.step(("tick", later))
        run.check()
    assert run.group.empty and run.group.state == "Empty"
    assert all(f.done() for _, f in run.joins) and all(f.done() for _, f in run.syncs)
