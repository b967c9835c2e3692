"""Records as they cross the core's boundary: what producers send and consumers get.

Producers give a list of `Record` or an Arrow table (the batch form); both
become one Arrow table of `TOPIC_FILE_SCHEMA` built in bulk, with checks at
the door: types here, the topic's checks (sizes, timestamps, keys) in
`record_checks.py`.
"""

from __future__ import annotations

import base64
import hashlib
import time
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakelog.platform.catalog.topic_config import TimestampType
from lakelog.platform.errors import InvalidRecord

# The checks of records against their topic's config live in record_checks.py; named here too, as before.
from lakelog.platform.produce.record_checks import (  # noqa: F401
    MAX_TIMESTAMP_MS,
    check_keys,
    check_sizes,
    check_timestamps,
    record_sizes,
    validate_records,
)
from lakelog.schemas import HEADERS_TYPE, TOPIC_FILE_SCHEMA
from lakelog.schemas.tables import TIMESTAMP_TYPE

Header = tuple[str, bytes]
TopicPartition = tuple[str, int]



@dataclass(frozen=True)
class Record:
    value: bytes | None
    key: bytes | None = None
    headers: Sequence[Header] | None = None
    timestamp_ms: int | None = None
    partition: int | None = None


# Producer ids from 2^62 up stand for Idempotency-Keys; producers choose ids below.
IDEMPOTENCY_BASE = 1 << 62


@dataclass(frozen=True)
class ProducerBatch:
    """Idempotent-producer fields of one produce call: its records get sequences base_sequence, +1, ...

    `content_digest` is set for Idempotency-Key batches: a retry must carry the same records."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    content_digest: bytes | None = None

    @property
    def keyed(self) -> bool:
        """Whether this batch stands for an Idempotency-Key (its content is compared on a retry)."""
        return self.producer_id >= IDEMPOTENCY_BASE


def idempotency_key_batch(key: str) -> ProducerBatch:
    """An Idempotency-Key as an idempotent producer of its own: one batch at sequence 0 of epoch 0."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return ProducerBatch(IDEMPOTENCY_BASE | (int.from_bytes(digest[:8], "big") & (IDEMPOTENCY_BASE - 1)), 0, 0)


def content_digest(table: pa.Table) -> bytes:
    """A digest of what the records say (keys, values, headers, in order), the same for the same content
    however its arrays lie in memory or on disk, computed in bulk."""
    digest = hashlib.sha256()
    _digest_binary(digest, table.column("key"))
    _digest_binary(digest, table.column("value"))
    headers = table.column("headers")
    _digest_lengths(digest, pc.list_value_length(headers))
    flat = pc.list_flatten(headers)
    _digest_binary(digest, pc.struct_field(flat, "key").cast(pa.binary()))
    _digest_binary(digest, pc.struct_field(flat, "value"))
    return digest.digest()


def _digest_binary(digest: hashlib._Hash, column: pa.Array | pa.ChunkedArray) -> None:
    _digest_lengths(digest, pc.binary_length(column))
    if len(column):
        filled = pc.fill_null(column, b"")  # a fresh array: null slots hold no bytes
        filled = filled.combine_chunks() if isinstance(filled, pa.ChunkedArray) else filled
        offsets = np.frombuffer(filled.buffers()[1], dtype=np.int32)[filled.offset:filled.offset + len(filled) + 1]
        if offsets[-1] > offsets[0]:
            digest.update(memoryview(filled.buffers()[2])[offsets[0]:offsets[-1]])


def _digest_lengths(digest: hashlib._Hash, lengths: pa.Array | pa.ChunkedArray) -> None:
    """Lengths, with -1 for null: null and empty differ."""
    digest.update(pc.fill_null(lengths, -1).cast(pa.int64()).to_numpy(zero_copy_only=False).astype("<i8").tobytes())


