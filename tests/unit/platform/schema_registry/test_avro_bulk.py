"""avro_bulk.py: Avro payloads read together agree with fastavro read one by one. A payload the bulk reader
vouches for is one fastavro reads, every byte used, to the same values; generated schemas, values, and
payloads damaged (cut, lengthened, bytes changed) as any producer may send them. The callers give the same
answers with and without it: record validation's errors, the typed column's values."""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import re
import tempfile
from typing import Iterator

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from lakelog.platform.catalog.topic_config import parse_topic_config
from lakelog.platform.schema_registry import SchemaRegistry
from lakelog.platform.schema_registry import arrow_values, validation
from lakelog.platform.schema_registry.arrow_values import (
    common_schema_id,
    decode_bulk,
    decode_values,
    decoder_of,
)
from lakelog.platform.schema_registry.avro_bulk import compile_reader
from lakelog.platform.schema_registry.validation import RecordValidator
from lakelog.platform.schema_registry.wire_format import framed
from lakelog.platform.storage import Storage

LEAVES = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]
FIELD_NAMES = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True), min_size=1, max_size=5, unique=True)
TOPICS = itertools.count()
CONFIG = parse_topic_config({"confluent.value.schema.validation": "true"})


@pytest.fixture(autouse=True, scope="module")
def bulk_from_one_value() -> Iterator[None]:
    """The bulk readers used from one value on (not BULK_MIN_VALUES): the generated calls are small."""
    saved = arrow_values.BULK_MIN_VALUES
    arrow_values.BULK_MIN_VALUES = validation.BULK_MIN_VALUES = 1
    yield
    arrow_values.BULK_MIN_VALUES = validation.BULK_MIN_VALUES = saved


@st.composite
def schemas(draw, names, depth=0):
    kind = draw(st.sampled_from(["leaf", "leaf", "enum", "fixed", "nullable", "record", "other"]
                                if depth < 2 else ["leaf", "enum", "fixed"]))
    if kind == "leaf":
        return draw(st.sampled_from(LEAVES))
    if kind == "enum":
        symbols = draw(st.lists(st.from_regex(r"[A-Z][A-Z0-9]{0,3}", fullmatch=True), min_size=1, max_size=4,
                                unique=True))
        return {"type": "enum", "name": f"E{next(names)}", "symbols": symbols}
    if kind == "fixed":
        return {"type": "fixed", "name": f"F{next(names)}", "size": draw(st.integers(0, 5))}
    if kind == "nullable":
        inner = draw(schemas(names, depth + 1).filter(lambda s: s != "null"))
        return ["null", inner] if draw(st.booleans()) else [inner, "null"]
    if kind == "record":
        return draw(records(names, depth + 1))
    return draw(st.sampled_from([{"type": "array", "items": "long"}, ["null", "int", "string"],
                                 {"type": "int", "logicalType": "date"}]))  # read one by one


@st.composite
def records(draw, names=None, depth=0):
    names = names if names is not None else itertools.count()
    return {"type": "record", "name": f"R{next(names)}",
            "fields": [{"name": n, "type": draw(schemas(names, depth))} for n in draw(FIELD_NAMES)]}


def datum(draw, schema):
    if isinstance(schema, list):
        if schema == ["null", "int", "string"]:
            return draw(st.one_of(st.none(), st.integers(-5, 5), st.text(max_size=3)))
        inner = schema[0] if schema[1] == "null" else schema[1]
        return None if draw(st.booleans()) else datum(draw, inner)
    if isinstance(schema, str):
        return draw({
            "null": st.none(), "boolean": st.booleans(), "int": st.integers(-2**31, 2**31 - 1),
            "long": st.integers(-2**63, 2**63 - 1), "float": st.floats(width=32, allow_nan=False),
            "double": st.floats(allow_nan=False), "bytes": st.binary(max_size=6), "string": st.text(max_size=6),
        }[schema])
    kind = schema["type"]
    if schema.get("logicalType") == "date":
        return draw(st.dates())
    if kind == "enum":
        return draw(st.sampled_from(schema["symbols"]))
    if kind == "fixed":
        return draw(st.binary(min_size=schema["size"], max_size=schema["size"]))
    if kind == "array":
        return draw(st.lists(st.integers(-2**63, 2**63 - 1), max_size=3))
    return {f["name"]: datum(draw, f["type"]) for f in schema["fields"]}


