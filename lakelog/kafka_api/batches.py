"""Kafka's v2 record batches to and from lakelog's columns, with aiokafka's compiled record codec.

Produce: each batch of a partition's records becomes one `RecordColumns` call (its records keep their
partition, keys, values, headers and CreateTime timestamps) with the batch's idempotent-producer
fields. Fetch: a partition's rows become one batch whose base offset is the first row's offset, so
compacted gaps keep their offsets (offset deltas), compressed with the codec asked for.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pyarrow as pa
from aiokafka.errors import CorruptRecordException, UnsupportedCodecError
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from lakelog.kafka_api.errors import CODES, KafkaProtocolError
from lakelog.platform.records import RecordColumns

NO_PRODUCER = -1
COMPRESSION = {"none": 0, "uncompressed": 0, "producer": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass(frozen=True)
class ProducedBatch:
    records: RecordColumns
    producer_id: int  # -1: not an idempotent producer
    producer_epoch: int
    base_sequence: int

    @property
    def idempotent(self) -> bool:
        return self.producer_id >= 0


def decode_produce(data: bytes | None, partition: int) -> list[ProducedBatch]:
    """The batches of one partition's `records` field. Raises KafkaProtocolError (CORRUPT_MESSAGE,
    UNSUPPORTED_COMPRESSION_TYPE, UNSUPPORTED_FOR_MESSAGE_FORMAT) for what cannot be written."""
    batches = []
    records = MemoryRecords(bytes(data or b""))
    try:
        while (batch := records.next_batch()) is not None:
            batches.append(_produced(batch, partition))
    except CorruptRecordException as exc:
        raise KafkaProtocolError(f"corrupt record batch: {exc}", CODES["CORRUPT_MESSAGE"]) from None
    except UnsupportedCodecError as exc:
        raise KafkaProtocolError(str(exc), CODES["UNSUPPORTED_COMPRESSION_TYPE"]) from None
    if not batches:
        raise KafkaProtocolError("a produce request without a record batch", CODES["CORRUPT_MESSAGE"])
    return batches


def _produced(batch, partition: int) -> ProducedBatch:  # type: ignore[no-untyped-def]
    if batch.magic != 2:
        raise KafkaProtocolError(f"record batches of magic {batch.magic} are not served (v2 only)",
                                 CODES["UNSUPPORTED_FOR_MESSAGE_FORMAT"])
    if not batch.validate_crc():
        raise KafkaProtocolError("record batch CRC mismatch", CODES["CORRUPT_MESSAGE"])
    if batch.is_transactional or batch.is_control_batch:
        raise KafkaProtocolError("transactions are not supported", CODES["INVALID_REQUEST"])
    keys, values, headers, timestamps = [], [], [], []
    for record in batch:
        keys.append(record.key)
        values.append(record.value)
        headers.append([{"key": k, "value": v} for k, v in record.headers] if record.headers else None)
        timestamps.append(record.timestamp if record.timestamp >= 0 else None)
    columns = RecordColumns(keys, values, headers, timestamps, [partition] * len(values))
    return ProducedBatch(columns, batch.producer_id, batch.producer_epoch, batch.base_sequence)


def encode_fetch(rows: pa.Table, compression: int = 0) -> bytes:
    """One v2 batch holding `rows` (TOPIC_SCHEMA columns, one partition, offsets ascending)."""
    if rows.num_rows == 0:
        return b""
    offsets = rows.column("offset").to_pylist()
    timestamps = rows.column("timestamp").cast(pa.int64()).to_pylist()
    keys = rows.column("key").to_pylist()
    values = rows.column("value").to_pylist()
    headers = rows.column("headers").to_pylist()
    base = offsets[0]
    builder = DefaultRecordBatchBuilder(2, compression, 0, NO_PRODUCER, NO_PRODUCER, NO_PRODUCER, 1 << 31)
    for offset, timestamp, key, value, record_headers in zip(offsets, timestamps, keys, values, headers):
        builder.append(offset - base, timestamp, key, value,
                       [(h["key"], h["value"]) for h in record_headers] if record_headers else [])
    batch = builder.build()
    struct.pack_into(">q", batch, 0, base)  # the base offset is outside the CRC
    return bytes(batch)
