"""Kafka's record batches to and from lakelog's columns, in bulk (`record_codec.py`: no Python work per record).

Produce: each v2 batch of a partition's records becomes one Arrow call (`ProducedBatch.records`: columns key,
value, headers, timestamp and partition, the batch form `arrow_to_table` takes), with the batch's
idempotent-producer fields. Its framing is checked here as Kafka's broker checks it (sizes, magic, CRC-32C,
codec, no control batch), its payload decompressed with aiokafka's codecs (cramjam), its records decoded by
`record_codec`. Fetch: a partition's rows become one batch per run of a producer's records, with its producer
id, epoch and base sequence, whose base offset is the run's first offset, so compacted gaps keep their
offsets (offset deltas), compressed with the codec asked for (uncompressed when that saves nothing, as
aiokafka's builder does). Encoded answers of recent data are kept (`encoded_cache.py`), so consumers of the
same tail pay the encoding once.

Produce v0-v2 and Fetch v0-v3 use the older message sets (magic 0 and 1) instead: converted here, at
the edge, by `legacy_messages.py`, so the log holds the same columns whatever the client spoke.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from aiokafka.codec import (
    gzip_decode,
    gzip_encode,
    lz4_decode,
    lz4_encode,
    snappy_decode,
    snappy_encode,
    zstd_decode,
    zstd_encode,
)
from kafka.protocol.api_key import ApiKey

from lakelog.kafka_api import legacy_messages, record_codec
from lakelog.kafka_api.encoded_cache import ENCODED, EncodedCache
from lakelog.kafka_api.errors import CODES, KafkaProtocolError
from lakelog.kafka_api.producer_ids import KAFKA_PRODUCERS, PARTITION_BITS
from lakelog.kafka_api.protocol import SUPPORTED
from lakelog.platform.records import IDEMPOTENCY_BASE, RecordColumns, arrow_to_table, columns_to_table
from lakelog.schemas import HEADERS_TYPE

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

# A v2 batch's header: base offset, length, partition leader epoch, magic, CRC-32C (of what follows it),
# attributes, last offset delta, first and max timestamps, producer id, epoch, base sequence, record count.
HEADER = struct.Struct(">qiibIhiqqqhii")
LOG_OVERHEAD = 12  # base offset and length
CRC_AT, ATTRIBUTES_AT = 17, 21
MIN_BATCH = LOG_OVERHEAD + 14  # aiokafka's smallest message (magic 0's overhead): below it, corrupt
CODEC_MASK, LOG_APPEND_TIME, TRANSACTIONAL, CONTROL = 0x07, 0x08, 0x10, 0x20
NO_LEADER_EPOCH = -1
DECODERS = {1: gzip_decode, 2: snappy_decode, 3: lz4_decode, 4: zstd_decode}
ENCODERS = {1: gzip_encode, 2: snappy_encode, 3: lz4_encode, 4: zstd_encode}
PARTITION_MASK = (1 << PARTITION_BITS) - 1
# A batch of fewer records becomes Python lists (`RecordColumns`, built by the compiled codec): the flush turns
# many such calls into one table together (about 150 ns a record), where a table per call costs some 200 µs of
# Arrow work of its own (`arrow_to_table`, explicit partitions as a list); from this many on (measured: the two
# meet near 1,100), Arrow columns cost less.
ARROW_FROM = 1024
PRODUCED = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("headers", HEADERS_TYPE),
                      ("timestamp", pa.int64()), ("partition", pa.int32())])  # a produced batch's columns


def fetch_magic(version: int) -> int:
    """The message format a Fetch version reads: magic 0 up to v1, 1 up to v3, then v2 batches."""
    return 0 if version <= 1 else 1 if version <= 3 else 2


@dataclass(frozen=True)
class ProducedBatch:
    records: RecordColumns | pa.Table  # a table: the batch form of `arrow_to_table` (a v2 batch); columns:
    # a message set of magic 0 or 1
    producer_id: int  # -1: not an idempotent producer
    producer_epoch: int
    base_sequence: int
    transactional: bool = False  # held outside the table until its transaction ends (handlers/transactions.py)

    @property
    def idempotent(self) -> bool:
        return self.producer_id >= 0

    def file_table(self) -> pa.Table:
        """The records as TOPIC_FILE_SCHEMA rows, offsets not assigned."""
        if isinstance(self.records, pa.Table):
            return arrow_to_table(self.records)[0]
        return columns_to_table([self.records])


def decode_produce(data: bytes | None, partition: int, version: int = NEWEST_PRODUCE) -> list[ProducedBatch]:
    """The batches of one partition's `records` field of a Produce of `version`. Raises KafkaProtocolError
    (CORRUPT_MESSAGE, INVALID_RECORD, UNSUPPORTED_COMPRESSION_TYPE) for what cannot be written."""
    data = bytes(data or b"")
    if version < FIRST_BATCH_PRODUCE and _first_magic(data) in (0, 1):
        return [_legacy_batch(data, partition)]  # before v3 any format is taken, as Kafka takes it
    batches = [_produced(batch, partition, version) for batch in _split(data)]
    if not batches:
        raise KafkaProtocolError("a produce request without a record batch", CODES["CORRUPT_MESSAGE"])
    return batches


def _split(data: bytes) -> list[memoryview]:
    """Each whole batch (or message) of `data`; an incomplete one at its end is left out, as aiokafka's
    reader (and Kafka's) leaves it."""
    view, pos, found = memoryview(data), 0, []
    while len(data) - pos >= LOG_OVERHEAD:
        end = pos + LOG_OVERHEAD + struct.unpack_from(">i", data, pos + 8)[0]
        if end > len(data):
            break
        if end - pos < MIN_BATCH:
            raise _corrupt(f"Record size is less than the minimum record overhead ({MIN_BATCH - LOG_OVERHEAD})")
        found.append(view[pos:end])
        pos = end
    return found


def _first_magic(data: bytes) -> int | None:
    return data[legacy_messages.MAGIC_AT] if len(data) > legacy_messages.MAGIC_AT else None


def _legacy_batch(data: bytes, partition: int) -> ProducedBatch:
    """A message set of magic 0 or 1 as one call: no producer id, no headers; magic 0 has no timestamps
    (the broker stamps the records)."""
    keys, values, timestamps = legacy_messages.decode(data)
    headers: list[list[dict] | None] = [None] * len(values)
    columns = RecordColumns(keys, values, headers, timestamps, [partition] * len(values))
    return ProducedBatch(columns, NO_PRODUCER, NO_PRODUCER, NO_PRODUCER)


def _produced(batch: memoryview, partition: int, version: int) -> ProducedBatch:
    if batch[legacy_messages.MAGIC_AT] != 2:  # Kafka's words and code:
        raise KafkaProtocolError(f"Produce requests with version {version} are only allowed to contain record "
                                 "batches with magic version 2 (got a message set of magic 0 or 1)",
                                 CODES["INVALID_RECORD"])
    if len(batch) < HEADER.size:
        raise _corrupt(f"a record batch of {len(batch)} bytes, shorter than its header")
    (_, _, _, _, crc, attributes, _, first_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
     count) = HEADER.unpack_from(batch)
    codec = attributes & CODEC_MASK
    if version < FIRST_ZSTD_PRODUCE and codec == ZSTD:
        raise KafkaProtocolError(f"zstd batches need Produce v{FIRST_ZSTD_PRODUCE} or later (got v{version})",
                                 CODES["UNSUPPORTED_COMPRESSION_TYPE"])
    if record_codec.crc32c(batch[ATTRIBUTES_AT:]) != crc:
        raise _corrupt("record batch CRC mismatch")
    if attributes & CONTROL:  # markers are the coordinator's, never a producer's
        raise KafkaProtocolError("a produced batch may not be a control batch", CODES["INVALID_RECORD"])
    payload = _decompressed(batch[HEADER.size:], codec)
    try:
        if count < ARROW_FROM:
            keys, values, headers, stamps = record_codec.decode_lists(payload, count, first_timestamp, max_timestamp,
                                                                      bool(attributes & LOG_APPEND_TIME))
            columns = RecordColumns(keys, values, headers, stamps, [partition] * len(values))
            return ProducedBatch(columns, producer_id, producer_epoch, base_sequence,
                                 bool(attributes & TRANSACTIONAL))
        records = record_codec.decode(payload, count)
    except ValueError as exc:
        raise _corrupt(f"corrupt record batch: {exc}") from None
    n = len(records)
    if attributes & LOG_APPEND_TIME:  # as aiokafka reads it: every record at the batch's max timestamp
        timestamps = np.full(n, max_timestamp, np.int64)
    else:
        timestamps = first_timestamp + records.timestamp_deltas
    left_out = timestamps < 0  # -1: the broker stamps it
    stamped = (pa.array(timestamps, pa.int64(), mask=left_out) if left_out.any()
               else pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(timestamps)], 0))
    partitions = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(np.full(n, partition, np.int32))], 0)
    table = pa.Table.from_arrays([records.keys, records.values, records.headers, stamped, partitions],
                                 schema=PRODUCED)
    return ProducedBatch(table, producer_id, producer_epoch, base_sequence, bool(attributes & TRANSACTIONAL))


