"""groups.classic, a property: consumers driving one classic group through random joins, syncs,
heartbeats, leaves and ticks never lose an answer, and every phase agrees on one generation and leader."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.platform.errors import LakelogError
from lakelog.platform.groups.classic import ClassicGroup, JoinResult, SyncResult
from lakelog.platform.groups.errors import MemberIdRequired, UnknownMemberId
from tests.unit.platform.groups.classic_group_calls import req


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
