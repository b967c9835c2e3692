"""record_codec.py and batches.py's produce side: Kafka v2 record batches decoded in bulk, by the compiled codec
and by its pure-Python twin, checked against kafka-python's own pure-Python record codec (`kafka.record`) as the
independent writer and reader, for every batch shape a producer sends: codecs, headers, null keys and values,
timestamps a producer left out, idempotent and transactional fields, LogAppendTime and control batches, and
corrupt records. kafka-python frames the batches; where it lacks a compression library (snappy, lz4, zstd:
packages lakelog does not use), aiokafka's codec functions (cramjam) are lent to it, its framing kept."""

from __future__ import annotations

import struct
import subprocess
import sys
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Iterator
from unittest import mock

import pytest
from aiokafka import codec as aio_codecs
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka.record import default_records as kafka_default
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from lakelog.kafka_api import batches, python_codec, record_codec
from lakelog.kafka_api.errors import CODES, KafkaProtocolError

from kafka import codec as kafka_codecs

IMPLEMENTATIONS = {"compiled": record_codec.compiled_codec, "python": python_codec}
CODECS = [0, 1, 2, 3, 4]  # none, gzip, snappy, lz4, zstd
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_the_compiled_codec_is_built_and_chosen() -> None:
    """`make install` (pip install -e) builds it where a C compiler is, as on every machine that runs the tests."""
    assert record_codec.COMPILED and record_codec.IMPLEMENTATION is record_codec.compiled_codec


def test_without_the_compiled_module_the_pure_python_twin_serves() -> None:
    code = ("import sys; sys.modules['lakelog.kafka_api.compiled_codec'] = None\n"
            "from lakelog.kafka_api import record_codec, python_codec, batches\n"
            "assert not record_codec.COMPILED and record_codec.IMPLEMENTATION is python_codec\n"
            "b = batches.encode_fetch(__import__('pyarrow').table({'partition': [0], 'offset': [5],"
            " 'timestamp': [7], 'key': [b'k'], 'value': [b'v']}))\n"
            "(p,) = batches.decode_produce(b, 0)\n"
            "assert p.records.values == [b'v'], p\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@contextmanager
def kafka_python_codecs() -> Iterator[None]:
    """kafka-python's record codec with aiokafka's compression functions where it has none of its own."""
    with mock.patch.multiple(kafka_default, snappy_encode=aio_codecs.snappy_encode,
                             snappy_decode=aio_codecs.snappy_decode, lz4_encode=aio_codecs.lz4_encode,
                             lz4_decode=aio_codecs.lz4_decode, zstd_encode=aio_codecs.zstd_encode,
                             zstd_decode=aio_codecs.zstd_decode), \
            mock.patch.multiple(kafka_codecs, has_snappy=lambda: True, has_lz4=lambda: True,
                                has_zstd=lambda: True):
        yield


@contextmanager
def using(implementation: ModuleType, form: str = "arrow") -> Iterator[None]:
    """Decode with `implementation`, into Arrow columns or (`form` "lists") the Python lists of small batches."""
    with mock.patch.object(record_codec, "IMPLEMENTATION", implementation), \
            mock.patch.object(batches, "ARROW_FROM", 0 if form == "arrow" else 1 << 31):
        yield


WAYS = [(name, form) for name in IMPLEMENTATIONS for form in ("arrow", "lists")]


headers_st = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=12)), max_size=3)
record_st = st.fixed_dictionaries({
    "key": st.none() | st.binary(max_size=30),
    "value": st.none() | st.binary(max_size=300),
    "headers": headers_st,
    "timestamp": st.just(-1) | st.integers(0, 2**42),  # -1: left out by the producer (the broker stamps it)
})
batch_st = st.fixed_dictionaries({
    "records": st.lists(record_st, min_size=1, max_size=25),
    "codec": st.sampled_from(CODECS),
    "producer": st.just((-1, -1, -1)) | st.tuples(st.integers(0, 2**40), st.integers(0, 32766),
                                                   st.integers(0, 2**31 - 100)),
    "transactional": st.booleans(),
    "log_append_time": st.booleans(),
})


def kafka_python_batch(shape: dict[str, Any]) -> bytes:
    """The batch kafka-python's producer writes (offset deltas 0..n-1); LogAppendTime set as a broker sets
    it (the attribute bit, the CRC computed again)."""
    producer_id, epoch, sequence = shape["producer"]
    transactional = shape["transactional"] and producer_id >= 0
    with kafka_python_codecs():
        builder = DefaultRecordBatchBuilder(2, shape["codec"], transactional, producer_id, epoch, sequence,
                                            batch_size=1 << 24)
        for i, record in enumerate(shape["records"]):
            builder.append(i, timestamp=record["timestamp"], key=record["key"], value=record["value"],
                           headers=record["headers"])
        data = bytearray(builder.build())
    if shape["log_append_time"]:
        set_attributes(data, struct.unpack_from(">h", data, 21)[0] | 0x08)
    return bytes(data)


def set_attributes(data: bytearray, attributes: int) -> None:
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">I", data, 17, kafka_default.calc_crc32c(bytes(data[21:])))


