"""Values in Confluent's wire format (magic byte 0, the schema id as 4 bytes big-endian, the encoded value:
wire_format.py) decoded into Arrow, each with the schema its id names, in the types `arrow_types` maps them to.

A value that is null, not in the wire format, of an unknown or unmappable schema, or that does not decode is
a null struct: the `value` bytes beside it are the record, this column only a view of them. Where a schema has
a bulk reader (`Bulk`: Avro's avro_bulk.py, Protobuf's protobuf_types.MessageColumns), its values are read
together, to the same values; those it does not vouch for, one by one.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

import fastavro
import numpy as np
import pyarrow as pa

from lakelog.platform.schema_registry import avro_compat, protobuf_schema
from lakelog.platform.schema_registry.arrow_types import (
    NotMappable,
    as_struct,
    avro_branches,
    avro_logical,
    avro_value_type,
    avro_widened_union,
    json_kind,
    json_resolved,
    json_value_type,
    nullable_everywhere,
)
from lakelog.platform.schema_registry.avro_bulk import compile_reader
from lakelog.platform.schema_registry.compatibility import AVRO, JSON, PROTOBUF
from lakelog.platform.schema_registry.protobuf_types import message_columns, message_converter, message_type
from lakelog.platform.schema_registry.wire_format import HEADER_BYTES, MAGIC_BYTE, schema_ids

Convert = Callable[[Any], Any]
# Fewer values than this are read one by one: a bulk read costs about half a millisecond a call whatever its size
# (measured, Avro: 125 values read in bulk ~ as dear as one by one, 500 values 25% cheaper).
BULK_MIN_VALUES = 256


class Bulk(Protocol):
    """A reader of many values of one schema (`avro_bulk.BulkReader`): (their struct array in its `type`, null
    where doubtful; the doubtful positions, to read one by one)."""

    @property
    def type(self) -> pa.StructType: ...

    def read(self, payloads: Any, skip: int = 0) -> tuple[pa.StructArray, list[int]]: ...


@dataclass(frozen=True)
class ValueDecoder:
    """One registered schema's decoder: the Arrow type of its values and how to read one (payload after the
    header -> Python value in that type; raises on a value that does not decode)."""

    schema_id: int
    type: pa.StructType
    decode: Callable[[bytes], Any]
    bulk: Bulk | None = None  # many values at once, in `type` (avro_bulk.py, protobuf_types.py); None: one by one


def decoder_of(schema_id: int, schema_type: str, text: str, references: Mapping[str, str] | None = None
               ) -> ValueDecoder:
    """NotMappable for a schema with no Arrow type (a recursive Avro record or Protobuf message)."""
    if schema_type == AVRO:
        parsed = avro_compat.parse(text, references)
        kind = avro_value_type(parsed.schema, parsed.names)
        convert = _avro_convert(parsed.schema, parsed.names)
        wrap = not pa.types.is_struct(kind)
        # Parsed once with fastavro's hint (its named types kept with it): without it, every read parses again.
        schema = fastavro.parse_schema(parsed.schema, named_schemas=dict(parsed.names))
        read = fastavro.schemaless_reader

        def decode_avro(payload: bytes) -> Any:
            value = read(io.BytesIO(payload), schema, None)
            if convert is not _same:
                value = convert(value)
            return {"value": value} if wrap else value

        column_type = nullable_everywhere(as_struct(kind))
        bulk = compile_reader(schema, schema.get("__named_schemas", parsed.names) if isinstance(schema, dict) else {})
        if bulk is not None and nullable_everywhere(bulk.type) != column_type:  # not as arrow_types maps it
            bulk = None
        return ValueDecoder(schema_id, column_type, decode_avro, bulk)
    if schema_type == JSON:
        document = json.loads(text)
        kind = json_value_type(document)
        wrap = not pa.types.is_struct(kind)
        convert_json = _json_convert(document, document)

        def decode_json(payload: bytes) -> Any:
            value = convert_json(json.loads(payload))
            return {"value": value} if wrap else value

        return ValueDecoder(schema_id, nullable_everywhere(as_struct(kind)), decode_json)
    if schema_type == PROTOBUF:
        return _protobuf_decoder(schema_id, protobuf_schema.parse(text, references))
    raise NotMappable(f"{schema_type} schemas are not mapped to typed columns: the values stay in `value`")


def _protobuf_decoder(schema_id: int, schema: protobuf_schema.ProtoSchema) -> ValueDecoder:
    """The column holds the file's first message (Confluent's default message of a schema); a value of another
    message of the file (other message indexes) does not decode here: it is null in the column."""
    message = schema.message([0])
    kind = message_type(message)
    convert = message_converter(message)
    cls = schema.message_class([0])

    def decode_protobuf(payload: bytes) -> Any:
        if len(payload) and payload[0] == 0:  # the count 0: [0], as serializers write it
            return convert(cls.FromString(bytes(payload[1:])))
        indexes, used = protobuf_schema.read_indexes(payload)
        if indexes != [0]:
            raise ValueError(f"message indexes {indexes}: the column holds {message.full_name} (indexes [0])")
        return convert(cls.FromString(bytes(payload[used:])))

    return ValueDecoder(schema_id, nullable_everywhere(kind), decode_protobuf, message_columns(message, cls))


def decode_values(values: Sequence[bytes | None], decoders: Callable[[int], ValueDecoder | None],
                  kind: pa.StructType, ids: Sequence[int | None] | None = None) -> pa.StructArray:
    """The values as one struct array of type `kind` (which holds every decoder's type: see `merged`); `ids`:
    their schema ids (`schema_ids`), when the caller has them already. The values of a schema with a bulk
    reader are read together, those it does not vouch for one by one, as the others."""
    if ids is None:
        ids = schema_ids(values)
    found: dict[int, ValueDecoder | None] = {}
    many = len(values) >= BULK_MIN_VALUES
    bulk: dict[int, tuple[ValueDecoder, Bulk, list[int], list[bytes]]] = {}
    at: list[int] = []  # the positions of `rows`, when some values are read in bulk
    rows: list[Any] = []
    for position, (value, schema_id) in enumerate(zip(values, ids)):
        if schema_id is None or value is None:
            decoder = None
        else:
            decoder = found.get(schema_id, _UNSEEN)
            if decoder is _UNSEEN:
                decoder = found[schema_id] = decoders(schema_id)
            if decoder is not None and decoder.bulk is not None and many:
                _, _, positions, payloads = bulk.setdefault(schema_id, (decoder, decoder.bulk, [], []))
                positions.append(position)
                payloads.append(value[HEADER_BYTES:])
                continue
        if bulk:
            at.append(position)
        rows.append(_decoded(value, decoder))
    if not bulk:
        return _array(rows, kind)
    if len(at) < len(rows):  # the rows before the first value read in bulk
        at[:0] = range(len(rows) - len(at))
    pieces = []
    for decoder, reader, positions, payloads in bulk.values():
        array, doubtful = reader.read(payloads)
        for i in doubtful:
            at.append(positions[i])
            rows.append(_decoded(values[positions[i]], decoder))
        if doubtful:
            kept = np.ones(len(positions), dtype=bool)
            kept[doubtful] = False
            array, positions = array.filter(pa.array(kept)), np.asarray(positions)[kept].tolist()
        pieces.append(conformed(array, kind))
        at.extend(positions)
    whole = pa.concat_arrays([_array(rows, kind), *pieces])
    return whole.take(pa.array(np.argsort(np.asarray(at, dtype=np.int64), kind="stable")))


def common_schema_id(values: pa.Array) -> int | None:
    """`wire_format.common_schema_id` of an Arrow binary array, over its buffers."""
    if len(values) == 0 or values.null_count or not (pa.types.is_binary(values.type)
                                                     or pa.types.is_large_binary(values.type)):
        return None
    width = np.int64 if pa.types.is_large_binary(values.type) else np.int32
    first = values.offset
    offsets = np.frombuffer(values.buffers()[1], dtype=width)[first:first + len(values) + 1].astype(np.int64)
    starts = offsets[:-1]
    if (offsets[1:] - starts).min() < HEADER_BYTES:
        return None
    headers = np.frombuffer(values.buffers()[2], dtype=np.uint8)[starts[:, None] + np.arange(HEADER_BYTES)]
    first = headers[0]
    if first[0] != MAGIC_BYTE or not (headers == first).all():
        return None
    return int.from_bytes(first[1:].tobytes(), "big")


def decode_bulk(values: pa.Array, decoder: ValueDecoder, kind: pa.StructType) -> pa.StructArray | None:
    """`decode_values` of values all under `decoder`'s schema (`common_schema_id`), read by its bulk reader
    straight from their Arrow buffers; None when it has none, or some values need reading one by one."""
    if decoder.bulk is None or len(values) < BULK_MIN_VALUES:
        return None
    array, doubtful = decoder.bulk.read(values, HEADER_BYTES)
    return None if doubtful else conformed(array, kind)


def _array(rows: list[Any], kind: pa.StructType) -> pa.StructArray:
    try:
        return pa.array(rows, type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # one row's values do not fit: only it is null
        return pa.array([_fits(row, kind) for row in rows], type=kind)


def _decoded(value: bytes | None, decoder: ValueDecoder | None) -> Any:
    if decoder is None or value is None:
        return None
    try:
        return decoder.decode(value[HEADER_BYTES:])
    except Exception:  # bytes from any producer: whatever a decoder raises on them, the view is null
        return None


_UNSEEN = ValueDecoder(-1, pa.struct([]), lambda payload: None)  # a marker: no decoder looked up yet for the id


def _fits(row: Any, kind: pa.DataType) -> Any:
    try:
        pa.array([row], type=kind)
        return row
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None


# ---- Avro: fastavro's values in the mapped types ------------------------------------------------------------


def _same(value: Any) -> Any:
    return value


def _avro_convert(schema: Any, names: Mapping[str, Any]) -> Convert:
    """A converter built once per schema (named types shared lazily: a schema is never recursive here)."""
    if isinstance(schema, str):
        return _avro_convert(names[schema], names) if schema in names else _same
    if isinstance(schema, list):
        return _union_convert(schema, names)
    kind, logical = schema.get("type"), avro_logical(schema)
    if logical in ("time-millis", "time-micros") and kind in ("int", "long"):
        per_second = 1000 if logical == "time-millis" else 1_000_000
        return lambda v: None if v is None else _time_units(v, per_second)
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        per_second = 1000 if logical == "local-timestamp-millis" else 1_000_000
        return lambda v: None if v is None else _local_units(v, per_second)
    if logical == "uuid":
        return lambda v: None if v is None else str(v)
    if kind == "record":
        fields = [(f["name"], _avro_convert(f["type"], names)) for f in schema["fields"]]
        if all(convert is _same for _, convert in fields):  # fastavro's dict, every field as it is: no copy
            return _same
        return lambda v: None if v is None else {name: convert(v.get(name)) for name, convert in fields}
    if kind == "array":
        items = _avro_convert(schema["items"], names)
        if items is _same:
            return _same
        return lambda v: None if v is None else [items(x) for x in v]
    if kind == "map":
        values = _avro_convert(schema["values"], names)
        return lambda v: None if v is None else [(k, values(x)) for k, x in v.items()]
    if isinstance(kind, (dict, list)):
        return _avro_convert(kind, names)
    return _same


def _union_convert(union: list, names: Mapping[str, Any]) -> Convert:
    _, others = avro_branches(union)
    if len(others) == 1:
        return _avro_convert(others[0], names)
    if not others or avro_widened_union(others) is not None:
        return _same
    branches = [(_avro_matcher(b, names), _avro_convert(b, names)) for b in others]

    def convert(value: Any) -> Any:
        if value is None:
            return None
        for i, (matches, inner) in enumerate(branches):
            if matches(value):
                return {f"member{i}": inner(value)}
        raise ValueError(f"no union branch holds {value!r}")

    return convert


def _avro_matcher(schema: Any, names: Mapping[str, Any]) -> Callable[[Any], bool]:
    """Which branch of a union a decoded value came from, told by its Python type (as fastavro's writer
    tells it)."""
    while isinstance(schema, str) and schema in names:
        schema = names[schema]
    kind = schema if isinstance(schema, str) else schema.get("type")
    logical = avro_logical(schema)
    by_logical = {"date": datetime.date, "timestamp-millis": datetime.datetime,
                  "timestamp-micros": datetime.datetime, "decimal": decimal.Decimal, "uuid": uuid.UUID,
                  "time-millis": datetime.time, "time-micros": datetime.time,
                  "local-timestamp-millis": datetime.datetime, "local-timestamp-micros": datetime.datetime}
    if logical in by_logical:
        return lambda v: isinstance(v, by_logical[logical])
    if kind == "record":
        fields = {f["name"] for f in schema["fields"]}
        return lambda v: isinstance(v, dict) and set(v) == fields
    if kind == "enum":
        symbols = set(schema["symbols"])
        return lambda v: isinstance(v, str) and v in symbols
    simple: dict[str, Callable[[Any], bool]] = {
        "boolean": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, float), "double": lambda v: isinstance(v, float),
        "bytes": lambda v: isinstance(v, bytes), "fixed": lambda v: isinstance(v, bytes),
        "string": lambda v: isinstance(v, str), "array": lambda v: isinstance(v, list),
        "map": lambda v: isinstance(v, dict),
    }
    return simple.get(kind, lambda v: False)


def _time_units(value: datetime.time, per_second: int) -> int:
    seconds = value.hour * 3600 + value.minute * 60 + value.second
    return seconds * per_second + value.microsecond * per_second // 1_000_000


_EPOCH = datetime.datetime(1970, 1, 1)


def _local_units(value: datetime.datetime, per_second: int) -> int:
    delta = value.replace(tzinfo=None) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * per_second + delta.microseconds * per_second // 1_000_000


# ---- JSON: a document's values in the mapped types ----------------------------------------------------------


def _json_convert(schema: Any, root: Any, seen: tuple[str, ...] = ()) -> Convert:
    """Walks the schema as `arrow_types._json_type` does. A value of the wrong JSON type for its field is null
    (the field only; the value's JSON is in `value`)."""
    schema, seen = json_resolved(schema, root, seen)
    kind = json_kind(schema)
    if kind == "object" and isinstance(schema.get("properties"), dict) and schema["properties"]:
        fields = [(str(n), _json_convert(sub, root, seen)) for n, sub in schema["properties"].items()]
        return lambda v: {n: c(v.get(n)) for n, c in fields} if isinstance(v, dict) else None
    if kind == "array" and isinstance(schema.get("items"), dict):
        items = _json_convert(schema["items"], root, seen)
        return lambda v: [items(x) for x in v] if isinstance(v, list) else None
    if kind == "integer":
        return lambda v: v if isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63 else None
    if kind == "number":
        return lambda v: float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if kind == "boolean":
        return lambda v: v if isinstance(v, bool) else None
    if kind == "string":
        return lambda v: v if isinstance(v, str) else None
    return lambda v: None if v is None else json.dumps(v, separators=(",", ":"))  # JSON_TEXT


# ---- a column as a reader's type -----------------------------------------------------------------------------


def conformed(array: pa.Array | pa.ChunkedArray, kind: pa.DataType) -> pa.Array:
    """`array` (as stored in one file) in `kind` (the table's type, as a reader declared it): struct fields
    matched by name, those the file lacks null, those `kind` lacks dropped; numbers widened."""
    if isinstance(array, pa.ChunkedArray):
        array = pa.concat_arrays(array.chunks) if array.num_chunks else pa.array([], kind)
    if array.type == kind:
        return array
    array = pa.concat_arrays([array])  # no slice offset: children and offsets line up with the parent
    if pa.types.is_struct(kind) and pa.types.is_struct(array.type):
        names = {f.name for f in array.type}
        children = [conformed(array.field(f.name), f.type) if f.name in names else pa.nulls(len(array), f.type)
                    for f in kind]
        return pa.StructArray.from_arrays(children, fields=list(kind), mask=array.is_null())
    if pa.types.is_list(kind) and pa.types.is_list(array.type):
        return pa.ListArray.from_arrays(array.offsets, conformed(array.values, kind.value_type), type=kind,
                                        mask=array.is_null())
    if pa.types.is_map(kind) and pa.types.is_map(array.type):
        return pa.MapArray.from_arrays(array.offsets, array.keys, conformed(array.items, kind.item_type), type=kind,
                                       mask=array.is_null())
    return array.cast(kind)
