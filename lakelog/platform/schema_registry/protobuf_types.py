"""Protobuf messages as Arrow types and values, as Spark's `from_protobuf` (SchemaConverters.toSqlType and
ProtobufDeserializer, default options) maps them.

Types: int32, sint32, sfixed32, uint32, fixed32 -> int; int64, sint64, sfixed64, uint64, fixed64 -> long (the
unsigned ones as Java holds them: their bits, so 2^32-1 reads -1); float, double, bool, string; bytes ->
binary; enum -> string (the value's name); a message -> struct of its fields; repeated -> list; map -> map;
google.protobuf.Timestamp (any message named Timestamp of `seconds`, `nanos`) -> timestamp (UTC, microseconds).
Where Delta cannot hold Spark's type: Duration (Spark's interval day to second) -> struct<seconds, nanos>, as
the message is. A message left without fields (an empty message) is dropped, as Spark drops it; a recursive
message is refused (`NotMappable`), as Spark refuses it by default.

Values, as Spark's deserializer reads them: a field that is repeated, has an explicit default (proto2) or is
present gives its value; any other is null. So a proto3 field without `optional` that holds its default (0,
"", false, the first enum value) is null, as in Spark with `emit.default.values` off. A flush's values of a
message of scalar fields are read a field at a time over the parsed messages (`MessageColumns`), to the same
values.
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Any, Callable

import numpy as np
import pyarrow as pa
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from lakelog.platform.schema_registry.arrow_types import TIMESTAMP, NotMappable

_F = FieldDescriptor
_INTS = {_F.TYPE_INT32, _F.TYPE_SINT32, _F.TYPE_SFIXED32, _F.TYPE_UINT32, _F.TYPE_FIXED32}
_LONGS = {_F.TYPE_INT64, _F.TYPE_SINT64, _F.TYPE_SFIXED64, _F.TYPE_UINT64, _F.TYPE_FIXED64}
_PRIMITIVES: dict[int, pa.DataType] = {
    **{t: pa.int32() for t in _INTS}, **{t: pa.int64() for t in _LONGS}, _F.TYPE_FLOAT: pa.float32(),
    _F.TYPE_DOUBLE: pa.float64(), _F.TYPE_BOOL: pa.bool_(), _F.TYPE_STRING: pa.string(), _F.TYPE_BYTES: pa.binary(),
    _F.TYPE_ENUM: pa.string(),
}
_UNSIGNED = {_F.TYPE_UINT32: 32, _F.TYPE_FIXED32: 32, _F.TYPE_UINT64: 64, _F.TYPE_FIXED64: 64}
Convert = Callable[[Any], Any]


def message_type(message: Descriptor) -> pa.StructType:
    """The Arrow type of a message (NotMappable: recursive, or no field left to hold)."""
    fields = _fields(message, (message.full_name,))
    if not fields:
        raise NotMappable(f"message {message.full_name} has no fields Delta can hold (an empty struct)")
    return pa.struct(fields)


def message_converter(message: Descriptor) -> Callable[[Message], dict[str, Any]]:
    """Reads a parsed message as a Python value of `message_type(message)`."""
    message_type(message)  # refuses what has no type, before any value is read
    return _message_convert(message)


# ---- types ---------------------------------------------------------------------------------------------


def _fields(message: Descriptor, seen: tuple[str, ...]) -> list[pa.Field]:
    out = []
    for f in message.fields:
        kind = _field_type(f, seen)
        if kind is not None:
            out.append(pa.field(f.name, kind, True))
    return out


def _field_type(f: FieldDescriptor, seen: tuple[str, ...]) -> pa.DataType | None:
    """None: the field is dropped (an empty message, as Spark drops it)."""
    if f.type in _PRIMITIVES:
        kind: pa.DataType | None = _PRIMITIVES[f.type]
    elif _is_map(f):
        key, value = (_field_type(f.message_type.fields_by_name[n], seen) for n in ("key", "value"))
        if key is None or value is None:
            return None
        return pa.map_(pa.field("key", key, False), pa.field("value", value, True))
    elif _is_timestamp(f.message_type):
        kind = TIMESTAMP
    else:
        name = f.message_type.full_name
        if name in seen:
            raise NotMappable(f"recursive Protobuf message {name} (field {f.full_name}): no Arrow type holds it "
                              "(nor Spark's, by default)")
        inner = _fields(f.message_type, (*seen, name))
        kind = pa.struct(inner) if inner else None
    if kind is None:
        return None
    return pa.list_(pa.field("element", kind, True)) if f.is_repeated else kind


def _is_map(f: FieldDescriptor) -> bool:
    return f.type == _F.TYPE_MESSAGE and f.message_type.GetOptions().map_entry


def _is_timestamp(message: Descriptor) -> bool:
    """Spark's test: named Timestamp, with the fields seconds and nanos in that order."""
    names = [f.name for f in message.fields]
    return message.name == "Timestamp" and names == ["seconds", "nanos"]


# ---- values --------------------------------------------------------------------------------------------


def _message_convert(message: Descriptor) -> Callable[[Message], dict[str, Any]]:
    fields = [(f.name, _field_reader(f)) for f in message.fields if _field_type(f, (message.full_name,)) is not None]

    def convert(value: Message) -> dict[str, Any]:
        return {name: read(value) for name, read in fields}

    return convert


