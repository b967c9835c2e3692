"""Produce to a typed topic (`confluent.*.schema.validation`): each call's records are checked against the
schema registry (`schema_registry/validation.py`) before anything is queued, then the call is written, refused
whole, or split between the topic and its dead-letter topic.

- No bad record: the call goes on as any other produce.
- Bad records and no dead-letter topic (`errors.deadletterqueue.topic.name` empty): the call is refused whole
  with INVALID_RECORD and one error per bad record (`RecordsRefused`), nothing written, and a log line.
- Bad records and a dead-letter topic: they are written to it, with the reason in their headers
  (`__lakelog.dlq.*`), and the good records to the topic; the producer is answered success. Its answer has
  offsets for the records written to the topic only: a dead-lettered record's entry is -1 (partition, offset,
  timestamp) and `dead_letters` says where it went. Over Kafka, the partition's base offset is that of the
  first record written (records after a dead-lettered one are not at base offset + index).
  Both writes are queued together (the call's order against later calls is kept); should the dead-letter
  write fail after the topic's succeeded, the call answers the error and a retry writes the good records
  again (dead letters are at least once).
- An idempotent producer's call (Kafka's idempotence, producer fields, an Idempotency-Key) with bad records is
  refused even with a dead-letter topic: its sequence numbers count every record of the call, and writing
  part of it would break the producer's next call.

`screen` is blocking (it may re-read the registry and open the dead-letter topic): call it off an event loop.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Sequence, TypeAlias, TypeVar

import numpy as np
import pyarrow as pa

from lakelog.platform.errors import RecordsRefused, UnknownTopicOrPartition
from lakelog.platform.records import ProducerBatch, ProduceResult, RecordColumns, arrow_to_table
from lakelog.platform.schema_registry.embedded_json import to_wire_format
from lakelog.platform.schema_registry.validation import Column, RecordValidator, subject_of

log = logging.getLogger(__name__)

DLQ_REASON, DLQ_TOPIC, DLQ_PARTITION = "__lakelog.dlq.reason", "__lakelog.dlq.topic", "__lakelog.dlq.partition"
Records: TypeAlias = "RecordColumns | pa.Table"
T = TypeVar("T")


@dataclass(frozen=True)
class DeadLetter:
    index: int  # in the produce call
    topic: str
    partition: int
    offset: int
    reason: str


@dataclass(frozen=True)
class TypedProduceResult(ProduceResult):
    dead_letters: tuple[DeadLetter, ...] = ()


@dataclass
class Screened:
    """A checked call: what goes to the topic and, when some records failed, to the dead-letter topic."""

    topic: str
    records: Records | None  # the good ones (None: none)
    good: list[int]  # their indexes in the call
    total: int
    dead_letter_topic: str = ""
    dead: RecordColumns | None = None
    reasons: list[tuple[int, str]] = field(default_factory=list)


def screen(broker: Any, validator: RecordValidator, topic: str, records: Records,
           producer: ProducerBatch | None = None, json_keys: bool = False, json_values: bool = False) -> Screened:
    """Check a call to `topic` (a typed one); `json_keys`/`json_values`: they are embedded JSON, converted
    with the subject's latest schema first. Raises RecordsRefused when the call cannot be written."""
    config = broker.topic(topic).config
    keys, values = _keys_values(records)
    preset: dict[int, str] = {}
    if json_keys or json_values:
        key_list, value_list = _as_list(keys), _as_list(values)
        if json_keys and config.confluent_key_schema_validation:
            key_list, failed = to_wire_format(validator, subject_of(topic, True), key_list)
            preset.update((i, f"key: {m}") for i, m in failed.items())
        if json_values and config.confluent_value_schema_validation:
            value_list, failed = to_wire_format(validator, subject_of(topic, False), value_list)
            preset.update((i, (f"{preset[i]}; " if i in preset else "") + f"value: {m}") for i, m in failed.items())
        records, keys, values = _with(records, key_list, value_list), key_list, value_list
    errors = dict(preset)
    errors.update((e.index, e.message) for e in validator.check(topic, config, keys, values) if e.index not in preset)
    total = len(values)
    if not errors:
        return Screened(topic, records, list(range(total)), total)
    reasons = sorted(errors.items())
    keys, values = _as_list(keys), _as_list(values)
    dlq = config.errors_deadletterqueue_topic_name
    _refuse_unless_dead_letters(broker, topic, dlq, reasons, total, producer)
    good = [i for i in range(total) if i not in errors]
    log.warning("produce to typed topic %r: %d of %d records dead-lettered to %r (first: record %d: %s)", topic,
                len(reasons), total, dlq, reasons[0][0], reasons[0][1])
    return Screened(topic, _subset(records, good) if good else None, good, total, dlq,
                    _dead_letters(records, keys, values, reasons, topic), reasons)


