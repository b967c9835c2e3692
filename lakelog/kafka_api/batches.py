"""Kafka's record batches to and from lakelog's columns, with aiokafka's compiled record codec.

Produce: each batch of a partition's records becomes one `RecordColumns` call (its records keep their
partition, keys, values, headers and CreateTime timestamps) with the batch's idempotent-producer
fields. Fetch: a partition's rows become one batch per run of a producer's records, with its producer id,
epoch and base sequence, whose base offset is the run's first offset, so compacted gaps keep their offsets
(offset deltas), compressed with the codec asked for.

Produce v0-v2 and Fetch v0-v3 use the older message sets (magic 0 and 1) instead: converted here, at
the edge, by `legacy_messages.py`, so the log holds the same columns whatever the client spoke.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from aiokafka.errors import CorruptRecordException, UnsupportedCodecError
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from kafka.protocol.api_key import ApiKey

from lakelog.kafka_api import legacy_messages
from lakelog.kafka_api.errors import CODES, KafkaProtocolError
from lakelog.kafka_api.producer_ids import kafka_producer_id
from lakelog.kafka_api.protocol import SUPPORTED
from lakelog.platform.records import RecordColumns

if TYPE_CHECKING:
    from aiokafka.record._protocols import DefaultRecordBatchProtocol, LegacyRecordBatchProtocol

NO_PRODUCER = -1
# The epoch a fetched batch without a producer carries. Kafka answers the epoch the batch was written with;
# lakelog keeps no epoch for records without a producer id (it means nothing there: Kafka's own broker ignores
# it). 0 is what KafkaJS writes and its tests read back; the Java client and librdkafka write -1 and no
# client reads it.
NO_EPOCH = 0
COMPRESSION = {"none": 0, "uncompressed": 0, "producer": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
ZSTD = 4
FIRST_BATCH_PRODUCE, FIRST_ZSTD_PRODUCE = 3, 7  # Produce versions: v2 batches only; zstd allowed (KIP-110)
NEWEST_PRODUCE = SUPPORTED[ApiKey.Produce][1]


def fetch_magic(version: int) -> int:
    """The message format a Fetch version reads: magic 0 up to v1, 1 up to v3, then v2 batches."""
    return 0 if version <= 1 else 1 if version <= 3 else 2


@dataclass(frozen=True)
class ProducedBatch:
    records: RecordColumns
    producer_id: int  # -1: not an idempotent producer
    producer_epoch: int
    base_sequence: int
    transactional: bool = False  # held outside the table until its transaction ends (handlers/transactions.py)

    @property
    def idempotent(self) -> bool:
        return self.producer_id >= 0


def decode_produce(data: bytes | None, partition: int, version: int = NEWEST_PRODUCE) -> list[ProducedBatch]:
    """The batches of one partition's `records` field of a Produce of `version`. Raises KafkaProtocolError
    (CORRUPT_MESSAGE, INVALID_RECORD, UNSUPPORTED_COMPRESSION_TYPE) for what cannot be written."""
    data = bytes(data or b"")
    if version < FIRST_BATCH_PRODUCE and _first_magic(data) in (0, 1):
        return [_legacy_batch(data, partition)]  # before v3 any format is taken, as Kafka takes it
    batches = []
    records = MemoryRecords(data)
    try:
        while (batch := records.next_batch()) is not None:
            batches.append(_produced(batch, partition, version))
    except (CorruptRecordException, SystemError) as exc:  # SystemError: aiokafka's compiled reader on a size
        # below -1 (found by fuzzing)
        raise KafkaProtocolError(f"corrupt record batch: {exc}", CODES["CORRUPT_MESSAGE"]) from None
    except UnsupportedCodecError as exc:
        raise KafkaProtocolError(str(exc), CODES["UNSUPPORTED_COMPRESSION_TYPE"]) from None
    if not batches:
        raise KafkaProtocolError("a produce request without a record batch", CODES["CORRUPT_MESSAGE"])
    return batches


def _first_magic(data: bytes) -> int | None:
    return data[legacy_messages.MAGIC_AT] if len(data) > legacy_messages.MAGIC_AT else None


def _legacy_batch(data: bytes, partition: int) -> ProducedBatch:
    """A message set of magic 0 or 1 as one call: no producer id, no headers; magic 0 has no timestamps
    (the broker stamps the records)."""
    keys, values, timestamps = legacy_messages.decode(data)
    headers: list[list[dict] | None] = [None] * len(values)
    columns = RecordColumns(keys, values, headers, timestamps, [partition] * len(values))
    return ProducedBatch(columns, NO_PRODUCER, NO_PRODUCER, NO_PRODUCER)


def _produced(batch: DefaultRecordBatchProtocol | LegacyRecordBatchProtocol, partition: int,
              version: int) -> ProducedBatch:
    if getattr(batch, "magic", None) != 2:  # aiokafka's legacy batches have no `magic`; Kafka's words and code:
        raise KafkaProtocolError(f"Produce requests with version {version} are only allowed to contain record "
                                 "batches with magic version 2 (got a message set of magic 0 or 1)",
                                 CODES["INVALID_RECORD"])
    if version < FIRST_ZSTD_PRODUCE and batch.compression_type == ZSTD:
        raise KafkaProtocolError(f"zstd batches need Produce v{FIRST_ZSTD_PRODUCE} or later (got v{version})",
                                 CODES["UNSUPPORTED_COMPRESSION_TYPE"])
    if not batch.validate_crc():
        raise KafkaProtocolError("record batch CRC mismatch", CODES["CORRUPT_MESSAGE"])
    if batch.is_control_batch:  # markers are the coordinator's, never a producer's
        raise KafkaProtocolError("a produced batch may not be a control batch", CODES["INVALID_RECORD"])
    keys, values, headers, timestamps = [], [], [], []
    for record in batch:
        keys.append(record.key)
        values.append(record.value)
        headers.append([{"key": k, "value": v} for k, v in record.headers] if record.headers else None)
        timestamps.append(record.timestamp if record.timestamp >= 0 else None)
    columns = RecordColumns(keys, values, headers, timestamps, [partition] * len(values))
    return ProducedBatch(columns, batch.producer_id, batch.producer_epoch, batch.base_sequence,
                         bool(batch.is_transactional))


def encode_fetch(rows: pa.Table, compression: int = 0, magic: int = 2) -> bytes:
    """`rows` (TOPIC_SCHEMA columns, one partition, offsets ascending) as v2 batches, one per run of a
    producer's records (`producer_runs`), or as a message set of magic 0 or 1 for the older Fetch versions."""
    if rows.num_rows == 0:
        return b""
    offsets = rows.column("offset").to_pylist()
    timestamps = rows.column("timestamp").cast(pa.int64()).to_pylist()
    keys = rows.column("key").to_pylist()
    values = rows.column("value").to_pylist()
    if magic < 2:
        return legacy_messages.encode(offsets, timestamps, keys, values, magic, compression)
    headers = rows.column("headers").to_pylist()
    batches = []
    for start, end, producer in producer_runs(rows):
        builder = DefaultRecordBatchBuilder(2, compression, 0, *producer, 1 << 31)
        base = offsets[start]
        for i in range(start, end):
            builder.append(offsets[i] - base, timestamps[i], keys[i], values[i],
                           [(h["key"], h["value"]) for h in headers[i]] if headers[i] else [])
        batch = builder.build()
        struct.pack_into(">q", batch, 0, base)  # the base offset is outside the CRC
        batches.append(bytes(batch))
    return b"".join(batches)