def _field_reader(f: FieldDescriptor) -> Callable[[Message], Any]:
    """A field's value in a message, converted, or None when it has none (`_has_value`), its descriptor's
    questions answered once."""
    name, inner = f.name, _field_convert(f)
    if f.is_repeated or (f.has_default_value and f.has_presence):
        return lambda message: inner(getattr(message, name))
    if f.has_presence:
        return lambda message: inner(getattr(message, name)) if message.HasField(name) else None
    if f.cpp_type in (f.CPPTYPE_FLOAT, f.CPPTYPE_DOUBLE):
        return lambda message: inner(getattr(message, name)) if _has_value(message, f) else None
    default = f.default_value
    if inner is _same:
        return lambda message: None if (value := getattr(message, name)) == default else value
    return lambda message: None if (value := getattr(message, name)) == default else inner(value)


def _has_value(message: Message, f: FieldDescriptor) -> bool:
    """Spark's `isRepeated || hasDefaultValue || hasField`, with Java's hasField (a field without presence
    has a value when it is not its default)."""
    if f.is_repeated or (f.has_default_value and f.has_presence):
        return True
    if f.has_presence:
        return message.HasField(f.name)
    value = getattr(message, f.name)
    if isinstance(value, float):  # Java compares a float's bits: -0.0 is not the default
        return value != 0.0 or math.copysign(1.0, value) < 0
    return value != f.default_value


def _field_convert(f: FieldDescriptor) -> Convert:
    if _is_map(f):
        key = _single_convert(f.message_type.fields_by_name["key"])
        value = _single_convert(f.message_type.fields_by_name["value"])
        return lambda m: [(key(k), value(m[k])) for k in m]
    single = _single_convert(f)
    if f.is_repeated:
        return lambda values: [single(v) for v in values]
    return single


def _single_convert(f: FieldDescriptor) -> Convert:
    if f.type in _UNSIGNED:
        bits = _UNSIGNED[f.type]
        return lambda v: v - (1 << bits) if v >= 1 << (bits - 1) else v
    if f.type == _F.TYPE_ENUM:
        names = {v.number: v.name for v in f.enum_type.values}
        unknown = f"UNKNOWN_ENUM_VALUE_{f.enum_type.name}_"
        return lambda v: names.get(v, f"{unknown}{v}")
    if f.type == _F.TYPE_BYTES:
        return bytes
    if f.type in (_F.TYPE_MESSAGE, _F.TYPE_GROUP):
        if _is_timestamp(f.message_type):
            return lambda m: m.seconds * 1_000_000 + int(m.nanos / 1000)  # toward zero, as Java's toMicros
        return _message_convert(f.message_type)
    return _same


def _same(value: Any) -> Any:
    return value


# ---- many messages at once: a column per field -----------------------------------------------------------


class MessageColumns:
    """The values of many payloads of one message as one struct array, built a field at a time over the parsed
    messages (no dict per message), for a message of scalar fields (no repeated, map or message field: those
    get no `message_columns`). `read` answers as `avro_bulk.BulkReader.read`: the payloads that do not start
    with the message indexes [0] or do not parse are doubtful, left to the one-by-one decoder."""

    def __init__(self, message: Descriptor, cls: type[Message], columns: list[Callable[[list[Any]], pa.Array]]
                 ) -> None:
        self.type = message_type(message)
        self._cls = cls
        self._columns = columns

    def read(self, payloads: Any, skip: int = 0) -> tuple[pa.StructArray, list[int]]:
        rows = payloads.to_pylist() if isinstance(payloads, pa.Array) else payloads
        parse, empty = self._cls.FromString, self._cls()
        messages: list[Any] = []
        doubtful: list[int] = []
        for i, payload in enumerate(rows):
            message = empty
            if len(payload) > skip and payload[skip] == 0:  # the count 0: indexes [0]
                try:
                    message = parse(bytes(payload[skip + 1:]))
                except Exception:  # the one-by-one decoder says what it says of it
                    doubtful.append(i)
            else:
                doubtful.append(i)
            messages.append(message)
        mask = None
        if doubtful:
            nulls = [False] * len(messages)
            for i in doubtful:
                nulls[i] = True
            mask = pa.array(nulls)
        children = [column(messages) for column in self._columns]
        return pa.StructArray.from_arrays(children, fields=list(self.type), mask=mask), doubtful


def message_columns(message: Descriptor, cls: type[Message]) -> MessageColumns | None:
    """The column-wise reader of `message`, or None when a field is not a scalar."""
    columns = []
    for f in message.fields:
        if f.is_repeated or f.type not in _PRIMITIVES:
            return None
        columns.append(_scalar_column(f))
    return MessageColumns(message, cls, columns)


def _scalar_column(f: FieldDescriptor) -> Callable[[list[Any]], pa.Array]:
    """One scalar field of many messages: its values, converted as `_single_convert` does, null where the field
    has no value (`_has_value`)."""
    name, kind, default = f.name, _PRIMITIVES[f.type], f.default_value
    always = f.has_default_value and f.has_presence
    real = f.cpp_type in (f.CPPTYPE_FLOAT, f.CPPTYPE_DOUBLE)
    convert = _single_convert(f)

    def column(messages: list[Any]) -> pa.Array:
        values = list(map(attrgetter(name), messages))
        if always:
            present = None
        elif f.has_presence:
            present = [m.HasField(name) for m in messages]
        elif real:
            present = [v != 0.0 or math.copysign(1.0, v) < 0 for v in values]
        else:
            present = [v != default for v in values]
        if convert is not _same:
            values = [convert(v) for v in values]
        return pa.array(values, kind, mask=None if present is None else ~np.asarray(present, dtype=bool))

    return column
