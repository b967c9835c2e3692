"""Registered schemas as Arrow types (as Spark's from_avro maps Avro), and the merge of a table's type."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from lakelog.platform.schema_registry import avro_compat
from lakelog.platform.schema_registry.arrow_types import (
    TIMESTAMP, NotMappable, TypeConflict, avro_type, json_type, merged, nullable_everywhere,
)


def of_avro(fields: list[dict]) -> pa.DataType:
    parsed = avro_compat.parse(json.dumps({"type": "record", "name": "R", "namespace": "n", "fields": fields}))
    return avro_type(parsed.schema, parsed.names)


def test_avro_maps_as_spark_from_avro():
    kind = of_avro([
        {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"}, {"name": "l", "type": "long"},
        {"name": "f", "type": "float"}, {"name": "d", "type": "double"}, {"name": "by", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 4}},
        {"name": "again", "type": "F"},
        {"name": "o", "type": ["null", "string"]},
        {"name": "il", "type": ["int", "long"]}, {"name": "fd", "type": ["null", "float", "double"]},
        {"name": "u", "type": ["int", "string"]},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "fdec", "type": {"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal",
                                  "precision": 18, "scale": 0}},
        {"name": "a", "type": {"type": "array", "items": ["null", "long"]}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
        {"name": "r", "type": ["null", {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]}]},
    ])
    expected = pa.struct([
        pa.field("b", pa.bool_(), False), pa.field("i", pa.int32(), False), pa.field("l", pa.int64(), False),
        pa.field("f", pa.float32(), False), pa.field("d", pa.float64(), False), pa.field("by", pa.binary(), False),
        pa.field("s", pa.string(), False), pa.field("e", pa.string(), False), pa.field("fx", pa.binary(), False),
        pa.field("again", pa.binary(), False), pa.field("o", pa.string(), True), pa.field("il", pa.int64(), False),
        pa.field("fd", pa.float64(), True),
        pa.field("u", pa.struct([pa.field("member0", pa.int32()), pa.field("member1", pa.string())]), False),
        pa.field("day", pa.date32(), False), pa.field("ms", TIMESTAMP, False), pa.field("us", TIMESTAMP, False),
        pa.field("dec", pa.decimal128(10, 2), False), pa.field("fdec", pa.decimal128(18, 0), False),
        pa.field("a", pa.list_(pa.field("element", pa.int64(), True)), False),
        pa.field("m", pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.string(), False)), False),
        pa.field("r", pa.struct([pa.field("x", pa.int32(), False)]), True),
    ])
    assert kind == expected


def test_recursive_avro_is_refused():
    with pytest.raises(NotMappable, match="recursive"):
        of_avro([{"name": "next", "type": ["null", "n.R"]}])


def test_decimal_beyond_delta_is_refused():
    with pytest.raises(NotMappable, match="1..38"):
        of_avro([{"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 0}}])


def test_json_schema_maps_and_keeps_the_rest_as_json_text():
    kind = json_type({
        "type": "object", "$defs": {"P": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "properties": {"n": {"type": "integer"}, "s": {"type": ["string", "null"]}, "b": {"type": "boolean"},
                       "p": {"$ref": "#/$defs/P"}, "tags": {"type": "array", "items": {"type": "string"}},
                       "any": {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "free": {"type": "object"},
                       "remote": {"$ref": "other.json"}},
    })
    assert kind == pa.struct([
        pa.field("n", pa.int64()), pa.field("s", pa.string()), pa.field("b", pa.bool_()),
        pa.field("p", pa.struct([pa.field("x", pa.float64())])),
        pa.field("tags", pa.list_(pa.field("element", pa.string()))),
        pa.field("any", pa.string()), pa.field("free", pa.string()), pa.field("remote", pa.string()),
    ])


def test_merge_appends_new_fields_and_widens():
    old = pa.struct([pa.field("a", pa.int32()), pa.field("s", pa.struct([pa.field("x", pa.float32())]))])
    new = pa.struct([pa.field("c", pa.string()), pa.field("a", pa.int64()),
                     pa.field("s", pa.struct([pa.field("y", pa.bool_()), pa.field("x", pa.float64())]))])
    assert merged(old, new) == pa.struct([
        pa.field("a", pa.int64()), pa.field("s", pa.struct([pa.field("x", pa.float64()), pa.field("y", pa.bool_())])),
        pa.field("c", pa.string())])


def test_merge_refuses_what_delta_cannot_hold():
    with pytest.raises(TypeConflict, match="value_typed.a"):
        merged(pa.struct([pa.field("a", pa.int64())]), pa.struct([pa.field("a", pa.string())]))


leaf_types = st.sampled_from([pa.int32(), pa.int64(), pa.string(), pa.bool_(), pa.float64(), pa.date32()])
arrow_types = st.recursive(leaf_types, lambda inner: st.one_of(
    st.lists(st.tuples(st.sampled_from("abcde"), inner), min_size=1, max_size=4, unique_by=lambda p: p[0]).map(
        lambda pairs: pa.struct([pa.field(n, t) for n, t in pairs])),
    inner.map(lambda t: pa.list_(pa.field("element", t)))), max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(arrow_types, arrow_types)
def test_merge_holds_both_or_refuses(first, second):
    try:
        both = merged(first, second)
    except TypeConflict:
        return
    assert merged(both, first) == both  # the table's type already holds what was merged in
    assert merged(both, second) == both


def test_nullable_everywhere():
    kind = pa.struct([pa.field("m", pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.int32(), False)),
                               False)])
    relaxed = nullable_everywhere(kind)
    assert relaxed.field("m").nullable and relaxed.field("m").type.item_field.nullable
    assert not relaxed.field("m").type.key_field.nullable
