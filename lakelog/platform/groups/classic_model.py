"""The classic group protocol's vocabulary: the group states, the JoinGroup request and the JoinGroup and
SyncGroup answers, a member's record, and the completion of the parked answers' futures.

Pure: data and small functions, no threads, clock or I/O. Owns what `classic.py` and `classic_phases.py`
share; any thread may use it, though the group's records are only changed by a `ClassicGroup`'s calls,
which run under the coordinator's lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any

EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

MAX_FENCED = 1000  # replaced static member ids remembered, so their late calls get FENCED_INSTANCE_ID


@dataclass(frozen=True)
class Protocol:
    name: str  # assignor name, e.g. "range", "roundrobin", "cooperative-sticky"
    metadata: bytes  # opaque subscription bytes


@dataclass(frozen=True)
class JoinRequest:
    member_id: str  # "" for a new member
    group_instance_id: str | None  # static membership (may be None)
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str  # "consumer"
    protocols: tuple[Protocol, ...]  # in the member's order of preference
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = False  # JoinGroup v4+: a new dynamic member first gets MEMBER_ID_REQUIRED
    supports_skip_assignment: bool = False  # JoinGroup v9+ (KIP-814): the answer may carry skip_assignment


@dataclass(frozen=True)
class JoinResult:
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    # (member_id, group_instance_id, metadata of the chosen protocol); only the leader gets them, others []
    members: list[tuple[str, str | None, bytes]]
    skip_assignment: bool = False  # a static leader that replaced itself must not assign (KIP-814)


@dataclass(frozen=True)
class SyncResult:
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


@dataclass
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[Protocol, ...]
    assignment: bytes = b""
    last_heartbeat: float = 0.0  # also refreshed by its JoinGroup, SyncGroup and the end of each phase
    join_future: Future[JoinResult] | None = None  # a parked JoinGroup
    sync_future: Future[SyncResult] | None = None  # a parked SyncGroup

    @property
    def protocol_names(self) -> set[str]:
        return {p.name for p in self.protocols}

    def metadata(self, protocol: str | None) -> bytes:
        return next((p.metadata for p in self.protocols if p.name == protocol), b"")

    def vote(self, candidates: set[str]) -> str:
        return next(p.name for p in self.protocols if p.name in candidates)

    def session_expired(self, now: float) -> bool:
        # A parked JoinGroup or SyncGroup cannot heartbeat: Kafka counts it as alive until the wait ends.
        if self.join_future is not None or self.sync_future is not None:
            return False
        return now - self.last_heartbeat > self.session_timeout_ms / 1000


def common_protocols(members: Iterable[ClassicMember]) -> set[str]:
    sets = [m.protocol_names for m in members]
    return set.intersection(*sets) if sets else set()


def differs(asked: str | None, actual: str | None) -> bool:
    # SyncGroup before v5 names neither: only a name given on both sides can disagree.
    return asked is not None and actual is not None and asked != actual


def resolve(future: Future[Any] | None, value: Any) -> None:
    if future is None or future.done():
        return
    try:
        future.set_result(value)
    except InvalidStateError:  # its caller cancelled it meanwhile (a closed connection)
        pass


def fail(future: Future[Any] | None, error: BaseException) -> None:
    if future is None or future.done():
        return
    try:
        future.set_exception(error)
    except InvalidStateError:
        pass