def read_by_kafka_python(data: bytes, partition: int = 0) -> dict[str, Any]:
    with kafka_python_codecs():
        batch = DefaultRecordBatch(data)
        assert batch.validate_crc()
        records = list(batch)
    return {
        "keys": [r.key for r in records], "values": [r.value for r in records],
        "headers": [[{"key": k, "value": v} for k, v in r.headers] or None for r in records],
        "timestamps": [r.timestamp if r.timestamp >= 0 else None for r in records],
        "partitions": [partition] * len(records),
        "producer": (batch.producer_id, batch.producer_epoch, batch.base_sequence),
        "transactional": batch.is_transactional,
    }


def decoded(produced: batches.ProducedBatch) -> dict[str, Any]:
    records = produced.records
    if isinstance(records, batches.RecordColumns):
        columns = {"keys": records.keys, "values": records.values,
                   "headers": records.headers or [None] * len(records), "timestamps": records.timestamps,
                   "partitions": records.partitions}
    else:
        columns = {"keys": records.column("key").to_pylist(), "values": records.column("value").to_pylist(),
                   "headers": records.column("headers").to_pylist(),
                   "timestamps": records.column("timestamp").to_pylist(),
                   "partitions": records.column("partition").to_pylist()}
    return {**columns, "producer": (produced.producer_id, produced.producer_epoch, produced.base_sequence),
            "transactional": produced.transactional}


@pytest.mark.parametrize("name,form", WAYS)
@SETTINGS
@given(shape=batch_st)
def test_a_produced_batch_decodes_as_kafka_python_reads_it(name: str, form: str, shape: dict[str, Any]) -> None:
    data = kafka_python_batch(shape)
    expected = read_by_kafka_python(data, partition=3)
    with using(IMPLEMENTATIONS[name], form):
        (produced,) = batches.decode_produce(data, partition=3)
    assert isinstance(produced.records, batches.RecordColumns) == (form == "lists")
    assert decoded(produced) == expected
    assert produced.file_table().num_rows == len(shape["records"])  # the form the writer (and transactions) take
    if shape["log_append_time"]:  # every record at the batch's max timestamp, as Kafka's readers see them
        assert len(set(expected["timestamps"])) == 1


@pytest.mark.parametrize("name,form", WAYS)
@SETTINGS
@given(shapes=st.lists(batch_st, min_size=2, max_size=4))
def test_several_batches_in_one_partition_decode_in_order(name: str, form: str,
                                                          shapes: list[dict[str, Any]]) -> None:
    datas = [kafka_python_batch(shape) for shape in shapes]
    with using(IMPLEMENTATIONS[name], form):
        produced = batches.decode_produce(b"".join(datas), partition=0)
    assert [decoded(p) for p in produced] == [read_by_kafka_python(d) for d in datas]


def test_a_control_batch_is_refused_as_a_produce() -> None:
    data = bytearray(kafka_python_batch({"records": [{"key": b"\x00\x00\x00\x01", "value": b"\x00" * 6,
                                                      "headers": [], "timestamp": 1}], "codec": 0,
                                         "producer": (5, 0, 0), "transactional": True, "log_append_time": False}))
    set_attributes(data, struct.unpack_from(">h", data, 21)[0] | 0x20)
    assert DefaultRecordBatch(bytes(data)).is_control_batch
    with pytest.raises(KafkaProtocolError) as refused:
        batches.decode_produce(bytes(data), 0)
    assert refused.value.code == CODES["INVALID_RECORD"]


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_an_unknown_codec_is_refused(codec: int) -> None:
    data = bytearray(kafka_python_batch({"records": [{"key": None, "value": b"v", "headers": [], "timestamp": 1}],
                                         "codec": 0, "producer": (-1, -1, -1), "transactional": False,
                                         "log_append_time": False}))
    set_attributes(data, codec)
    with pytest.raises(KafkaProtocolError) as refused:
        batches.decode_produce(bytes(data), 0)
    assert refused.value.code == CODES["UNSUPPORTED_COMPRESSION_TYPE"]


def test_a_header_key_that_is_not_utf8_is_corrupt() -> None:
    data = bytearray(kafka_python_batch({"records": [{"key": None, "value": b"v", "headers": [("ab", b"x")],
                                                      "timestamp": 1}], "codec": 0, "producer": (-1, -1, -1),
                                         "transactional": False, "log_append_time": False}))
    at = bytes(data).index(b"ab", batches.HEADER.size)
    data[at:at + 2] = b"\xff\xfe"
    set_attributes(data, 0)  # the CRC again: the batch is whole, its record is not
    for name, form in WAYS:
        with using(IMPLEMENTATIONS[name], form), pytest.raises(KafkaProtocolError) as refused:
            batches.decode_produce(bytes(data), 0)
        assert refused.value.code == CODES["CORRUPT_MESSAGE"]