def _decompressed(payload: memoryview, codec: int) -> bytes | memoryview:
    if codec == 0:
        return payload
    decoder = DECODERS.get(codec)
    if decoder is None:
        raise KafkaProtocolError(f"Unknown compression codec {codec:#04x}", CODES["UNSUPPORTED_COMPRESSION_TYPE"])
    try:
        return bytes(decoder(payload.tobytes()))
    except Exception as exc:  # each library has its own errors (zlib.error, cramjam's DecompressionError, ...)
        raise _corrupt(f"corrupt record batch: its codec {codec} could not decompress it: {exc}") from None


def _corrupt(message: str) -> KafkaProtocolError:
    return KafkaProtocolError(message, CODES["CORRUPT_MESSAGE"])


def encode_fetch(rows: pa.Table, compression: int = 0, magic: int = 2, topic: str | None = None,
                 cache: EncodedCache = ENCODED) -> bytes:
    """`rows` (TOPIC_SCHEMA columns, one partition, offsets ascending) as v2 batches, one per run of a
    producer's records (`producer_runs`), or as a message set of magic 0 or 1 for the older Fetch versions.
    With `topic`, the answer is looked up in (and kept in) `cache` first."""
    if rows.num_rows == 0:
        return b""
    key = cache.key(topic, rows, compression, magic) if topic is not None else None
    if key is not None and (found := cache.get(key)) is not None:
        return found
    encoded = _encoded(rows, compression, magic)
    if key is not None:
        cache.put(key, encoded)
    return encoded


