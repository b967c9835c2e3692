"""Which files a fetch reads, and in which waves: up to the first hole in the offsets, as many at once as
the files' statistics say it still wants (a tailing read reads one file, a catching-up read several)."""

from __future__ import annotations

import pyarrow as pa

from lakelog.platform.segments.index import SegmentFile
from lakelog.platform.log import READ_PARALLELISM, in_file_schema, read_wave, without_holes
from lakelog.schemas import TOPIC_FILE_SCHEMA


def segment(first: int, last: int, size: int = 1000) -> SegmentFile:
    return SegmentFile(f"{first}.parquet", 0, size, last - first + 1, first, last, 0, 0)


def test_files_stop_at_the_first_hole() -> None:
    files = [segment(0, 9), segment(10, 19), segment(25, 30), segment(31, 40)]
    assert without_holes(files, 0) == files[:2]
    assert without_holes(files, 12) == files[:2]  # from inside a file
    assert without_holes(files[2:], 25) == files[2:]
    assert without_holes(files[2:], 20) == []  # the first file starts past the offset


def test_a_tailing_read_reads_one_file_and_a_catching_up_read_several() -> None:
    files = [segment(100 * i, 100 * i + 99) for i in range(10)]
    assert read_wave(files[1:], 150, 10, None) == files[1:2]
    assert read_wave(files[1:], 150, 60, None) == files[1:3]  # 50 left in the first file
    assert read_wave(files, 0, 50_000, None) == files[:READ_PARALLELISM]
    assert read_wave(files[9:], 950, 50_000, None) == files[9:]


def test_a_byte_budget_bounds_the_wave_by_file_size() -> None:
    files = [segment(100 * i, 100 * i + 99, size=4000) for i in range(10)]
    assert read_wave(files, 0, 50_000, 3000) == files[:1]
    assert read_wave(files, 0, 50_000, 6000) == files[:2]


def _stored(offsets: list[int]) -> pa.Table:
    """Records as a file stores them: timestamps in microseconds."""
    n = len(offsets)
    stored = pa.schema([f.with_type(pa.timestamp("us", tz="UTC")) if f.name == "timestamp" else f
                        for f in TOPIC_FILE_SCHEMA])
    columns = [pa.array(offsets, pa.int64()), pa.array([(1_700_000_000_000 + o) * 1000 for o in offsets],
                                                       pa.timestamp("us", tz="UTC"))]
    columns += [pa.nulls(n, f.type) if f.nullable else pa.array([0] * n, f.type) for f in list(TOPIC_FILE_SCHEMA)[2:]]
    return pa.table(columns, schema=stored)


def test_pieces_come_back_in_order_in_the_file_schema() -> None:
    pieces = [_stored([0, 1]), _stored([2]), TOPIC_FILE_SCHEMA.empty_table(), _stored([3, 4])]
    runs = in_file_schema(pieces)
    assert all(run.schema == TOPIC_FILE_SCHEMA for run in runs)
    table = pa.concat_tables(runs)
    assert table.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_000 + o for o in range(5)]
