"""ingest_api.codec: bodies to Arrow (JSON, NDJSON, Arrow IPC), strictly; Idempotency-Keys to producers."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest

from lakelog.ingest_api.codec import parse_arrow_body, parse_json_body, parse_ndjson_body, producer_batch
from lakelog.ingest_api.errors import MalformedRequest, SchemaViolation
from lakelog.platform.records import IDEMPOTENCY_BASE


def arrow(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def test_json_records_to_columns_of_bytes() -> None:
    parsed = parse_json_body(b'{"records": [{"key": "k", "value": "v\xc3\xa9", "partition": 1}, {"value": null}]}')
    assert parsed.records.keys == [b"k", None]
    assert parsed.records.values == ["v\u00e9".encode(), None]
    assert parsed.records.partitions == [1, None]
    assert parsed.records.timestamps is None and parsed.records.headers is None


def test_a_lone_surrogate_is_refused_as_malformed_json() -> None:
    with pytest.raises(MalformedRequest, match="malformed JSON: no low surrogate"):
        parse_json_body(b'{"records": [{"value": "\\ud800"}]}')


@pytest.mark.parametrize("body,error,message", [
    (b'{"records": [{"value": "x", "partition": true}]}', SchemaViolation, "partition must be an integer"),
    (b'{"records": [{"value": "x", "timestamp": 1.5}]}', SchemaViolation, "timestamp must be an integer"),
    (b'{"records": [{"value": 5}]}', SchemaViolation, "must be a string"),
    (b'{"records": []}', SchemaViolation, "non-empty list"),
    (b'{"records": [', MalformedRequest, "malformed JSON"),
])
def test_json_shapes_are_strict(body: bytes, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        parse_json_body(body)


def test_ndjson_with_formats() -> None:
    parsed = parse_ndjson_body(b'{"value": "aGk="}\n\n{"value": "eW8="}\n', "string", "base64")
    assert parsed.records.values == [b"hi", b"yo"]
    with pytest.raises(MalformedRequest, match="line 2"):
        parse_ndjson_body(b'{"value": "a"}\n{oops\n', "string", "string")


def test_one_arrow_stream_and_nothing_after_it() -> None:
    body = arrow(pa.table({"value": [b"a", b"b"]}))
    assert parse_arrow_body(body).records.num_rows == 2
    with pytest.raises(MalformedRequest, match="7 bytes after the end of the Arrow stream"):
        parse_arrow_body(body + b"garbage")
    with pytest.raises(MalformedRequest, match="not an Arrow IPC stream"):
        parse_arrow_body(b"nope")


def test_idempotency_keys_and_producer_fields() -> None:
    keyed = producer_batch({}, "order-1")
    assert keyed is not None and keyed.producer_id >= IDEMPOTENCY_BASE
    assert producer_batch({}, None) is None
    with pytest.raises(SchemaViolation, match="either an Idempotency-Key"):
        producer_batch({"producer_id": 1, "producer_epoch": 0, "sequence": 0}, "k")
    with pytest.raises(SchemaViolation, match="missing"):
        producer_batch({"producer_id": 1}, None)
    with pytest.raises(SchemaViolation, match="producer_id must be an integer between 0"):
        producer_batch({"producer_id": IDEMPOTENCY_BASE, "producer_epoch": 0, "sequence": 0}, None)