def _encoded(rows: pa.Table, compression: int, magic: int) -> bytes:
    if magic < 2:
        return legacy_messages.encode(rows.column("offset").to_pylist(),
                                      rows.column("timestamp").cast(pa.int64()).to_pylist(),
                                      rows.column("key").to_pylist(), rows.column("value").to_pylist(), magic,
                                      compression)
    offsets = _int64(rows.column("offset"))
    timestamps = _int64(rows.column("timestamp").cast(pa.int64()))
    runs = producer_runs(rows)
    starts = np.array([start for start, _, _ in runs], np.int64)
    row_run = np.repeat(np.arange(len(runs)), np.diff(np.append(starts, rows.num_rows)))
    out, ends = record_codec.encode(offsets - offsets[starts][row_run], timestamps - timestamps[starts][row_run],
                                    rows.column("key"), rows.column("value"),
                                    rows.column("headers") if "headers" in rows.column_names else None,
                                    starts, HEADER.size)
    max_timestamps = np.maximum.reduceat(timestamps, starts)
    pieces: list[bytearray | memoryview] = []
    for i, (start, end, producer) in enumerate(runs):
        at = int(ends[start - 1]) if start else 0  # the run's batch, its header's room first
        batch = memoryview(out)[at:int(ends[end - 1])]
        pieces.append(_batch(batch, int(offsets[start]), int(offsets[end - 1] - offsets[start]), int(timestamps[start]),
                             int(max_timestamps[i]), producer, end - start, compression))
    return bytes(out) if all(isinstance(piece, memoryview) for piece in pieces) else b"".join(pieces)


