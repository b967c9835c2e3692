"""Fetch sessions (KIP-227): the partitions a consumer fetches, kept by the listener from one Fetch to the
next, so that a request names only what changed and an answer only the partitions with news.

As Kafka's broker does (FetchSession.scala, FetchManager): epoch 0 opens a session (a full request; an id
given with it closes that session first), -1 asks for none (and closes the id given), any other epoch
is incremental and must be the session's next: its partitions are added or updated, its forgotten ones
dropped, and the answer lists only the partitions with records, an error, or a high watermark, log start
or last stable offset other than the session last answered. A wrong epoch answers
INVALID_FETCH_SESSION_EPOCH, an unknown id FETCH_SESSION_ID_NOT_FOUND. The cache is bounded
(max.incremental.fetch.session.cache.slots); when it is full and nothing may be evicted, a full request
is answered without a session (id 0). Protocol state only, in memory: the records are the broker's.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from lakelog.kafka_api.errors import CODES

INVALID_SESSION_ID = 0
INITIAL_EPOCH, FINAL_EPOCH = 0, -1
MAX_EPOCH = 2**31 - 1
FETCH_SESSION_ID_NOT_FOUND = CODES["FETCH_SESSION_ID_NOT_FOUND"]
INVALID_FETCH_SESSION_EPOCH = CODES["INVALID_FETCH_SESSION_EPOCH"]
FIRST_SESSION_VERSION = 7  # Fetch v7 carries session ids and epochs
MAX_SESSIONS = 1000  # Kafka's max.incremental.fetch.session.cache.slots default
EVICTION_S = 120.0  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: younger sessions are kept

Key = tuple[str, int]  # (topic, partition)


@dataclass
class Cached:
    """One partition of a session: the request's parameters and what the last answer said of it."""
    offset: int
    max_bytes: int
    high_watermark: int = -1
    log_start_offset: int = -1
    last_stable_offset: int = -1


@dataclass(frozen=True)
class Answer:
    """What a Fetch answer says of one partition, as far as a session compares it."""
    has_records: bool
    error_code: int
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int


@dataclass
class FetchSession:
    id: int
    partitions: dict[Key, Cached]  # in fetch order: partitions that answered records move to the end
    epoch: int  # the epoch the next request must carry
    created: float
    used: float


class Kind(Enum):
    SESSIONLESS = "sessionless"  # answered whole, session id 0
    FULL = "full"  # answered whole, and a session is opened with its partitions
    INCREMENTAL = "incremental"  # the session's partitions, answered where something changed
    ERROR = "error"  # a session error: nothing is read


@dataclass(frozen=True)
class Plan:
    """What one Fetch reads: (partition, offset, max bytes) in order, and how its answer is formed."""
    kind: Kind
    wanted: list[tuple[Key, int, int]] = field(default_factory=list)
    error_code: int = 0
    session: FetchSession | None = None
    epoch: int = 0  # the request's


@dataclass(frozen=True)
class Outcome:
    session_id: int
    error_code: int
    listed: list[Key]  # the partitions the answer carries, in order


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1


def sessionless(requested: dict[Key, tuple[int, int]]) -> Plan:
    """A Fetch before v7, or one asking for no session."""
    return Plan(Kind.SESSIONLESS, [(key, offset, size) for key, (offset, size) in requested.items()])


