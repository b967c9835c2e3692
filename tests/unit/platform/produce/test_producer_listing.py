"""platform/produce/producer_listing.py: the producers active on a partition, from the records they wrote."""

from __future__ import annotations

import pyarrow as pa

from lakelog.platform.produce.producer_listing import ActiveProducer, latest_per_producer, partition_producers
from lakelog.platform.segments.index import SegmentFile


def history(*rows: tuple[int, int, int | None, int | None, int | None]) -> pa.Table:
    """(offset, timestamp ms, producer id, epoch, sequence) rows."""
    offsets, stamps, ids, epochs, sequences = (list(c) for c in zip(*rows))
    return pa.table({"offset": pa.array(offsets, pa.int64()), "timestamp": pa.array(stamps, pa.timestamp("ms")),
                     "producer_id": pa.array(ids, pa.int64()), "producer_epoch": pa.array(epochs, pa.int16()),
                     "sequence": pa.array(sequences, pa.int32())})


def test_each_producer_is_answered_by_its_last_record() -> None:
    rows = history((2, 200, 7, 1, 4), (0, 100, 7, 0, 9), (1, 150, 9, 0, 0), (3, 300, None, None, None))
    assert latest_per_producer(rows, 0) == [ActiveProducer(7, 1, 4, 200, 2), ActiveProducer(9, 0, 0, 150, 1)]


def test_producers_silent_since_the_expiration_are_left_out() -> None:
    rows = history((0, 100, 7, 0, 0), (1, 900, 8, 0, 0))
    assert [p.producer_id for p in latest_per_producer(rows, 500)] == [8]


class FakeLog:
    def __init__(self, files: dict[str, pa.Table], segments: list[SegmentFile]) -> None:
        self.files, self._segments, self.read = files, segments, []

    def segments(self, partition: int) -> list[SegmentFile]:
        return self._segments

    def read_segment_table(self, segment: SegmentFile, columns: list[str] | None = None) -> pa.Table:
        self.read.append(segment.path)
        return self.files[segment.path]


def segment(path: str, newest_ms: int, producers: bool) -> SegmentFile:
    return SegmentFile(path, 0, 1, 1, 0, 0, 0, newest_ms, 7 if producers else None, 7 if producers else None)


def test_only_files_with_producers_within_the_expiration_are_read() -> None:
    log = FakeLog({"new": history((5, 1_000, 7, 2, 3))},
                  [segment("old", 10, True), segment("plain", 1_000, False), segment("new", 1_000, True)])
    assert partition_producers(log, 0, now_ms=1_500, expiration_ms=1_000) == [ActiveProducer(7, 2, 3, 1_000, 5)]
    assert log.read == ["new"]
