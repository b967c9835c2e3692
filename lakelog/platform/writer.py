"""The topic writer: produce calls group-committed per topic, each flush one Delta commit.

A flush (see group_commit.py) waits `linger.ms` after the first pending call, or until `batch.bytes`
are buffered, then takes everything pending: idempotent retries are answered from producer state,
stale producers fenced, the rest stamped and committed in one commit on this topic's flush thread.
Each caller's future is answered with its own offsets.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
import pyarrow as pa

from lakelog.platform.clock import now_ms
from lakelog.platform.deadline import Deadline
from lakelog.platform.errors import (
    DataChangedOutside,
    InvalidProducerEpoch,
    LakelogError,
    OutOfOrderSequence,
    ProducerStateChanged,
)
from lakelog.platform.group_commit import GroupCommit, fail, succeed
from lakelog.platform.log import Appended, TopicLog
from lakelog.platform.producer_state import ProducerStateManager, key_reused
from lakelog.platform.records import (
    ProduceResult,
    ProducerBatch,
    RecordColumns,
    Stamp,
    columns_to_table,
    content_digest,
    stamp,
    validate_records,
)
from lakelog.platform.storage import STORAGE_ERRORS
from lakelog.platform.topic_config import TopicConfig

log = logging.getLogger(__name__)


@dataclass
class PendingProduce:
    """One produce call, partitioned, waiting for the next flush. Its records are checked there, in bulk with
    the flush's other calls: a small call's columns become Arrow only as part of the flush's one table."""

    records: RecordColumns | pa.Table  # a table is TOPIC_FILE_SCHEMA rows (`arrow_to_table`), offsets not assigned
    partitions: np.ndarray  # int32, one per row
    deadline: Deadline
    config: TopicConfig
    producer: ProducerBatch | None = None
    acks: int = 1  # what the caller waits for (1 or -1; -1 is also replicated by the broker after the commit)
    future: Future = field(default_factory=Future)
    table: pa.Table | None = None  # the records as Arrow, set by the flush that checked them

    @property
    def rows(self) -> int:
        return len(self.records) if isinstance(self.records, RecordColumns) else self.records.num_rows

    @property
    def nbytes(self) -> int:
        return self.records.nbytes

    @property
    def stamp(self) -> Stamp:
        return Stamp(self.rows, self.config.timestamp_type, self.producer)