def submit(broker: Any, screened: Screened, acks: Any, timeout_ms: int | None,
           producer: ProducerBatch | None) -> Future:
    """Queue a screened call; the future gives a TypedProduceResult for all its records, in order."""
    if screened.dead is None:
        return broker.produce_async(screened.topic, screened.records, acks, timeout_ms, producer)
    dead = broker.produce_async(screened.dead_letter_topic, screened.dead, acks, timeout_ms)
    kept = (broker.produce_async(screened.topic, screened.records, acks, timeout_ms)
            if screened.records is not None else None)
    answer: Future = Future()
    lock = threading.Lock()  # the two writes may finish at once, on two topics' flush threads

    def done(_: Future) -> None:
        with lock:
            if answer.done() or not dead.done() or (kept is not None and not kept.done()):
                return
            try:
                answer.set_result(_combined(screened, kept.result() if kept is not None else None, dead.result()))
            except BaseException as exc:
                answer.set_exception(exc)
    for future in (dead, kept):
        if future is not None:
            future.add_done_callback(done)
    return answer


def _combined(screened: Screened, kept: ProduceResult | None, dead: ProduceResult) -> TypedProduceResult:
    n = screened.total
    partitions, offsets = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    timestamps = np.full(n, -1, dtype=np.int64)
    if kept is not None:
        good = np.array(screened.good, dtype=np.int64)
        partitions[good], offsets[good], timestamps[good] = kept.partitions, kept.offsets, kept.timestamps_ms
    letters = tuple(DeadLetter(index, screened.dead_letter_topic, int(p), int(o), reason)
                    for (index, reason), p, o in zip(screened.reasons, dead.partitions, dead.offsets))
    return TypedProduceResult(partitions, offsets, timestamps, version=kept.version if kept else -1,
                              dead_letters=letters)


def _refuse_unless_dead_letters(broker: Any, topic: str, dlq: str, reasons: list[tuple[int, str]], total: int,
                                producer: ProducerBatch | None) -> None:
    why = None
    if not dlq:
        why = ""
    elif dlq == topic:
        why = f"; the dead-letter topic {dlq!r} is the topic itself"
    elif producer is not None:
        why = f"; an idempotent producer's call is not split to the dead-letter topic {dlq!r}"
    else:
        try:
            broker.topic(dlq)
        except UnknownTopicOrPartition:
            why = f"; the dead-letter topic {dlq!r} does not exist"
    if why is None:
        return
    first = reasons[0]
    message = (f"{len(reasons)} of {total} records are not valid for typed topic {topic!r}{why}; nothing was "
               f"written (record {first[0]}: {first[1]})")
    log.warning("produce refused: %s", message)
    raise RecordsRefused(message, reasons)


def _keys_values(records: Records) -> tuple[Column, Column]:
    """The call's keys and values: Python lists, or an Arrow call's columns as they are (checked from their
    buffers)."""
    if isinstance(records, RecordColumns):
        return list(records.keys), list(records.values)
    table, _ = arrow_to_table(records)
    return table.column("key"), table.column("value")


def _as_list(column: Column) -> list[bytes | None]:
    return column.to_pylist() if isinstance(column, (pa.Array, pa.ChunkedArray)) else list(column)


def _with(records: Records, keys: list[bytes | None], values: list[bytes | None]) -> Records:
    """The call with converted keys and values (embedded JSON comes in JSON bodies: columns)."""
    if isinstance(records, RecordColumns):
        return RecordColumns(keys, values, records.headers, records.timestamps, records.partitions,
                             records.received_ms)
    return records.drop_columns([c for c in ("key", "value") if c in records.column_names]).append_column(
        "key", pa.array(keys, pa.binary())).append_column("value", pa.array(values, pa.binary()))


def _subset(records: Records, rows: Sequence[int]) -> Records:
    if isinstance(records, pa.Table):
        return records.take(pa.array(rows, pa.int64()))

    def pick(column: list[T] | None) -> list[T] | None:
        return None if column is None else [column[i] for i in rows]
    return RecordColumns([records.keys[i] for i in rows], [records.values[i] for i in rows], pick(records.headers),
                         pick(records.timestamps), pick(records.partitions), records.received_ms)


def _dead_letters(records: Records, keys: list[bytes | None], values: list[bytes | None],
                  reasons: list[tuple[int, str]], topic: str) -> RecordColumns:
    """The bad records for the dead-letter topic: their key, value, headers and timestamp, plus the reason,
    the topic and (when the call named one) the partition; the dead-letter topic partitions them itself."""
    if isinstance(records, RecordColumns):
        headers, timestamps, partitions = records.headers, records.timestamps, records.partitions
    else:
        table, partitions = arrow_to_table(records)
        headers = table.column("headers").to_pylist()
        timestamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    out_headers: list[list[dict] | None] = []
    out_timestamps: list[int | None] = []
    for index, reason in reasons:
        extra = [{"key": DLQ_REASON, "value": reason.encode()}, {"key": DLQ_TOPIC, "value": topic.encode()}]
        if partitions is not None and partitions[index] is not None:
            extra.append({"key": DLQ_PARTITION, "value": str(partitions[index]).encode()})
        out_headers.append(list((headers[index] if headers else None) or []) + extra)
        out_timestamps.append(timestamps[index] if timestamps else None)
    dead = RecordColumns([keys[i] for i, _ in reasons], [values[i] for i, _ in reasons], out_headers,
                         out_timestamps if any(t is not None for t in out_timestamps) else None)
    return replace(dead, received_ms=records.received_ms) if isinstance(records, RecordColumns) else dead
