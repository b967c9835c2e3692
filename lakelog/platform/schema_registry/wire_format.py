"""Confluent's wire format of a serialized key or value: magic byte 0, the schema id as 4 bytes big-endian,
then the serialized payload (Avro binary, JSON text, or Protobuf message indexes then the message).

The one place that reads and writes the frame: record validation, value_format=json and the typed columns
of a topic's table all use it.
"""

from __future__ import annotations

import struct
from typing import Sequence, cast

import numpy as np

MAGIC_BYTE = 0
HEADER_BYTES = 5
_HEADER = struct.Struct(">bI")


class NotWireFormat(ValueError):
    """The bytes are not in Confluent's wire format; the message says why."""


def split_wire(data: bytes | None) -> tuple[int, memoryview]:
    """(schema id, payload) of `data`; NotWireFormat when it is null, too short or has another magic byte."""
    if data is None:
        raise NotWireFormat("null, not in Confluent's wire format (magic byte 0 and a schema id)")
    if len(data) < HEADER_BYTES:
        raise NotWireFormat(f"{len(data)} bytes, too short for Confluent's wire format (magic byte 0 and a "
                            "4-byte schema id)")
    if data[0] != MAGIC_BYTE:
        raise NotWireFormat(f"magic byte {data[0]}, not Confluent's wire format (magic byte 0)")
    return _HEADER.unpack_from(data)[1], memoryview(data)[HEADER_BYTES:]


def schema_id_of(data: bytes | None) -> int | None:
    """The schema id of wire-format bytes, None for anything else."""
    try:
        return split_wire(data)[0]
    except NotWireFormat:
        return None


def schema_ids(values: Sequence[bytes | None]) -> list[int | None]:
    """`schema_id_of` of each value, in one pass."""
    return [int.from_bytes(v[1:HEADER_BYTES], "big") if v is not None and len(v) >= HEADER_BYTES and v[0] == MAGIC_BYTE
            else None for v in values]


def common_schema_id(values: Sequence[bytes | None]) -> int | None:
    """The schema id of every value when all are in the wire format under one id (the usual call), else None;
    with numpy over their bytes, no Python per value."""
    if not values or None in values:
        return None
    present = cast(Sequence[bytes], values)
    lengths = np.fromiter(map(len, present), dtype=np.int64, count=len(present))
    if lengths.min() < HEADER_BYTES:
        return None
    starts = np.cumsum(lengths) - lengths
    headers = np.frombuffer(b"".join(present), dtype=np.uint8)[starts[:, None] + np.arange(HEADER_BYTES)]
    first = headers[0]
    if first[0] != MAGIC_BYTE or not (headers == first).all():
        return None
    return int.from_bytes(first[1:].tobytes(), "big")


def framed(schema_id: int, payload: bytes) -> bytes:
    """`payload` in the wire format, under `schema_id`."""
    return _HEADER.pack(MAGIC_BYTE, schema_id) + payload
