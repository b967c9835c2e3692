"""Consumer: group membership over HTTP (join, a heartbeat thread, polls, commits with the generation),
rebalance callbacks (eager, or cooperative when the assignor is cooperative-sticky), and manual
assignment (`assign`) that reads partitions directly with client-side positions.

Under `subscribe`, the server keeps the member's read positions (and commits them itself at the next
poll when enable.auto.commit is on). So the client asks for more only when everything it was given has
been handed to the application: what the server auto-commits has been consumed, as in Kafka.

The class is built from collaborators, each given what it needs: `consumer_membership.py` (join,
heartbeats, rebalances), `consumer_fetch.py` (fetches, positions, seek), `consumer_commits.py`; the state
they share in `consumer_state.py` (the member as the server knows it, under its lock; what the application
holds, its thread's only); its configuration and join request, pure, in `consumer_config.py`. The
application's thread calls it (a rebalance callback runs in it); close may come from another thread.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any, Mapping

from lakelog.client.consumer_commits import Commits
from lakelog.client.consumer_config import DEFAULTS, RESETS, STRATEGIES, RebalanceCallback, join_body, tp_list
from lakelog.client.consumer_fetch import Fetching
from lakelog.client.consumer_membership import Membership, Told
from lakelog.client.consumer_state import Handed, MemberState
from lakelog.client.errors import INVALID_ARG, STATE, KafkaError, KafkaException
from lakelog.client.http import Session, with_retries
from lakelog.client.message import OFFSET_BEGINNING, OFFSET_END, Message, TopicPartition
from lakelog.client.producer import check_config

__all__ = ["Consumer", "join_body"]


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
        self._auto_commit = bool(self._config["enable.auto.commit"])
        self._group = self._config["group.id"]
        self._api_key = api_key or self._config["api.key"]
        self._request_s = int(self._config["request.timeout.ms"]) / 1000
        self._api_timeout_s = int(self._config["default.api.timeout.ms"]) / 1000
        self._backoff_s = int(self._config["retry.backoff.ms"]) / 1000
        self._session = Session(url, self._api_key, self._request_s)
        self._mode: str | None = None  # "subscribe", "assign" or None (the application's thread)
        self._closed = False
        new_session = partial(Session, url, self._api_key, self._request_s)
        mode = lambda: self._mode  # noqa: E731
        self._member = MemberState()  # what the server said (whichever thread heartbeats, under its lock)
        self._handed = Handed()  # what the application has been told and handed (its thread only)
        self._commits = Commits(
            self._session, new_session, self._call, self._group, self._member, self._handed, mode, self._check_open,
            api_timeout_s=self._api_timeout_s, backoff_s=self._backoff_s, on_commit=self._config["on_commit"],
            auto_commit=self._auto_commit, auto_commit_interval_ms=self._config["auto.commit.interval.ms"])
        self._membership = Membership(
            self._session, new_session, self._call, self._group, self._member, self._handed, mode,
            self._commits.commit_revoked, heartbeat_interval_ms=self._config["heartbeat.interval.ms"],
            session_timeout_s=int(self._config["session.timeout.ms"]) / 1000,
            cooperative=self._strategy == "cooperative-sticky", auto_commit=self._auto_commit)
        self._fetching = Fetching(
            self._session, self._call, self._group, self._member, self._handed, self._membership, mode,
            reset=self._reset, max_poll_records=self._config["max.poll.records"],
            fetch_max_bytes=self._config["fetch.max.bytes"], backoff_s=self._backoff_s, request_s=self._request_s)

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
            self._membership.leave()
        body = join_body(self._config, self._reset, self._strategy, topics)
        self._membership.subscribe(body, {"assign": self._bound(on_assign), "revoke": self._bound(on_revoke),
                                          "lost": self._bound(on_lost)})
        self._mode = "subscribe"
        self._membership.join()
        self._membership.start_heartbeats()

    def _bound(self, callback: RebalanceCallback | None) -> Told | None:
        """A rebalance callback as membership calls it: this consumer, then the partitions."""
        return None if callback is None else partial(callback, self)

    def unsubscribe(self) -> None:
        if self._mode == "subscribe":
            self._membership.leave()
        self._mode = None

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Read these partitions without group membership; a TopicPartition's offset (>= 0, or
        OFFSET_BEGINNING / OFFSET_END) is where to start, else the committed offset or auto.offset.reset."""
        self._check_open()
        if self._mode == "subscribe":
            raise KafkaException(KafkaError(STATE, "unsubscribe() before assign()"))
        self._mode = "assign"
        handed = self._handed
        handed.assignment = set()
        self._fetching.forget_fetch_offsets()
        handed.buffer.clear()
        for tp in partitions:
            handed.assignment.add(tp.key())
            if tp.offset >= 0 or tp.offset in (OFFSET_BEGINNING, OFFSET_END):
                self.seek(tp)

    def unassign(self) -> None:
        self._handed.assignment, self._mode = set(), None
        self._handed.buffer.clear()
        self._fetching.forget_fetch_offsets()

    def assignment(self) -> list[TopicPartition]:
        return tp_list(self._handed.assignment)

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
            self._membership.serve_group_changes()
            self._commits.maybe_auto_commit()
            out = self._handed.hand_out(num_messages)
            if out:
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            wait = min(left, int(self._config["fetch.wait.max.ms"]) / 1000)
            fetching = self._fetching
            fetched = fetching.fetch_group(wait) if self._mode == "subscribe" else fetching.fetch_assigned(wait)
            self._handed.buffer.extend(fetched)  # after the fetch: it may have purged the buffer

    def seek(self, partition: TopicPartition) -> None:
        """Read `partition` from its offset next. Assign mode: any offset. Subscribe mode: the server keeps
        the group's positions and has no seek, so only forward (records below the offset are skipped)."""
        self._fetching.seek(partition)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return self._fetching.position(partitions)

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        return self._fetching.committed(partitions, timeout)

    # ---- commits -------------------------------------------------------------------------------

    def commit(self, message: Message | None = None, offsets: list[TopicPartition] | None = None,
               asynchronous: bool = True) -> list[TopicPartition] | None:
        """Commit the message's next offset, the given offsets, or every position poll() handed out.
        Synchronous: answers the committed offsets once durable (raises on failure). Asynchronous
        (confluent-kafka's default): returns at once; `on_commit(err, partitions)` hears the outcome."""
        return self._commits.commit(message, offsets, asynchronous)

    # ---- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Commit what poll() handed out (when enable.auto.commit is on), leave the group, stop threads."""
        if self._closed:
            return
        try:
            if self._auto_commit and self._group and self._mode is not None:
                self._commits.final_commit(self._membership.relearn)
            if self._mode == "subscribe":
                self._membership.leave()
        finally:
            self._closed = True
            self._membership.stop(self._request_s + 1)
            self._commits.close()
            self._session.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def _member_id(self) -> str | None:
        """The member this consumer is in its group now (None outside one, or rejoining)."""
        return self._member.member_id

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaException(KafkaError(STATE, "the consumer is closed"))

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        """A request that should land: retriable failures are retried up to default.api.timeout.ms."""
        return with_retries(lambda: self._session.request(method, path, **kwargs),
                            time.monotonic() + self._api_timeout_s, self._backoff_s)
