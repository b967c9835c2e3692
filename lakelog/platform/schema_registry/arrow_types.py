"""Registered schemas as Arrow types: the type of a typed topic's struct column (`value_typed`).

Avro maps as Spark's `from_avro` (SchemaConverters.toSqlType) maps it: record -> struct, enum -> string,
fixed and bytes -> binary, a union of null and one type -> that type (nullable), a union of int and long ->
long, of float and double -> double, any other union -> struct of `member0`, `member1`, ... (its non-null
branches), array -> list, map -> map<string, _>, and the logical types date -> date, timestamp-millis and
-micros -> timestamp (UTC), decimal -> decimal(precision, scale), uuid -> string. Where Delta cannot hold
Spark's type: a field of type null -> string (always null); local-timestamp-millis/-micros -> long (their
raw value: Spark's TimestampNTZ needs a Delta table feature lakelog does not enable); time-millis -> int and
time-micros -> long, as Spark has them. A recursive schema is refused, as Spark refuses it.

JSON Schema: object with properties -> struct, integer -> long, number -> double, string -> string, boolean
-> boolean, array with items -> list; `"type": [T, "null"]` -> T; a local `$ref` is followed; anything else
(oneOf/anyOf/allOf, several types, an object without properties, a remote $ref) -> string holding the JSON.

Protobuf maps as Spark's `from_protobuf` maps it: protobuf_types.py.

Every field of the Delta column is nullable (`nullable_everywhere`): a value that cannot be decoded is null,
and files written before a field was added lack it. `merged` widens a table's type by a new schema's type
as Delta's schema evolution allows (new fields appended, int -> long, float -> double).
"""

from __future__ import annotations

from typing import Any, Mapping

import pyarrow as pa

from lakelog.platform.schema_registry.errors import RegistryError

TIMESTAMP = pa.timestamp("us", tz="UTC")  # Delta's timestamp: microseconds, UTC
MAX_DECIMAL_PRECISION = 38  # Delta's and Spark's
_AVRO_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.string(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}
_JSON_PRIMITIVES: dict[str, pa.DataType] = {
    "integer": pa.int64(), "number": pa.float64(), "string": pa.string(), "boolean": pa.bool_(),
}
JSON_TEXT = pa.string()  # a JSON Schema part with no Arrow type: the value's JSON text


class NotMappable(RegistryError):
    """A schema (or part of one) with no Arrow type: its topic's values get no typed column."""

    code = "SCHEMA_NOT_MAPPABLE"
    status, error_code = 422, 42201


class TypeConflict(RegistryError):
    """Two schemas give one field types Delta's schema evolution cannot merge (long then string)."""

    code = "SCHEMA_TYPE_CONFLICT"
    status, error_code = 409, 40901


# ---- Avro ------------------------------------------------------------------------------------------------


def avro_type(schema: Any, names: Mapping[str, Any]) -> pa.DataType:
    """The Arrow type of a parsed Avro schema (fastavro's `parse_schema` form; `names`: its named types)."""
    return as_struct(avro_value_type(schema, names))


def avro_value_type(schema: Any, names: Mapping[str, Any]) -> pa.DataType:
    """The Arrow type of the values themselves (a struct only for records and unions of several types)."""
    return _avro_field(schema, names, ()).type


def as_struct(kind: pa.DataType) -> pa.StructType:
    """A column's type: a value that is no struct becomes a struct of one field `value`."""
    return kind if pa.types.is_struct(kind) else pa.struct([pa.field("value", kind)])


def avro_logical(schema: Any) -> str | None:
    return schema.get("logicalType") if isinstance(schema, dict) else None


def avro_branches(union: list) -> tuple[bool, list]:
    """(whether null is a branch, the other branches in order)."""
    others = [b for b in union if b != "null" and not (isinstance(b, dict) and b.get("type") == "null")]
    return len(others) < len(union), others


def avro_widened_union(others: list) -> str | None:
    """The primitive a union of numeric branches becomes in Spark (int+long -> long, float+double -> double)."""
    kinds = {b if isinstance(b, str) else b.get("type") for b in others}
    if any(avro_logical(b) for b in others):
        return None
    if kinds == {"int", "long"}:
        return "long"
    if kinds == {"float", "double"}:
        return "double"
    return None


def _avro_field(schema: Any, names: Mapping[str, Any], seen: tuple[str, ...], name: str = "value") -> pa.Field:
    if isinstance(schema, list):
        nullable, others = avro_branches(schema)
        if not others:
            return pa.field(name, pa.string(), True)
        if len(others) == 1:
            return pa.field(name, _avro_field(others[0], names, seen).type, nullable)
        widened = avro_widened_union(others)
        if widened is not None:
            return pa.field(name, _AVRO_PRIMITIVES[widened], nullable)
        members = [pa.field(f"member{i}", _avro_field(b, names, seen).type, True) for i, b in enumerate(others)]
        return pa.field(name, pa.struct(members), nullable)
    return pa.field(name, _avro_type(schema, names, seen), schema == "null")


