"""Idempotent-producer state of one topic: epoch, next sequence and recent batches per producer id.

lakelog commits all partitions of a flush at once, so a producer's sequence
runs per topic (the records of one produce call get base_sequence, +1, ...,
whatever partitions they land on). A producer writing a single partition sees
exactly Kafka's per-partition rule. The state is rebuilt after a restart from
the log itself: records carry producer_id, producer_epoch and sequence, and
file statistics on producer_id find the files to read.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from lakelog.platform.errors import (
    DuplicateSequence,
    IdempotencyKeyReused,
    InvalidProducerEpoch,
    OutOfOrderSequence,
)
from lakelog.platform.records import ProducerBatch, ProduceResult, content_digest

RECENT_BATCHES = 5  # as Kafka's broker keeps for each producer


@dataclass
class _Batch:
    epoch: int
    first_sequence: int
    count: int
    result: ProduceResult
    content_digest: bytes | None = None


@dataclass
class _Producer:
    epoch: int
    next_sequence: int
    recent: deque[_Batch] = field(default_factory=lambda: deque(maxlen=RECENT_BATCHES))


# Reads the log for one producer id: columns partition, offset, timestamp, producer_epoch, sequence
# and, when the flag is set, key, value and headers (to compare an Idempotency-Key retry's content).
ProducerLoader = Callable[[int, bool], pa.Table]


class ProducerStateManager:
    def __init__(self, loader: ProducerLoader) -> None:
        self._load = loader
        self._producers: dict[int, _Producer | None] = {}
        self._lock = threading.Lock()
        self._history: dict[int, pa.Table] = {}

    def read_history_from(self, loader: ProducerLoader) -> None:
        """Rebuild producers' state from `loader` from now on (the node journal adds its acknowledged batches
        not yet in the table); what was read before is dropped."""
        with self._lock:
            self._load = loader
            self._producers.clear()
            self._history.clear()

    def check(self, batch: ProducerBatch, count: int, pending: dict[int, tuple[int, int]]) -> ProduceResult | None:
        """None when the batch is new; the original result when it is a retry. Raises on fencing or gaps.

        `pending` holds (epoch, next sequence) of batches accepted into the flush in progress.
        """
        epoch, next_sequence = pending.get(batch.producer_id) or self._position(batch.producer_id)
        if epoch is None:
            return None  # an unknown producer starts where it says
        if batch.producer_epoch < epoch:
            raise InvalidProducerEpoch(
                f"producer {batch.producer_id} epoch {batch.producer_epoch} is fenced by epoch {epoch}"
            )
        if batch.producer_epoch > epoch:
            if batch.base_sequence != 0:
                raise OutOfOrderSequence(
                    f"producer {batch.producer_id} new epoch {batch.producer_epoch} must start at sequence 0, "
                    f"got {batch.base_sequence}"
                )
            return None
        if batch.base_sequence == next_sequence:
            return None
        if batch.base_sequence > next_sequence:
            raise OutOfOrderSequence(
                f"producer {batch.producer_id} sequence gap: expected {next_sequence}, got {batch.base_sequence}"
            )
        return self._original(batch, count)

    def _position(self, producer_id: int) -> tuple[int | None, int]:
        with self._lock:
            if producer_id not in self._producers:
                self._producers[producer_id] = self._rebuild(producer_id)
            state = self._producers[producer_id]
        return (None, 0) if state is None else (state.epoch, state.next_sequence)

    def _rebuild(self, producer_id: int) -> _Producer | None:
        history = self._load(producer_id, False)
        if history.num_rows == 0:
            return None
        self._history[producer_id] = history
        epoch = int(pc.max(history.column("producer_epoch")).as_py())
        same = history.filter(pc.equal(history.column("producer_epoch"), epoch))
        return _Producer(epoch, int(pc.max(same.column("sequence")).as_py()) + 1)

    def _original(self, batch: ProducerBatch, count: int) -> ProduceResult:
        with self._lock:
            state = self._producers.get(batch.producer_id)
            for seen in state.recent if state else ():
                if (seen.epoch, seen.first_sequence, seen.count) == (batch.producer_epoch, batch.base_sequence, count):
                    if batch.keyed and seen.content_digest != batch.content_digest:
                        raise key_reused()
                    return ProduceResult(seen.result.partitions, seen.result.offsets, seen.result.timestamps_ms, True)
        found = self._from_log(batch, count)
        if found is None:
            if batch.keyed:
                raise key_reused()
            raise DuplicateSequence(
                f"producer {batch.producer_id} sequence {batch.base_sequence} was already written and is no "
                f"longer in the recent batches"
            )
        return found

    def _from_log(self, batch: ProducerBatch, count: int) -> ProduceResult | None:
        history = self._history.get(batch.producer_id)
        if history is None or batch.keyed:
            history = self._load(batch.producer_id, batch.keyed)
        rows = history.filter(pc.and_(
            pc.equal(history.column("producer_epoch"), batch.producer_epoch),
            pc.and_(pc.greater_equal(history.column("sequence"), batch.base_sequence),
                    pc.less(history.column("sequence"), batch.base_sequence + count)),
        )).sort_by("sequence")
        if rows.num_rows != count:
            return None
        if batch.keyed and content_digest(rows) != batch.content_digest:
            raise key_reused()
        return ProduceResult(
            rows.column("partition").to_numpy(),
            rows.column("offset").to_numpy(),
            rows.column("timestamp").cast(pa.int64()).to_numpy(),
            duplicate=True,
        )

    def record(self, batch: ProducerBatch, count: int, result: ProduceResult) -> None:
        with self._lock:
            state = self._producers.get(batch.producer_id)
            if state is None or batch.producer_epoch > state.epoch:
                state = self._producers[batch.producer_id] = _Producer(batch.producer_epoch, 0)
            state.next_sequence = batch.base_sequence + count
            state.recent.append(_Batch(batch.producer_epoch, batch.base_sequence, count, result,
                                       batch.content_digest))
            self._history.pop(batch.producer_id, None)

    def forget(self, producer_id: int) -> None:
        """Drop what is known of a producer: the next check rebuilds its state from the log."""
        with self._lock:
            self._producers.pop(producer_id, None)
            self._history.pop(producer_id, None)

    def forget_changed(self, producer_ids: set[int] | None) -> None:
        """Another writer of the topic committed batches of these producers (None: of any): their state here
        is stale, and the next check of each rebuilds it from the log."""
        with self._lock:
            if producer_ids is None:
                self._producers.clear()
                self._history.clear()
                return
            for producer_id in producer_ids:
                self._producers.pop(producer_id, None)
                self._history.pop(producer_id, None)


def key_reused() -> IdempotencyKeyReused:
    return IdempotencyKeyReused("this Idempotency-Key was used before with different content (other records "
                                "or another count); use a new key for new records")
