"""Produce calls and their admission: `PendingProduce` (one call, partitioned, on its way to the node
journal), `checked` (a flush's records checked in bulk, a bad call refused alone) and `ProducerAdmission`
(which calls of a topic go on, by their producers' state). The journal's writer (journal/writer.py) is the
one place that assigns offsets and acknowledges: every produce goes through it.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable

import numpy as np
import pyarrow as pa

from lakelog.platform.catalog.topic_config import TopicConfig
from lakelog.platform.deadline import Deadline
from lakelog.platform.errors import InvalidProducerEpoch, LakelogError, OutOfOrderSequence
from lakelog.platform.log import TopicLog
from lakelog.platform.produce.group_commit import fail, succeed
from lakelog.platform.produce.producer_state import ProducerStateManager, key_reused
from lakelog.platform.records import (
    ProducerBatch,
    ProduceResult,
    RecordColumns,
    Stamp,
    columns_to_table,
    content_digest,
    validate_records,
)
from lakelog.platform.storage import STORAGE_ERRORS

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
    # Where the call goes again when its journal flush meets a fence (set by the broker): its future then
    # stays unanswered until the call sent again is answered.
    resend: Callable[[PendingProduce], None] | None = None

    @property
    def rows(self) -> int:
        return len(self.records) if isinstance(self.records, RecordColumns) else self.records.num_rows

    @cached_property
    def nbytes(self) -> int:  # asked by the traffic count and by the flush's size (a sum over the records)
        return self.records.nbytes

    @property
    def stamp(self) -> Stamp:
        return Stamp(self.rows, self.config.timestamp_type, self.producer)


class ProducerAdmission:
    """Which of a topic's produce calls go on: the node journal's flush admits each topic's calls here
    (expired calls dropped, idempotent retries answered from producer state, stale producers fenced), and
    records the producers' batches once their records are durable. No thread: the journal's flush thread
    calls it, and a node has no other writer of its topics."""

    def __init__(self, topic_log: TopicLog, producers: ProducerStateManager) -> None:
        self.log = topic_log
        self.producers = producers

    def served(self, calls: list[PendingProduce]) -> list[PendingProduce]:
        """The calls whose partitions the log serves: a call to a partition refused because another Delta
        writer changed it (DATA_CHANGED_OUTSIDE_LAKELOG, outside_commits.py) is answered with that refusal
        and acknowledges nothing, until `lakelog topics repair` lifts it."""
        refusals = self.log.outside.refusals
        if not refusals.why:  # the usual case: nothing refused, nothing to look at per call
            return calls
        kept = []
        for call in calls:
            error = next((e for e in map(refusals.error, np.unique(call.partitions).tolist()) if e is not None), None)
            if error is None:
                kept.append(call)
            elif fail(call.future, error):
                log.warning("produce to %s refused, nothing written: %s", self.log.name, error.message)
        return kept

    def admit(self, batch: list[PendingProduce], catch_up: Callable[[], None]) -> list[PendingProduce]:
        """The calls of a flush that go on. No look at other writers' commits: a node is the topic's only
        writer while it holds the topic's epoch, and the look would wait on the log lock that a table commit
        holds for its round trips. `catch_up` follows the refresh of a sequence gap: the journal's, which
        asks whether the topic is still this node's."""
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
    assert retry.producer is not None and original.producer is not None  # idempotent calls, both
    if retry.producer.keyed and retry.producer.content_digest != original.producer.content_digest:
        fail(retry.future, key_reused())
        return

    def copy(done: Future) -> None:
        error = done.exception()
        if error is not None:
            fail(retry.future, error)
        else:
            succeed(retry.future, replace(done.result(), duplicate=True))

    original.future.add_done_callback(copy)


def checked(calls: list[PendingProduce], topic: str) -> list[PendingProduce]:
    """Each call's records as Arrow (`call.table`), checked in bulk for the whole flush. When a check fails,
    each call is checked on its own: a call with a bad record is answered with that error (naming the record
    by its place in the call), logged, and changes nothing; the others go on."""
    return checked_together(calls, topic)[0]


def checked_together(calls: list[PendingProduce], topic: str) -> tuple[list[PendingProduce], pa.Table | None]:
    """`checked`, and the checked calls' records as one table, in order (the table the check read; None when
    a call was refused or the calls' configs differ): a flush writes it without joining the calls again."""
    try:
        whole = _as_tables(calls)
        configs = {id(call.config): call.config for call in calls}
        if len(configs) == 1 and calls:
            together = whole if whole is not None else _concat([call.table for call in calls])
            validate_records(together, calls[0].config)
            return calls, together
        for call in calls:
            validate_records(call.table, call.config)
    except LakelogError:
        return [call for call in calls if _checked_alone(call, topic)], None
    return calls, None


def _checked_alone(call: PendingProduce, topic: str) -> bool:
    try:
        _as_tables([call])
        validate_records(call.table, call.config)
    except LakelogError as exc:
        log.warning("produce to %s refused, nothing written: %s: %s", topic, exc.code, exc.message)
        fail(call.future, exc)
        return False
    return True


def _as_tables(calls: list[PendingProduce]) -> pa.Table | None:
    """Set each call's table: the columnar calls as slices of one table built for all of them. Returns that
    table when every call is columnar (it is then all the calls' records, in order)."""
    columnar = [call for call in calls if isinstance(call.records, RecordColumns)]
    whole = columns_to_table([call.records for call in columnar]) if columnar else None
    start = 0
    for call in calls:
        if isinstance(call.records, RecordColumns) and whole is not None:
            call.table = whole.slice(start, len(call.records))
            start += len(call.records)
        else:
            call.table = call.records
        if call.producer is not None and call.producer.keyed:  # a retry must carry the same records
            call.producer = replace(call.producer, content_digest=content_digest(call.table))
    return whole if len(columnar) == len(calls) else None


def _concat(tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]
