"""Producer: per-topic batching (linger.ms, batch.size) on a background sender thread, retries of
retriable errors, idempotence on by default, delivery callbacks served by poll()/flush() as in
confluent-kafka, and a Future per record."""

from __future__ import annotations

import base64
import logging
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Mapping
from urllib.parse import quote

import pyarrow as pa

from lakelog.client.batching import Accumulator, Pending
from lakelog.client.errors import INVALID_ARG, MSG_TIMED_OUT, STATE, KafkaError, KafkaException
from lakelog.client.http import ARROW_STREAM, Session
from lakelog.client.message import Message, normalize_headers, to_bytes
from lakelog.client.sequences import Sequences

log = logging.getLogger(__name__)

DeliveryCallback = Callable[[KafkaError | None, Message | None], None]  # None: a table produce

DEFAULTS: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 100_000,
    "enable.idempotence": True,
    "acks": "all",
    "retries": 2_147_483_647,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
    "delivery.timeout.ms": 120_000,
    "request.timeout.ms": 30_000,
}
KNOWN = set(DEFAULTS) | {"on_delivery", "api.key", "client.id", "transactional.id"}
# Answers that mean the batch is already in the log (a retry of one the server took before).
ALREADY_WRITTEN = "DUPLICATE_SEQUENCE_NUMBER"
FENCED = frozenset({"OUT_OF_ORDER_SEQUENCE_NUMBER", "INVALID_PRODUCER_EPOCH"})


def check_config(config: Mapping[str, Any], known: set[str], what: str) -> None:
    unknown = sorted(set(config) - known)
    if unknown:
        raise KafkaException(KafkaError(INVALID_ARG, f"unknown {what} configuration {unknown}"))


