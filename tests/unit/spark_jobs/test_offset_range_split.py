"""Planning helpers: range splitting (minPartitions, maxRecordsPerPartition) and the start/end order check."""

from __future__ import annotations

import pytest

from lakelog.platform.errors import InvalidConfig
from lakelog.spark_jobs.ranges import FileRef, OffsetRange, check_start_not_after_end, split_ranges


def rng(partition: int, start: int, end: int) -> OffsetRange:
    files = tuple(FileRef(f"f{i}", i, i + 9) for i in range(start - start % 10, end, 10))
    return OffsetRange("t", partition, start, end, "uri", files)


def covered(ranges: list[OffsetRange]) -> list[tuple[int, int]]:
    return sorted((r.partition, o) for r in ranges for o in range(r.start, r.end))


def test_max_records_per_partition_caps_every_piece():
    """Guide, maxRecordsPerPartition: "Spark will divvy up Kafka partitions to smaller pieces so that each
    partition has up to maxRecordsPerPartition records"."""
    ranges = [rng(0, 0, 95), rng(1, 5, 25)]
    out = split_ranges(ranges, None, 20)
    assert max(r.size for r in out) <= 20 and covered(out) == covered(ranges)
    assert all(all(f.max_offset >= r.start and f.min_offset < r.end for f in r.files) for r in out)


def test_min_partitions_applies_after_max_records():
    """Guide: "if the final partition count is less than minPartitions it will divvy up partitions again
    based on minPartitions"."""
    ranges = [rng(0, 0, 100)]
    out = split_ranges(ranges, 8, 50)
    assert len(out) >= 8 and covered(out) == covered(ranges)


def test_start_after_end_names_both_options():
    check_start_not_after_end({("t", 0): 5}, {("t", 0): 5}, "startingOffsets", "endingOffsets")
    with pytest.raises(InvalidConfig, match=r"starting offset 6 of t-0 \(option 'startingOffsets'\) is after its "
                                            r"ending offset 5 \(option 'endingTimestamp'\)"):
        check_start_not_after_end({("t", 0): 6}, {("t", 0): 5}, "startingOffsets", "endingTimestamp")