@st.composite
def cases(draw):
    """A record schema and payloads: written by fastavro, some damaged."""
    schema = draw(records())
    parsed = fastavro.parse_schema(schema)
    payloads = []
    for _ in range(draw(st.integers(1, 6))):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, datum(draw, schema))
        payload = out.getvalue()
        damage = draw(st.sampled_from(["none", "none", "cut", "extra", "byte", "garbage"]))
        if damage == "cut" and payload:
            payload = payload[:draw(st.integers(0, len(payload) - 1))]
        elif damage == "extra":
            payload += draw(st.binary(min_size=1, max_size=3))
        elif damage == "byte" and payload:
            at = draw(st.integers(0, len(payload) - 1))
            payload = payload[:at] + bytes([draw(st.integers(0, 255))]) + payload[at + 1:]
        elif damage == "garbage":
            payload = draw(st.binary(max_size=24))
        payloads.append(payload)
    return schema, payloads


def errors(found: list) -> list[tuple[int, str]]:
    """Record errors without the addresses of objects fastavro names in its messages."""
    return [(e.index, re.sub(r"0x[0-9a-f]+", "0x", e.message)) for e in found]


def same(a: object, b: object) -> bool:
    """Equal, NaN equal to NaN."""
    return repr(a) == repr(b)


def one_by_one(parsed, payload: bytes):
    """fastavro's reading: (True, value) when it reads the payload, every byte used; (False, None) else."""
    source = io.BytesIO(payload)
    try:
        value = fastavro.schemaless_reader(source, parsed, None)
    except Exception:
        return False, None
    return source.tell() == len(payload), value


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_vouched_payloads_are_fastavros(case) -> None:
    schema, payloads = case
    names: dict = {}
    parsed = fastavro.parse_schema(schema, named_schemas=names)
    reader = compile_reader(parsed, names)
    if reader is None:
        return
    column, doubtful = reader.read(payloads)
    decoder = decoder_of(1, "AVRO", json.dumps(schema))
    for i, payload in enumerate(payloads):
        if i in doubtful:
            assert column[i].as_py() is None
            continue
        read, _ = one_by_one(parsed, payload)
        assert read, f"payload {payload!r} vouched for, fastavro refuses it"
        assert same(column[i].as_py(), pa.array([decoder.decode(payload)], decoder.type)[0].as_py())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_decode_values_with_and_without_bulk(case) -> None:
    schema, payloads = case
    decoder = decoder_of(7, "AVRO", json.dumps(schema))
    plain = dataclasses.replace(decoder, bulk=None)
    values = [framed(7, p) for p in payloads] + [None, b"not framed"]
    expected = decode_values(values, {7: plain}.get, plain.type)
    assert same(decode_values(values, {7: decoder}.get, decoder.type).to_pylist(), expected.to_pylist())
    array = pa.array([framed(7, p) for p in payloads], pa.binary())
    assert common_schema_id(array) == 7
    whole = decode_bulk(array, decoder, decoder.type)
    if whole is not None:
        assert same(whole.to_pylist(), decode_values(array.to_pylist(), {7: plain}.get, plain.type).to_pylist())


@pytest.fixture(scope="module")
def registry() -> SchemaRegistry:
    return SchemaRegistry(Storage.open(tempfile.mkdtemp(prefix="lakelog-avro-bulk-")))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(cases())
def test_validation_with_and_without_bulk(registry: SchemaRegistry, case) -> None:
    schema, payloads = case
    topic = f"t{next(TOPICS)}"
    schema_id = registry.register(f"{topic}-value", json.dumps(schema))
    bulk, plain = RecordValidator(registry), RecordValidator(registry)
    parsed = plain.parsed(schema_id)
    plain._parsed[schema_id] = dataclasses.replace(parsed, bulk=None)
    for values in ([framed(schema_id, p) for p in payloads], [framed(schema_id, p) for p in payloads] + [b"x", None]):
        keys = [None] * len(values)
        assert errors(bulk.check(topic, CONFIG, keys, values)) == errors(plain.check(topic, CONFIG, keys, values))


def test_not_read_in_bulk() -> None:
    unread = [{"type": "array", "items": "int"}, ["null", "int", "string"],
              {"type": "long", "logicalType": "timestamp-millis"}]
    for schema in [*({"type": "record", "name": "R", "fields": [{"name": "a", "type": t}]} for t in unread), "long"]:
        assert compile_reader(fastavro.parse_schema(schema), {}) is None
    assert decoder_of(1, "AVRO", json.dumps("long")).bulk is None


def test_one_schema_id_or_none() -> None:
    assert common_schema_id(pa.array([framed(3, b"a"), framed(3, b"")], pa.binary())) == 3
    assert common_schema_id(pa.array([framed(3, b"a"), framed(4, b"a")], pa.binary())) is None
    assert common_schema_id(pa.array([framed(3, b"a"), None], pa.binary())) is None
    assert common_schema_id(pa.array([framed(3, b"a"), b"\1\0\0\0\3"], pa.binary())) is None
    assert common_schema_id(pa.array([framed(3, b"a"), b"\0"], pa.binary())) is None
    assert common_schema_id(pa.array([framed(3, b"a")] * 3, pa.binary())[1:]) == 3
