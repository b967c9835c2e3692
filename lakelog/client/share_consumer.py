"""ShareConsumer: a member of a share group (KIP-932, queues) over HTTP, with confluent-kafka's names.

    consumer = ShareConsumer({"bootstrap.servers": "http://127.0.0.1:8080", "group.id": "workers"})
    consumer.subscribe(["jobs"])
    for message in consumer.poll(1.0):
        ...

Records, not partitions, are what a share group hands out: any number of consumers read one partition, each
record locked to one of them until it is acknowledged: accepted (done), released (delivered again, its
`delivery_count()` one higher) or rejected (never again; dead-lettered when the group has a dead-letter
topic). In implicit mode (the default) what one poll handed out is accepted by the next poll, commit or
close; in explicit mode the application acknowledges each record (`acknowledge`), and those acknowledgements
go with the next poll, `commit_sync` or `commit_async`.

Built from collaborators: `share_membership.py` (join, the heartbeat thread, leave, rejoin) and
`share_acks.py` (what was handed out and chosen, pure). The application's thread calls it; commit_async's
requests go out on a sender thread of their own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

from lakelog.client.errors import INVALID_ARG, STATE, KafkaError, KafkaException
from lakelog.client.http import Session, with_retries
from lakelog.client.message import Message, TopicPartition, from_fetched
from lakelog.client.producer import check_config
from lakelog.client.share_acks import Acknowledgements, AcknowledgeType, Key, wire
from lakelog.client.share_membership import GONE, ShareMembership

__all__ = ["AcknowledgeType", "ShareConsumer"]

log = logging.getLogger("lakelog.client.share_consumer")

DEFAULTS: dict[str, Any] = {
    "bootstrap.servers": None,
    "group.id": None,
    "share.acknowledgement.mode": "implicit",
    "max.poll.records": 500,
    "fetch.max.bytes": None,
    "fetch.wait.max.ms": 500,
    "heartbeat.interval.ms": None,  # None: as the server says (group.share.heartbeat.interval.ms)
    "request.timeout.ms": 30_000,
    "default.api.timeout.ms": 60_000,
    "retry.backoff.ms": 100,
    "api.key": None,
    "client.id": "",
    "on_commit": None,  # on_commit(error or None, partitions): the outcome of acknowledgements sent
}
CommitResult = dict[TopicPartition, KafkaError | None]


class ShareConsumer:
    """`ShareConsumer({"bootstrap.servers": url, "group.id": g})`, or `ShareConsumer(url, {"group.id": g})`
    as the other clients of this package take their URL; then subscribe() and poll()."""

    def __init__(self, url: str | Mapping[str, Any], config: Mapping[str, Any] | None = None, *,
                 api_key: str | None = None) -> None:
        if isinstance(url, Mapping):
            config = {**url, **(config or {})}
            url = str(config.get("bootstrap.servers") or "")
        config = dict(config or {})
        check_config(config, set(DEFAULTS), "share consumer")
        self._config = {**DEFAULTS, **config}
        if not url:
            raise KafkaException(KafkaError(INVALID_ARG, "give the server's URL (bootstrap.servers)"))
        try:
            self._acks = Acknowledgements(str(self._config["share.acknowledgement.mode"]))
        except ValueError as exc:
            raise KafkaException(KafkaError(INVALID_ARG, str(exc))) from None
        api_key = api_key or self._config["api.key"]
        self._request_s = int(self._config["request.timeout.ms"]) / 1000
        self._api_timeout_s = int(self._config["default.api.timeout.ms"]) / 1000
        self._backoff_s = int(self._config["retry.backoff.ms"]) / 1000
        self._on_commit: Callable[[KafkaError | None, list[TopicPartition]], None] | None = self._config["on_commit"]
        self._session = Session(url, api_key, self._request_s)
        new_session = partial(Session, url, api_key, self._request_s)
        interval = self._config["heartbeat.interval.ms"]
        self._membership = ShareMembership(self._session, new_session, self._call, self._config["group.id"],
                                           str(self._config["client.id"] or ""),
                                           None if interval is None else int(interval))
        self._sender = ThreadPoolExecutor(1, "lakelog-share-acks", initializer=self._sender_session,
                                          initargs=(new_session,))
        self._sender_sessions: list[Session] = []
        self._subscription: list[str] = []
        self._closed = False

    # ---- subscription ---------------------------------------------------------------------------

    def subscribe(self, topics: list[str]) -> None:
        """Join the share group for these topics (again, with the new list, when subscribed already)."""
        self._check_open()
        if not topics:
            raise KafkaException(KafkaError(INVALID_ARG, "subscribe to at least one topic"))
        self._send_now()
        self._membership.join(list(topics))
        self._subscription = list(topics)

    def unsubscribe(self) -> None:
        self._send_now()
        self._membership.leave(forget_topics=True)
        self._subscription = []

    def subscription(self) -> list[str]:
        return list(self._subscription)

    def assignment(self) -> list[TopicPartition]:
        """The partitions the server has this member read (others may read them too)."""
        return [TopicPartition(t, p) for t, p in sorted(self._membership.assignment)]

    # ---- reading --------------------------------------------------------------------------------

    def poll(self, timeout: float | None = None) -> list[Message]:
        """The records delivered to this member within `timeout` seconds (None or -1: until some come),
        after acknowledging the previous poll's (implicit mode) or those acknowledged since (explicit)."""
        self._check_open()
        if not self._subscription:
            raise KafkaException(KafkaError(STATE, "subscribe() first"))
        deadline = float("inf") if timeout is None or timeout < 0 else time.monotonic() + timeout
        acks = self._acks.take()
        while True:
            if self._membership.ensure():
                acks = {}
                self._acks.forget()
            member = self._membership.member_id
            left = deadline - time.monotonic()
            wait_s = max(0.0, min(left, int(self._config["fetch.wait.max.ms"]) / 1000))
            body: dict[str, Any] = {"max_records": int(self._config["max.poll.records"]),
                                    "timeout_ms": int(wait_s * 1000), "acks": wire(acks),
                                    "key_format": "base64", "value_format": "base64"}
            if self._config["fetch.max.bytes"]:
                body["max_bytes"] = int(self._config["fetch.max.bytes"])
            assert member is not None  # ensure() joined
            try:
                answer = self._session.request("POST", f"{self._membership.member_path(member)}/poll", json=body,
                                               timeout_s=wait_s + self._request_s)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() in GONE:
                    self._membership.forgotten(member)
                elif not error.retriable():
                    raise
                if acks:
                    self._report(acks, {}, error)
                    acks = {}
                if time.monotonic() >= deadline:
                    return []
                time.sleep(min(self._backoff_s, max(0.0, deadline - time.monotonic())))
                continue
            if acks:
                self._report(acks, self._failures(answer["failed_acks"]))
                acks = {}
            for failure in answer.get("errors", ()):
                log.warning("share poll: %s-%s: %s: %s", failure["topic"], failure["partition"],
                            failure["error_code"], failure["message"])
            messages = [from_fetched(r) for r in answer["records"]]
            if messages:
                self._acks.handed((m.topic(), m.partition(), m.offset()) for m in messages)
                return messages
            if time.monotonic() >= deadline:
                return []

    # ---- acknowledging --------------------------------------------------------------------------

    def acknowledge(self, message: Message, ack_type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """How this record went: ACCEPT, RELEASE or REJECT; sent with the next poll or commit."""
        self._check_open()
        try:
            self._acks.choose((message.topic(), message.partition(), message.offset()), AcknowledgeType(ack_type))
        except KeyError:
            raise KafkaException(KafkaError(STATE, f"{message!r} was not handed out by this consumer's last "
                                                   "polls, or was acknowledged already")) from None

    def commit_sync(self, timeout: float | None = None) -> CommitResult:
        """Send the pending acknowledgements now; answers each partition's outcome (None: durable)."""
        self._check_open()
        return self._commit(self._session, self._acks.take(), timeout)

    def commit_async(self) -> Future[CommitResult]:
        """Send the pending acknowledgements on the sender thread; `on_commit` hears the outcome."""
        self._check_open()
        return self._sender.submit(self._commit_on_sender, self._acks.take())

    def _commit_on_sender(self, acks: dict[Key, AcknowledgeType]) -> CommitResult:
        return self._commit(self._sender_sessions[0], acks, None)

    def _sender_session(self, new_session: Callable[[], Session]) -> None:
        self._sender_sessions.append(new_session())

    def _commit(self, session: Session, acks: dict[Key, AcknowledgeType], timeout: float | None) -> CommitResult:
        member = self._membership.member_id
        if not acks or member is None:
            if acks:
                self._report(acks, {}, KafkaError("UNKNOWN_MEMBER_ID", "not a member: nothing acknowledged"))
            return {}
        deadline = time.monotonic() + (self._api_timeout_s if timeout is None else timeout)
        try:
            answer = with_retries(lambda: session.request("POST", f"{self._membership.member_path(member)}/acks",
                                                          json={"acks": wire(acks)}), deadline, self._backoff_s)
        except KafkaException as exc:
            return self._report(acks, {}, exc.args[0])
        return self._report(acks, self._failures(answer["failed_acks"]))

    @staticmethod
    def _failures(failed: list[dict[str, Any]]) -> dict[tuple[str, int], KafkaError]:
        return {(f["topic"], f["partition"]): KafkaError(f["error_code"], f["message"]) for f in failed}

    def _report(self, acks: dict[Key, AcknowledgeType], failures: dict[tuple[str, int], KafkaError],
                error: KafkaError | None = None) -> CommitResult:
        """Each acknowledged partition's outcome, told to `on_commit` (once per error, with its partitions)."""
        outcome: CommitResult = {}
        for topic, partition in sorted({(t, p) for t, p, _ in acks}):
            outcome[TopicPartition(topic, partition)] = error or failures.get((topic, partition))
        if self._on_commit is not None:
            by_error: dict[KafkaError | None, list[TopicPartition]] = {}
            for tp, err in outcome.items():
                by_error.setdefault(err, []).append(tp)
            for err, partitions in by_error.items():
                self._on_commit(err, partitions)
        for tp, err in outcome.items():
            if err is not None:
                log.warning("share acknowledgement of %s-%d failed: %s", tp.topic, tp.partition, err.str())
        return outcome

    def _send_now(self) -> None:
        """What is pending, acknowledged before the member changes (implicit mode: accepted)."""
        if self._membership.member_id is not None:
            self._commit(self._session, self._acks.take(), None)
        self._acks.forget()

    # ---- closing --------------------------------------------------------------------------------

    def close(self) -> None:
        """Acknowledge what is pending (implicit mode: accept what the last poll handed out), leave the group
        (what the member still holds goes back to it), stop the threads."""
        if self._closed:
            return
        try:
            self._send_now()
            self._membership.leave(forget_topics=True)
        finally:
            self._closed = True
            self._membership.stop(self._request_s + 1)
            self._sender.shutdown(wait=True)
            for session in self._sender_sessions:
                session.close()
            self._session.close()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaException(KafkaError(STATE, "the share consumer is closed"))

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        """A request that should land: retriable failures are retried up to default.api.timeout.ms."""
        return with_retries(lambda: self._session.request(method, path, **kwargs),
                            time.monotonic() + self._api_timeout_s, self._backoff_s)