class TopicWriter:
    """The one writer of a topic on this node: group commit on a flush thread, one commit in flight.

    `committed` is notified after every commit, so long polls wake when records arrive; a node passes
    one condition to all its writers, so a group poll over many topics waits on one."""

    def __init__(self, topic_log: TopicLog, linger_ms: int, batch_bytes: int,
                 producers: ProducerStateManager, committed: threading.Condition | None = None) -> None:
        self.log = topic_log
        self.producers = producers
        self.committed = committed or threading.Condition()
        self._flushes = GroupCommit(f"flush-{topic_log.name}", self._flush, linger_ms, batch_bytes,
                                    lambda pending: pending.nbytes)
        self._abandoned: LakelogError | None = None  # the table is no longer the topic's: every call gets this

    def submit(self, pending: PendingProduce) -> Future:
        self._flushes.submit(pending)
        return pending.future

    def expire(self, now: float) -> int:
        """Answer callers whose deadline passed while storage is stuck: a bounded, retriable error.

        The commit may still land later (as with Kafka's request timeout); an
        idempotent producer's retry then gets the original offsets.
        """
        expired = 0
        for pending in self._flushes.waiting():
            if pending.deadline.passed(now) and fail(
                    pending.future, pending.deadline.timed_out(f"no commit to {self.log.name!r}")):
                expired += 1
        return expired

    def notify_committed(self) -> None:
        with self.committed:
            self.committed.notify_all()

    def drain(self) -> None:
        """Wait until every call submitted so far is answered."""
        self._flushes.drain()

    def close(self, timeout: float | None = None) -> None:
        """Flush what is pending, then stop."""
        self._flushes.close(timeout)

    def abandon(self, error: LakelogError) -> None:
        """Commit nothing more (the table is no longer the topic's): the calls waiting, and any flush after
        this, are answered `error`."""
        self._abandoned = error
        for pending in self._flushes.waiting():
            fail(pending.future, error)

    def _flush(self, batch: list[PendingProduce]) -> None:
        if self._abandoned is not None:
            for pending in batch:
                fail(pending.future, self._abandoned)
            return
        calls = checked([p for p in batch if not p.future.done()], self.log.name)
        while True:
            # Other writers of the topic (another node) may have committed batches of our producers: their
            # state here is dropped and rebuilt from the log by the check, so a retry they wrote is answered.
            self.producers.forget_changed(self.log.take_changed_producers())
            accepted = self._admit(calls)
            if not accepted:
                return
            table = _concat([p.table for p in accepted])  # type: ignore[misc]
            partitions = np.concatenate([p.partitions for p in accepted])
            table = stamp(table, [p.stamp for p in accepted], now_ms())
            deadline = Deadline.earliest([p.deadline for p in accepted])
            producer_ids = frozenset(p.producer.producer_id for p in accepted if p.producer is not None)
            try:
                appended = self.log.append(table, partitions, deadline, producer_ids=producer_ids)
                assert appended is not None
            except ProducerStateChanged:
                calls = accepted  # nothing was committed: check these calls again on the refreshed log
                continue
            except DataChangedOutside as exc:  # nothing was committed: the calls to other partitions go on
                calls = []
                for pending in accepted:
                    if exc.partition in pending.partitions:
                        fail(pending.future, exc)
                    else:
                        calls.append(pending)
                continue
            except LakelogError as exc:
                for pending in accepted:
                    fail(pending.future, exc)
                return
            self._answer(accepted, partitions, table, appended)
            return

    def _answer(self, accepted: list[PendingProduce], partitions: np.ndarray, table: pa.Table,
                appended: Appended) -> None:
        """The records are in the log: every caller gets its offsets, whatever fails in the bookkeeping."""
        offsets = appended.offsets
        timestamps = table.column("timestamp").cast(pa.int64()).to_numpy()
        start = 0
        for pending in accepted:
            end = start + pending.rows
            result = ProduceResult(partitions[start:end], offsets[start:end], timestamps[start:end],
                                   version=appended.version)
            if pending.producer is not None:
                try:
                    self.producers.record(pending.producer, pending.rows, result)
                except Exception:  # a retry then finds the batch in the log instead
                    log.exception("producer state of %s not recorded", self.log.name)
                    self.producers.forget(pending.producer.producer_id)
            succeed(pending.future, result)
            start = end
        self.notify_committed()

    def admit(self, batch: list[PendingProduce], catch_up: Callable[[], None]) -> list[PendingProduce]:
        """The calls of a flush that go on (the node journal's flush admits its calls of this topic here). No
        look at other writers' commits: with the journal a node is the topic's only writer, and the look
        would wait on the log lock that a table commit holds for its round trips. `catch_up` follows the
        refresh of a sequence gap: the journal's, which asks whether the topic is still this node's."""
        return self._admit(batch, catch_up=catch_up)

    def record_producers(self, accepted: list[PendingProduce], results: list[ProduceResult]) -> None:
        """Producer state after the calls' records became durable (a failure only makes a retry look further)."""
        for pending, result in zip(accepted, results):
            if pending.producer is not None:
                try:
                    self.producers.record(pending.producer, pending.rows, result)
                except Exception:
                    log.exception("producer state of %s not recorded", self.log.name)
                    self.producers.forget(pending.producer.producer_id)

    def _admit(self, batch: list[PendingProduce], refreshed: bool = False,
               catch_up: Callable[[], None] | None = None) -> list[PendingProduce]:
        """Drop expired calls, answer retried idempotent batches, fence stale producers.

        A sequence gap or a fenced epoch may only mean that this node's view is behind the log (another
        node wrote the producer's later batches): the log is refreshed once and every call of the flush
        is judged again, those accepted before included, since the refresh may show their batches too."""
        accepted: list[PendingProduce] = []
        in_flush: dict[int, tuple[int, int]] = {}
        batches: dict[tuple[int, int, int, int], PendingProduce] = {}  # the producer batches accepted so far
        now = time.monotonic()
        for pending in batch:
            if pending.future.done():
                continue
            if pending.deadline.passed(now):
                fail(pending.future, pending.deadline.timed_out("the flush did not start", written=False))
                continue
            producer = pending.producer
            if producer is None:
                accepted.append(pending)
                continue
            count = pending.rows
            batch_key = (producer.producer_id, producer.producer_epoch, producer.base_sequence, count)
            if batch_key in batches:  # a retry that caught up with its original (another node forwarded it)
                _follow(pending, batches[batch_key])
                continue
            try:
                original = self.producers.check(producer, count, in_flush)
            except (OutOfOrderSequence, InvalidProducerEpoch) as exc:
                if not refreshed:
                    self._catch_up_producers()
                    if catch_up is not None:
                        catch_up()
                    return self._admit(batch, refreshed=True)
                fail(pending.future, exc)
                continue
            except LakelogError as exc:
                fail(pending.future, exc)
                continue
            if original is not None:
                succeed(pending.future, original)
                continue
            in_flush[producer.producer_id] = (producer.producer_epoch, producer.base_sequence + count)
            batches[batch_key] = pending
            accepted.append(pending)
        return accepted

    def _catch_up_producers(self) -> None:
        try:
            self.log.refresh()
        except STORAGE_ERRORS:
            log.warning("log of %s not refreshed; producer state judged on what this node knows", self.log.name)
        self.producers.forget_changed(self.log.take_changed_producers())


