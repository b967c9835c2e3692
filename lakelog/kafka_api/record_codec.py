"""The records of a Kafka v2 batch to Arrow arrays and back, in bulk: no Python work per record.

The byte work is `compiled_codec.pyx` (Cython, built at install), or its pure-Python twin
`python_codec.py` where the compiled module is missing (`COMPILED` says which serves); both turn a
batch's uncompressed records into flat columns (offsets into byte buffers, validity bytes) and back. This
module turns those columns into Arrow arrays (`pa.Array.from_buffers`, no copy) and Arrow arrays into them.
Batch framing, compression and CRCs are `batches.py`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakelog.kafka_api import python_codec
from lakelog.schemas import HEADERS_TYPE

compiled_codec: ModuleType | None
try:
    from lakelog.kafka_api import compiled_codec
except ImportError:  # built at install where a C compiler is (pyproject.toml's ext-modules); else pure Python
    compiled_codec = None

COMPILED = compiled_codec is not None
IMPLEMENTATION: ModuleType = compiled_codec if compiled_codec is not None else python_codec
HEADER_FIELDS = HEADERS_TYPE.value_type  # struct<key: string, value: binary>


def crc32c(data: bytes | bytearray | memoryview, implementation: ModuleType | None = None) -> int:
    """CRC-32C (Castagnoli) of `data`, as a v2 batch carries it (the compiled module uses the processor's
    instruction where there is one)."""
    return int((implementation or IMPLEMENTATION).crc32c(data))


def decode_lists(payload: bytes | bytearray | memoryview, count: int, first_timestamp: int, max_timestamp: int,
                 log_append_time: bool, implementation: ModuleType | None = None
                 ) -> tuple[list[bytes | None], list[bytes | None], list[list[dict] | None] | None, list[int | None]]:
    """A small batch's records as Python lists, built by the compiled module (`RecordColumns`' form: a small
    call costs no Arrow work of its own before its flush): keys, values, headers (None when no record has
    any), timestamps (None where the producer left them out). Raises ValueError as `decode` does."""
    keys, values, headers, timestamps = (implementation or IMPLEMENTATION).decode_lists(
        payload, count, first_timestamp, max_timestamp, log_append_time)
    return keys, values, headers, timestamps


@dataclass(frozen=True)
class Records:
    """A batch's records as Arrow arrays: offset and timestamp deltas (int64, numpy), keys and values
    (binary), headers (`HEADERS_TYPE`; null where a record has none)."""

    offset_deltas: np.ndarray
    timestamp_deltas: np.ndarray
    keys: pa.Array
    values: pa.Array
    headers: pa.Array

    def __len__(self) -> int:
        return len(self.offset_deltas)


def decode(payload: bytes | bytearray | memoryview, count: int, implementation: ModuleType | None = None) -> Records:
    """`count` records from a batch's uncompressed payload; raises ValueError when they are malformed (header
    keys that are not UTF-8 included)."""
    (offset_deltas, timestamp_deltas, key_offsets, key_valid, key_data, value_offsets, value_valid, value_data,
     header_offsets, hkey_offsets, hkey_data, hval_offsets, hval_valid, hval_data) = \
        (implementation or IMPLEMENTATION).decode_records(payload, count)
    keys = _binary(pa.binary(), key_offsets, key_valid, key_data)
    values = _binary(pa.binary(), value_offsets, value_valid, value_data)
    if len(hkey_offsets) == 1:  # no record has headers
        headers = pa.nulls(count, HEADERS_TYPE)
    else:
        header_keys = _binary(pa.string(), hkey_offsets, None, hkey_data)
        try:
            header_keys.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise ValueError(f"a header key that is not UTF-8: {exc}") from None
        pairs = pa.StructArray.from_arrays([header_keys, _binary(pa.binary(), hval_offsets, hval_valid, hval_data)],
                                           fields=list(HEADER_FIELDS))
        none = np.diff(header_offsets) == 0
        headers = pa.Array.from_buffers(HEADERS_TYPE, count, [_bitmap(~none), pa.py_buffer(header_offsets)],
                                        int(none.sum()), children=[pairs])
    return Records(offset_deltas, timestamp_deltas, keys, values, headers)


def _binary(kind: pa.DataType, offsets: np.ndarray, valid: np.ndarray | None, data: np.ndarray) -> pa.Array:
    nulls = 0 if valid is None else len(valid) - int(np.count_nonzero(valid))
    bitmap = _bitmap(valid.view(bool)) if nulls and valid is not None else None
    return pa.Array.from_buffers(kind, len(offsets) - 1, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], nulls)


def _bitmap(valid: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def encode(offset_deltas: np.ndarray, timestamp_deltas: np.ndarray, keys: pa.Array | pa.ChunkedArray,
           values: pa.Array | pa.ChunkedArray, headers: pa.Array | pa.ChunkedArray | None,
           run_starts: np.ndarray | None = None, headroom: int = 0,
           implementation: ModuleType | None = None) -> tuple[bytearray, np.ndarray]:
    """The records' bytes and each record's end in them (int64), from their deltas (int64) and their keys,
    values (binary) and headers (`HEADERS_TYPE`, null or empty for none); `headroom` bytes left before the
    records of each run that starts at a row of `run_starts` (a batch's header, written in place after)."""
    n = len(offset_deltas)
    starts = np.zeros(0, np.int64) if run_starts is None else np.ascontiguousarray(run_starts, np.int64)
    key_offsets, key_valid, key_data = _flat(keys)
    value_offsets, value_valid, value_data = _flat(values)
    if headers is None or headers.null_count == len(headers):
        header_offsets = np.zeros(n + 1, np.int32)
        hkey_offsets = hval_offsets = np.zeros(1, np.int32)
        hkey_data = hval_data = hval_valid = np.zeros(0, np.uint8)
    else:
        counts = pc.fill_null(pc.list_value_length(headers), 0).to_numpy(zero_copy_only=False)
        header_offsets = np.zeros(n + 1, np.int32)
        np.cumsum(counts, out=header_offsets[1:])
        pairs = pc.list_flatten(headers)
        hkey_offsets, _, hkey_data = _flat(pc.struct_field(pairs, "key"))
        hval_offsets, hval_valid, hval_data = _flat(pc.struct_field(pairs, "value"))
    return (implementation or IMPLEMENTATION).encode_records(
        np.ascontiguousarray(offset_deltas, np.int64), np.ascontiguousarray(timestamp_deltas, np.int64),
        key_offsets, key_valid, key_data, value_offsets, value_valid, value_data,
        header_offsets, hkey_offsets, hkey_data, hval_offsets, hval_valid, hval_data, starts, headroom)


def _flat(array: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A binary or string array's offsets (int32, len + 1, into the data as it lies), validity (uint8) and
    data (uint8), without copying the data."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if pa.types.is_null(array.type):
        array = array.cast(pa.binary())
    if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
        array = array.cast(pa.binary())
    n = len(array)
    buffers = array.buffers()
    offsets = (np.frombuffer(buffers[1], np.int32)[array.offset:array.offset + n + 1] if buffers[1] is not None
               else np.zeros(n + 1, np.int32))
    valid = (np.ones(n, np.uint8) if array.null_count == 0
             else array.is_valid().to_numpy(zero_copy_only=False).view(np.uint8))
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return np.ascontiguousarray(offsets), np.ascontiguousarray(valid), data
