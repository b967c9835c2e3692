"""batches.py's fetch side: rows encoded as Kafka record batches in bulk, by the compiled codec and by its
pure-Python twin, read back by kafka-python's own pure-Python record codec (`kafka.record`) for every shape a
partition's rows take: codecs, headers (none, empty, null values), null keys and values, compacted gaps,
producers' runs (Kafka producers, HTTP producers, Idempotency-Keys, records without one), and the older message
formats (magic 0 and 1) for old consumers; the cache of encoded answers; and the bytes, uncompressed, exactly
those aiokafka's batch builder (the encoder before this one) writes."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords

from lakelog.kafka_api import batches, encoded_cache
from lakelog.kafka_api.producer_ids import KAFKA_PRODUCERS, PARTITION_BITS, kafka_producer_id
from lakelog.platform.records import IDEMPOTENCY_BASE
from lakelog.schemas import TOPIC_SCHEMA
from tests.unit.kafka_api.test_record_codec import CODECS, IMPLEMENTATIONS, kafka_python_codecs, using

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PARTITION = 2

producer_st = st.sampled_from([
    (None, None, None),
    (KAFKA_PRODUCERS + (7 << PARTITION_BITS) + PARTITION, 0, None),  # a Kafka producer of this partition
    (KAFKA_PRODUCERS + (7 << PARTITION_BITS) + PARTITION, 1, None),  # the same, its epoch bumped
    (KAFKA_PRODUCERS + (9 << PARTITION_BITS) + PARTITION + 1, 0, None),  # another partition's: no producer
    (55, 3, None),  # an HTTP producer
    (IDEMPOTENCY_BASE + 1, 0, None),  # an Idempotency-Key: no producer
])
row_st = st.fixed_dictionaries({
    "gap": st.integers(1, 3),  # compaction's gaps between offsets
    "timestamp": st.integers(0, 2**42),
    "key": st.none() | st.binary(max_size=30),
    "value": st.none() | st.binary(max_size=300),
    "headers": st.none() | st.lists(st.fixed_dictionaries({"key": st.text(max_size=8),
                                                           "value": st.none() | st.binary(max_size=12)}),
                                    max_size=3),
    "producer": producer_st,
    "sequence_step": st.sampled_from([0, 0, 0, 5]),  # 5: a sequence that breaks off
})


def table(rows: list[dict[str, Any]], first: int = 100) -> pa.Table:
    offsets, sequences, offset = [], [], first
    for row in rows:
        offsets.append(offset)
        sequences.append(None if row["producer"][0] is None else offset + row["sequence_step"])
        offset += row["gap"]
    columns = {
        "partition": [PARTITION] * len(rows), "offset": offsets,
        "timestamp": pa.array([r["timestamp"] for r in rows], pa.int64()).cast(TOPIC_SCHEMA.field("timestamp").type),
        "timestamp_type": [0] * len(rows), "key": [r["key"] for r in rows], "value": [r["value"] for r in rows],
        "headers": [r["headers"] for r in rows], "producer_id": [r["producer"][0] for r in rows],
        "producer_epoch": [r["producer"][1] for r in rows], "sequence": sequences,
    }
    return pa.Table.from_pydict(columns, schema=TOPIC_SCHEMA)


def reference_runs(rows: pa.Table) -> list[tuple[int, int, tuple[int, int, int]]]:
    """The producer runs as batches.py found them record by record before it worked in bulk."""
    fields = []
    for stored, epoch, sequence, partition in zip(*(rows.column(c).to_pylist() for c in (
            "producer_id", "producer_epoch", "sequence", "partition"))):
        kafka_id = None if stored is None else kafka_producer_id(stored, partition)
        fields.append((-1, batches.NO_EPOCH, -1) if kafka_id is None or epoch is None or sequence is None
                      else (kafka_id, epoch, sequence))
    offsets = rows.column("offset").to_pylist()
    runs, start = [], 0
    for i in range(1, rows.num_rows + 1):
        if i == rows.num_rows or fields[i - 1][:2] != fields[i][:2] or (
                fields[i - 1][0] != -1 and fields[i][2] - fields[i - 1][2] != offsets[i] - offsets[i - 1]):
            runs.append((start, i, fields[start]))
            start = i
    return runs


def read_back(data: bytes) -> tuple[list[tuple[Any, ...]], list[tuple[int, int, int, int, int]]]:
    """kafka-python's reading: every record, and each batch's (base offset, count, producer id, epoch, base
    sequence); each batch's CRC checked."""
    records, found = [], []
    with kafka_python_codecs():
        memory = MemoryRecords(data)
        while (batch := memory.next_batch()) is not None:
            assert batch.validate_crc() and batch.magic == 2 and not batch.is_transactional
            read = list(batch)
            found.append((batch.base_offset, len(read), batch.producer_id, batch.producer_epoch,
                          batch.base_sequence))
            assert batch.last_offset_delta == read[-1].offset - batch.base_offset
            assert batch.max_timestamp == max(r.timestamp for r in read)
            records.extend((r.offset, r.timestamp, r.key, r.value, r.headers) for r in read)
    return records, found


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
@SETTINGS
@given(rows=st.lists(row_st, min_size=1, max_size=30), codec=st.sampled_from(CODECS))
def test_fetched_rows_read_back_by_kafka_python(name: str, rows: list[dict[str, Any]], codec: int) -> None:
    fetched = table(rows)
    with using(IMPLEMENTATIONS[name]):
        data = batches.encode_fetch(fetched, codec)
    records, found = read_back(data)
    assert records == expected_records(fetched)
    runs = batches.producer_runs(fetched)
    assert runs == reference_runs(fetched)
    offsets = fetched.column("offset").to_pylist()
    assert found == [(offsets[start], end - start, *producer) for start, end, producer in runs]


