"""The schema registry's compatibility rules (Avro, JSON Schema) and levels, pure."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from lakelog.platform.schema_registry import avro_compat, compatibility as compat, json_compat
from lakelog.platform.schema_registry.errors import InvalidCompatibilityLevel, InvalidSchema, InvalidVersion
from lakelog.platform.schema_registry.state import parse_version

PRIMS = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]
DEFAULTS = {"null": None, "boolean": False, "int": 0, "long": 0, "float": 0.0, "double": 0.0, "bytes": "",
            "string": ""}


def record(fields, name="R"):
    return json.dumps({"type": "record", "name": name, "fields": fields})


def problems(level, new, *olds, kind="AVRO"):
    parse = (lambda t: compat.parse(kind, t))
    return compat.check(level, kind, parse(new), [(kind, parse(o)) for o in olds])


field_names = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), min_size=1, max_size=5, unique=True)
avro_records = st.builds(lambda names, types: record([{"name": n, "type": t} for n, t in zip(names, types)]),
                         field_names, st.lists(st.sampled_from(PRIMS), min_size=5, max_size=5))


@settings(max_examples=60, deadline=None)
@given(avro_records, st.sampled_from(compat.LEVELS))
def test_every_avro_schema_is_compatible_with_itself(schema, level):
    assert problems(level, schema, schema, schema) == []


@settings(max_examples=60, deadline=None)
@given(avro_records, st.sampled_from(PRIMS))
def test_adding_a_field_with_a_default_is_backward_and_forward(schema, kind):
    fields = json.loads(schema)["fields"]
    added = record([*fields, {"name": "zz_added", "type": kind, "default": DEFAULTS[kind]}])
    assert problems("BACKWARD", added, schema) == []
    assert problems("FULL", added, schema) == []


@settings(max_examples=60, deadline=None)
@given(avro_records, st.sampled_from(PRIMS))
def test_a_field_without_default_added_is_not_backward_and_removed_is_not_forward(schema, kind):
    fields = json.loads(schema)["fields"]
    added = record([*fields, {"name": "zz_added", "type": kind}])
    assert problems("BACKWARD", added, schema)
    assert problems("FORWARD", schema, added)  # removing a field without default
    assert problems("BACKWARD", schema, added) == []  # removing a field: BACKWARD


@pytest.mark.parametrize("writer,reader,ok", [
    ("int", "long", True), ("int", "float", True), ("int", "double", True), ("long", "double", True),
    ("float", "double", True), ("string", "bytes", True), ("bytes", "string", True),
    ("long", "int", False), ("double", "float", False), ("string", "int", False),
])
def test_avro_promotions(writer, reader, ok):
    old, new = record([{"name": "f", "type": writer}]), record([{"name": "f", "type": reader}])
    assert (problems("BACKWARD", new, old) == []) is ok


def test_avro_enums_unions_names_and_transitivity():
    enum = lambda symbols, **extra: record([{"name": "e", "type": {"type": "enum", "name": "E", "symbols": symbols,
                                                                   **extra}}])
    assert problems("BACKWARD", enum(["A", "B", "C"]), enum(["A", "B"])) == []
    assert problems("BACKWARD", enum(["A"]), enum(["A", "B"]))
    assert problems("BACKWARD", enum(["A"], default="A"), enum(["A", "B"])) == []
    union = record([{"name": "f", "type": ["null", "string"]}])
    plain = record([{"name": "f", "type": "string"}])
    assert problems("BACKWARD", union, plain) == []  # a union reads any of its branches
    assert problems("BACKWARD", plain, union)  # null is not readable as string
    assert problems("BACKWARD", record([], "Other"), record([]))
    v1 = record([{"name": "a", "type": "int"}])
    v2 = record([{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}])
    v3 = record([{"name": "b", "type": "int"}])  # reads v2 (b present) but not v1
    assert problems("BACKWARD", v3, v1, v2) == []
    assert problems("BACKWARD_TRANSITIVE", v3, v1, v2)
    assert problems("NONE", v3, v1, v2) == []


def test_avro_recursive_and_invalid():
    node = record([{"name": "v", "type": "int"}, {"name": "next", "type": ["null", "R"]}])
    assert problems("FULL_TRANSITIVE", node, node) == []
    with pytest.raises(InvalidSchema):
        avro_compat.parse('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}')
    with pytest.raises(InvalidSchema):
        compat.parse("AVRO", "{not json")


def obj(props, required=(), closed=None):
    schema = {"type": "object", "properties": props, "required": list(required)}
    if closed is not None:
        schema["additionalProperties"] = not closed
    return json.dumps(schema)


def jproblems(level, new, *olds):
    return problems(level, new, *olds, kind="JSON")


def test_json_schema_content_models():
    base = {"a": {"type": "string"}}
    more = {**base, "b": {"type": "integer"}}
    assert jproblems("BACKWARD", obj(more), obj(base, closed=True)) == []  # added to a closed model
    assert jproblems("BACKWARD", obj(more), obj(base))  # added to an open model
    assert jproblems("BACKWARD", obj({**base, "b": {}}), obj(base)) == []  # accepting anything
    assert jproblems("BACKWARD", obj(base), obj(more)) == []  # removed from an open model
    assert jproblems("BACKWARD", obj(base, closed=True), obj(more, closed=True))  # removed from a closed one
    assert jproblems("BACKWARD", obj(base, required=["a"]), obj(base))  # required added
    assert jproblems("BACKWARD", obj(base), obj(base, required=["a"])) == []  # required removed


def test_json_schema_types_and_limits():
    assert jproblems("BACKWARD", '{"type": "number"}', '{"type": "integer"}') == []
    assert jproblems("BACKWARD", '{"type": "integer"}', '{"type": "number"}')
    assert jproblems("BACKWARD", '{"type": ["string", "null"]}', '{"type": "string"}') == []
    assert jproblems("BACKWARD", '{"type": "string", "maxLength": 5}', '{"type": "string", "maxLength": 9}')
    assert jproblems("BACKWARD", '{"type": "string", "maxLength": 9}', '{"type": "string", "maxLength": 5}') == []
    assert jproblems("BACKWARD", '{"enum": ["a", "b"]}', '{"enum": ["a"]}') == []
    assert jproblems("BACKWARD", '{"enum": ["a"]}', '{"enum": ["a", "b"]}')
    assert jproblems("FORWARD", '{"type": "integer"}', '{"type": "number"}') == []
    with pytest.raises(InvalidSchema):
        json_compat.parse('{"type": "strin"}')
    with pytest.raises(InvalidSchema):
        json_compat.parse("[1]")


json_schemas = st.recursive(
    st.sampled_from([{"type": t} for t in sorted(json_compat.TYPES)]),
    lambda inner: st.builds(lambda props, closed: {"type": "object", "properties": props,
                                                   "additionalProperties": not closed},
                            st.dictionaries(st.from_regex(r"[a-z]{1,4}", fullmatch=True), inner, max_size=3),
                            st.booleans()), max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(json_schemas, st.sampled_from(compat.LEVELS))
def test_every_json_schema_is_compatible_with_itself(schema, level):
    assert jproblems(level, json.dumps(schema), json.dumps(schema)) == []


def test_levels_types_versions_and_protobuf():
    with pytest.raises(InvalidCompatibilityLevel):
        compat.validate_level("SIDEWAYS")
    assert compat.validate_type(None) == "AVRO"
    with pytest.raises(InvalidSchema):
        compat.validate_type("XML")
    assert parse_version("latest") == -1 and parse_version("3") == 3
    for bad in ("0", "x", str(2**31)):
        with pytest.raises(InvalidVersion):
            parse_version(bad)
    proto = 'syntax = "proto3"; message M { string a = 1; }'
    assert problems("FULL", proto, 'syntax = "proto3"; message M { bytes a = 1; }', kind="PROTOBUF") == []
    assert problems("BACKWARD", proto, 'syntax = "proto3"; message M { int32 a = 1; }', kind="PROTOBUF")
    assert compat.check("BACKWARD", "JSON", {}, [("AVRO", None)])  # another type than the latest version's
