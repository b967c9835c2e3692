"""Message sets of magic 0 and 1 (Produce v0-v2, Fetch v0-v3) to lakelog's columns and back, checked
against kafka-python's own pure-Python legacy codec as the independent writer and reader where it has
the codec (uncompressed, gzip), and against aiokafka's reader for snappy and lz4."""

from __future__ import annotations

import struct
import zlib

import pyarrow as pa
import pytest
from aiokafka.codec import lz4_decode, lz4_encode
from aiokafka.record.legacy_records import LegacyRecordBatch as AioLegacyBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from lakelog.kafka_api import legacy_messages
from lakelog.kafka_api.batches import decode_produce, encode_fetch, fetch_magic
from lakelog.kafka_api.errors import CODES, KafkaProtocolError
from lakelog.schemas import TOPIC_SCHEMA

TIME = 1_700_000_000_000


def kafka_python_set(magic: int, codec: int = 0) -> bytes:
    """What an old producer sends: kafka-python's message set (offsets 0..n-1, the broker assigns)."""
    builder = LegacyRecordBatchBuilder(magic, codec, batch_size=1 << 20)
    builder.append(0, timestamp=TIME, key=b"k0", value=b"v0")
    builder.append(1, timestamp=TIME + 1, key=None, value=None)  # a tombstone without a key
    builder.append(2, timestamp=TIME + 2, key=b"k2", value=b"v2" * 50)
    return bytes(builder.build())


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, legacy_messages.GZIP])
@pytest.mark.parametrize("version", [0, 1, 2])
def test_an_old_producer_s_message_set_becomes_one_call_of_columns(magic: int, codec: int, version: int) -> None:
    (batch,) = decode_produce(kafka_python_set(magic, codec), partition=4, version=version)
    columns = batch.records
    assert (columns.keys, columns.values) == ([b"k0", None, b"k2"], [b"v0", None, b"v2" * 50])
    # magic 0 has no timestamps: the broker stamps the records (None)
    assert columns.timestamps == ([None] * 3 if magic == 0 else [TIME, TIME + 1, TIME + 2])
    assert columns.headers == [None] * 3 and columns.partitions == [4] * 3
    assert not batch.idempotent


@pytest.mark.parametrize("magic,codec", [(0, 2), (0, 3), (1, 2), (1, 3)])  # snappy, lz4 (0.8's frame at magic 0)
def test_compressed_message_sets_lakelog_writes_read_back_through_produce(magic: int, codec: int) -> None:
    data = legacy_messages.encode([7, 8], [TIME, TIME + 5], [b"a", None], [b"x" * 300, b"y"], magic, codec)
    assert data[legacy_messages.ATTRIBUTES_AT] & legacy_messages.CODEC_MASK == codec  # one wrapper message
    (batch,) = decode_produce(data, 0, version=2)
    assert (batch.records.keys, batch.records.values) == ([b"a", None], [b"x" * 300, b"y"])
    assert batch.records.timestamps == ([None, None] if magic == 0 else [TIME, TIME + 5])


def test_a_message_set_in_a_v3_produce_is_refused_as_kafka_refuses_it() -> None:
    with pytest.raises(KafkaProtocolError) as refused:
        decode_produce(kafka_python_set(1), 0, version=3)
    assert refused.value.code == CODES["INVALID_RECORD"]


@pytest.mark.parametrize("damage,code", [
    (lambda d: d[:-3], "CORRUPT_MESSAGE"),  # truncated
    (lambda d: d[:30] + bytes([d[30] ^ 1]) + d[31:], "CORRUPT_MESSAGE"),  # a flipped byte under the CRC
    (lambda d: d + b"\x00" * 5, "CORRUPT_MESSAGE"),  # trailing garbage
])
def test_damaged_message_sets_are_refused(damage, code: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KafkaProtocolError) as refused:
        decode_produce(damage(kafka_python_set(1)), 0, version=2)
    assert refused.value.code == CODES[code]


