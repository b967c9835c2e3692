"""Offsets by time: `earliest`, `latest`, or the earliest offset at or after a timestamp, found from the
files' timestamp statistics, then the candidate files' offset and timestamp columns.

Threads: the caller's (offset lookups and resets, the Spark source's options); the log lock is taken only
through the offsets and the index's files (the snapshot's), files are read outside it.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lakelog.platform.errors import InvalidRequest
from lakelog.platform.log.read import LogReader
from lakelog.platform.log.snapshot import LogSnapshot


class TimeIndex:
    """Offsets by timestamp. It owns no state: the files' statistics are the snapshot's, their columns read by
    the reader."""

    def __init__(self, snapshot: LogSnapshot, reader: LogReader) -> None:
        self._snapshot = snapshot
        self._reader = reader

    def offset_for(self, partition: int, spec: str | int) -> int:
        """`earliest`, `latest`, or a timestamp in ms: the earliest offset at or after it (latest if none)."""
        if spec == "earliest":
            return self._snapshot.log_start_offset(partition)
        if spec == "latest":
            return self._snapshot.log_end_offset(partition)
        try:
            timestamp = int(spec)
        except (TypeError, ValueError):
            raise InvalidRequest(f"offset spec must be earliest, latest or a timestamp in ms, got {spec!r}") from None
        found = self.offset_for_timestamp(partition, timestamp)
        return self._snapshot.log_end_offset(partition) if found is None else found

    def offset_for_timestamp(self, partition: int, timestamp_ms: int) -> int | None:
        """The earliest offset whose timestamp is >= `timestamp_ms`; None when there is none."""
        for segment in self._snapshot.segments(partition):
            if segment.max_timestamp_ms < timestamp_ms:
                continue
            table = self._reader.read_segment_table(segment, ["offset", "timestamp"])
            ts = table.column("timestamp").cast(pa.int64())
            hits = pc.filter(table.column("offset"), pc.greater_equal(ts, timestamp_ms))
            if len(hits):
                return int(pc.min(hits).as_py())
        return None
