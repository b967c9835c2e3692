"""kafka_api/batches.py: v2 record batches to lakelog's columns and back, checked against kafka-python's own
(pure Python) record codec as the independent reader and writer."""

from __future__ import annotations

import pyarrow as pa
import pytest
from kafka import codec as kafka_codecs
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from lakelog.kafka_api.batches import NO_EPOCH, decode_produce, encode_fetch
from lakelog.kafka_api.errors import CODES, KafkaProtocolError
from lakelog.kafka_api.producer_ids import lakelog_producer_id
from lakelog.platform.records import IDEMPOTENCY_BASE
from lakelog.schemas import TOPIC_SCHEMA


# The codecs kafka-python can read and write here (others need packages lakelog does not use; the
# end-to-end tests cover them with librdkafka).
CODECS = [0, 1] + [c for c, has in ((2, kafka_codecs.has_snappy), (3, kafka_codecs.has_lz4),
                                     (4, kafka_codecs.has_zstd)) if has()]


def produced(codec: int = 0, producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, *producer, batch_size=1 << 20)
    builder.append(0, timestamp=1_700_000_000_000, key=b"k0", value=b"v0", headers=[("h", b"x")])
    builder.append(1, timestamp=-1, key=None, value=None, headers=[])
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS)
def test_a_produced_batch_becomes_one_call_of_columns(codec: int) -> None:
    (batch,) = decode_produce(produced(codec, (7, 1, 40)), partition=5)
    columns = batch.records
    assert (columns.keys, columns.values) == ([b"k0", None], [b"v0", None])
    assert columns.headers == [[{"key": "h", "value": b"x"}], None]
    assert columns.timestamps == [1_700_000_000_000, None]  # -1: the broker stamps it
    assert columns.partitions == [5, 5]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.idempotent) == (7, 1, 40, True)


def test_two_batches_in_one_partition_are_two_calls() -> None:
    assert len(decode_produce(produced() + produced(), 0)) == 2


@pytest.mark.parametrize("data,code", [
    (b"", "CORRUPT_MESSAGE"),
    (produced()[:-3], "CORRUPT_MESSAGE"),
    (produced()[:30] + b"\x00" + produced()[31:], "CORRUPT_MESSAGE"),  # a flipped byte under the CRC
])
def test_bad_batches_are_refused(data: bytes, code: str) -> None:
    with pytest.raises(KafkaProtocolError) as refused:
        decode_produce(data, 0)
    assert refused.value.code == CODES[code]


def rows(offsets: list[int]) -> pa.Table:
    n = len(offsets)
    return pa.Table.from_pydict({
        "partition": [0] * n, "offset": offsets,
        "timestamp": pa.array([1_700_000_000_000 + o for o in offsets], pa.int64()).cast(
            TOPIC_SCHEMA.field("timestamp").type),
        "timestamp_type": [0] * n, "key": [b"k%d" % o for o in offsets], "value": [b"v" * 100] * n,
        "headers": [[{"key": "h", "value": b"%d" % o}] for o in offsets],
    }, schema=pa.schema([TOPIC_SCHEMA.field(name) for name in
                         ("partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers")]))


@pytest.mark.parametrize("codec", CODECS)
def test_fetched_rows_read_back_with_their_offsets(codec: int) -> None:
    offsets = [10, 11, 14, 15]  # a compacted gap keeps its offsets
    data = encode_fetch(rows(offsets), codec)
    batch = DefaultRecordBatch(data)
    assert batch.compression_type == codec and batch.base_offset == 10 and batch.validate_crc()
    read = list(batch)
    assert [(r.offset, r.key, r.timestamp, r.headers) for r in read] == [
        (o, b"k%d" % o, 1_700_000_000_000 + o, [("h", b"%d" % o)]) for o in offsets]
    if codec:
        assert len(data) < len(encode_fetch(rows(offsets), 0))


def test_nothing_to_fetch_is_no_batch() -> None:
    assert encode_fetch(rows([])) == b""


def with_producers(offsets: list[int], producers: list[tuple[int | None, int | None, int | None]]) -> pa.Table:
    table = rows(offsets)
    for name, column in zip(("producer_id", "producer_epoch", "sequence"), zip(*producers)):
        table = table.append_column(TOPIC_SCHEMA.field(name), pa.array(column, TOPIC_SCHEMA.field(name).type))
    return table


def fetched_batches(data: bytes) -> list[tuple[int, int, int, int, list[int]]]:
    """(producer id, epoch, base sequence, base offset, offsets) of each batch, as kafka-python reads them."""
    found, records = [], MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        found.append((batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.base_offset,
                      [r.offset for r in batch]))
    return found


def test_fetched_batches_carry_each_producers_id_epoch_and_sequences() -> None:
    a, b = lakelog_producer_id(7, 0), lakelog_producer_id(8, 0)
    producers = [(a, 0, 0), (a, 0, 1), (a, 0, 3),  # 10, 11, 13: compaction removed 12 (sequence 2) too
                 (None, None, None), (None, None, None),  # 14, 15: no producer
                 (b, 2, 5),  # 16: another producer
                 (a, 1, 0),  # 17: the first one again, its epoch bumped: sequences start over
                 (55, 3, 9),  # 18: an HTTP producer, known to Kafka clients by lakelog's own id
                 (IDEMPOTENCY_BASE + 1, 0, 0)]  # 19: an Idempotency-Key retry is no producer
    data = encode_fetch(with_producers([10, 11, 13, 14, 15, 16, 17, 18, 19], producers))
    assert fetched_batches(data) == [(7, 0, 0, 10, [10, 11, 13]), (-1, NO_EPOCH, -1, 14, [14, 15]),
                                     (8, 2, 5, 16, [16]), (7, 1, 0, 17, [17]), (55, 3, 9, 18, [18]),
                                     (-1, NO_EPOCH, -1, 19, [19])]


def test_a_sequence_that_breaks_off_starts_another_batch() -> None:
    a = lakelog_producer_id(7, 0)
    data = encode_fetch(with_producers([0, 1, 2], [(a, 0, 0), (a, 0, 1), (a, 0, 40)]))
    assert fetched_batches(data) == [(7, 0, 0, 0, [0, 1]), (7, 0, 40, 2, [2])]


def test_rows_without_producer_columns_are_one_batch_without_a_producer() -> None:
    assert fetched_batches(encode_fetch(rows([3, 4]))) == [(-1, NO_EPOCH, -1, 3, [3, 4])]


def test_zstd_batches_need_produce_v7_as_in_kafka() -> None:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder

    builder = AioBuilder(2, 4, 0, -1, -1, -1, 1 << 20)  # zstd, written by aiokafka (cramjam)
    builder.append(0, timestamp=1_700_000_000_000, key=b"k", value=b"v" * 100, headers=[])
    zstd = bytes(builder.build())
    with pytest.raises(KafkaProtocolError) as refused:
        decode_produce(zstd, 0, version=6)
    assert refused.value.code == CODES["UNSUPPORTED_COMPRESSION_TYPE"]
    (batch,) = decode_produce(zstd, 0, version=7)
    assert batch.records.values == [b"v" * 100]
