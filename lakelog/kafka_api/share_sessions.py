"""Share sessions (KIP-932's ShareFetch and ShareAcknowledge): which partitions a member fetches, carried
from request to request so that a request names only what changed.

Epoch 0 opens a session (or starts one over) with the request's partitions, and may not carry
acknowledgements; each later request carries the next epoch, adds its partitions and drops its forgotten
ones; -1 closes it (its acknowledgements still apply; nothing is fetched). A session is keyed by (group,
member): one node serves a member's share-partitions. Protocol state only: the records' state is the share
coordinator's.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from lakelog.platform.errors import InvalidRequest
from lakelog.platform.records import TopicPartition
from lakelog.platform.share.errors import InvalidShareSessionEpoch, ShareSessionNotFound

OPEN, CLOSE = 0, -1
MAX_SESSIONS = 10_000  # group.share.max.share.sessions: beyond it, the oldest session is dropped


@dataclass
class ShareSession:
    partitions: list[TopicPartition] = field(default_factory=list)
    epoch: int = 1  # the epoch the next request must carry


class ShareSessions:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def step(self, group: str, member: str, epoch: int, added: list[TopicPartition],
             forgotten: list[TopicPartition], acknowledging: bool) -> ShareSession | None:
        """Apply one request to the member's session; answers the session (None once closed). Raises
        ShareSessionNotFound, InvalidShareSessionEpoch or InvalidRequest, changing nothing."""
        key = (group, member)
        with self._lock:
            if epoch == OPEN:
                if acknowledging:
                    raise InvalidRequest("a ShareFetch opening a share session (epoch 0) cannot acknowledge")
                if len(self._sessions) >= MAX_SESSIONS and key not in self._sessions:
                    self._sessions.pop(next(iter(self._sessions)))
                opened = self._sessions[key] = ShareSession(_unique(added))
                return opened
            session = self._sessions.get(key)
            if session is None:
                raise ShareSessionNotFound(f"no share session of member {member!r} of group {group!r}: open one "
                                           "with epoch 0")
            if epoch == CLOSE:
                if forgotten:
                    raise InvalidRequest("a request closing a share session (epoch -1) cannot forget partitions")
                del self._sessions[key]
                return None
            if epoch != session.epoch:
                raise InvalidShareSessionEpoch(f"share session of member {member!r} expects epoch {session.epoch}, "
                                               f"not {epoch}")
            gone = set(forgotten)
            session.partitions = _unique([tp for tp in session.partitions if tp not in gone] + added)
            session.epoch += 1
            return session

    def check(self, group: str, member: str, epoch: int, acknowledging: bool) -> None:
        """ShareAcknowledge's check: the session exists and the epoch is its next (or -1, closing it)."""
        with self._lock:
            session = self._sessions.get((group, member))
            if epoch == OPEN:
                raise InvalidShareSessionEpoch("ShareAcknowledge cannot open a share session (epoch 0)")
            if session is None and epoch == CLOSE and not acknowledging:
                return  # closing what is gone already (the member left first): nothing to do
            if session is None:
                raise ShareSessionNotFound(f"no share session of member {member!r} of group {group!r}")
            if epoch == CLOSE:
                del self._sessions[(group, member)]
            elif epoch != session.epoch:
                raise InvalidShareSessionEpoch(f"share session of member {member!r} expects epoch {session.epoch}, "
                                               f"not {epoch}")
            else:
                session.epoch += 1

    def forget_member(self, group: str, member: str) -> None:
        with self._lock:
            self._sessions.pop((group, member), None)


def _unique(partitions: list[TopicPartition]) -> list[TopicPartition]:
    return list(dict.fromkeys(partitions))
