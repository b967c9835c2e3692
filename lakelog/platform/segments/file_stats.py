"""Delta statistics of topic data files, written and read in one place: the segment and time index.

A topic file's statistics hold min/max of `offset`, `timestamp` (ISO 8601, UTC, milliseconds),
`producer_id` and (layout 2) `partition`, and the record count; the segment index (`index.py`) is built from them, the
log writes them for its own files (through delta-rs) and compaction for the files it rewrites.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
from deltalake.transaction import AddAction

from lakelog.platform.segments.index import SegmentFile

STATS_COLUMNS = ("partition", "offset", "timestamp", "producer_id")  # `partition`: layout 2 files only
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_ms(ms: int) -> str:
    """Milliseconds since the epoch as Delta writes timestamp statistics."""
    return (_EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def file_stats(table: pa.Table) -> str:
    """Delta statistics JSON for a data file: the segment and time index."""
    n = table.num_rows
    mins: dict[str, object] = {}
    maxs: dict[str, object] = {}
    nulls: dict[str, int] = {}
    for name in STATS_COLUMNS:
        if name not in table.column_names:
            continue
        column = table.column(name)
        nulls[name] = column.null_count
        if column.null_count == n:
            continue
        bounds = pc.min_max(column.cast(pa.int64()) if name == "timestamp" else column)
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        if name == "timestamp":
            lo, hi = iso_ms(lo), iso_ms(hi)
        mins[name], maxs[name] = lo, hi
    for name in ("key", "value"):
        nulls[name] = table.column(name).null_count
    return json.dumps({"numRecords": n, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


def segment_of(action: AddAction) -> SegmentFile:
    """The index entry of a file of one partition from its add action (the statistics JSON in it; the
    partition is the add's partition value in layout 1, the `partition` statistics in layout 2)."""
    stats = json.loads(action.stats)
    mins, maxs = stats["minValues"], stats["maxValues"]
    partition_value = (action.partition_values or {}).get("partition")
    if partition_value is not None:
        partition = int(partition_value)
    elif mins.get("partition") == maxs.get("partition") is not None:
        partition = int(mins["partition"])
    else:
        raise ValueError(f"{action.path} holds several partitions: index it from its footer")
    return SegmentFile(
        path=action.path,
        partition=partition,
        size_bytes=action.size,
        num_records=stats["numRecords"],
        min_offset=mins["offset"],
        max_offset=maxs["offset"],
        min_timestamp_ms=parse_iso_ms(mins["timestamp"]),
        max_timestamp_ms=parse_iso_ms(maxs["timestamp"]),
        min_producer_id=mins.get("producer_id"),
        max_producer_id=maxs.get("producer_id"),
        modification_time_ms=action.modification_time,
    )


def holds_several_partitions(action: AddAction) -> bool:
    """A layout 2 file of several partitions: its `partition` statistics span more than one value."""
    try:
        stats = json.loads(action.stats)
        low, high = stats["minValues"]["partition"], stats["maxValues"]["partition"]
        return "offset" in stats["minValues"] and low is not None and high is not None and low != high
    except (KeyError, TypeError, ValueError):
        return False


def parse_iso_ms(text: str) -> int:
    """Delta's statistics timestamps: ISO 8601 in UTC, with or without fractional seconds."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)