@dataclass(frozen=True)
class ProduceResult:
    """Per record, in request order. Offsets are -1 under acks=0."""

    partitions: np.ndarray
    offsets: np.ndarray
    timestamps_ms: np.ndarray
    duplicate: bool = False
    version: int = -1  # the Delta table version that holds them (replication copies up to it)

    def __len__(self) -> int:
        return len(self.offsets)

    def records(self) -> list[tuple[int, int, int]]:
        return list(zip(self.partitions.tolist(), self.offsets.tolist(), self.timestamps_ms.tolist()))


@dataclass(frozen=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


@dataclass(frozen=True)
class Marker:
    """A transaction's control record at `offset` (Kafka's commit or abort marker): its producer, and
    whether it committed. The table holds no row for it, only an empty file covering its offset."""

    offset: int
    producer_id: int
    commit: bool


@dataclass(frozen=True)
class FetchResult:
    topic: str
    partition: int
    records: pa.Table  # TOPIC_SCHEMA
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int = -1  # below it no transaction is open (-1: not asked, the high watermark)
    # Nothing returned, and the offsets from the fetch's up to `skip_to` hold no record (a transaction's
    # marker, an aborted range): where the reader continues. `marker`: the one at `skip_to` - 1, if any.
    skip_to: int | None = None
    marker: Marker | None = None

    @property
    def next_offset(self) -> int | None:
        """Where the next fetch continues; None when nothing was returned (nor skipped)."""
        if self.records.num_rows == 0:
            return self.skip_to
        return int(self.records.column("offset")[-1].as_py()) + 1

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return iter(table_to_records(self.topic, self.records))


def table_to_records(topic: str, table: pa.Table) -> list[ConsumerRecord]:
    columns = {name: table.column(name).to_pylist() for name in
               ("partition", "offset", "timestamp_type", "key", "value", "headers")}
    timestamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    return [
        ConsumerRecord(topic, p, o, ts, tt, k, v, [(h["key"], h["value"]) for h in (hs or [])])
        for p, o, ts, tt, k, v, hs in zip(columns["partition"], columns["offset"], timestamps,
                                          columns["timestamp_type"], columns["key"], columns["value"],
                                          columns["headers"])
    ]


@dataclass(frozen=True)
class RecordColumns:
    """One produce call's records as Python columns: the form small calls keep until their flush builds one
    Arrow table for all of them (`columns_to_table`), so a tiny request costs no Arrow work of its own.

    Keys and values are bytes (or None); headers `{"key": str, "value": bytes | None}` lists; timestamps
    ms (None: the broker's clock when the call arrived, `received_ms`)."""

    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[dict] | None] | None = None
    timestamps: list[int | None] | None = None
    partitions: list[int | None] | None = None  # explicit partitions, None where the partitioner chooses
    received_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def __len__(self) -> int:
        return len(self.values)

    @property
    def nbytes(self) -> int:
        """Keys and values: what counts towards a flush's `batch.bytes`."""
        return sum(map(len, filter(None, self.values))) + sum(map(len, filter(None, self.keys)))


def records_to_columns(records: Sequence[Record]) -> RecordColumns:
    """The Record-list form as columns."""
    if not records:
        raise InvalidRecord("no records given")
    headers = [_headers(r.headers) for r in records]
    timestamps = [r.timestamp_ms for r in records]
    partitions = [r.partition for r in records]
    return RecordColumns([_as_bytes(r.key, i, "key") for i, r in enumerate(records)],
                         [_as_bytes(r.value, i, "value") for i, r in enumerate(records)],
                         headers if any(h is not None for h in headers) else None,
                         timestamps if any(t is not None for t in timestamps) else None,
                         partitions if any(p is not None for p in partitions) else None)


def _as_bytes(data: object, i: int, name: str) -> bytes | None:
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, str):
        try:
            return data.encode()
        except UnicodeEncodeError as exc:
            raise InvalidRecord(f"bad record field: record {i}'s {name} is not valid Unicode: {exc}") from None
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise InvalidRecord(f"bad record field: record {i}'s {name} must be bytes (or None), got {type(data).__name__}")


