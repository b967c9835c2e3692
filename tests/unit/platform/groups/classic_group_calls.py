"""Driving a groups.classic ClassicGroup in tests: JoinGroup requests, the answers of its futures, and a
group already formed (Stable, generation 1). Time is passed in as plain numbers."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from lakelog.platform.groups.classic import ClassicGroup, JoinRequest, Protocol

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
