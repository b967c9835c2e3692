"""Avro payloads of one schema decoded together, with numpy over their bytes: no Python per record.

A reader is compiled once per schema (`compile_reader`) for the schemas most typed topics use: a record of
records, `null`, `boolean`, `int`, `long`, `float`, `double`, `string`, `bytes`, `fixed`, `enum` fields and
unions of `null` and one of those. Others (arrays, maps, other unions, logical types, whose values fastavro
converts and may refuse) get no reader: their payloads are read one by one, as before.

The reader never decides that a payload is bad. It vouches for the payloads it decoded for certain (every
byte used, each varint of at most 9 bytes, each length, enum index and union branch in range, each string
UTF-8, booleans 0 or 1, ints within 32 bits) and answers the positions of the others, "doubtful": the callers
read those with fastavro, one by one, which then says whether and why they fail. So a payload vouched for is
one fastavro reads, to the same values: record validation (validation.py) and the typed column
(arrow_values.py) give the same answers, only sooner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "string", "bytes"}
_MAX_VARINT = 9  # bytes: 63 bits, read by fastavro and here alike; longer ones are doubtful
_INT32 = (-(2 ** 31), 2 ** 31 - 1)


class _Cursor:
    """The payloads of one call, concatenated, and where each one's reading is."""

    def __init__(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray, skip: int) -> None:
        self.data = data  # padded: reads past an end stay in it
        self.end = ends
        self.pos = starts + skip
        self.ok = ends - starts >= skip

    @classmethod
    def of(cls, payloads: Sequence[bytes | memoryview] | pa.Array, skip: int) -> _Cursor:
        """Over Python bytes, or over an Arrow binary array without nulls (its buffers, as they are)."""
        if isinstance(payloads, pa.Array):
            width = np.int64 if pa.types.is_large_binary(payloads.type) else np.int32
            first, count = payloads.offset, len(payloads)
            offsets = np.frombuffer(payloads.buffers()[1], dtype=width)[first:first + count + 1].astype(np.int64)
            raw = payloads.buffers()[2]
            data = np.frombuffer(raw, dtype=np.uint8) if raw is not None else np.zeros(0, dtype=np.uint8)
            return cls(np.concatenate([data, np.zeros(16, dtype=np.uint8)]), offsets[:-1], offsets[1:], skip)
        lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
        ends = np.cumsum(lengths)
        return cls(np.frombuffer(b"".join(payloads) + bytes(16), dtype=np.uint8), ends - lengths, ends, skip)

    def varint(self, live: np.ndarray) -> np.ndarray:
        """Zigzag varints at the live rows' positions (garbage elsewhere); those that cannot be read for sure are
        no longer ok. Byte by byte over the rows whose varint goes on: most are one or two bytes long."""
        live = live & self.ok
        pos = self.pos
        byte = self.data[pos]
        raw = (byte & 0x7F).astype(np.uint64)
        size = np.ones(len(pos), dtype=np.int64)
        more = np.flatnonzero(live & (byte >= 0x80))
        for k in range(1, _MAX_VARINT + 1):
            if not len(more):
                break
            if k == _MAX_VARINT:  # a tenth byte: doubtful
                self.fail(np.isin(np.arange(len(pos)), more))
                break
            byte = self.data[pos[more] + k]
            raw[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            size[more] += 1
            more = more[byte >= 0x80]
        self.fail(live & (pos + size > self.end))
        value = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
        self.advance(live & self.ok, size)
        return value

    def take(self, live: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The next `sizes` bytes of each live row (none of the others): (offsets, bytes), as Arrow lays them."""
        self.fail(live & ((sizes < 0) | (self.pos + sizes > self.end)))
        sizes = np.where(live & self.ok, sizes, 0)
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        index = np.arange(offsets[-1], dtype=np.int64) + np.repeat(self.pos - offsets[:-1], sizes)
        self.pos = self.pos + sizes
        return offsets, self.data[index]

    def fail(self, rows: np.ndarray) -> None:
        self.ok &= ~rows

    def advance(self, rows: np.ndarray, size: np.ndarray | int) -> None:
        self.pos = np.where(rows, self.pos + size, self.pos)


Read = Callable[[_Cursor, np.ndarray], pa.Array]  # the column of the live rows (null elsewhere)


@dataclass(frozen=True)
class BulkReader:
    """A compiled reader: `read(payloads)` -> (the values as a struct array of `type`, null where doubtful;
    the doubtful positions)."""

    type: pa.StructType
    _read: Read

    def read(self, payloads: Sequence[bytes | memoryview] | pa.Array, skip: int = 0
             ) -> tuple[pa.StructArray, list[int]]:
        """`skip`: bytes before each payload (a header) left out; `payloads` an Arrow binary array has no null."""
        cursor = _Cursor.of(payloads, skip)
        live = cursor.ok.copy()
        column = self._read(cursor, live)
        cursor.fail(cursor.pos != cursor.end)  # every byte used
        good = cursor.ok
        array = pa.StructArray.from_arrays(column.flatten(), fields=list(self.type), mask=pa.array(~good))
        return array, np.flatnonzero(~good).tolist()

    def doubtful(self, payloads: Sequence[bytes | memoryview], skip: int = 0) -> list[int]:
        return self.read(payloads, skip)[1]


def compile_reader(schema: Any, names: Mapping[str, Any]) -> BulkReader | None:
    """The bulk reader of a top-level record schema (fastavro's parsed form; `names`: its named types), or None
    when the schema holds a type it does not read."""
    compiled = _compile(schema, names, ())
    if compiled is None or not pa.types.is_struct(compiled[0]):
        return None
    return BulkReader(compiled[0], compiled[1])


def _compile(schema: Any, names: Mapping[str, Any], seen: tuple[str, ...]) -> tuple[pa.DataType, Read] | None:
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _primitive(schema)
        if schema in names and schema not in seen:
            return _compile(names[schema], names, (*seen, schema))
        return None
    if isinstance(schema, list):
        return _optional(schema, names, seen)
    if not isinstance(schema, dict) or "logicalType" in schema:
        return None
    kind = schema.get("type")
    if kind == "record":
        fields = []
        for f in schema["fields"]:
            compiled = _compile(f["type"], names, (*seen, schema.get("name", "")))
            if compiled is None:
                return None
            fields.append((f["name"], *compiled))
        return _record(fields)
    if kind == "enum":
        return _enum(list(schema["symbols"]))
    if kind == "fixed":
        return _fixed(int(schema["size"]))
    if isinstance(kind, str) and kind in _PRIMITIVES:
        return _primitive(kind)
    return None


def _valid(live: np.ndarray) -> pa.Array:
    return pa.array(~live)


def _primitive(kind: str) -> tuple[pa.DataType, Read]:
    if kind == "null":
        return pa.string(), lambda cursor, live: pa.nulls(len(live), pa.string())
    if kind in ("int", "long"):
        arrow = pa.int32() if kind == "int" else pa.int64()

        def read_integer(cursor: _Cursor, live: np.ndarray) -> pa.Array:
            value = cursor.varint(live)
            if kind == "int":
                cursor.fail(live & ((value < _INT32[0]) | (value > _INT32[1])))
                value = np.where(live & cursor.ok, value, 0).astype(np.int32)
            return pa.array(value, arrow, mask=~live)
        return arrow, read_integer
    if kind in ("float", "double"):
        size, dtype, arrow = (4, "<f4", pa.float32()) if kind == "float" else (8, "<f8", pa.float64())

        def read_real(cursor: _Cursor, live: np.ndarray) -> pa.Array:
            _, raw = cursor.take(live, np.full(len(live), size, dtype=np.int64))
            values = np.zeros(len(live), dtype=dtype)
            values[live & cursor.ok] = raw.view(dtype)
            return pa.array(values, arrow, mask=~live)
        return arrow, read_real
    if kind == "boolean":
        def read_boolean(cursor: _Cursor, live: np.ndarray) -> pa.Array:
            _, raw = cursor.take(live, np.ones(len(live), dtype=np.int64))
            values = np.zeros(len(live), dtype=np.uint8)
            values[live & cursor.ok] = raw
            cursor.fail(live & (values > 1))
            return pa.array(values == 1, pa.bool_(), mask=~live)
        return pa.bool_(), read_boolean
    text = kind == "string"
    arrow = pa.string() if text else pa.binary()

    def read_bytes(cursor: _Cursor, live: np.ndarray) -> pa.Array:
        sizes = cursor.varint(live)
        offsets, raw = cursor.take(live & cursor.ok, sizes)
        return _binary(arrow, offsets, raw, live, cursor if text else None)
    return arrow, read_bytes


def _binary(arrow: pa.DataType, offsets: np.ndarray, raw: np.ndarray, live: np.ndarray,
            text_of: _Cursor | None) -> pa.Array:
    """Strings or bytes from Arrow's buffers; strings that are not UTF-8 are doubtful (`text_of`'s rows)."""
    if offsets[-1] >= 2 ** 31:
        arrow_offsets, kind = offsets, (pa.large_string() if arrow == pa.string() else pa.large_binary())
    else:
        arrow_offsets, kind = offsets.astype(np.int32), arrow
    bitmap = pa.array(live).buffers()[1]
    array = pa.Array.from_buffers(kind, len(live), [bitmap, pa.py_buffer(arrow_offsets), pa.py_buffer(raw)])
    if text_of is not None:
        try:
            array.validate(full=True)
        except pa.ArrowInvalid:  # which ones: Python says (only when some are not UTF-8)
            blob = raw.tobytes()
            for row in np.flatnonzero(live):
                try:
                    blob[offsets[row]:offsets[row + 1]].decode()
                except UnicodeDecodeError:
                    text_of.fail(np.arange(len(live)) == row)
            array = pa.Array.from_buffers(kind, len(live), [pa.array(live & text_of.ok).buffers()[1],
                                                            pa.py_buffer(arrow_offsets), pa.py_buffer(raw)])
    return array if kind == arrow else array.cast(arrow)


def _fixed(size: int) -> tuple[pa.DataType, Read]:
    def read_fixed(cursor: _Cursor, live: np.ndarray) -> pa.Array:
        offsets, raw = cursor.take(live, np.full(len(live), size, dtype=np.int64))
        return _binary(pa.binary(), offsets, raw, live, None)
    return pa.binary(), read_fixed


def _enum(symbols: list[str]) -> tuple[pa.DataType, Read]:
    names = pa.array(symbols, pa.string())

    def read_enum(cursor: _Cursor, live: np.ndarray) -> pa.Array:
        index = cursor.varint(live)
        cursor.fail(live & ((index < 0) | (index >= len(symbols))))
        return names.take(pa.array(np.where(live & cursor.ok, index, 0), mask=~live))
    return pa.string(), read_enum


def _record(fields: list[tuple[str, pa.DataType, Read]]) -> tuple[pa.DataType, Read]:
    kind = pa.struct([pa.field(name, arrow) for name, arrow, _ in fields])

    def read_record(cursor: _Cursor, live: np.ndarray) -> pa.Array:
        children = [read(cursor, live) for _, _, read in fields]
        return pa.StructArray.from_arrays(children, fields=list(kind), mask=_valid(live))
    return kind, read_record


def _optional(union: list, names: Mapping[str, Any], seen: tuple[str, ...]) -> tuple[pa.DataType, Read] | None:
    """A union of null and one other type (either order): that type, null when the branch is null."""
    if len(union) != 2 or union.count("null") != 1:
        return None
    present = 1 - union.index("null")
    compiled = _compile(union[present], names, seen)
    if compiled is None:
        return None
    arrow, inner = compiled

    def read_optional(cursor: _Cursor, live: np.ndarray) -> pa.Array:
        branch = cursor.varint(live)
        cursor.fail(live & (branch != 0) & (branch != 1))
        return inner(cursor, live & cursor.ok & (branch == present))
    return arrow, read_optional
