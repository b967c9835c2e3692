"""Protobuf messages as Arrow types and values, as Spark's from_protobuf maps them (protobuf_types.py), through
the typed column's decoder (arrow_values.decoder_of) as a flush calls it."""

from __future__ import annotations

import base64
import datetime
import math

import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2
from hypothesis import HealthCheck, example, given, settings, strategies as st

from lakelog.platform.schema_registry.arrow_types import TIMESTAMP, NotMappable
from lakelog.platform.schema_registry.arrow_values import decode_values, decoder_of
from lakelog.platform.schema_registry.protobuf_schema import parse, write_indexes
from lakelog.platform.schema_registry.wire_format import framed

F = descriptor_pb2.FieldDescriptorProto
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
INT = pa.int32()
LONG = pa.int64()


def of(body: str, syntax: str = "proto3") -> pa.DataType:
    return decoder_of(1, "PROTOBUF", f'syntax = "{syntax}"; package p; import "google/protobuf/timestamp.proto"; '
                                     f'import "google/protobuf/duration.proto"; {body}').type


def test_protobuf_maps_as_spark_from_protobuf() -> None:
    kind = of("message M { int32 i = 1; sint32 si = 2; sfixed32 sf = 3; uint32 u = 4; fixed32 fx = 5; int64 l = 6; "
              "sint64 sl = 7; sfixed64 sfl = 8; uint64 ul = 9; fixed64 fxl = 10; float f = 11; double d = 12; "
              "bool b = 13; string s = 14; bytes by = 15; E e = 16; Inner inner = 17; repeated int64 r = 18; "
              "map<string, Inner> m = 19; google.protobuf.Timestamp t = 20; google.protobuf.Duration du = 21; "
              "Empty gone = 22; optional string o = 23; oneof pick { string a = 24; int64 bb = 25; } "
              "enum E { E0 = 0; E1 = 1; } message Inner { repeated string x = 1; } message Empty {} }")
    inner = pa.struct([pa.field("x", pa.list_(pa.field("element", pa.string())))])
    expected = pa.struct(
        [pa.field(n, INT) for n in ("i", "si", "sf", "u", "fx")] + [pa.field(n, LONG) for n in ("l", "sl", "sfl", "ul",
                                                                                                 "fxl")]
        + [pa.field("f", pa.float32()), pa.field("d", pa.float64()), pa.field("b", pa.bool_()),
           pa.field("s", pa.string()), pa.field("by", pa.binary()), pa.field("e", pa.string()),
           pa.field("inner", inner), pa.field("r", pa.list_(pa.field("element", LONG))),
           pa.field("m", pa.map_(pa.field("key", pa.string(), False), pa.field("value", inner))),
           pa.field("t", TIMESTAMP), pa.field("du", pa.struct([pa.field("seconds", LONG), pa.field("nanos", INT)])),
           pa.field("o", pa.string()), pa.field("a", pa.string()), pa.field("bb", LONG)])
    assert kind == expected  # Empty is dropped, as Spark drops it; Duration is its message (no Delta interval)


@pytest.mark.parametrize("body,why", [
    ("message M { int64 a = 1; M next = 2; }", "recursive Protobuf message p.M"),
    ("message M { repeated Node n = 1; } message Node { map<string, Node> children = 1; }", "recursive"),
    ("message M {}", "has no fields Delta can hold"),
])
def test_what_spark_refuses_is_refused(body: str, why: str) -> None:
    with pytest.raises(NotMappable, match=why):
        of(body)


def test_the_column_holds_the_first_message_only() -> None:
    text = 'syntax = "proto3"; message A { int64 a = 1; } message B { string b = 1; }'
    decoder = decoder_of(3, "PROTOBUF", text)
    schema = parse(text)
    a, b = schema.message_class([0])(a=5), schema.message_class([1])(b="x")
    values = [framed(3, write_indexes([0]) + a.SerializeToString()),
              framed(3, write_indexes([1]) + b.SerializeToString())]
    assert decode_values(values, {3: decoder}.get, decoder.type).to_pylist() == [{"a": 5}, None]


# ---- property: random messages round trip into the column --------------------------------------------------

SCALARS = {  # proto type -> (descriptor type, values, expected reading of a value)
    "int32": (F.TYPE_INT32, st.integers(-2**31, 2**31 - 1), lambda v: v),
    "uint32": (F.TYPE_UINT32, st.integers(0, 2**32 - 1), lambda v: v - 2**32 if v >= 2**31 else v),
    "sint64": (F.TYPE_SINT64, st.integers(-2**63, 2**63 - 1), lambda v: v),
    "fixed64": (F.TYPE_FIXED64, st.integers(0, 2**64 - 1), lambda v: v - 2**64 if v >= 2**63 else v),
    "double": (F.TYPE_DOUBLE, st.floats(allow_nan=False), lambda v: v),
    "float": (F.TYPE_FLOAT, st.floats(width=32, allow_nan=False), lambda v: v),
    "bool": (F.TYPE_BOOL, st.booleans(), lambda v: v),
    "string": (F.TYPE_STRING, st.text(max_size=5), lambda v: v),
    "bytes": (F.TYPE_BYTES, st.binary(max_size=5), lambda v: v),
    "enum": (F.TYPE_ENUM, st.sampled_from([0, 1, 2, 7]), lambda v: ["E0", "E1", "E2"][v] if v < 3
             else "UNKNOWN_ENUM_VALUE_E_7"),
}
SHAPES = ["plain", "optional", "repeated"]


