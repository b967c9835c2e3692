"""Protobuf schemas: parsing both registered forms (protobuf_schema.py) and Confluent's Protobuf compatibility
rules (protobuf_compat.py), through compatibility.check as the registry calls it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from lakelog.platform.schema_registry import compatibility as compat
from lakelog.platform.schema_registry.errors import InvalidSchema
from lakelog.platform.schema_registry.protobuf_schema import parse, read_indexes, write_indexes

BASE = 'syntax = "proto3"; package shop; message Order { int64 id = 1; string item = 2; }'


def proto(body: str, package: str = "shop", syntax: str = "proto3") -> str:
    return f'syntax = "{syntax}"; package {package}; {body}'


def problems(level: str, new: str, *olds: str) -> list[str]:
    def parsed(text: str):
        return compat.parse("PROTOBUF", text)
    return compat.check(level, "PROTOBUF", parsed(new), [("PROTOBUF", parsed(o)) for o in olds])


def kinds(level: str, new: str, *olds: str) -> set[str]:
    return {p.split(" ", 1)[0] for p in problems(level, new, *olds)}


@pytest.mark.parametrize("old,new", [
    ("int64 id = 1; string item = 2;", "int64 id = 1; string item = 2; double price = 3;"),  # field added
    ("int64 id = 1; string item = 2;", "int64 id = 1;"),  # field removed
    ("int64 id = 1;", "int64 order_id = 1;"),  # renamed: the wire has numbers
    ("int32 id = 1;", "int64 id = 1;"), ("uint32 id = 1;", "bool id = 1;"),  # one scalar group
    ("sint32 id = 1;", "sint64 id = 1;"), ("fixed32 id = 1;", "sfixed32 id = 1;"),
    ("string id = 1;", "bytes id = 1;"), ("string id = 1;", "repeated string id = 1;"),
    ("int64 id = 1; string a = 2;", "int64 id = 1; oneof pick { string a = 2; }"),  # one field into a new oneof
    ("int64 id = 1;", "int64 id = 1; Status s = 2; enum Status { A = 0; B = 1; }"),  # enum added
    ("int64 id = 1; map<string, int32> tags = 2;", "int64 id = 1; map<string, int64> tags = 2;"),
])
def test_compatible_changes_both_ways(old: str, new: str) -> None:
    old_text, new_text = proto(f"message Order {{ {old} }}"), proto(f"message Order {{ {new} }}")
    assert problems("FULL", new_text, old_text) == []


@pytest.mark.parametrize("old,new,kind", [
    ("int64 id = 1;", "string id = 1;", "FIELD_SCALAR_KIND_CHANGED"),
    ("int32 id = 1;", "sint32 id = 1;", "FIELD_SCALAR_KIND_CHANGED"),
    ("float id = 1;", "double id = 1;", "FIELD_SCALAR_KIND_CHANGED"),
    ("int64 id = 1;", "Inner id = 1; message Inner { int64 v = 1; }", "FIELD_KIND_CHANGED"),
    ("map<string, int32> m = 1;", "repeated string m = 1;", "FIELD_KIND_CHANGED"),
    ("map<string, int32> m = 1;", "map<string, string> m = 1;", "FIELD_SCALAR_KIND_CHANGED"),
    ("A x = 1; message A { int64 v = 1; } message B { int64 v = 1; }",
     "B x = 1; message A { int64 v = 1; } message B { int64 v = 1; }", "FIELD_NAMED_TYPE_CHANGED"),
    ("int64 id = 1;", "repeated int64 id = 1;", "FIELD_NUMERIC_LABEL_CHANGED"),
    ("string a = 1; string b = 2;", "oneof pick { string a = 1; string b = 2; }", "MULTIPLE_FIELDS_MOVED_TO_ONEOF"),
    ("string a = 1; oneof pick { string b = 2; }", "oneof pick { string a = 1; string b = 2; }",
     "FIELD_MOVED_TO_EXISTING_ONEOF"),
    ("oneof pick { string a = 1; string b = 2; }", "oneof pick { string a = 1; }", "ONEOF_FIELD_REMOVED"),
    ("Inner x = 1; message Inner { int64 v = 1; }", "Inner x = 1; message Inner { string v = 1; }",
     "FIELD_SCALAR_KIND_CHANGED"),  # inside a nested message
])
def test_incompatible_changes(old: str, new: str, kind: str) -> None:
    old_text, new_text = proto(f"message Order {{ {old} }}"), proto(f"message Order {{ {new} }}")
    assert kind in kinds("BACKWARD", new_text, old_text)
    assert kind in kinds("FORWARD", new_text, old_text) or kind in kinds("FORWARD", old_text, new_text)


def test_package_change_message_removal_and_required_fields() -> None:
    assert "PACKAGE_CHANGED" in kinds("BACKWARD", proto("message Order { int64 id = 1; }", "other"), BASE)
    two = proto("message Order { int64 id = 1; } message Refund { int64 id = 1; }")
    assert "MESSAGE_REMOVED" in kinds("BACKWARD", proto("message Order { int64 id = 1; }"), two)
    assert problems("BACKWARD", two, proto("message Order { int64 id = 1; }")) == []  # message added
    one, both = proto("message Order { oneof pick { string a = 2; } }"), proto(
        "message Order { oneof pick { string a = 2; int64 b = 3; } }")
    assert problems("BACKWARD", both, one) == [] and "ONEOF_FIELD_REMOVED" in kinds("FORWARD", both, one)
    old = proto("message Order { required int64 id = 1; }", syntax="proto2")
    new = proto("message Order { required int64 id = 1; required string item = 2; }", syntax="proto2")
    assert "REQUIRED_FIELD_ADDED" in kinds("BACKWARD", new, old)
    assert "REQUIRED_FIELD_REMOVED" in kinds("BACKWARD", old, new)
    message = problems("BACKWARD", proto("message Order { string id = 1; }"), BASE)[0]
    assert "FIELD_SCALAR_KIND_CHANGED at '#/Order/1'" in message and "version 1" in message


def test_transitive_levels_check_every_version() -> None:
    v1 = proto("message Order { int64 id = 1; string note = 2; }")
    v2 = proto("message Order { int64 id = 1; }")  # note removed: compatible
    v3 = proto("message Order { int64 id = 1; int64 note = 2; }")  # number 2 reused with another type
    assert problems("BACKWARD", v3, v1, v2) == []
    assert "FIELD_SCALAR_KIND_CHANGED" in kinds("BACKWARD_TRANSITIVE", v3, v1, v2)


field_types = st.sampled_from(["int32", "int64", "uint32", "uint64", "sint32", "sint64", "bool", "string", "bytes",
                               "fixed32", "fixed64", "sfixed32", "sfixed64", "float", "double"])
messages = st.lists(field_types, min_size=1, max_size=6).map(
    lambda types: proto("message Order { " + " ".join(f"{t} f{i} = {i + 1};" for i, t in enumerate(types)) + " }"))


@settings(max_examples=25, deadline=None)
@given(messages, st.sampled_from(compat.LEVELS))
def test_every_protobuf_schema_is_compatible_with_itself_and_with_a_field_added(text: str, level: str) -> None:
    assert problems(level, text, text) == []
    added = text.replace(" }", " string zz_added = 99; }")
    assert problems(level, added, text) == []


def test_the_serialized_form_parses_as_the_text_does() -> None:
    text = parse(BASE)
    serialized = parse(text.serialized())
    assert serialized.message([0]).full_name == "shop.Order"
    assert problems("FULL", text.serialized(), BASE) == []


def test_imports_resolve_through_references() -> None:
    common = 'syntax = "proto3"; package common; import "google/protobuf/timestamp.proto"; ' \
             "message Address { string city = 1; google.protobuf.Timestamp since = 2; }"
    text = proto('import "common/address.proto"; message Order { common.Address ship = 1; }')
    parsed = compat.parse("PROTOBUF", text, {"common/address.proto": common})
    ship = parsed.message([0]).fields_by_name["ship"].message_type
    assert ship.fields_by_name["since"].message_type.full_name == "google.protobuf.Timestamp"
    by_serialized = compat.parse("PROTOBUF", parsed.serialized(), {"common/address.proto": parse(common).serialized()})
    assert by_serialized.message([0]).full_name == "shop.Order"


@pytest.mark.parametrize("text,why", [
    ('syntax = "proto3"; message M { strin a = 1; }', '"strin" is not defined'),
    ('syntax = "proto3"; import "missing.proto"; message M {}', "missing.proto"),
    ("AAAA////", "not a serialized FileDescriptorProto"),
    ("   ", "non-empty string"),
])
def test_invalid_protobuf_is_refused_clearly(text: str, why: str) -> None:
    with pytest.raises(InvalidSchema, match=why):
        compat.parse("PROTOBUF", text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=5), st.binary(max_size=8))
def test_message_indexes_round_trip(indexes: list[int], rest: bytes) -> None:
    written = write_indexes(indexes)
    assert read_indexes(written + rest) == (indexes, len(written))
    assert write_indexes([0]) == b"\x00"
