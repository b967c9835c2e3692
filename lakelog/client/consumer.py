"""Consumer: group membership over HTTP (join, a heartbeat thread, polls, commits with the generation),
rebalance callbacks (eager, or cooperative when the assignor is cooperative-sticky), and manual
assignment (`assign`) that reads partitions directly with client-side positions.

Under `subscribe`, the server keeps the member's read positions (and commits them itself at the next
poll when enable.auto.commit is on). So the client asks for more only when everything it was given has
been handed to the application: what the server auto-commits has been consumed, as in Kafka.

The class is put together from its parts: `consumer_membership.py` (join, heartbeats, rebalances),
`consumer_fetch.py` (fetches, positions, seek), `consumer_commits.py`; its configuration and join
request, pure, in `consumer_config.py`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

from lakelog.client.consumer_commits import Commits
from lakelog.client.consumer_config import DEFAULTS, RESETS, STRATEGIES, TP, RebalanceCallback, join_body, tp_list
from lakelog.client.consumer_fetch import Fetching
from lakelog.client.consumer_membership import Membership
from lakelog.client.errors import INVALID_ARG, STATE, KafkaError, KafkaException
from lakelog.client.http import Session, with_retries
from lakelog.client.message import OFFSET_BEGINNING, OFFSET_END, Message, TopicPartition
from lakelog.client.producer import check_config

__all__ = ["Consumer", "join_body"]


class Consumer(Membership, Fetching, Commits):
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
        self._poll_requests = 0  # subscribe mode: poll requests sent, numbered (`request`), never reset
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