def producer_runs(rows: pa.Table) -> list[tuple[int, int, tuple[int, int, int]]]:
    """(start, end, (producer id, epoch, base sequence)) of each run of rows one batch can carry: a producer's
    records in sequence, as Kafka id and epoch (producer_ids.py), or records without a producer (-1, NO_EPOCH,
    -1). A Kafka batch names one producer, and a record's sequence is its batch's first plus its offset delta
    (whatever compaction removed between). Rows without the producer columns have no producer."""
    n = rows.num_rows
    if "producer_id" not in rows.column_names:
        return [(0, n, (NO_PRODUCER, NO_EPOCH, NO_PRODUCER))]
    ids = rows.column("producer_id").to_pylist()
    epochs = rows.column("producer_epoch").to_pylist()
    sequences = rows.column("sequence").to_pylist()
    partitions = rows.column("partition").to_pylist()
    fields = []
    for stored, epoch, sequence, partition in zip(ids, epochs, sequences, partitions):
        kafka_id = None if stored is None else kafka_producer_id(stored, partition)
        fields.append((NO_PRODUCER, NO_EPOCH, NO_PRODUCER) if kafka_id is None or epoch is None or sequence is None
                      else (kafka_id, epoch, sequence))
    offsets = rows.column("offset").to_pylist()
    runs, start = [], 0
    for i in range(1, n + 1):
        if i == n or not _same_run(fields[i - 1], fields[i], offsets[i] - offsets[i - 1]):
            runs.append((start, i, fields[start]))
            start = i
    return runs


def _same_run(previous: tuple[int, int, int], current: tuple[int, int, int], offset_delta: int) -> bool:
    if previous[:2] != current[:2]:
        return False
    return previous[0] == NO_PRODUCER or current[2] - previous[2] == offset_delta
