"""Offset ranges to read, planned on the driver from the segment index (Delta file stats).

A range is [start, end) of one topic-partition plus the files that hold it,
so an executor reads parquet directly, without opening the Delta log. Offsets
removed by retention before they were read are data loss: an error when
`failOnDataLoss` is true, skipped with a warning when false. Gaps left by log
compaction are normal and never reported.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

from lakelog.platform.broker.reader import TopicReader
from lakelog.platform.errors import InvalidConfig, OffsetOutOfRange
from lakelog.platform.records import TopicPartition
from lakelog.platform.segments.index import SegmentFile

log = logging.getLogger(__name__)


class DataLoss(OffsetOutOfRange):
    """Offsets a query still had to read were removed (retention) before it read them."""


@dataclass(frozen=True)
class FileRef:
    path: str  # relative to the table root
    min_offset: int
    max_offset: int
    row_groups: tuple[int, ...] | None = None  # the partition's own, in a file holding several

    @classmethod
    def of(cls, segment: SegmentFile) -> FileRef:
        return cls(segment.path, segment.min_offset, segment.max_offset, segment.row_groups)


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int  # exclusive
    table_uri: str
    files: tuple[FileRef, ...]

    @property
    def size(self) -> int:
        return self.end - self.start


def check_data_loss(topic: str, partition: int, start: int, log_start: int, log_end: int,
                    fail_on_data_loss: bool) -> int:
    """The offset to read from: `start`, or the log start when records before it were removed."""
    if start >= log_start:
        return start
    message = (f"offsets {start}..{log_start - 1} of {topic}-{partition} were removed (retention) before they "
               f"were read; the log now starts at {log_start}. Some data may have been lost. If you want the "
               f"query to go on past missing data, set the option failOnDataLoss to false.")
    if fail_on_data_loss:
        raise DataLoss(message, log_start, log_end)
    log.warning(message)
    return log_start


def check_start_not_after_end(starts: dict[TopicPartition, int], ends: dict[TopicPartition, int],
                              starting_option: str, ending_option: str) -> None:
    """A batch range that starts after it ends is a wrong option, not an empty result (Kafka fails too)."""
    for (topic, partition), end in sorted(ends.items()):
        start = starts.get((topic, partition))
        if start is not None and start > end:
            raise InvalidConfig(f"the starting offset {start} of {topic}-{partition} (option {starting_option!r}) "
                                f"is after its ending offset {end} (option {ending_option!r})")


def plan_ranges(reader: TopicReader, starts: dict[TopicPartition, int], ends: dict[TopicPartition, int],
                fail_on_data_loss: bool, min_partitions: int | None = None,
                max_records_per_partition: int | None = None) -> list[OffsetRange]:
    ranges = []
    for (topic, partition), end in sorted(ends.items()):
        topic_log = reader.topic_log(topic)
        start = starts.get((topic, partition), topic_log.log_start_offset(partition))
        start = check_data_loss(topic, partition, start, topic_log.log_start_offset(partition),
                                topic_log.log_end_offset(partition), fail_on_data_loss)
        if end <= start:
            continue
        files = _files(topic_log.segments(partition), start, end)
        ranges.append(OffsetRange(topic, partition, start, end, topic_log.uri, files))
    return split_ranges(ranges, min_partitions, max_records_per_partition)


def _files(segments: list[SegmentFile], start: int, end: int) -> tuple[FileRef, ...]:
    return tuple(FileRef.of(s) for s in segments if s.max_offset >= start and s.min_offset < end)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Split ranges as Kafka's range calculator: first into pieces of at most `max_records_per_partition`,
    then, when there are still fewer than `min_partitions` tasks, the large ones in proportion to their size."""
    if max_records_per_partition:
        ranges = [piece for r in ranges for piece in _split(r, math.ceil(r.size / max_records_per_partition))]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    return [piece for r in ranges
            for piece in _split(r, max(1, min(r.size, math.ceil(r.size / total * min_partitions))))]


def _split(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """`r` cut into `parts` ranges of (nearly) equal size, each with only the files it reads."""
    if parts <= 1:
        return [r]
    step = r.size / parts
    bounds = [r.start + round(i * step) for i in range(parts)] + [r.end]
    return [replace(r, start=lo, end=hi, files=tuple(f for f in r.files if f.max_offset >= lo and f.min_offset < hi))
            for lo, hi in zip(bounds, bounds[1:])]