def _follow(retry: PendingProduce, original: PendingProduce) -> None:
    """Answer an idempotent retry queued in the same flush as its original with the original's answer,
    once it has one: the batch is written once, and neither caller sees DUPLICATE_SEQUENCE_NUMBER."""
    if retry.producer.keyed and retry.producer.content_digest != original.producer.content_digest:  # type: ignore[union-attr]
        fail(retry.future, key_reused())
        return

    def copy(done: Future) -> None:
        if done.exception() is not None:
            fail(retry.future, done.exception())  # type: ignore[arg-type]
        else:
            succeed(retry.future, replace(done.result(), duplicate=True))

    original.future.add_done_callback(copy)


def checked(calls: list[PendingProduce], topic: str) -> list[PendingProduce]:
    """Each call's records as Arrow (`call.table`), checked in bulk for the whole flush. When a check fails,
    each call is checked on its own: a call with a bad record is answered with that error (naming the record
    by its place in the call), logged, and changes nothing; the others go on."""
    try:
        _as_tables(calls)
        configs = {id(call.config): call.config for call in calls}
        if len(configs) == 1 and calls:
            validate_records(_concat([call.table for call in calls]), calls[0].config)  # type: ignore[misc]
        else:
            for call in calls:
                validate_records(call.table, call.config)  # type: ignore[arg-type]
    except LakelogError:
        return [call for call in calls if _checked_alone(call, topic)]
    return calls


def _checked_alone(call: PendingProduce, topic: str) -> bool:
    try:
        _as_tables([call])
        validate_records(call.table, call.config)  # type: ignore[arg-type]
    except LakelogError as exc:
        log.warning("produce to %s refused, nothing written: %s: %s", topic, exc.code, exc.message)
        fail(call.future, exc)
        return False
    return True


def _as_tables(calls: list[PendingProduce]) -> None:
    """Set each call's table: the columnar calls as slices of one table built for all of them."""
    columnar = [call for call in calls if isinstance(call.records, RecordColumns)]
    whole = columns_to_table([call.records for call in columnar]) if columnar else None  # type: ignore[misc]
    start = 0
    for call in calls:
        if isinstance(call.records, RecordColumns):
            call.table = whole.slice(start, len(call.records))  # type: ignore[union-attr]
            start += len(call.records)
        else:
            call.table = call.records
        if call.producer is not None and call.producer.keyed:  # a retry must carry the same records
            call.producer = replace(call.producer, content_digest=content_digest(call.table))


def _concat(tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]
