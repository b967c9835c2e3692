"""protobuf_types.MessageColumns: many Protobuf values of one message read a field at a time agree with the
one-by-one reader (defaults null, -0.0 kept, presence, unknown enum values, unsigned bits), damaged payloads
and other message indexes included; messages with other than scalar fields are read one by one."""

from __future__ import annotations

import dataclasses
import functools
from typing import Iterator

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from lakelog.platform.schema_registry import arrow_values, validation
from lakelog.platform.schema_registry.arrow_values import common_schema_id, decode_bulk, decode_values, decoder_of
from lakelog.platform.schema_registry.protobuf_schema import parse, write_indexes
from lakelog.platform.schema_registry.wire_format import framed

PROTO3 = ('syntax = "proto3"; package p; message M { int32 i = 1; sint32 si = 2; uint32 u = 3; fixed32 fx = 4; '
          'int64 l = 5; uint64 ul = 6; sfixed64 sfl = 7; float f = 8; double d = 9; bool b = 10; string s = 11; '
          'bytes by = 12; E e = 13; optional string o = 14; optional double od = 15; '
          'enum E { E0 = 0; E1 = 1; } } message N { string n = 1; }')
PROTO2 = ('syntax = "proto2"; package q; message M { optional int32 i = 1 [default = 7]; optional string s = 2; '
          'required int64 l = 3; optional bool b = 4 [default = true]; }')
FLOATS = st.sampled_from([0.0, -0.0, 1.5, -2.25, float("inf")])


parsed = functools.cache(parse)  # protoc runs once per text
decoder = functools.cache(lambda text: decoder_of(4, "PROTOBUF", text))


@pytest.fixture(autouse=True, scope="module")
def bulk_from_one_value() -> Iterator[None]:
    """The bulk readers used from one value on (not BULK_MIN_VALUES): the generated calls are small."""
    saved = arrow_values.BULK_MIN_VALUES
    arrow_values.BULK_MIN_VALUES = validation.BULK_MIN_VALUES = 1
    yield
    arrow_values.BULK_MIN_VALUES = validation.BULK_MIN_VALUES = saved


def same(a: object, b: object) -> bool:
    return repr(a) == repr(b)


@st.composite
def proto3_payloads(draw):
    schema = parsed(PROTO3)
    cls = schema.message_class([0])
    kind = draw(st.sampled_from(["m", "m", "m", "other", "garbage", "cut"]))
    if kind == "other":
        return write_indexes([1]) + schema.message_class([1])(n="x").SerializeToString()
    if kind == "garbage":
        return draw(st.binary(max_size=12))
    fields = {
        "i": draw(st.integers(-2**31, 2**31 - 1)), "si": draw(st.integers(-5, 5)), "u": draw(st.integers(0, 2**32 - 1)),
        "fx": draw(st.integers(0, 2**32 - 1)), "l": draw(st.integers(-2**63, 2**63 - 1)),
        "ul": draw(st.integers(0, 2**64 - 1)), "sfl": draw(st.integers(-3, 3)), "f": draw(FLOATS),
        "d": draw(FLOATS), "b": draw(st.booleans()), "s": draw(st.text(max_size=4)), "by": draw(st.binary(max_size=3)),
        "e": draw(st.integers(0, 3)),
    }
    message = cls(**{k: v for k, v in fields.items() if draw(st.booleans())})
    if draw(st.booleans()):
        message.o = draw(st.sampled_from(["", "x"]))
    if draw(st.booleans()):
        message.od = draw(FLOATS)
    payload = message.SerializeToString()
    if kind == "cut" and payload:
        payload = payload[:draw(st.integers(0, len(payload) - 1))]
    return write_indexes([0]) + payload


@st.composite
def proto2_payloads(draw):
    cls = parsed(PROTO2).message_class([0])
    message = cls(l=draw(st.integers(-9, 9)))
    if draw(st.booleans()):
        message.i = draw(st.integers(-9, 9))
    if draw(st.booleans()):
        message.s = draw(st.text(max_size=3))
    if draw(st.booleans()):
        message.b = draw(st.booleans())
    return write_indexes([0]) + message.SerializeToString()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([(PROTO3, proto3_payloads()), (PROTO2, proto2_payloads())]).flatmap(
    lambda case: st.tuples(st.just(case[0]), st.lists(case[1], min_size=1, max_size=8))))
def test_columns_agree_with_one_by_one(case) -> None:
    text, payloads = case
    columns = decoder(text)
    assert columns.bulk is not None
    plain = dataclasses.replace(columns, bulk=None)
    values = [framed(4, p) for p in payloads]
    expected = decode_values(values, {4: plain}.get, plain.type).to_pylist()
    assert same(decode_values(values + [None], {4: columns}.get, columns.type).to_pylist(), expected + [None])
    array = pa.array(values, pa.binary())
    assert common_schema_id(array) == 4
    whole = decode_bulk(array, columns, columns.type)
    if whole is not None:
        assert same(whole.to_pylist(), expected)


def test_only_scalar_messages_are_read_in_columns() -> None:
    for body in ("message M { repeated int64 r = 1; }", "message M { Inner i = 1; } message Inner { int64 x = 1; }",
                 "message M { map<string, int64> m = 1; }"):
        assert decoder_of(1, "PROTOBUF", f'syntax = "proto3"; {body}').bulk is None
