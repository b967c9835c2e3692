"""typed/fetch.py: fetched records' fields, decoded as the typed column decodes them (a real broker on a local
root), refused on an untyped topic, and rendered JSON-safe (property: every rendering is JSON, and reads back
into the same values)."""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json

import fastavro
import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from lakelog.platform import Broker, Record
from lakelog.platform.errors import InvalidRequest
from lakelog.platform.schema_registry.wire_format import framed
from lakelog.platform.typed.fetch import json_rows, typed_values

UTC = datetime.timezone.utc
V1 = {"type": "record", "name": "Payment", "fields": [
    {"name": "id", "type": "long"}, {"name": "raw", "type": "bytes"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "map", "values": "int"}}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "memo", "type": ["null", "string"], "default": None}]}


def avro(schema_id: int, schema: dict, datum: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return framed(schema_id, out.getvalue())


def test_fields_of_two_schema_versions_and_refusal_when_untyped(tmp_path) -> None:  # type: ignore[no-untyped-def]
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    with Broker(root=str(tmp_path)) as broker:
        broker.create_topic("payments", config={"confluent.value.schema.validation": "true"})
        broker.create_topic("plain")
        registry = broker.schema_registry()
        first = registry.register("payments-value", json.dumps(V1))
        second = registry.register("payments-value", json.dumps(V2))
        broker.produce("payments", [
            Record(avro(first, V1, {"id": 1, "raw": b"\x00\xff", "at": at, "tags": {"a": 1}})),
            Record(b"not framed"),
            Record(avro(second, V2, {"id": 2, "raw": b"", "at": at, "tags": {}, "memo": "refund"}))])
        fetched = broker.fetch("payments", 0, 0)
        rows = json_rows(typed_values(broker.topic_log("payments"), fetched.records))
        assert rows == [
            {"id": 1, "raw": "AP8=", "at": "2026-01-02T03:04:05.678000Z", "tags": {"a": 1}, "memo": None},
            None,
            {"id": 2, "raw": "", "at": "2026-01-02T03:04:05.678000Z", "tags": {}, "memo": "refund"}]
        assert list(rows[0]) == ["id", "raw", "at", "tags", "memo"]  # the schema's order, new fields last

        broker.produce("plain", [Record(b"x")])
        with pytest.raises(InvalidRequest, match="not typed"):
            typed_values(broker.topic_log("plain"), broker.fetch("plain", 0, 0).records)


def test_a_typed_topic_with_no_schema_seen_answers_null_fields(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Broker(root=str(tmp_path)) as broker:
        broker.create_topic("t", config={"confluent.value.schema.validation": "true"})
        empty = broker.fetch("t", 0, 0).records
        assert json_rows(typed_values(broker.topic_log("t"), empty)) == []


LEAVES = [
    (pa.int64(), st.integers(-2**63, 2**63 - 1), lambda v: v),
    (pa.float64(), st.floats(allow_nan=False, allow_infinity=False), lambda v: v),
    (pa.string(), st.text(), lambda v: v),
    (pa.bool_(), st.booleans(), lambda v: v),
    (pa.binary(), st.binary(max_size=20), lambda v: base64.b64decode(v)),
    (pa.timestamp("us", tz="UTC"), st.datetimes(min_value=datetime.datetime(1, 1, 1),
                                                max_value=datetime.datetime(9999, 12, 31), timezones=st.just(UTC)),
     lambda v: datetime.datetime.fromisoformat(v.replace("Z", "+00:00"))),
    (pa.date32(), st.dates(), datetime.date.fromisoformat),
    (pa.decimal128(10, 3), st.decimals(min_value=-10**6, max_value=10**6, places=3, allow_nan=False,
                                       allow_infinity=False), decimal.Decimal),
]


@st.composite
def typed_columns(draw):  # type: ignore[no-untyped-def]
    """A struct type of leaves, lists and maps of leaves, with rows of it; and how to read each field back."""
    fields, readers, makers = [], {}, {}
    for i in range(draw(st.integers(1, 4))):
        kind, values, read = draw(st.sampled_from(LEAVES))
        shape = draw(st.sampled_from(["leaf", "list", "map"]))
        name = f"f{i}"
        if shape == "list":
            kind, values, read = pa.list_(kind), st.lists(values, max_size=3), (lambda r: lambda v: [r(x) for x in v])(read)
        elif shape == "map":
            kind = pa.map_(pa.string(), kind)
            values = st.dictionaries(st.text(max_size=4), values, max_size=3)
            read = (lambda r: lambda v: {k: r(x) for k, x in v.items()})(read)
        fields.append(pa.field(name, kind))
        readers[name], makers[name] = read, st.none() | values
    rows = draw(st.lists(st.none() | st.fixed_dictionaries(makers), max_size=5))
    return pa.struct(fields), rows, readers


def as_arrow(row, kind):  # type: ignore[no-untyped-def]
    """A row as pa.array takes it (maps as lists of pairs)."""
    if row is None:
        return None
    return {f.name: (list(row[f.name].items()) if isinstance(row[f.name], dict) else row[f.name]) for f in kind}


@settings(max_examples=200, deadline=None)
@given(typed_columns())
def test_rendering_is_json_and_reads_back(column) -> None:  # type: ignore[no-untyped-def]
    kind, rows, readers = column
    array = pa.array([as_arrow(row, kind) for row in rows], type=kind)
    rendered = json_rows(array)
    assert orjson.loads(orjson.dumps(rendered)) == rendered  # JSON-safe, nothing lost in the text
    for row, out in zip(rows, rendered):
        if row is None:
            assert out is None
            continue
        assert list(out) == [f.name for f in kind]
        for name, value in row.items():
            assert (None if out[name] is None else readers[name](out[name])) == value