class FetchSessions:
    """One listener's sessions. Thread-safe; `plan` before the read, `finish` once it is answered."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, eviction_s: float = EVICTION_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_sessions, self.eviction_s, self.clock = max_sessions, eviction_s, clock
        self._lock = threading.Lock()
        self._sessions: dict[int, FetchSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def plan(self, session_id: int, epoch: int, requested: dict[Key, tuple[int, int]],
             forgotten: list[Key]) -> Plan:
        """Apply a Fetch's session fields: which partitions it reads at which offsets."""
        with self._lock:
            if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
                self._sessions.pop(session_id, None)  # a full request closes the session it names
                if epoch == FINAL_EPOCH:
                    return sessionless(requested)
                return Plan(Kind.FULL, sessionless(requested).wanted)
            session = self._sessions.get(session_id)
            if session is None:
                return Plan(Kind.ERROR, error_code=FETCH_SESSION_ID_NOT_FOUND)
            if epoch != session.epoch:
                return Plan(Kind.ERROR, error_code=INVALID_FETCH_SESSION_EPOCH)
            _update(session, requested, forgotten)
            if not session.partitions:  # nothing left to fetch: the session ends (Kafka does the same)
                del self._sessions[session_id]
                return sessionless(requested)
            session.used = self.clock()
            session.epoch = next_epoch(session.epoch)
            wanted = [(key, p.offset, p.max_bytes) for key, p in session.partitions.items()]
            return Plan(Kind.INCREMENTAL, wanted, session=session, epoch=epoch)

    def finish(self, plan: Plan, answers: list[tuple[Key, Answer]]) -> Outcome:
        """The answer's session id, error and partitions; opens the session of a full request."""
        every = [key for key, _ in answers]
        if plan.kind is Kind.ERROR:
            return Outcome(INVALID_SESSION_ID, plan.error_code, [])
        if plan.kind is Kind.SESSIONLESS:
            return Outcome(INVALID_SESSION_ID, 0, every)
        with self._lock:
            if plan.kind is Kind.FULL:
                return Outcome(self._open(plan, dict(answers)), 0, every)
            session = plan.session
            assert session is not None  # an incremental plan carries its session
            if session.epoch != next_epoch(plan.epoch):  # a later request of the session came first
                return Outcome(INVALID_SESSION_ID, INVALID_FETCH_SESSION_EPOCH, [])
            return Outcome(session.id, 0, [key for key, answer in answers if _changed(session, key, answer)])

    def _open(self, plan: Plan, answers: dict[Key, Answer]) -> int:
        now = self.clock()
        if len(self._sessions) >= self.max_sessions and not self._evict(len(plan.wanted), now):
            return INVALID_SESSION_ID
        partitions = {}
        for key, offset, size in plan.wanted:
            cached = partitions[key] = Cached(offset, size)
            answer = answers.get(key)
            if answer is not None:
                _remember(cached, answer)
        session_id = self._new_id()
        self._sessions[session_id] = FetchSession(session_id, partitions, next_epoch(INITIAL_EPOCH), now, now)
        return session_id

    def _evict(self, size: int, now: float) -> bool:
        """Kafka's rule: the least recently used session if it is stale, else the smallest of those older
        than the eviction time, when the new one holds more partitions. False when none may go."""
        oldest = min(self._sessions.values(), key=lambda s: (s.used, s.id))
        if now - oldest.used > self.eviction_s:
            del self._sessions[oldest.id]
            return True
        settled = [s for s in self._sessions.values() if now - s.created > self.eviction_s]
        if not settled:
            return False
        smallest = min(settled, key=lambda s: (len(s.partitions), s.id))
        if size <= len(smallest.partitions):
            return False
        del self._sessions[smallest.id]
        return True

    def _new_id(self) -> int:
        while True:
            session_id = random.randint(1, MAX_EPOCH)
            if session_id not in self._sessions:
                return session_id


def _update(session: FetchSession, requested: dict[Key, tuple[int, int]], forgotten: list[Key]) -> None:
    for key, (offset, size) in requested.items():
        cached = session.partitions.get(key)
        if cached is None:
            session.partitions[key] = Cached(offset, size)
        else:
            cached.offset, cached.max_bytes = offset, size
    for key in forgotten:
        session.partitions.pop(key, None)


def _changed(session: FetchSession, key: Key, answer: Answer) -> bool:
    """Whether an incremental answer lists the partition; the session remembers what it says."""
    cached = session.partitions.get(key)
    if cached is None:  # forgotten by a request that came meanwhile
        return False
    listed = answer.has_records or answer.error_code != 0 or (
        answer.high_watermark, answer.log_start_offset, answer.last_stable_offset) != (
        cached.high_watermark, cached.log_start_offset, cached.last_stable_offset)
    _remember(cached, answer)
    if answer.has_records:  # to the end: the next answers' byte budget goes to the others first
        session.partitions[key] = session.partitions.pop(key)
    return listed


def _remember(cached: Cached, answer: Answer) -> None:
    if answer.error_code:  # resent once the error is gone
        cached.high_watermark = cached.log_start_offset = cached.last_stable_offset = -1
        return
    cached.high_watermark = answer.high_watermark
    cached.log_start_offset = answer.log_start_offset
    cached.last_stable_offset = answer.last_stable_offset
