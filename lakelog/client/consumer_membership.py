"""The consumer's group membership: join, the heartbeat thread, rebalances served in the application's
thread (eager, or cooperative when the assignor is cooperative-sticky: `rebalance.changes` decides),
membership lost, leaving the group.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import quote

from lakelog.client.consumer_config import MEMBER_GONE, TP, tp_list
from lakelog.client.errors import INVALID_ARG, KafkaError, KafkaException
from lakelog.client.http import Session
from lakelog.client.rebalance import Changes, changes

log = logging.getLogger("lakelog.client.consumer")  # the consumer's one logger, whichever part logs


class Membership:
    """Consumer's group membership (a part of `Consumer`: its state is set up in `Consumer.__init__`)."""

    def _group_path(self) -> str:
        if not self._group:
            raise KafkaException(KafkaError(INVALID_ARG, "this needs group.id"))
        return f"/v1/groups/{quote(self._group, safe='')}"

    def _join(self) -> None:
        answer = self._call("POST", f"{self._group_path()}/members", json=self._join_body)
        with self._lock:
            self._member_id, self._generation = answer["member_id"], answer["generation"]
            self._polls = 0  # a new member: no poll received yet
            self._server_assignment, self._revoke_told, self._rejoin = None, set(), False
        self._beat(self._session)

    def _heartbeats(self) -> None:
        """The heartbeat thread: its own HTTP session, every heartbeat.interval.ms or when woken."""
        session = Session(self._url, self._api_key, self._request_s)
        interval = int(self._config["heartbeat.interval.ms"]) / 1000
        try:
            while not self._stop.is_set():
                self._wake.wait(interval)
                self._wake.clear()
                if not self._stop.is_set():
                    self._beat(session)
        finally:
            session.close()

    def _beat(self, session: Session) -> None:
        """One heartbeat, unless partitions the server asked back are not given up yet (the next
        heartbeat tells the server they are, cooperative rebalancing): then it waits for poll() to give
        them up, for at most half the session timeout."""
        with self._beat_lock:
            with self._lock:
                member = self._member_id
                waiting = self._revoke_told and time.monotonic() - self._told_at < self._session_s / 2
            if member is None or waiting:
                return
            try:
                answer = session.request("POST", f"{self._group_path()}/members/{quote(member, safe='')}/heartbeat")
            except KafkaException as exc:
                if exc.args[0].code() in MEMBER_GONE:
                    with self._lock:
                        if self._member_id == member:
                            self._rejoin = True
                elif not exc.args[0].retriable():
                    log.warning("heartbeat failed: %s", exc)
                return
            with self._lock:
                if self._member_id != member:
                    return
                self._generation = answer["generation"]
                self._server_assignment = {(a["topic"], a["partition"]) for a in answer["assignment"]}
                revoke = {(a["topic"], a["partition"]) for a in answer["revoke"]}
                if revoke and self._cooperative:
                    self._revoke_told = revoke
                    self._told_at = time.monotonic()
                else:
                    self._revoke_told = set()

    def _serve_group_changes(self) -> None:
        """In the application's thread: rejoin when the server forgot this member, give up revoked
        partitions (commit, callback), take new ones (callback)."""
        if self._mode != "subscribe":
            return
        with self._lock:
            rejoin, told = self._rejoin, set(self._revoke_told)
            server = None if self._server_assignment is None else set(self._server_assignment)
        if rejoin:
            self._lose_all()
            try:
                self._join()
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
                with self._lock:
                    self._rejoin = True
            return
        plan: Changes = changes(self._assignment, server, told, self._cooperative)
        if plan.revoke:
            self._callback("revoke", plan.revoke)  # before giving up: a callback may still commit them
        if plan.give_up:
            self._give_up(plan.give_up, commit=self._auto_commit and self._cooperative)
        if told:
            with self._lock:
                self._revoke_told -= told
            self._wake.set()  # the heartbeat thread tells the server they are given up
        if plan.assign is not None:
            for tp in plan.target - self._assignment:  # a position from an earlier ownership is stale
                self._positions.pop(tp, None)
            self._assignment = set(plan.target)
            self._callback("assign", plan.assign)

    def _give_up(self, partitions: set[TP], commit: bool) -> None:
        if commit:
            wanted = {tp: o for tp, o in self._positions.items() if tp in partitions}
            if wanted:
                self._commit_revoked(wanted)
        self._assignment -= partitions
        self._given_up |= partitions
        self._drop_buffered(partitions)
        for tp in partitions:
            self._positions.pop(tp, None)
            self._skip.pop(tp, None)

    def _lose_all(self) -> None:
        """The server no longer knows this member: its partitions may be someone else's already."""
        lost = set(self._assignment)
        self._give_up(lost, commit=False)
        self._buffer.clear()
        self._positions.clear()  # of partitions handed out but not (yet) assigned too: a commit must not use them
        self._skip.clear()
        if lost:
            self._callback("lost" if self._callbacks.get("lost") else "revoke", lost)
        with self._lock:
            self._member_id = None

    def _callback(self, kind: str, partitions: set[TP]) -> None:
        callback = self._callbacks.get(kind)
        if callback is not None:
            callback(self, tp_list(partitions, self._positions))

    def _leave(self) -> None:
        member = self._member_id
        if member is None:
            return
        if self._assignment:
            self._callback("revoke", set(self._assignment))
        with self._lock:
            self._member_id, self._server_assignment, self._revoke_told = None, None, set()
        self._assignment = set()
        self._buffer.clear()
        self._positions.clear()
        try:
            self._session.request("DELETE", f"{self._group_path()}/members/{quote(member, safe='')}")
        except KafkaException as exc:
            log.info("leaving the group: %s", exc)