def is_default(v) -> bool:
    if isinstance(v, float):  # Java compares a float's bits: -0.0 is a value
        return v == 0.0 and math.copysign(1, v) > 0
    return v in (0, "", b"", False)


def file_of(fields: list[tuple[str, str]]) -> str:
    """A serialized FileDescriptorProto (the form confluent-kafka registers) of message M with these fields."""
    fd = descriptor_pb2.FileDescriptorProto(name="m.proto", package="p", syntax="proto3",
                                            dependency=["google/protobuf/timestamp.proto"])
    enum = fd.enum_type.add(name="E")
    for i, name in enumerate(["E0", "E1", "E2"]):
        enum.value.add(name=name, number=i)
    message = fd.message_type.add(name="M")  # the first message: the column's
    inner = fd.message_type.add(name="Inner")
    inner.field.add(name="x", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    entry = message.nested_type.add(name="TagsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    for number, (kind, shape) in enumerate(fields, start=1):
        field = message.field.add(name=f"f{number}", number=number, json_name=f"f{number}",
                                  label=F.LABEL_REPEATED if shape == "repeated" or kind == "map" else F.LABEL_OPTIONAL)
        if kind in SCALARS:
            field.type = SCALARS[kind][0]
            if kind == "enum":
                field.type_name = ".p.E"
        else:
            field.type = F.TYPE_MESSAGE
            field.type_name = {"inner": ".p.Inner", "time": ".google.protobuf.Timestamp", "map": ".p.M.TagsEntry"}[kind]
        if shape == "optional" and kind != "map":
            field.proto3_optional = True
            field.oneof_index = len(message.oneof_decl)
            message.oneof_decl.add(name=f"_f{number}")
    return base64.standard_b64encode(fd.SerializeToString()).decode()


@st.composite
def value_of(draw, kind: str, shape: str):
    """(what is set on the message, what the column reads; absent: None set)."""
    if shape == "repeated" and kind != "map":
        pairs = draw(st.lists(value_of(kind, "optional"), max_size=3))
        return [p[0] for p in pairs], [p[1] for p in pairs]
    if kind == "map":
        tags = draw(st.dictionaries(st.text(max_size=3), st.integers(-2**63, 2**63 - 1), max_size=3))
        return tags, sorted(tags.items())
    present = shape == "optional" or draw(st.booleans())
    if kind == "inner":
        x = draw(st.integers(-2**63, 2**63 - 1))
        return ({"x": x}, {"x": None if x == 0 else x}) if present else (None, None)
    if kind == "time":
        seconds, nanos = draw(st.integers(-2**33, 2**33)), draw(st.integers(0, 999_999_999))
        micros = seconds * 1_000_000 + nanos // 1000
        return ({"seconds": seconds, "nanos": nanos}, EPOCH + datetime.timedelta(microseconds=micros)) if present \
            else (None, None)
    values, expected = SCALARS[kind][1], SCALARS[kind][2]
    v = draw(values) if present else None
    if v is None:
        return None, None
    return v, None if shape == "plain" and is_default(v) else expected(v)


@st.composite
def cases(draw):
    kinds = [*SCALARS, "inner", "time", "map"]
    fields = draw(st.lists(st.tuples(st.sampled_from(kinds), st.sampled_from(SHAPES)), min_size=1, max_size=6))
    rows = draw(st.lists(st.tuples(*[value_of(k, s) for k, s in fields]), min_size=1, max_size=3))
    return fields, rows


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
@example(([("double", "plain")], [((-0.0, -0.0),), ((0.0, None),)]))  # -0.0 is not the default (Java's bits)
def test_messages_round_trip_into_the_column(case) -> None:
    fields, rows = case
    text = file_of(fields)
    decoder = decoder_of(9, "PROTOBUF", text)
    cls = parse(text).message_class([0])
    values, expected = [], []
    for row in rows:
        message = cls()
        for number, (set_value, _) in enumerate(row, start=1):
            if set_value is None:
                continue
            name, kind = f"f{number}", fields[number - 1][0]
            if isinstance(set_value, dict) and kind != "map":
                getattr(message, name).CopyFrom(getattr(message, name).__class__(**set_value))
            elif isinstance(set_value, dict):
                getattr(message, name).update(set_value)
            elif isinstance(set_value, list) and kind in ("inner", "time"):
                for v in set_value:
                    getattr(message, name).add(**v)
            elif isinstance(set_value, list):
                getattr(message, name).extend(set_value)
            else:
                setattr(message, name, set_value)
        values.append(framed(9, b"\x00" + message.SerializeToString()))
        expected.append({f"f{n}": want for n, (_, want) in enumerate(row, start=1)})
    column = decode_values(values, {9: decoder}.get, decoder.type)
    assert column.type == decoder.type and column.null_count == 0
    got = column.to_pylist()
    for g in got:  # a map's order is the runtime's
        for name, (kind, _) in zip(g, fields):
            if kind == "map":
                g[name] = sorted(g[name])
    assert got == expected
