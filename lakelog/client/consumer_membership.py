"""The consumer's group membership: join, the heartbeat thread, rebalances served in the application's
thread (eager, or cooperative when the assignor is cooperative-sticky: `rebalance.changes` decides),
membership lost, leaving the group.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable
from urllib.parse import quote

from lakelog.client.consumer_config import MEMBER_GONE, TP, group_path, tp_list
from lakelog.client.consumer_state import Handed, MemberState
from lakelog.client.errors import KafkaException
from lakelog.client.http import Session
from lakelog.client.message import TopicPartition
from lakelog.client.rebalance import Changes, changes

log = logging.getLogger("lakelog.client.consumer")  # the consumer's one logger, whichever part logs

Told = Callable[[list[TopicPartition]], None]  # a rebalance callback, the consumer bound to it


class Membership:
    """The consumer's group membership.

    Thread contract: the application's thread subscribes, joins, serves the group's changes and leaves;
    the heartbeat thread (its own, with its own HTTP session; started by `start_heartbeats`, stopped by
    `stop`) heartbeats every heartbeat.interval.ms or when woken (`_wake`). A heartbeat runs under
    `_beat_lock`, whichever thread sends it. What the server said lives in `member` (under its lock);
    what the application holds in `handed` (the application's thread only). `_join_body` and
    `_callbacks` are set by `subscribe`, in the application's thread.
    """

    def __init__(self, session: Session, new_session: Callable[[], Session], call: Callable[..., Any],
                 group: str | None, member: MemberState, handed: Handed, mode: Callable[[], str | None],
                 commit_revoked: Callable[[dict[TP, int]], None], *, heartbeat_interval_ms: Any,
                 session_timeout_s: float, cooperative: bool, auto_commit: bool) -> None:
        """`session`: the application thread's HTTP session; `new_session()`: the heartbeat thread's;
        `call(method, path, ...)`: a request retried up to default.api.timeout.ms; `mode()`: "subscribe",
        "assign" or None; `commit_revoked(offsets)`: commits what was read of partitions given up;
        `heartbeat_interval_ms`: as configured (read as a number when the heartbeat thread starts)."""
        self._session = session
        self._new_session = new_session
        self._call = call
        self._group = group
        self._member = member
        self._handed = handed
        self._mode = mode
        self._commit_revoked = commit_revoked
        self._interval_ms = heartbeat_interval_ms
        self._session_s = session_timeout_s
        self._cooperative = cooperative
        self._auto_commit = auto_commit
        self._beat_lock = threading.Lock()
        self._join_body: dict[str, Any] = {}
        self._callbacks: dict[str, Told | None] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def subscribe(self, join_body: dict[str, Any], callbacks: dict[str, Told | None]) -> None:
        """What the next join asks for, and the rebalance callbacks ("assign", "revoke", "lost")."""
        self._join_body, self._callbacks = join_body, callbacks

    def join(self) -> None:
        answer = self._call("POST", f"{group_path(self._group)}/members", json=self._join_body)
        self._member.joined(answer["member_id"], answer["generation"])
        self.beat(self._session)

    def start_heartbeats(self) -> None:
        if self._heartbeat is None:
            self._heartbeat = threading.Thread(target=self._heartbeats, name="lakelog-heartbeat", daemon=True)
            self._heartbeat.start()

    def _heartbeats(self) -> None:
        """The heartbeat thread: its own HTTP session, every heartbeat.interval.ms or when woken."""
        session = self._new_session()
        interval = int(self._interval_ms) / 1000
        try:
            while not self._stop.is_set():
                self._wake.wait(interval)
                self._wake.clear()
                if not self._stop.is_set():
                    self.beat(session)
        finally:
            session.close()

    def beat(self, session: Session) -> None:
        """One heartbeat, unless partitions the server asked back are not given up yet (the next
        heartbeat tells the server they are, cooperative rebalancing): then it waits for poll() to give
        them up, for at most half the session timeout."""
        with self._beat_lock:
            member, waiting = self._member.beat_target(self._session_s)
            if member is None or waiting:
                return
            try:
                path = f"{group_path(self._group)}/members/{quote(member, safe='')}/heartbeat"
                answer = session.request("POST", path)
            except KafkaException as exc:
                if exc.args[0].code() in MEMBER_GONE:
                    self._member.forgotten(member)
                elif not exc.args[0].retriable():
                    log.warning("heartbeat failed: %s", exc)
                return
            self._member.heard(member, answer["generation"],
                               {(a["topic"], a["partition"]) for a in answer["assignment"]},
                               {(a["topic"], a["partition"]) for a in answer["revoke"]}, self._cooperative)

    def relearn(self) -> None:
        """Learn the current generation now (a heartbeat, not held back by partitions asked back)."""
        self._member.clear_revoke()
        self.beat(self._session)

    def serve_group_changes(self) -> None:
        """In the application's thread: rejoin when the server forgot this member, give up revoked
        partitions (commit, callback), take new ones (callback)."""
        if self._mode() != "subscribe":
            return
        rejoin, told, server = self._member.changes()
        if rejoin:
            self._lose_all()
            try:
                self.join()
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
                self._member.ask_rejoin()
            return
        handed = self._handed
        plan: Changes = changes(handed.assignment, server, told, self._cooperative)
        if plan.revoke:
            self._callback("revoke", plan.revoke)  # before giving up: a callback may still commit them
        if plan.give_up:
            self._give_up(plan.give_up, commit=self._auto_commit and self._cooperative)
        if told:
            self._member.given_back(told)
            self._wake.set()  # the heartbeat thread tells the server they are given up
        if plan.assign is not None:
            for tp in plan.target - handed.assignment:  # a position from an earlier ownership is stale
                handed.positions.pop(tp, None)
            handed.assignment = set(plan.target)
            self._callback("assign", plan.assign)

    def _give_up(self, partitions: set[TP], commit: bool) -> None:
        if commit:
            wanted = {tp: o for tp, o in self._handed.positions.items() if tp in partitions}
            if wanted:
                self._commit_revoked(wanted)
        self._handed.give_up(partitions)

    def _lose_all(self) -> None:
        """The server no longer knows this member: its partitions may be someone else's already."""
        handed = self._handed
        lost = set(handed.assignment)
        self._give_up(lost, commit=False)
        handed.buffer.clear()
        handed.positions.clear()  # of partitions handed out but not (yet) assigned too: a commit must not use them
        handed.skip.clear()
        if lost:
            self._callback("lost" if self._callbacks.get("lost") else "revoke", lost)
        self._member.lost()

    def _callback(self, kind: str, partitions: set[TP]) -> None:
        callback = self._callbacks.get(kind)
        if callback is not None:
            callback(tp_list(partitions, self._handed.positions))

    def leave(self) -> None:
        member = self._member.member_id
        if member is None:
            return
        handed = self._handed
        if handed.assignment:
            self._callback("revoke", set(handed.assignment))
        self._member.left()
        handed.assignment = set()
        handed.buffer.clear()
        handed.positions.clear()
        try:
            self._session.request("DELETE", f"{group_path(self._group)}/members/{quote(member, safe='')}")
        except KafkaException as exc:
            log.info("leaving the group: %s", exc)

    def stop(self, timeout_s: float) -> None:
        """Stop the heartbeat thread (waiting up to `timeout_s` for it)."""
        self._stop.set()
        self._wake.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout_s)