def expected_records(rows: pa.Table) -> list[tuple[Any, ...]]:
    return [(offset, timestamp, key, value, [(h["key"], h["value"]) for h in headers or []])
            for offset, timestamp, key, value, headers in zip(
                rows.column("offset").to_pylist(), rows.column("timestamp").cast(pa.int64()).to_pylist(),
                rows.column("key").to_pylist(), rows.column("value").to_pylist(), rows.column("headers").to_pylist())]


@SETTINGS
@given(rows=st.lists(row_st, min_size=1, max_size=30))
def test_uncompressed_bytes_are_aiokafka_s_exactly_and_both_implementations_agree(rows: list[dict[str, Any]]) -> None:
    fetched = table(rows)
    encoded = []
    for implementation in IMPLEMENTATIONS.values():
        with using(implementation):
            encoded.append(batches.encode_fetch(fetched, 0))
    assert encoded[0] == encoded[1] == aiokafka_encoded(fetched)


def aiokafka_encoded(rows: pa.Table) -> bytes:
    """What batches.py wrote with aiokafka's builder, record by record, before the bulk codec."""
    import struct

    offsets, timestamps = rows.column("offset").to_pylist(), rows.column("timestamp").cast(pa.int64()).to_pylist()
    keys, values, headers = (rows.column(c).to_pylist() for c in ("key", "value", "headers"))
    out = []
    for start, end, producer in reference_runs(rows):
        builder = AioBuilder(2, 0, 0, *producer, 1 << 31)
        for i in range(start, end):
            builder.append(offsets[i] - offsets[start], timestamps[i], keys[i], values[i],
                           [(h["key"], h["value"]) for h in headers[i]] if headers[i] else [])
        batch = builder.build()
        struct.pack_into(">q", batch, 0, offsets[start])
        out.append(bytes(batch))
    return b"".join(out)


@pytest.mark.parametrize("magic", [0, 1])
@SETTINGS
@given(rows=st.lists(row_st, min_size=1, max_size=20), codec=st.sampled_from([0, 1]))
def test_old_consumers_read_message_sets(magic: int, rows: list[dict[str, Any]], codec: int) -> None:
    """Fetch v0-v3 (legacy_messages.py, kept as it was): kafka-python reads the message set of its magic."""
    fetched = table(rows)
    memory = MemoryRecords(batches.encode_fetch(fetched, codec, magic))
    read = []
    while (batch := memory.next_batch()) is not None:
        read.extend((r.offset, r.key, r.value, r.timestamp if magic else None) for r in batch)
    assert read == [(o, k, v, t if magic else None) for o, t, k, v, _ in expected_records(fetched)]


def test_an_empty_fetch_is_no_batch() -> None:
    assert batches.encode_fetch(table([]), 1, topic="t") == b""


def one_row(value: bytes = b"v" * 100, offset: int = 100) -> pa.Table:
    return table([{"gap": 1, "timestamp": 1_700_000_000_000, "key": b"k", "value": value, "headers": None,
                   "producer": (None, None, None), "sequence_step": 0}], first=offset)


def test_the_cache_answers_the_same_range_once_encoded() -> None:
    cache = encoded_cache.EncodedCache()
    rows = table([{"gap": 1, "timestamp": 1_700_000_000_000 + i, "key": b"k%d" % i, "value": b"v" * 100,
                   "headers": None, "producer": (None, None, None), "sequence_step": 0} for i in range(50)])
    first = batches.encode_fetch(rows, 1, topic="t", cache=cache)
    assert (cache.hits, cache.misses, len(cache)) == (0, 1, 1)
    assert batches.encode_fetch(rows, 1, topic="t", cache=cache) is first
    assert cache.hits == 1
    batches.encode_fetch(rows, 0, topic="t", cache=cache)  # another codec: other bytes
    batches.encode_fetch(rows.slice(0, 49), 1, topic="t", cache=cache)  # another range
    batches.encode_fetch(rows, 1, topic="u", cache=cache)  # another topic
    assert (cache.hits, cache.misses, len(cache)) == (1, 4, 4)
    assert batches.encode_fetch(rows, 1, cache=cache) == first and len(cache) == 4  # no topic: not cached


def test_a_topic_created_again_is_not_answered_with_the_old_bytes() -> None:
    cache = encoded_cache.EncodedCache()
    old = batches.encode_fetch(one_row(b"old value"), 0, topic="t", cache=cache)
    new = batches.encode_fetch(one_row(b"new value!"), 0, topic="t", cache=cache)
    assert old != new and read_back(new)[0][0][3] == b"new value!"


def test_the_cache_is_bounded_in_bytes() -> None:
    single = len(batches.encode_fetch(one_row(), 0))
    cache = encoded_cache.EncodedCache(max_bytes=single * 4 + 1)
    for offset in range(0, 20):
        batches.encode_fetch(one_row(offset=offset), 0, topic="t", cache=cache)
    assert len(cache) == 4 and cache.nbytes <= cache.max_bytes
    assert cache.get(cache.key("t", one_row(offset=19), 0, 2)) is not None  # the most recent stay
    assert cache.get(cache.key("t", one_row(offset=0), 0, 2)) is None
    small = encoded_cache.EncodedCache(max_bytes=single)  # an answer over a quarter of the bound is not kept
    batches.encode_fetch(one_row(), 0, topic="t", cache=small)
    assert len(small) == 0 and small.nbytes == 0