class Producer:
    """`Producer(url, {"linger.ms": 5})`; `produce()` queues, the sender thread batches and sends."""

    def __init__(self, url: str, config: Mapping[str, Any] | None = None, *, api_key: str | None = None) -> None:
        config = dict(config or {})
        check_config(config, KNOWN, "producer")
        if config.get("transactional.id"):
            raise KafkaException(KafkaError("_NOT_IMPLEMENTED", "the HTTP API has no transactions"))
        self._config = {**DEFAULTS, **config}
        acks = str(self._config["acks"])
        self._acks = {"-1": "all"}.get(acks, acks)
        self._idempotent = bool(self._config["enable.idempotence"])
        if self._idempotent and self._acks == "0":
            raise KafkaException(KafkaError(INVALID_ARG, "enable.idempotence needs acks=all (or 1)"))
        self._default_callback: DeliveryCallback | None = self._config.get("on_delivery")
        self._request_timeout_s = int(self._config["request.timeout.ms"]) / 1000
        self._session = Session(url, api_key or self._config.get("api.key"), self._request_timeout_s + 5)
        self._sequences = Sequences()
        self._accumulator = Accumulator(int(self._config["linger.ms"]) / 1000, int(self._config["batch.size"]),
                                        int(self._config["batch.num.messages"]))
        self._cond = threading.Condition()
        self._outstanding = 0  # queued or in flight, not yet reported
        self._flushing = 0
        self._closed = False
        self._reports: queue.SimpleQueue[tuple[DeliveryCallback, KafkaError | None, Message | None]] = (
            queue.SimpleQueue())
        self._sender = threading.Thread(target=self._run, name="lakelog-producer", daemon=True)
        self._sender.start()

    # ---- the application's side ---------------------------------------------------------

    def produce(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
                partition: int | None = None, on_delivery: DeliveryCallback | None = None,
                timestamp: int = 0, callback: DeliveryCallback | None = None) -> Future:
        """Queue one record; answers a Future of its delivered Message. Raises BufferError when
        queue.buffering.max.messages records wait (serve poll() or flush() and try again)."""
        record: dict[str, Any] = {}
        key_bytes, value_bytes = to_bytes(key, "key"), to_bytes(value, "value")
        pairs = normalize_headers(headers)
        if key_bytes is not None:
            record["key"] = base64.b64encode(key_bytes).decode("ascii")
        if value_bytes is not None:
            record["value"] = base64.b64encode(value_bytes).decode("ascii")
        if pairs:
            record["headers"] = [{"key": k, "value": text_header(k, v)} for k, v in pairs]
        if partition is not None and partition >= 0:
            record["partition"] = partition
        if timestamp:
            record["timestamp"] = timestamp
        message = Message(topic, partition if partition is not None else -1, key=key_bytes, value=value_bytes,
                          headers=pairs, timestamp=timestamp or None)
        size = len(key_bytes or b"") + len(value_bytes or b"") + sum(len(k) + len(v or b"") for k, v in pairs or ())
        return self._enqueue(Pending(topic, size + 16, time.monotonic(), record=record),
                             message, on_delivery or callback)

    def produce_table(self, topic: str, table: pa.Table, on_delivery: DeliveryCallback | None = None) -> Future:
        """Arrow bulk produce: columns key, value and optional headers, partition, timestamp, sent as one
        Arrow IPC stream (one sequence range when idempotent). Answers a Future of the list of
        (partition, offset, timestamp), one per row in order; `on_delivery(err, None)` once for the table."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        body = sink.getvalue().to_pybytes()
        return self._enqueue(Pending(topic, len(body), time.monotonic(), table=body, count=table.num_rows),
                             None, on_delivery)

    def _enqueue(self, item: Pending, message: Message | None, callback: DeliveryCallback | None) -> Future:
        future: Future = Future()
        item.report = (message, callback or self._default_callback, future)
        with self._cond:
            if self._closed:
                raise KafkaException(KafkaError(STATE, "the producer is closed"))
            if self._outstanding >= int(self._config["queue.buffering.max.messages"]):
                raise BufferError("queue.buffering.max.messages reached: call poll() or flush()")
            self._outstanding += 1
            self._accumulator.add(item)
            self._cond.notify_all()
        return future

    def poll(self, timeout: float | None = 0) -> int:
        """Serve delivery callbacks (in this thread, as confluent-kafka); waits up to `timeout` seconds
        (None or -1: forever) for the first one. Answers how many ran."""
        served = self._serve_reports()
        if served or timeout == 0:
            return served
        try:
            callback, error, message = self._reports.get(timeout=None if timeout is None or timeout < 0
                                                         else timeout)
        except queue.Empty:
            return 0
        callback(error, message)
        return 1 + self._serve_reports()

    def flush(self, timeout: float | None = None) -> int:
        """Send everything queued now (no lingering), wait for the answers, serve the callbacks;
        answers how many records are still outstanding (0 unless the timeout passed)."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
        try:
            while True:
                self._serve_reports()
                with self._cond:
                    if self._outstanding == 0:
                        break
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    self._cond.wait(0.05 if left is None else min(left, 0.05))
        finally:
            with self._cond:
                self._flushing -= 1
        self._serve_reports()
        return self._outstanding

    def __len__(self) -> int:
        """Records queued or in flight, plus callbacks not served yet (confluent-kafka's meaning)."""
        return self._outstanding + self._reports.qsize()

    def close(self, timeout: float | None = None) -> int:
        """Flush, stop the sender thread; answers the records left undelivered."""
        left = self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._sender.join(max(timeout or 30, 1))
        self._serve_reports()
        self._session.close()
        return left

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def producer_id(self) -> int:
        """The idempotent producer id in use (a random one below 2^62)."""
        return self._sequences.producer_id

    def _serve_reports(self) -> int:
        served = 0
        while True:
            try:
                callback, error, message = self._reports.get_nowait()
            except queue.Empty:
                return served
            callback(error, message)
            served += 1

    # ---- the sender thread -------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    ready = self._accumulator.ready(now, flushing=self._flushing > 0 or self._closed)
                    if ready or (self._closed and not len(self._accumulator)):
                        break
                    self._cond.wait(self._accumulator.next_due(now))
                if not ready:
                    return
                batches = [(topic, self._accumulator.drain(topic)) for topic in ready]
            for topic, batch in batches:
                try:
                    self._send(topic, batch)
                except Exception as exc:  # never let the sender die with records waiting on it
                    log.exception("producer sender failed")
                    self._complete(batch, KafkaError("_FAIL", f"{type(exc).__name__}: {exc}"), None)

    def _send(self, topic: str, batch: list[Pending]) -> None:
        """Send one batch until it is answered, retrying retriable errors with the same sequence."""
        count = sum(item.count for item in batch)
        params: dict[str, Any] = {"acks": self._acks, "timeout_ms": int(self._request_timeout_s * 1000)}
        if batch[0].table is not None:
            request: dict[str, Any] = {"content": batch[0].table, "headers": {"content-type": ARROW_STREAM}}
        else:
            request = {"json": {"key_format": "base64", "value_format": "base64",
                                "records": [item.record for item in batch]}}
        epoch = base = -1
        if self._idempotent:
            producer_id, epoch, base = self._sequences.reserve(topic, count)
            params.update(producer_id=producer_id, producer_epoch=epoch, sequence=base)
        deadline = batch[0].enqueued_at + int(self._config["delivery.timeout.ms"]) / 1000
        backoff = int(self._config["retry.backoff.ms"]) / 1000
        attempts = 0
        while True:
            attempts += 1
            try:
                answer = self._session.request("POST", f"/v1/topics/{quote(topic, safe='')}/records",
                                               params=params, **request)
                offsets = [(o["partition"], o["offset"], o["timestamp"]) for o in answer["offsets"]]
                break
            except KafkaException as exc:
                error = exc.args[0]
                if self._idempotent and error.code() == ALREADY_WRITTEN:
                    offsets = [(-1, -1, -1)] * count  # in the log already; the server no longer knows where
                    break
                left = deadline - time.monotonic()
                if error.retriable() and attempts <= int(self._config["retries"]) and left > backoff:
                    time.sleep(min(max(backoff, error.retry_after_s), left))
                    backoff = min(backoff * 2, int(self._config["retry.backoff.max.ms"]) / 1000)
                    continue
                if self._idempotent and (error.retriable() or error.code() in FENCED):
                    self._sequences.bump_epoch()  # the batch may or may not be in: never reuse its sequences
                if error.retriable():
                    error = KafkaError(MSG_TIMED_OUT, f"delivery.timeout.ms or retries ran out: {error.str()}",
                                       False, error.status())
                self._complete(batch, error, None)
                return
        if self._idempotent:
            self._sequences.delivered(topic, epoch, base, count)
        self._complete(batch, None, offsets)

    def _complete(self, batch: list[Pending], error: KafkaError | None,
                  offsets: list[tuple[int, int, int]] | None) -> None:
        at = 0
        for item in batch:
            message, callback, future = item.report
            if item.table is not None:
                result = offsets[at:at + item.count] if offsets is not None else None
                at += item.count
                self._report(callback, future, error, None, result)
                continue
            if offsets is not None:
                partition, offset, stamp = offsets[at]
                message._partition, message._offset = partition, offset
                if stamp >= 0:
                    message._timestamp = stamp
            at += 1
            message._error = error
            self._report(callback, future, error, message, message)
        with self._cond:
            self._outstanding -= len(batch)
            self._cond.notify_all()

    def _report(self, callback: DeliveryCallback | None, future: Future, error: KafkaError | None,
                message: Message | None, result: Any) -> None:
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(KafkaException(error))
        if callback is not None:
            self._reports.put((callback, error, message))


def text_header(key: str, value: bytes | None) -> str | None:
    """The JSON produce body takes header values as text: UTF-8 bytes only (use produce_table otherwise)."""
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"header {key!r}: the JSON produce body takes UTF-8 header values only; "
                         "send binary headers with produce_table()") from None
