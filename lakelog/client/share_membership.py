"""The share consumer's membership of its share group: join, the heartbeat thread, leave, and a member the
server forgot (its session timed out) joined again in the application's thread.

A share group has no rebalance for the application to serve: a member learns its assignment at once, and
locks, not ownership, keep two members from taking the same record. So the heartbeat thread only keeps the
member alive and notes what the server answered.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable
from urllib.parse import quote

from lakelog.client.errors import INVALID_ARG, KafkaError, KafkaException
from lakelog.client.http import Session

log = logging.getLogger("lakelog.client.share_consumer")

GONE = frozenset({"UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH", "GROUP_ID_NOT_FOUND"})


def share_group_path(group: str | None) -> str:
    if not group:
        raise KafkaException(KafkaError(INVALID_ARG, "a share consumer needs group.id"))
    return f"/v1/share-groups/{quote(group, safe='')}"


class ShareMembership:
    """Thread contract: the application's thread joins and leaves (`join`, `leave`, `ensure`); the heartbeat
    thread (its own HTTP session) heartbeats every interval. What the server said (`member_id`, `epoch`,
    `assignment`, `lost`) is under `_lock`."""

    def __init__(self, session: Session, new_session: Callable[[], Session], call: Callable[..., Any],
                 group: str | None, client_id: str, heartbeat_interval_ms: int | None) -> None:
        """`session`: the application thread's; `new_session()`: the heartbeat thread's; `call(method, path,
        ...)`: a request retried up to default.api.timeout.ms; `heartbeat_interval_ms`: None for the
        server's."""
        self._session = session
        self._new_session = new_session
        self._call = call
        self._path = share_group_path(group)
        self._client_id = client_id
        self._interval_ms = heartbeat_interval_ms
        self._lock = threading.Lock()
        self._topics: list[str] = []
        self.member_id: str | None = None
        self.epoch = -1
        self.assignment: set[tuple[str, int]] = set()
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def member_path(self, member_id: str) -> str:
        return f"{self._path}/members/{quote(member_id, safe='')}"

    def join(self, topics: list[str]) -> None:
        """Join for `topics` (leaving first if a member already)."""
        self.leave()
        self._topics = list(topics)
        answer = self._call("POST", f"{self._path}/members", json={"topics": self._topics,
                                                                   "client_id": self._client_id})
        with self._lock:
            self.member_id, self.lost = answer["member_id"], False
            self._heard(answer)
            if self._interval_ms is None:
                self._interval_ms = int(answer["heartbeat_interval_ms"])
        if self._thread is None:
            self._thread = threading.Thread(target=self._heartbeats, name="lakelog-share-heartbeat", daemon=True)
            self._thread.start()

    def ensure(self) -> bool:
        """In the application's thread: join again when the server forgot this member. Answers True when it
        did (whatever the old member held is no longer this consumer's to acknowledge)."""
        with self._lock:
            lost = (self.lost or self.member_id is None) and bool(self._topics)
        if lost:
            log.info("share group member %s was forgotten by the server: joining again", self.member_id)
            with self._lock:
                self.member_id = None
            self.join(self._topics)
        return lost

    def forgotten(self, member_id: str) -> None:
        """The server does not know `member_id` (any thread): rejoin at the next poll."""
        with self._lock:
            if self.member_id == member_id:
                self.lost = True

    def _heard(self, answer: dict[str, Any]) -> None:
        self.epoch = answer["epoch"]
        self.assignment = {(a["topic"], a["partition"]) for a in answer["assignment"]}

    def _heartbeats(self) -> None:
        session = self._new_session()
        try:
            while not self._stop.wait(int(self._interval_ms or 5000) / 1000):
                self.beat(session)
        finally:
            session.close()

    def beat(self, session: Session) -> None:
        with self._lock:
            member, lost = self.member_id, self.lost
        if member is None or lost:
            return
        try:
            answer = session.request("POST", f"{self.member_path(member)}/heartbeat", json={})
        except KafkaException as exc:
            if exc.args[0].code() in GONE:
                self.forgotten(member)
            elif not exc.args[0].retriable():
                log.warning("share group heartbeat failed: %s", exc)
            return
        with self._lock:
            if self.member_id == member:
                self._heard(answer)

    def leave(self, forget_topics: bool = False) -> None:
        with self._lock:
            member, self.member_id, self.assignment = self.member_id, None, set()
            if forget_topics:
                self._topics = []
        if member is None:
            return
        try:
            self._session.request("DELETE", self.member_path(member))
        except KafkaException as exc:
            log.info("leaving the share group: %s", exc)

    def stop(self, timeout_s: float) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
