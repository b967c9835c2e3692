"""Consumer: group membership over HTTP (join, a heartbeat thread, polls, commits with the generation),
rebalance callbacks (eager, or cooperative when the assignor is cooperative-sticky), and manual
assignment (`assign`) that reads partitions directly with client-side positions.

Under `subscribe`, the server keeps the member's read positions (and commits them itself at the next
poll when enable.auto.commit is on). So the client asks for more only when everything it was given has
been handed to the application: what the server auto-commits has been consumed, as in Kafka.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import quote

from lakelog.client.errors import INVALID_ARG, NOT_IMPLEMENTED, STATE, KafkaError, KafkaException
from lakelog.client.http import Session, with_retries
from lakelog.client.message import OFFSET_BEGINNING, OFFSET_END, Message, TopicPartition, from_fetched
from lakelog.client.producer import check_config
from lakelog.client.rebalance import Changes, changes

log = logging.getLogger(__name__)

TP = tuple[str, int]
RebalanceCallback = Callable[["Consumer", list[TopicPartition]], None]
CommitCallback = Callable[[KafkaError | None, list[TopicPartition]], None]

DEFAULTS: dict[str, Any] = {
    "group.id": None,
    "auto.offset.reset": "latest",
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 5000,
    "session.timeout.ms": 45_000,
    "heartbeat.interval.ms": 3000,
    "max.poll.interval.ms": 300_000,
    "partition.assignment.strategy": "range",
    "group.instance.id": None,
    "max.poll.records": 500,
    "fetch.max.bytes": None,
    "fetch.wait.max.ms": 500,
    "request.timeout.ms": 30_000,
    "default.api.timeout.ms": 60_000,
    "retry.backoff.ms": 100,
    "api.key": None,
    "client.id": None,
    "on_commit": None,
}
RESETS = {"earliest": "earliest", "smallest": "earliest", "beginning": "earliest",
          "latest": "latest", "largest": "latest", "end": "latest", "none": "none", "error": "none"}
STRATEGIES = {"range": "range", "roundrobin": "roundrobin", "cooperative-sticky": "cooperative-sticky"}
MEMBER_GONE = frozenset({"UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID"})


def tp_list(keys: Iterable[TP], offsets: Mapping[TP, int] | None = None) -> list[TopicPartition]:
    return [TopicPartition(t, p, (offsets or {}).get((t, p), -1001)) for t, p in sorted(keys)]


class Consumer:
    """`Consumer(url, {"group.id": "g", "auto.offset.reset": "earliest"})`, then subscribe() and poll()."""

    def __init__(self, url: str, config: Mapping[str, Any] | None = None, *, api_key: str | None = None) -> None:
        config = dict(config or {})
        check_config(config, set(DEFAULTS), "consumer")
        self._config = {**DEFAULTS, **config}
        reset = str(self._config["auto.offset.reset"])
        strategy = str(self._config["partition.assignment.strategy"]).split(",")[0].strip()
        if reset not in RESETS or strategy not in STRATEGIES:
            raise KafkaException(KafkaError(INVALID_ARG, f"auto.offset.reset {reset!r} or partition.assignment."
                                                         f"strategy {strategy!r} is not one lakelog knows"))
        self._reset, self._strategy = RESETS[reset], STRATEGIES[strategy]
        self._cooperative = self._strategy == "cooperative-sticky"
        self._auto_commit = bool(self._config["enable.auto.commit"])
        self._group = self._config["group.id"]
        self._url, self._api_key = url, api_key or self._config["api.key"]
        self._request_s = int(self._config["request.timeout.ms"]) / 1000
        self._api_timeout_s = int(self._config["default.api.timeout.ms"]) / 1000
        self._backoff_s = int(self._config["retry.backoff.ms"]) / 1000
        self._session_s = int(self._config["session.timeout.ms"]) / 1000
        self._session = Session(url, self._api_key, self._request_s)
        self._lock = threading.Lock()
        self._beat_lock = threading.Lock()
        self._mode: str | None = None
        self._join_body: dict[str, Any] = {}
        self._callbacks: dict[str, RebalanceCallback | None] = {}
        # What the server said (written by whichever thread heartbeats, under _lock).
        self._member_id: str | None = None
        self._generation = -1
        self._server_assignment: set[TP] | None = None
        self._revoke_told: set[TP] = set()
        self._told_at = 0.0
        self._rejoin = False
        # What the application has been told and handed (the application's thread only).
        self._assignment: set[TP] = set()
        self._buffer: deque[Message] = deque()
        self._positions: dict[TP, int] = {}  # the next offset after what poll() handed out
        self._polls = 0  # subscribe mode: the number of the last poll answer received (sent back as `after`)
        self._skip: dict[TP, int] = {}  # subscribe mode: a forward seek, records below are dropped
        self._fetch_at: dict[TP, int] = {}  # assign mode: the next offset to fetch
        self._cursor = 0
        self._given_up: set[TP] = set()  # partitions given up during the fetch in progress
        self._last_auto_commit = time.monotonic()
        self._closed = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._committer: ThreadPoolExecutor | None = None

    # ---- subscription and assignment -----------------------------------------------------

    def subscribe(self, topics: list[str], on_assign: RebalanceCallback | None = None,
                  on_revoke: RebalanceCallback | None = None, on_lost: RebalanceCallback | None = None) -> None:
        """Join the group for these topics; a name starting with '^' is a regex (RE2, whole-name match)."""
        self._check_open()
        if not self._group:
            raise KafkaException(KafkaError(INVALID_ARG, "subscribe needs group.id"))
        if self._mode == "assign":
            raise KafkaException(KafkaError(STATE, "unassign() before subscribe()"))
        if self._mode == "subscribe":
            self._leave()
        self._join_body = join_body(self._config, self._reset, self._strategy, topics)
        self._callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        self._mode = "subscribe"
        self._join()
        if self._heartbeat is None:
            self._heartbeat = threading.Thread(target=self._heartbeats, name="lakelog-heartbeat", daemon=True)
            self._heartbeat.start()

    def unsubscribe(self) -> None:
        if self._mode == "subscribe":
            self._leave()
        self._mode = None

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Read these partitions without group membership; a TopicPartition's offset (>= 0, or
        OFFSET_BEGINNING / OFFSET_END) is where to start, else the committed offset or auto.offset.reset."""
        self._check_open()
        if self._mode == "subscribe":
            raise KafkaException(KafkaError(STATE, "unsubscribe() before assign()"))
        self._mode = "assign"
        self._assignment = set()
        self._fetch_at.clear()
        self._buffer.clear()
        for tp in partitions:
            self._assignment.add(tp.key())
            if tp.offset >= 0 or tp.offset in (OFFSET_BEGINNING, OFFSET_END):
                self.seek(tp)

    def unassign(self) -> None:
        self._assignment, self._mode = set(), None
        self._buffer.clear()
        self._fetch_at.clear()

    def assignment(self) -> list[TopicPartition]:
        return tp_list(self._assignment)

    # ---- reading ---------------------------------------------------------------------------

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next message, or None when none came within `timeout` seconds (None or -1: forever)."""
        messages = self.consume(1, -1 if timeout is None else timeout)
        return messages[0] if messages else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """Up to `num_messages` messages, waiting up to `timeout` seconds for the first."""
        self._check_open()
        if self._mode is None:
            raise KafkaException(KafkaError(STATE, "subscribe() or assign() first"))
        deadline = float("inf") if timeout is None or timeout < 0 else time.monotonic() + timeout
        while True:
            self._serve_group_changes()
            self._maybe_auto_commit()
            out = self._hand_out(num_messages)
            if out:
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            wait = min(left, int(self._config["fetch.wait.max.ms"]) / 1000)
            fetched = self._fetch_group(wait) if self._mode == "subscribe" else self._fetch_assigned(wait)
            self._buffer.extend(fetched)  # after the fetch: it may have purged the buffer

    def _hand_out(self, limit: int) -> list[Message]:
        out: list[Message] = []
        while self._buffer and len(out) < limit:
            message = self._buffer.popleft()
            tp = (message.topic(), message.partition())
            if message.offset() < self._skip.get(tp, -1):
                continue
            self._positions[tp] = message.offset() + 1
            out.append(message)
        return out

    def _fetch_group(self, wait_s: float) -> list[Message]:
        member = self._member_id
        if member is None:
            self._rejoin = True
            time.sleep(min(self._backoff_s, wait_s))
            return []
        params = {"max_records": int(self._config["max.poll.records"]), "timeout_ms": int(wait_s * 1000),
                  "key_format": "base64", "value_format": "base64", "after": self._polls}
        if self._config["fetch.max.bytes"]:
            params["max_bytes"] = int(self._config["fetch.max.bytes"])
        self._given_up.clear()
        try:
            answer = self._session.request("GET", f"{self._group_path()}/members/{quote(member, safe='')}/records",
                                           params=params, timeout_s=wait_s + self._request_s)
        except KafkaException as exc:
            return self._fetch_failed(exc.args[0], wait_s)
        self._polls = answer.get("poll", 0)
        if answer.get("generation") is not None and answer["generation"] != self._generation:
            self._beat(self._session)  # a rebalance happened: learn the assignment before handing anything out
        messages = [from_fetched(r) for r in answer["records"]]
        if any((m.topic(), m.partition()) not in self._assignment for m in messages):
            self._beat(self._session)
        self._serve_group_changes()
        # Records of partitions given up meanwhile were committed up to what was handed out: their new
        # owner reads them from there.
        return [m for m in messages if (m.topic(), m.partition()) not in self._given_up]

    def _fetch_failed(self, error: KafkaError, wait_s: float) -> list[Message]:
        if error.code() in MEMBER_GONE:
            with self._lock:
                self._rejoin = True
            return []
        if error.retriable():
            time.sleep(min(self._backoff_s, wait_s))
            return []
        raise KafkaException(error)

    def _fetch_assigned(self, wait_s: float) -> list[Message]:
        """Assign mode: each partition in turn from the client's own positions; the last one long-polls."""
        plan = sorted(self._assignment)
        if not plan:
            time.sleep(wait_s)
            return []
        self._cursor = (self._cursor + 1) % len(plan)
        plan = plan[self._cursor:] + plan[:self._cursor]
        share = max(int(self._config["max.poll.records"]) // len(plan), 1)
        for i, tp in enumerate(plan):
            last = i == len(plan) - 1
            try:
                offset = self._fetch_at.get(tp)
                if offset is None:
                    offset = self._fetch_at[tp] = self._start_offset(tp)
                answer = self._session.request(
                    "GET", f"/v1/topics/{quote(tp[0], safe='')}/partitions/{tp[1]}/records",
                    params={"offset": offset, "max_records": share, "timeout_ms": int(wait_s * 1000) if last else 0,
                            "key_format": "base64", "value_format": "base64"},
                    timeout_s=wait_s + self._request_s)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == "OFFSET_OUT_OF_RANGE" and self._reset != "none":
                    self._fetch_at[tp] = self._list_offset(tp, self._reset)
                    continue
                return self._fetch_failed(error, wait_s)
            if answer["records"]:
                self._fetch_at[tp] = answer["next_offset"]
                return [from_fetched(r) for r in answer["records"]]
        return []

    def _start_offset(self, tp: TP) -> int:
        committed = self._committed_offsets().get(tp) if self._group else None
        if committed is not None:
            return committed
        if self._reset == "none":
            raise KafkaException(KafkaError("OFFSET_OUT_OF_RANGE", f"no committed offset for {tp[0]}-{tp[1]} and "
                                                                   "auto.offset.reset is none"))
        return self._list_offset(tp, self._reset)

    def _list_offset(self, tp: TP, spec: str | int) -> int:
        answer = self._call("GET", f"/v1/topics/{quote(tp[0], safe='')}/partitions/{tp[1]}/offsets",
                            params={"spec": str(spec)})
        return int(answer["offset"])

    # ---- positions -----------------------------------------------------------------------

    def seek(self, partition: TopicPartition) -> None:
        """Read `partition` from its offset next. Assign mode: any offset. Subscribe mode: the server keeps
        the group's positions and has no seek, so only forward (records below the offset are skipped)."""
        tp = partition.key()
        if tp not in self._assignment:
            raise KafkaException(KafkaError(STATE, f"{tp[0]}-{tp[1]} is not assigned to this consumer"))
        offset = partition.offset
        if offset == OFFSET_BEGINNING:
            offset = self._list_offset(tp, "earliest")
        elif offset == OFFSET_END:
            offset = self._list_offset(tp, "latest")
        if offset < 0:
            raise KafkaException(KafkaError(INVALID_ARG, f"cannot seek to offset {partition.offset}"))
        self._drop_buffered({tp})
        if self._mode == "assign":
            self._fetch_at[tp] = offset
            self._positions[tp] = offset
            return
        position = self._positions.get(tp)
        if position is not None and offset < position:
            raise KafkaException(KafkaError(NOT_IMPLEMENTED, "the server keeps a group member's positions and has "
                                                             "no seek: subscribe mode seeks forward only"))
        self._skip[tp] = offset
        self._positions[tp] = offset

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self._positions.get(tp.key(), -1001)) for tp in partitions]

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        found = self._committed_offsets()
        return [TopicPartition(tp.topic, tp.partition, found.get(tp.key(), -1001)) for tp in partitions]

    def _committed_offsets(self) -> dict[TP, int]:
        try:
            answer = self._call("GET", f"{self._group_path()}/offsets")
        except KafkaException as exc:
            if exc.args[0].status() == 404:
                return {}
            raise
        return {(o["topic"], o["partition"]): o["offset"] for o in answer["offsets"]}

    # ---- commits ---------------------------------------------------------------------------

    def commit(self, message: Message | None = None, offsets: list[TopicPartition] | None = None,
               asynchronous: bool = True) -> list[TopicPartition] | None:
        """Commit the message's next offset, the given offsets, or every position poll() handed out.
        Synchronous: answers the committed offsets once durable (raises on failure). Asynchronous
        (confluent-kafka's default): returns at once; `on_commit(err, partitions)` hears the outcome."""
        self._check_open()
        if message is not None:
            wanted = {(message.topic(), message.partition()): message.offset() + 1}
        elif offsets is not None:
            wanted = {tp.key(): tp.offset for tp in offsets}
        else:
            wanted = {tp: o for tp, o in self._positions.items() if tp in self._assignment}
        if not wanted:
            if asynchronous:
                return None
            raise KafkaException(KafkaError("_NO_OFFSET", "nothing to commit"))
        member, generation = (self._member_id, self._generation) if self._mode == "subscribe" else (None, -1)
        if not asynchronous:
            try:
                return self._commit_now(self._session, wanted, member, generation)
            except KafkaException as exc:
                self._note_gone(exc.args[0], member)
                raise
        if self._committer is None:
            self._committer = ThreadPoolExecutor(1, thread_name_prefix="lakelog-commit")
        self._committer.submit(self._commit_async, wanted, member, generation)
        return None

    def _note_gone(self, error: KafkaError, member: str | None) -> None:
        """A commit answered that the server forgot this member: rejoin at the next poll (and drop what
        was fetched but not handed out: it comes again from the committed offsets)."""
        if error.code() in MEMBER_GONE and member is not None:
            with self._lock:
                if self._member_id == member:
                    self._rejoin = True

    def _commit_async(self, wanted: dict[TP, int], member: str | None, generation: int) -> None:
        callback: CommitCallback | None = self._config["on_commit"]
        session = Session(self._url, self._api_key, self._request_s)
        try:
            self._commit_now(session, wanted, member, generation)
            error = None
        except KafkaException as exc:
            error = exc.args[0]
            self._note_gone(error, member)
            log.warning("async commit failed: %s", error)
        finally:
            session.close()
        if callback is not None:
            callback(error, tp_list(wanted, wanted))

    def _commit_now(self, session: Session, wanted: dict[TP, int], member: str | None,
                    generation: int) -> list[TopicPartition]:
        if member is None and self._mode == "subscribe":
            raise KafkaException(KafkaError("UNKNOWN_MEMBER_ID", "not in the group (rejoining): cannot commit"))
        body: dict[str, Any] = {"generation": generation,
                                "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in
                                            sorted(wanted.items())]}
        if member is not None:
            body["member_id"] = member
        with_retries(lambda: session.request("POST", f"{self._group_path()}/offsets", json=body),
                     time.monotonic() + self._api_timeout_s, self._backoff_s)
        return tp_list(wanted, wanted)

    def _maybe_auto_commit(self) -> None:
        """Assign mode only (the server auto-commits group members at their polls)."""
        if self._mode != "assign" or not self._auto_commit or not self._group:
            return
        now = time.monotonic()
        if now - self._last_auto_commit >= int(self._config["auto.commit.interval.ms"]) / 1000:
            self._last_auto_commit = now
            self.commit(asynchronous=True)

    # ---- group membership ---------------------------------------------------------------

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

    def _commit_revoked(self, wanted: dict[TP, int]) -> None:
        """Commit what was read of partitions being given up, before the server hands them on. A newer
        generation may have started meanwhile: read it from the group's description (a heartbeat now
        would hand the partitions on before the commit) and commit once more."""
        generation = self._generation
        for attempt in range(2):
            try:
                self._commit_now(self._session, wanted, self._member_id, generation)
                return
            except KafkaException as exc:
                if exc.args[0].code() != "ILLEGAL_GENERATION" or attempt:
                    log.warning("commit of revoked partitions failed: %s", exc)
                    return
                generation = int(self._call("GET", self._group_path())["generation"])

    def _drop_buffered(self, partitions: set[TP]) -> None:
        """Forget fetched, not handed out records of these partitions (in place: one buffer for good)."""
        kept = [m for m in self._buffer if (m.topic(), m.partition()) not in partitions]
        self._buffer.clear()
        self._buffer.extend(kept)

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

    # ---- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Commit what poll() handed out (when enable.auto.commit is on), leave the group, stop threads."""
        if self._closed:
            return
        try:
            if self._auto_commit and self._group and self._mode is not None:
                self._final_commit()
            if self._mode == "subscribe":
                self._leave()
        finally:
            self._closed = True
            self._stop.set()
            self._wake.set()
            if self._heartbeat is not None:
                self._heartbeat.join(self._request_s + 1)
            if self._committer is not None:
                self._committer.shutdown(wait=True)
            self._session.close()

    def _final_commit(self) -> None:
        wanted = {tp: o for tp, o in self._positions.items() if tp in self._assignment}
        if not wanted:
            return
        for attempt in range(2):
            member, generation = (self._member_id, self._generation) if self._mode == "subscribe" else (None, -1)
            try:
                self._commit_now(self._session, wanted, member, generation)
                return
            except KafkaException as exc:
                if exc.args[0].code() != "ILLEGAL_GENERATION" or attempt:
                    log.warning("commit on close failed: %s", exc)
                    return
                with self._lock:
                    self._revoke_told = set()
                self._beat(self._session)  # learn the current generation, then commit once more

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaException(KafkaError(STATE, "the consumer is closed"))

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        """A request that should land: retriable failures are retried up to default.api.timeout.ms."""
        return with_retries(lambda: self._session.request(method, path, **kwargs),
                            time.monotonic() + self._api_timeout_s, self._backoff_s)


def join_body(config: Mapping[str, Any], reset: str, strategy: str, topics: list[str]) -> dict[str, Any]:
    """The join request: Kafka's consumer settings by their names, the topics or one pattern."""
    if not topics:
        raise KafkaException(KafkaError(INVALID_ARG, "subscribe to at least one topic or pattern"))
    body: dict[str, Any] = {
        "session.timeout.ms": int(config["session.timeout.ms"]),
        "max.poll.interval.ms": int(config["max.poll.interval.ms"]),
        "auto.offset.reset": reset,
        "enable.auto.commit": bool(config["enable.auto.commit"]),
        "assignor": strategy,
    }
    if config.get("group.instance.id"):
        body["group.instance.id"] = config["group.instance.id"]
    if any(t.startswith("^") for t in topics):
        body["pattern"] = "|".join(f"(?:{t[1:]})" if t.startswith("^") else re.escape(t) for t in topics)
    else:
        body["topics"] = list(topics)
    return body