def _int64(column: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(column.to_numpy(), np.int64)


def _batch(batch: memoryview, base_offset: int, last_offset_delta: int, first_timestamp: int, max_timestamp: int,
           producer: tuple[int, int, int], count: int, compression: int) -> bytearray | memoryview:
    """`batch` (its header's room, then its records' bytes) as one v2 batch: its header written in place, or
    a new batch where `compression` makes it smaller."""
    codec = 0
    if compression:
        compressed = memoryview(ENCODERS[compression](batch[HEADER.size:].tobytes()))
        if compressed.nbytes < batch.nbytes - HEADER.size:
            fresh = bytearray(HEADER.size)
            fresh += compressed
            batch, codec = memoryview(fresh), compression
    HEADER.pack_into(batch, 0, base_offset, batch.nbytes - LOG_OVERHEAD, NO_LEADER_EPOCH, 2, 0, codec,
                     last_offset_delta, first_timestamp, max_timestamp, *producer, count)
    struct.pack_into(">I", batch, CRC_AT, record_codec.crc32c(batch[ATTRIBUTES_AT:]))
    return batch if not codec else fresh


def producer_runs(rows: pa.Table) -> list[tuple[int, int, tuple[int, int, int]]]:
    """(start, end, (producer id, epoch, base sequence)) of each run of rows one batch can carry: a producer's
    records in sequence, as Kafka id and epoch (producer_ids.py), or records without a producer (-1, NO_EPOCH,
    -1). A Kafka batch names one producer, and a record's sequence is its batch's first plus its offset delta
    (whatever compaction removed between). Rows without the producer columns have no producer. In bulk."""
    n = rows.num_rows
    if "producer_id" not in rows.column_names or rows.column("producer_id").null_count == n:
        return [(0, n, (NO_PRODUCER, NO_EPOCH, NO_PRODUCER))]
    columns = [rows.column(name) for name in ("producer_id", "producer_epoch", "sequence")]
    stored, epochs, sequences = (_int64(pc.fill_null(column.cast(pa.int64()), 0)) for column in columns)
    partitions = _int64(rows.column("partition").cast(pa.int64()))
    known = (stored < IDEMPOTENCY_BASE) & np.logical_and.reduce([_valid(column) for column in columns])
    kafka = stored >= KAFKA_PRODUCERS  # a Kafka producer of this partition: known by its Kafka id
    within = stored - KAFKA_PRODUCERS
    known &= ~kafka | ((within & PARTITION_MASK) == partitions)
    ids = np.where(known, np.where(kafka, within >> PARTITION_BITS, stored), NO_PRODUCER)
    epochs = np.where(known, epochs, NO_EPOCH)
    sequences = np.where(known, sequences, NO_PRODUCER)
    offsets = _int64(rows.column("offset"))
    breaks = (ids[1:] != ids[:-1]) | (epochs[1:] != epochs[:-1]) | (
        (ids[1:] != NO_PRODUCER) & (np.diff(sequences) != np.diff(offsets)))
    starts = np.concatenate([[0], np.flatnonzero(breaks) + 1]).tolist()
    ends = starts[1:] + [n]
    return [(start, end, (int(ids[start]), int(epochs[start]), int(sequences[start])))
            for start, end in zip(starts, ends)]


def _valid(column: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.is_valid(column).to_numpy(), bool)