def columns_to_table(calls: Sequence[RecordColumns]) -> pa.Table:
    """Many calls' columns as one TOPIC_FILE_SCHEMA table, built in bulk; raises InvalidRecord naming the
    first field Arrow cannot take (a value that is not bytes, a header key that is not a string)."""
    keys = [k for call in calls for k in call.keys]
    values = [v for call in calls for v in call.values]
    n = len(values)
    try:
        headers = pa.array([h for call in calls for h in (call.headers or [None] * len(call))], HEADERS_TYPE) \
            if any(call.headers for call in calls) else pa.nulls(n, HEADERS_TYPE)
        if any(call.timestamps for call in calls):
            timestamps = pa.array(
                [call.received_ms if t is None else t for call in calls
                 for t in (call.timestamps or [call.received_ms] * len(call))], pa.int64())
        else:  # the common case: each call's receipt time, repeated in bulk
            timestamps = _int64_array(np.repeat(np.array([call.received_ms for call in calls], dtype=np.int64),
                                                [len(call) for call in calls]))
        return _file_table(pa.array(keys, pa.binary()), pa.array(values, pa.binary()), headers, timestamps)
    except (TypeError, pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise InvalidRecord(f"bad record field: {exc}") from None


def records_to_table(records: Sequence[Record]) -> tuple[pa.Table, list[int | None] | None]:
    """Bulk-convert records; returns the table and the explicit partitions (None when none given)."""
    columns = records_to_columns(records)
    return columns_to_table([columns]), columns.partitions


def arrow_to_table(batch: pa.Table) -> tuple[pa.Table, list[int | None] | None]:
    """The batch form: columns key, value and optional headers, partition, timestamp."""
    names = set(batch.column_names)
    allowed = {"key", "value", "headers", "partition", "timestamp"}
    if "value" not in names:
        raise InvalidRecord("an Arrow batch needs a 'value' column")
    if names - allowed:
        raise InvalidRecord(f"unknown columns {sorted(names - allowed)}; allowed: {sorted(allowed)}")
    if batch.num_rows == 0:
        raise InvalidRecord("no records given")
    n = batch.num_rows
    try:
        values = _binary(batch.column("value"))
        keys = _binary(batch.column("key")) if "key" in names else pa.nulls(n, pa.binary())
        headers = (batch.column("headers").cast(HEADERS_TYPE) if "headers" in names
                   else pa.nulls(n, HEADERS_TYPE))
        timestamps = _timestamps(batch.column("timestamp")) if "timestamp" in names else pa.nulls(n, pa.int64())
        explicit = _partitions(batch.column("partition")) if "partition" in names else None
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InvalidRecord(f"bad column type in Arrow batch: {exc}") from None
    if explicit is not None and all(p is None for p in explicit):
        explicit = None
    return _file_table(keys, values, headers, timestamps), explicit


@dataclass(frozen=True)
class Stamp:
    """What the writer sets on one call's rows at the flush: who produced them and how they are timed."""

    rows: int
    timestamp_type: TimestampType
    producer: ProducerBatch | None = None


def stamp(table: pa.Table, stamps: Sequence[Stamp], now_ms: int) -> pa.Table:
    """Set timestamp types, LogAppendTime timestamps and the idempotent-producer columns of a flush, whose
    rows are the calls of `stamps` one after the other; in bulk, by column name."""
    kinds = np.repeat(np.array([int(s.timestamp_type) for s in stamps], dtype=np.int8), [s.rows for s in stamps])
    table = _set(table, "timestamp_type", pa.array(kinds))
    appended = kinds == int(TimestampType.LOG_APPEND_TIME)
    if appended.any():
        stamps_ms = np.where(appended, now_ms, table.column("timestamp").cast(pa.int64()).to_numpy())
        table = _set(table, "timestamp", pa.array(stamps_ms).cast(TIMESTAMP_TYPE))
    if any(s.producer is not None for s in stamps):
        ids, epochs, sequences = [], [], []
        for s in stamps:
            p = s.producer
            ids.append(pa.nulls(s.rows, pa.int64()) if p is None else pa.array(np.full(s.rows, p.producer_id)))
            epochs.append(pa.nulls(s.rows, pa.int16()) if p is None
                          else pa.array(np.full(s.rows, p.producer_epoch, dtype=np.int16)))
            sequences.append(pa.nulls(s.rows, pa.int32()) if p is None else pa.array(
                np.arange(p.base_sequence, p.base_sequence + s.rows, dtype=np.int32)))
        table = _set(table, "producer_id", pa.chunked_array(ids, pa.int64()))
        table = _set(table, "producer_epoch", pa.chunked_array(epochs, pa.int16()))
        table = _set(table, "sequence", pa.chunked_array(sequences, pa.int32()))
    return table


def _set(table: pa.Table, name: str, column: pa.Array | pa.ChunkedArray) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), table.schema.field(name), column)