def _avro_type(schema: Any, names: Mapping[str, Any], seen: tuple[str, ...]) -> pa.DataType:
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema]
        if schema in seen:
            raise NotMappable(f"recursive Avro type {schema!r}: no Arrow type holds it (nor Spark's)")
        if schema not in names:
            raise NotMappable(f"unknown Avro type {schema!r}")
        return _avro_type(names[schema], names, seen)
    if isinstance(schema, list):
        return _avro_field(schema, names, seen).type
    kind = schema.get("type")
    logical = _avro_logical_type(schema)
    if logical is not None:
        return logical
    if kind == "record":
        inner = (*seen, schema["name"])
        return pa.struct([_avro_field(f["type"], names, inner, f["name"]) for f in schema["fields"]])
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    if kind == "array":
        items = _avro_field(schema["items"], names, seen, "element")
        return pa.list_(items)
    if kind == "map":
        values = _avro_field(schema["values"], names, seen, "value")
        return pa.map_(pa.field("key", pa.string(), False), values)
    return _avro_type(kind, names, seen)  # {"type": "int"}, or {"type": {...}}


def _avro_logical_type(schema: dict) -> pa.DataType | None:
    logical, kind = avro_logical(schema), schema.get("type")
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return TIMESTAMP
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema.get("precision", 0)), int(schema.get("scale", 0))
        if 0 < precision <= MAX_DECIMAL_PRECISION and 0 <= scale <= precision:
            return pa.decimal128(precision, scale)
        raise NotMappable(f"decimal({precision}, {scale}): Delta holds decimals of precision 1..38")
    return None  # uuid, time-*, local-timestamp-*: their underlying type, as Spark reads them


# ---- JSON Schema -----------------------------------------------------------------------------------------


def json_type(schema: Any) -> pa.DataType:
    """The Arrow type of a JSON Schema document (a struct, or a struct of one field `value`)."""
    return as_struct(json_value_type(schema))


def json_value_type(schema: Any) -> pa.DataType:
    return _json_type(schema, schema, ())


def json_resolved(schema: Any, root: Any, seen: tuple[str, ...] = ()) -> tuple[Any, tuple[str, ...]]:
    """`schema` with its local `$ref` followed (None when it points outside the document or loops)."""
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
        ref = schema["$ref"]
        if not ref.startswith("#") or ref in seen:
            return None, seen
        seen = (*seen, ref)
        target: Any = root
        for part in [p for p in ref[1:].split("/") if p]:
            target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, dict) else None
        schema = target
    return schema, seen


def json_kind(schema: Any) -> str | None:
    """The one JSON type a (resolved) schema allows, null aside; None when it allows several or names none."""
    if not isinstance(schema, dict) or any(k in schema for k in ("oneOf", "anyOf", "allOf", "not", "if")):
        return None
    kind = schema.get("type")
    if isinstance(kind, list):
        others = [k for k in kind if k != "null"]
        kind = others[0] if len(others) == 1 else None
    if kind is None and isinstance(schema.get("properties"), dict):
        kind = "object"
    return kind if isinstance(kind, str) else None


def _json_type(schema: Any, root: Any, seen: tuple[str, ...]) -> pa.DataType:
    schema, seen = json_resolved(schema, root, seen)
    kind = json_kind(schema)
    if kind in _JSON_PRIMITIVES:
        return _JSON_PRIMITIVES[kind]
    if kind == "object" and isinstance(schema.get("properties"), dict) and schema["properties"]:
        return pa.struct([pa.field(str(name), _json_type(sub, root, seen))
                          for name, sub in schema["properties"].items()])
    if kind == "array" and isinstance(schema.get("items"), dict):
        return pa.list_(pa.field("element", _json_type(schema["items"], root, seen)))
    return JSON_TEXT


# ---- the Delta column ------------------------------------------------------------------------------------


def nullable_everywhere(kind: pa.DataType) -> pa.DataType:
    """`kind` with every field (of structs, lists, map values) nullable; map keys stay non-null (Delta's)."""
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, nullable_everywhere(f.type), True) for f in kind])
    if pa.types.is_map(kind):
        return pa.map_(kind.key_field, pa.field(kind.item_field.name, nullable_everywhere(kind.item_type), True))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(pa.field(kind.value_field.name, nullable_everywhere(kind.value_type), True))
    return kind


_WIDENINGS = {(pa.int32(), pa.int64()): pa.int64(), (pa.float32(), pa.float64()): pa.float64()}


def merged(table: pa.DataType | None, new: pa.DataType, path: str = "value_typed") -> pa.DataType:
    """The type holding both (Delta schema evolution): a struct keeps its fields in order and appends the new
    ones; int widens to long, float to double. TypeConflict for anything else."""
    if table is None or table == new:
        return new
    if pa.types.is_struct(table) and pa.types.is_struct(new):
        fields = {f.name: f for f in table}
        for f in new:
            old = fields.get(f.name)
            fields[f.name] = f if old is None else pa.field(
                f.name, merged(old.type, f.type, f"{path}.{f.name}"), old.nullable or f.nullable)
        return pa.struct(list(fields.values()))
    if pa.types.is_list(table) and pa.types.is_list(new):
        item = merged(table.value_type, new.value_type, f"{path}[]")
        return pa.list_(pa.field(table.value_field.name, item, True))
    if pa.types.is_map(table) and pa.types.is_map(new) and table.key_type == new.key_type:
        item = merged(table.item_type, new.item_type, f"{path}{{}}")
        return pa.map_(table.key_field, pa.field(table.item_field.name, item, True))
    for pair in ((table, new), (new, table)):
        if pair in _WIDENINGS:
            return _WIDENINGS[pair]
    raise TypeConflict(f"{path} is {table} in the table and {new} in the new schema: Delta cannot merge them")
