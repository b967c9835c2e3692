"""Typed topics' record checks (validation.py), the wire format's frame (wire_format.py) and embedded JSON
(embedded_json.py), against a registry on a local root."""

from __future__ import annotations

import io
import json

import fastavro
import orjson
import pytest
from hypothesis import given, settings, strategies as st

from lakelog.platform.schema_registry import SchemaRegistry
from lakelog.platform.schema_registry.embedded_json import to_wire_format
from lakelog.platform.schema_registry.validation import RecordValidator
from lakelog.platform.schema_registry.wire_format import NotWireFormat, framed, schema_id_of, split_wire
from lakelog.platform.storage import Storage
from lakelog.platform.catalog.topic_config import parse_topic_config

AVRO = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                      {"name": "item", "type": "string"},
                                                      {"name": "note", "type": ["null", "string"], "default": None}]}
JSON_SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
               "required": ["id"]}
VALUES = parse_topic_config({"confluent.value.schema.validation": "true"})
KEYS = parse_topic_config({"confluent.key.schema.validation": True})


def avro(datum: dict, schema: dict = AVRO) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return out.getvalue()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> SchemaRegistry:
    registry = SchemaRegistry(Storage.open(str(tmp_path_factory.mktemp("root"))))
    registry.register("orders-value", json.dumps(AVRO))
    registry.register("docs-value", json.dumps(JSON_SCHEMA), "JSON")
    registry.register("protos-value", 'syntax = "proto3"; message M { int64 id = 1; }', "PROTOBUF")
    registry.register("orders-key", '"string"')
    return registry


@pytest.fixture()
def validator(registry: SchemaRegistry) -> RecordValidator:
    return RecordValidator(registry)


def ids(registry: SchemaRegistry) -> dict[str, int]:
    return {s: registry.version(s, "latest")["id"] for s in registry.subjects()}


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.binary(max_size=64))
def test_frame_round_trips(schema_id: int, payload: bytes) -> None:
    data = framed(schema_id, payload)
    assert schema_id_of(data) == schema_id
    found, rest = split_wire(data)
    assert (found, bytes(rest)) == (schema_id, payload)


@pytest.mark.parametrize("data,why", [(None, "null"), (b"\0\0\0", "too short"), (b"\x01\0\0\0\x01x", "magic byte 1")])
def test_not_wire_format(data: bytes | None, why: str) -> None:
    with pytest.raises(NotWireFormat, match=why):
        split_wire(data)
    assert schema_id_of(data) is None


def test_avro_values(validator: RecordValidator, registry: SchemaRegistry) -> None:
    sid = ids(registry)["orders-value"]
    good = framed(sid, avro({"id": 1, "item": "pen", "note": None}))
    values = [good, None, b"plain text", framed(sid, avro({"id": 1, "item": "pen"})[:-2]),
              good + b"x", framed(ids(registry)["docs-value"], b'{"id": 1}'), framed(9999, b"")]
    errors = validator.check("orders", VALUES, [None] * len(values), values)
    assert [e.index for e in errors] == [2, 3, 4, 5, 6]
    messages = [e.message for e in errors]
    assert "magic byte 112" in messages[0]
    assert "does not decode" in messages[1] and "(AVRO)" in messages[1]
    assert "1 bytes left" in messages[2]
    assert "not registered under subject 'orders-value'" in messages[3]
    assert "schema id 9999" in messages[4]
    assert all(m.startswith("value: ") for m in messages)


def test_keys_checked_only_when_configured(validator: RecordValidator, registry: SchemaRegistry) -> None:
    key = framed(ids(registry)["orders-key"], avro("k1", "string"))  # type: ignore[arg-type]
    assert validator.check("orders", KEYS, [key, None], [b"anything", b"at all"]) == []
    errors = validator.check("orders", KEYS, [b"raw key"], [b"anything"])
    assert [(e.index, e.message.split(":")[0]) for e in errors] == [(0, "key")]
    assert validator.check("orders", parse_topic_config({}), [b"raw"], [b"raw"]) == []