def _file_table(keys: pa.Array, values: pa.Array, headers: pa.Array, timestamps: pa.Array) -> pa.Table:
    # Built from numpy buffers and zero-copy views: a flush of small calls builds this table each time, and
    # Arrow's casts and kernels cost microseconds each at any size.
    n = len(values)
    if timestamps.null_count == n:  # no timestamps given: the broker's clock for all
        timestamps = _int64_array(np.full(n, int(time.time() * 1000), dtype=np.int64))
    elif timestamps.null_count:
        timestamps = pc.fill_null(timestamps, int(time.time() * 1000))
    if timestamps.type != pa.int64():
        timestamps = timestamps.cast(pa.int64())
    return pa.Table.from_arrays(
        [
            _int64_array(np.zeros(n, dtype=np.int64)),
            timestamps.view(TIMESTAMP_TYPE),  # milliseconds either way: the same 64-bit values
            pa.array(np.zeros(n, dtype=np.int8)),
            keys, values, headers,
            pa.nulls(n, pa.int64()), pa.nulls(n, pa.int16()), pa.nulls(n, pa.int32()),
        ],
        schema=TOPIC_FILE_SCHEMA,
    )


def _int64_array(values: np.ndarray) -> pa.Array:
    """A numpy int64 array as Arrow's, without a conversion pass (no nulls)."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _binary(column: pa.ChunkedArray) -> pa.Array:
    column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()  # no copy for one chunk
    if pa.types.is_binary(column.type):
        return column
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type) or pa.types.is_large_binary(
            column.type) or pa.types.is_null(column.type):
        return column.cast(pa.binary())
    raise InvalidRecord(f"key and value must be binary or string columns, got {column.type}")


def _timestamps(column: pa.ChunkedArray) -> pa.Array:
    column = column.combine_chunks()
    if pa.types.is_timestamp(column.type):
        return column.cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    if pa.types.is_integer(column.type):
        return column.cast(pa.int64())
    raise InvalidRecord(f"timestamp must be an integer (ms) or timestamp column, got {column.type}")


def _partitions(column: pa.ChunkedArray) -> list[int | None]:
    """Explicit partitions: an integer column, nothing that merely casts to one ("1" is not a partition)."""
    if not (pa.types.is_integer(column.type) or pa.types.is_null(column.type)):
        raise InvalidRecord(f"the partition column must be integers, got {column.type}")
    return column.cast(pa.int64()).to_pylist()


def _headers(headers: Sequence[Header] | None) -> list[dict] | None:
    if headers is None:
        return None
    out = []
    for item in headers:
        key, value = item
        if not isinstance(key, str):
            raise InvalidRecord(f"header keys must be strings, got {key!r}")
        out.append({"key": key, "value": value})
    return out


def encode_bytes(data: bytes | None) -> tuple[str | None, bool]:
    """UTF-8 text where valid, else base64; the flag says base64 was used."""
    if data is None:
        return None, False
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), True
