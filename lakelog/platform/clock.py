"""Milliseconds since the epoch: the one unit of time lakelog stores, compares and answers with."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa


def now_ms() -> int:
    return int(time.time() * 1000)


def to_ms(value: Any) -> int:
    """A datetime (as a reader may give a timestamp column's value) or a number, in ms; None is 0."""
    if value is None:
        return 0
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1000)
    return int(value)


def column_ms(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """A timestamp column in ms since the epoch, whatever unit the reader gave it."""
    return column.cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