def test_json_schema_values(validator: RecordValidator, registry: SchemaRegistry) -> None:
    sid = ids(registry)["docs-value"]
    values = [framed(sid, b'{"id": 3, "item": "x"}'), framed(sid, b'{"item": "x"}'), framed(sid, b'{"id": "3"}'),
              framed(sid, b"{not json")]
    errors = validator.check("docs", VALUES, [None] * 4, values)
    assert [e.index for e in errors] == [1, 2, 3]
    assert "'id' is a required property" in errors[0].message
    assert "is not of type 'integer'" in errors[1].message and "$.id" in errors[1].message
    assert "(JSON)" in errors[2].message


def test_protobuf_values_parse_as_the_indexed_message(validator: RecordValidator, registry: SchemaRegistry) -> None:
    sid = ids(registry)["protos-value"]
    good = b"\x00" + bytes([0x08, 0x2A])  # message indexes [0], then field 1 (varint) = 42
    values = [framed(sid, good), framed(sid, b"\x00\xff any bytes"), framed(sid, b"\x02\x06" + good[1:]),
              framed(sid, b""), framed(ids(registry)["orders-value"], good), framed(sid, b"\x00")]
    errors = validator.check("protos", VALUES, [None] * len(values), values)
    assert [e.index for e in errors] == [1, 2, 3, 4]
    assert "(PROTOBUF)" in errors[0].message
    assert "message index [3]: the file has 1 message(s)" in errors[1].message
    assert "ends inside its message indexes" in errors[2].message
    assert "not registered under subject 'protos-value'" in errors[3].message


def test_a_schema_registered_on_another_node_is_found(tmp_path) -> None:
    root = str(tmp_path)
    here, there = SchemaRegistry(Storage.open(root)), SchemaRegistry(Storage.open(root))
    checker = RecordValidator(here)
    schema = {"type": "record", "name": "T", "fields": [{"name": "a", "type": "int"}]}
    sid = there.register("t-value", json.dumps(schema))
    assert here.cached_state().schemas == {}  # this node has not read it yet
    assert checker.check("t", VALUES, [None], [framed(sid, avro({"a": 1}, schema))]) == []


def test_deleted_versions_no_longer_validate(tmp_path) -> None:
    registry = SchemaRegistry(Storage.open(str(tmp_path)))
    checker = RecordValidator(registry)
    schema = {"type": "record", "name": "T", "fields": [{"name": "a", "type": "int"}]}
    sid = registry.register("t-value", json.dumps(schema))
    value = framed(sid, avro({"a": 1}, schema))
    assert checker.check("t", VALUES, [None], [value]) == []
    registry.delete_subject("t-value")
    assert "not registered" in checker.check("t", VALUES, [None], [value])[0].message


def test_embedded_json_avro(validator: RecordValidator, registry: SchemaRegistry) -> None:
    docs = [orjson.dumps({"id": 7, "item": "pen", "note": "n"}), None, orjson.dumps({"id": "x", "item": "pen"})]
    converted, problems = to_wire_format(validator, "orders-value", docs)
    sid = ids(registry)["orders-value"]
    assert schema_id_of(converted[0]) == sid
    assert fastavro.schemaless_reader(io.BytesIO(converted[0][5:]), fastavro.parse_schema(AVRO), None) == {
        "id": 7, "item": "pen", "note": "n"}
    assert converted[1] is None and converted[2] == docs[2]
    assert list(problems) == [2] and "does not convert" in problems[2]
    assert validator.check("orders", VALUES, [None, None], converted[:2]) == []


def test_embedded_json_schema(validator: RecordValidator, registry: SchemaRegistry) -> None:
    converted, problems = to_wire_format(validator, "docs-value", [b'{"id":1}', b'{"id":"1"}'])
    assert converted[0] == framed(ids(registry)["docs-value"], b'{"id":1}')
    assert list(problems) == [1]


def test_embedded_json_protobuf(validator: RecordValidator, registry: SchemaRegistry) -> None:
    converted, problems = to_wire_format(validator, "protos-value", [b'{"id": "42"}', b'{"nope": 1}', None])
    assert converted[0] == framed(ids(registry)["protos-value"], b"\x00" + bytes([0x08, 0x2A]))
    assert converted[2] is None and list(problems) == [1] and "nope" in problems[1]
    assert validator.check("protos", VALUES, [None], converted[:1]) == []