@SETTINGS
@given(shape=batch_st, at=st.integers(0, 10_000), byte=st.integers(0, 255), cut=st.integers(0, 40))
def test_corrupt_records_are_refused_alike_by_both_implementations(shape: dict[str, Any], at: int, byte: int,
                                                                   cut: int) -> None:
    """Records damaged under a good CRC (a byte changed, the payload cut short): the compiled codec and its
    twin, to Arrow and to lists, agree, record for record or error for error, and nothing but CORRUPT_MESSAGE
    comes out of a malformed payload."""
    shape = {**shape, "codec": 0}
    data = bytearray(kafka_python_batch(shape))
    payload_at = batches.HEADER.size
    data[payload_at + at % (len(data) - payload_at)] = byte
    if cut:
        del data[max(len(data) - cut, payload_at):]
        struct.pack_into(">i", data, 8, len(data) - 12)
    set_attributes(data, struct.unpack_from(">h", data, 21)[0])
    outcomes = []
    for name, form in WAYS:
        try:
            with using(IMPLEMENTATIONS[name], form):
                outcomes.append([decoded(p) for p in batches.decode_produce(bytes(data), 0)])
        except KafkaProtocolError as exc:
            assert exc.code == CODES["CORRUPT_MESSAGE"], exc
            outcomes.append(exc.code)
    assert all(outcome == outcomes[0] for outcome in outcomes), outcomes


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
@SETTINGS
@given(payload=st.binary(max_size=200), count=st.integers(-2, 40))
def test_any_bytes_decode_or_raise_value_error(name: str, payload: bytes, count: int) -> None:
    try:
        records = record_codec.decode(payload, count, IMPLEMENTATIONS[name])
    except ValueError:
        return
    assert len(records) == len(records.keys) == len(records.values) == len(records.headers) == count
    records.headers.validate(full=True)


@pytest.mark.parametrize("data", [
    b"\x00" * 11,  # shorter than an offset and a length: no batch
    struct.pack(">qi", 0, 3) + b"\x02" * 3,  # below the smallest message
    struct.pack(">qi", 0, -5) + b"\x00" * 30,  # a negative length
    struct.pack(">qi", 0, 20) + b"\x00\x00\x00\x00\x02" + b"\x00" * 15,  # magic 2, shorter than its header
])
def test_bad_framing_is_corrupt(data: bytes) -> None:
    with pytest.raises(KafkaProtocolError) as refused:
        batches.decode_produce(data, 0)
    assert refused.value.code == CODES["CORRUPT_MESSAGE"]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_payload_its_codec_cannot_decompress_is_corrupt(codec: int) -> None:
    data = bytearray(kafka_python_batch({"records": [{"key": None, "value": b"v" * 500, "headers": [],
                                                      "timestamp": 1}], "codec": codec, "producer": (-1, -1, -1),
                                         "transactional": False, "log_append_time": False}))
    data[batches.HEADER.size:] = b"\x07" * (len(data) - batches.HEADER.size)
    set_attributes(data, codec)
    with pytest.raises(KafkaProtocolError) as refused:
        batches.decode_produce(bytes(data), 0)
    assert refused.value.code == CODES["CORRUPT_MESSAGE"]


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
@SETTINGS
@given(data=st.binary(max_size=3000), start=st.integers(0, 9))
def test_crc32c_is_kafka_python_s(name: str, data: bytes, start: int) -> None:
    """Any length, any alignment (a batch's CRC starts 21 bytes in): the processor's instruction where the
    compiled module has it, aiokafka's table elsewhere."""
    view = memoryview(data)[min(start, len(data)):]
    assert record_codec.crc32c(view, IMPLEMENTATIONS[name]) == kafka_default.calc_crc32c(bytes(view))


@pytest.mark.parametrize("magic", [0, 1])
@SETTINGS
@given(records=st.lists(record_st, min_size=1, max_size=20), codec=st.sampled_from([0, 1, 2, 3]))
def test_an_old_producer_s_message_set_still_decodes(magic: int, records: list[dict[str, Any]], codec: int) -> None:
    """Produce v0-v2 (legacy_messages.py, kept as it was): kafka-python's message set of magic 0 or 1, any
    codec it has, read by decode_produce as kafka-python reads it (magic 0 has no timestamps)."""
    assume(magic == 1 or codec != 3)  # 0.8's lz4 frame: kafka-python writes it with a package lakelog lacks
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

    with kafka_python_codecs(), mock.patch.multiple(
            "kafka.record.legacy_records", snappy_encode=aio_codecs.snappy_encode,
            snappy_decode=aio_codecs.snappy_decode, lz4_encode=aio_codecs.lz4_encode,
            lz4_decode=aio_codecs.lz4_decode):
        builder = LegacyRecordBatchBuilder(magic, codec, batch_size=1 << 24)
        for i, record in enumerate(records):
            builder.append(i, timestamp=max(record["timestamp"], 0), key=record["key"], value=record["value"])
        data = bytes(builder.build())
        read, memory = [], MemoryRecords(data)
        while (batch := memory.next_batch()) is not None:
            read.extend((r.key, r.value, r.timestamp if magic else None) for r in batch)
    (produced,) = batches.decode_produce(data, partition=1, version=2)
    columns = produced.records
    assert isinstance(columns, batches.RecordColumns) and not produced.idempotent
    assert list(zip(columns.keys, columns.values, columns.timestamps)) == read
