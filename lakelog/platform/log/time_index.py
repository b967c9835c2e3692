"""Offsets by time: `earliest`, `latest`, or the earliest offset at or after a timestamp, found from the
files' timestamp statistics, then the candidate files' offset and timestamp columns.

Threads: the caller's (offset lookups and resets, the Spark source's options); the log lock `_lock` is
taken only through the offsets and the index's files (offsets.py), files are read outside it.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lakelog.platform.errors import InvalidRequest


class TimeIndex:
    """Offsets by timestamp: a part of `TopicLog`, whose `__init__` (topic_log.py) sets up the state."""

    def offset_for(self, partition: int, spec: str | int) -> int:
        """`earliest`, `latest`, or a timestamp in ms: the earliest offset at or after it (latest if none)."""
        if spec == "earliest":
            return self.log_start_offset(partition)
        if spec == "latest":
            return self.log_end_offset(partition)
        try:
            timestamp = int(spec)
        except (TypeError, ValueError):
            raise InvalidRequest(f"offset spec must be earliest, latest or a timestamp in ms, got {spec!r}") from None
        found = self.offset_for_timestamp(partition, timestamp)
        return self.log_end_offset(partition) if found is None else found

    def offset_for_timestamp(self, partition: int, timestamp_ms: int) -> int | None:
        """The earliest offset whose timestamp is >= `timestamp_ms`; None when there is none."""
        for segment in self.segments(partition):
            if segment.max_timestamp_ms < timestamp_ms:
                continue
            table = self.read_segment_table(segment, ["offset", "timestamp"])
            ts = table.column("timestamp").cast(pa.int64())
            hits = pc.filter(table.column("offset"), pc.greater_equal(ts, timestamp_ms))
            if len(hits):
                return int(pc.min(hits).as_py())
        return None