def rows(offsets: list[int]) -> pa.Table:
    n = len(offsets)
    return pa.Table.from_pydict({
        "partition": [0] * n, "offset": offsets,
        "timestamp": pa.array([TIME + o for o in offsets], pa.int64()).cast(TOPIC_SCHEMA.field("timestamp").type),
        "timestamp_type": [0] * n, "key": [b"k%d" % o for o in offsets], "value": [b"v" * 100] * n,
        "headers": [[{"key": "h", "value": b"%d" % o}] for o in offsets],
    }, schema=pa.schema([TOPIC_SCHEMA.field(name) for name in
                         ("partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers")]))


OFFSETS = [10, 11, 14, 15]  # a compacted gap keeps its offsets


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@pytest.mark.parametrize("codec", [0, legacy_messages.GZIP])
def test_old_fetch_versions_read_message_sets_with_their_offsets(version: int, codec: int) -> None:
    magic = fetch_magic(version)
    data = encode_fetch(rows(OFFSETS), codec, magic)
    read = [record for batch in MemoryRecords(data) for record in batch]  # kafka-python's reader
    assert {record.magic for record in read} == {magic}
    assert [(r.offset, r.key, r.value) for r in read] == [(o, b"k%d" % o, b"v" * 100) for o in OFFSETS]
    assert [r.timestamp for r in read] == ([None] * 4 if magic == 0 else [TIME + o for o in OFFSETS])
    assert all(r.headers == [] for r in read)  # neither format has headers


@pytest.mark.parametrize("magic,codec", [(0, 2), (1, 2), (1, 3)])
def test_snappy_and_lz4_message_sets_read_back_with_aiokafka(magic: int, codec: int) -> None:
    data = encode_fetch(rows(OFFSETS), codec, magic)
    batch = AioLegacyBatch(data, magic)
    assert batch.validate_crc()
    assert [(r.offset, r.key, r.timestamp if magic else None) for r in batch] == [
        (o, b"k%d" % o, TIME + o if magic else None) for o in OFFSETS]


def test_a_zstd_topic_answers_old_fetches_uncompressed() -> None:
    data = encode_fetch(rows(OFFSETS), 4, 1)
    assert data[legacy_messages.ATTRIBUTES_AT] & legacy_messages.CODEC_MASK == 0
    assert len([r for batch in MemoryRecords(data) for r in batch]) == 4


def test_kafka_0_8_lz4_frames_carry_the_header_checksum_over_the_magic_number() -> None:
    assert [legacy_messages.xxh32_short(s) for s in (b"", b"a", b"abc")] == [0x02CC5D05, 0x550D7456, 0x32D153FF]
    frame = lz4_encode(b"hello" * 200)
    broken = legacy_messages.broken_lz4_frame(frame)
    assert broken != frame and len(broken) == len(frame)
    with pytest.raises(Exception):
        lz4_decode(broken)  # what standard lz4 readers (and aiokafka) make of 0.8's frames
    assert legacy_messages.fixed_lz4_frame(broken) == frame
    magic_0_lz4 = legacy_messages.encode([3], [TIME], [b"k"], [b"v"], 0, legacy_messages.LZ4)
    wrapper_value = magic_0_lz4[legacy_messages.KEY_AT[0] + 8:]  # after a null key and the value's size
    assert struct.unpack_from(">i", magic_0_lz4, legacy_messages.KEY_AT[0]) == (-1,)
    assert lz4_decode(legacy_messages.fixed_lz4_frame(wrapper_value))  # the wrapper holds a 0.8 frame


def test_nothing_to_fetch_is_no_message_set() -> None:
    assert encode_fetch(rows([]), 0, 0) == b"" and legacy_messages.encode([], [], [], [], 1) == b""


def test_a_negative_size_under_a_valid_crc_is_corrupt_not_a_server_error() -> None:
    body = struct.pack(">bb", 0, 0) + struct.pack(">i", -5) + struct.pack(">i", 1) + b"v"  # key size -5
    message = struct.pack(">qiI", 0, len(body) + 4, zlib.crc32(body)) + body
    with pytest.raises(KafkaProtocolError) as refused:
        decode_produce(message, 0, version=0)
    assert refused.value.code == CODES["CORRUPT_MESSAGE"]
