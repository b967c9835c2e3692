"""Confluent wire-format values decoded into Arrow: generated Avro record schemas and JSON Schema documents
with generated values round-trip (encoded as a serializer would, decoded into the mapped struct, equal)."""

from __future__ import annotations

import datetime
import decimal
import io
import itertools
import json

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from lakelog.platform.schema_registry.arrow_types import NotMappable, merged
from lakelog.platform.schema_registry.arrow_values import conformed, decode_values, decoder_of

UTC = datetime.timezone.utc
PRIMITIVES = ["boolean", "int", "long", "float", "double", "bytes", "string"]
FIELD_NAMES = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True), min_size=1, max_size=4, unique=True)


def wire(schema_id: int, payload: bytes) -> bytes:
    return b"\0" + schema_id.to_bytes(4, "big") + payload


def avro_bytes(schema: dict, datum: object) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return out.getvalue()


# ---- Avro schemas and their data -------------------------------------------------------------------------


@st.composite
def avro_schemas(draw, names=None, depth=0):
    """A schema of a value (named types uniquely named through `names`, a counter)."""
    names = names if names is not None else itertools.count()
    leaves = ["prim", "enum", "fixed", "date", "ts-millis", "ts-micros", "decimal"]
    kinds = leaves + (["array", "map", "record", "nullable", "union"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "prim":
        return draw(st.sampled_from(PRIMITIVES))
    if kind == "enum":
        symbols = draw(st.lists(st.from_regex(r"[A-Z][A-Z0-9]{0,4}", fullmatch=True), min_size=1, max_size=4,
                                unique=True))
        return {"type": "enum", "name": f"E{next(names)}", "symbols": symbols}
    if kind == "fixed":
        return {"type": "fixed", "name": f"F{next(names)}", "size": draw(st.integers(0, 6))}
    if kind == "date":
        return {"type": "int", "logicalType": "date"}
    if kind in ("ts-millis", "ts-micros"):
        return {"type": "long", "logicalType": "timestamp-" + kind[3:]}
    if kind == "decimal":
        precision = draw(st.integers(1, 20))
        return {"type": "bytes", "logicalType": "decimal", "precision": precision,
                "scale": draw(st.integers(0, precision))}
    if kind == "array":
        return {"type": "array", "items": draw(avro_schemas(names, depth + 1))}
    if kind == "map":
        return {"type": "map", "values": draw(avro_schemas(names, depth + 1))}
    if kind == "record":
        return draw(avro_records(names, depth + 1))
    if kind == "nullable":
        return ["null", draw(avro_schemas(names, depth + 1))]
    return ["null", "int", "string"]


@st.composite
def avro_records(draw, names=None, depth=0):
    names = names if names is not None else itertools.count()
    fields = [{"name": n, "type": draw(avro_schemas(names, depth))} for n in draw(FIELD_NAMES)]
    return {"type": "record", "name": f"R{next(names)}", "fields": fields}


@st.composite
def avro_data(draw, schema):
    """(the datum to write, the value expected in Arrow's `to_pylist`)."""
    if isinstance(schema, list):
        if schema == ["null", "int", "string"]:
            branch = draw(st.sampled_from([None, 0, 1]))
            if branch is None:
                return None, None
            value = draw(st.integers(-2**31, 2**31 - 1) if branch == 0 else st.text(max_size=5))
            return value, {"member0": value if branch == 0 else None, "member1": value if branch == 1 else None}
        if draw(st.booleans()):
            return None, None
        return draw(avro_data(schema[1]))
    if isinstance(schema, str):
        strategy = {
            "boolean": st.booleans(), "int": st.integers(-2**31, 2**31 - 1), "long": st.integers(-2**63, 2**63 - 1),
            "float": st.floats(width=32, allow_nan=False), "double": st.floats(allow_nan=False),
            "bytes": st.binary(max_size=8), "string": st.text(max_size=8),
        }[schema]
        value = draw(strategy)
        return value, value
    kind, logical = schema["type"], schema.get("logicalType")
    if logical == "date":
        value = draw(st.dates())
        return value, value
    if logical == "timestamp-millis" or logical == "timestamp-micros":
        value = draw(st.datetimes(datetime.datetime(1900, 1, 1), datetime.datetime(2200, 1, 1), timezones=st.just(UTC)))
        if logical == "timestamp-millis":
            value = value.replace(microsecond=value.microsecond // 1000 * 1000)
        return value, value
    if logical == "decimal":
        precision, scale = schema["precision"], schema["scale"]
        bound = decimal.Decimal(10) ** (precision - scale) - decimal.Decimal(10) ** -scale
        value = draw(st.decimals(-bound, bound, places=scale, allow_nan=False, allow_infinity=False))
        return value, value
    if kind == "enum":
        value = draw(st.sampled_from(schema["symbols"]))
        return value, value
    if kind == "fixed":
        value = draw(st.binary(min_size=schema["size"], max_size=schema["size"]))
        return value, value
    if kind == "array":
        pairs = draw(st.lists(avro_data(schema["items"]), max_size=3))
        return [p[0] for p in pairs], [p[1] for p in pairs]
    if kind == "map":
        keys = draw(st.lists(st.text(max_size=4), max_size=3, unique=True))
        pairs = [draw(avro_data(schema["values"])) for _ in keys]
        return {k: p[0] for k, p in zip(keys, pairs)}, [(k, p[1]) for k, p in zip(keys, pairs)]
    written, expected = {}, {}
    for field in schema["fields"]:
        written[field["name"]], expected[field["name"]] = draw(avro_data(field["type"]))
    return written, expected


@st.composite
def avro_cases(draw):
    schema = draw(avro_records())
    return schema, draw(st.lists(avro_data(schema), min_size=1, max_size=4))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(avro_cases())
def test_avro_records_round_trip(case):
    schema, data = case
    decoder = decoder_of(7, "AVRO", json.dumps(schema))
    values = [wire(7, avro_bytes(schema, written)) for written, _ in data]
    column = decode_values(values, {7: decoder}.get, decoder.type)
    assert column.type == decoder.type
    assert column.null_count == 0
    assert column.to_pylist() == [expected for _, expected in data]


@given(avro_cases(), st.lists(st.sampled_from(["null", "plain", "unknown-id", "truncated", "short"]), min_size=1))
@settings(max_examples=50, deadline=None)
def test_values_not_decodable_are_null_and_the_rest_decode(case, kinds):
    schema, data = case
    decoder = decoder_of(7, "AVRO", json.dumps(schema))
    good = wire(7, avro_bytes(schema, data[0][0]))
    bad = {"null": None, "plain": b"{\"a\": 1}", "unknown-id": wire(8, good[5:]), "short": b"\0\0\0",
           "truncated": good[:5] + b"\xff" * 3}
    column = decode_values([bad[k] for k in kinds] + [good], {7: decoder}.get, decoder.type)
    assert column.to_pylist()[-1] == data[0][1]
    assert column.to_pylist()[:-1] == [None] * len(kinds) or "truncated" in kinds  # a truncation may decode


# ---- JSON Schema documents and their data ----------------------------------------------------------------

JSON_LEAVES = {"integer": st.integers(-2**63, 2**63 - 1), "number": st.floats(allow_nan=False, allow_infinity=False),
               "string": st.text(max_size=6), "boolean": st.booleans()}


@st.composite
def json_schemas(draw, depth=0):
    kinds = list(JSON_LEAVES) + (["object", "array", "any"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "object":
        return {"type": "object", "properties": {n: draw(json_schemas(depth + 1)) for n in draw(FIELD_NAMES)}}
    if kind == "array":
        return {"type": "array", "items": draw(json_schemas(depth + 1))}
    if kind == "any":
        return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    return {"type": kind}


@st.composite
def json_data(draw, schema):
    if "oneOf" in schema:
        value = draw(st.one_of(st.text(max_size=4), st.integers()))
        return value, json.dumps(value, separators=(",", ":"))
    kind = schema["type"]
    if kind == "object":
        pairs = {n: draw(json_data(s)) for n, s in schema["properties"].items()}
        return {n: p[0] for n, p in pairs.items()}, {n: p[1] for n, p in pairs.items()}
    if kind == "array":
        pairs = draw(st.lists(json_data(schema["items"]), max_size=3))
        return [p[0] for p in pairs], [p[1] for p in pairs]
    value = draw(JSON_LEAVES[kind])
    return value, value


@st.composite
def json_cases(draw):
    schema = {"type": "object", "properties": {n: draw(json_schemas(1)) for n in draw(FIELD_NAMES)}}
    return schema, draw(st.lists(json_data(schema), min_size=1, max_size=4))


@settings(max_examples=150, deadline=None)
@given(json_cases())
def test_json_documents_round_trip(case):
    schema, data = case
    decoder = decoder_of(3, "JSON", json.dumps(schema))
    values = [wire(3, json.dumps(doc).encode()) for doc, _ in data]
    column = decode_values(values, {3: decoder}.get, decoder.type)
    assert column.to_pylist() == [expected for _, expected in data]


def test_json_field_of_the_wrong_type_is_null_alone():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}}
    decoder = decoder_of(3, "JSON", json.dumps(schema))
    column = decode_values([wire(3, b'{"n": "x", "s": "ok"}'), wire(3, b"not json")], {3: decoder}.get, decoder.type)
    assert column.to_pylist() == [{"n": None, "s": "ok"}, None]


def test_a_value_that_is_no_record_is_a_struct_of_one_field():
    decoder = decoder_of(1, "AVRO", json.dumps("long"))
    assert decoder.type == pa.struct([pa.field("value", pa.int64())])
    assert decode_values([wire(1, avro_bytes("long", 5))], {1: decoder}.get, decoder.type).to_pylist() == [{"value": 5}]


def test_recursive_protobuf_is_refused_clearly():
    with pytest.raises(NotMappable, match="recursive Protobuf message M"):
        decoder_of(1, "PROTOBUF", 'syntax = "proto3"; message M { int32 a = 1; M child = 2; }')


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(avro_cases(), st.integers(0, 3))
def test_a_column_conformed_to_an_evolved_type_keeps_its_values(case, start):
    """A file's column read as the table's later type: the same values, the fields added since null."""
    schema, data = case
    decoder = decoder_of(7, "AVRO", json.dumps(schema))
    column = decode_values([wire(7, avro_bytes(schema, w)) for w, _ in data], {7: decoder}.get, decoder.type)
    evolved = merged(decoder.type, pa.struct([pa.field("added_later", pa.struct([pa.field("x", pa.int64())]))]))
    read = conformed(column.slice(min(start, len(data) - 1)), evolved)
    assert read.type == evolved
    assert read.to_pylist() == [{**e, "added_later": None} for _, e in data][min(start, len(data) - 1):]
