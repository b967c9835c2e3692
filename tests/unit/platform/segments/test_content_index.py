"""Files another Delta tool wrote, indexed by their content (content_index.py): which files need it, the
entries made from their partition and offset columns, how those entries tile a partition in the index
(index.joined_runs), and reads that return one entry's rows in offset order (segment.py)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq

from lakelog.platform.segments.content_index import DataFile, files_needing_slices, index_by_content, runs_of
from lakelog.platform.segments.index import SegmentFile, SegmentIndex, joined_runs
from lakelog.platform.segments.segment import INTAKE_FILE_SCHEMA, read_file, read_offsets, slices_of
from lakelog.platform.storage import Storage
from lakelog.schemas import TOPIC_FILE_SCHEMA

MS = 1_700_000_000_000


def columns(partitions: list[int], offsets: list[int], producers: list[int | None] | None = None) -> pa.Table:
    return pa.table({"partition": pa.array(partitions, pa.int32()), "offset": pa.array(offsets, pa.int64()),
                     "timestamp": pa.array([(MS + o) * 1000 for o in offsets], pa.timestamp("us", tz="UTC")),
                     "producer_id": pa.array(producers or [None] * len(offsets), pa.int64())})


def test_interleaved_partitions_become_one_entry_per_contiguous_run_with_their_row_groups() -> None:
    # As delta-rs's OPTIMIZE wrote it: two flushes' files concatenated, newest first, in two row groups.
    table = columns([0, 0, 1, 1, 1, 0, 0, 1, 2], [3, 4, 3, 4, 5, 0, 1, 0, 9], [None, None, 7, 8, 9, 1, 1, 2, None])
    entries = runs_of("f.parquet", 5, 900, table, first_rows=[0, 5])
    assert [(e.partition, e.min_offset, e.max_offset, e.num_records, e.row_groups) for e in entries] == [
        (0, 0, 1, 2, (1,)), (0, 3, 4, 2, (0,)),  # offset 2 of partition 0 is elsewhere: two runs
        (1, 0, 0, 1, (1,)), (1, 3, 5, 3, (0,)),
        (2, 9, 9, 1, (1,))]
    assert all(e.by_content and e.shared and e.path == "f.parquet" and e.modification_time_ms == 5 for e in entries)
    assert sum(e.size_bytes for e in entries) == 900  # a remove of the file names its whole size
    assert (entries[3].min_producer_id, entries[3].max_producer_id) == (7, 9)
    assert (entries[0].min_producer_id, entries[4].max_producer_id) == (1, None)
    assert (entries[3].min_timestamp_ms, entries[3].max_timestamp_ms) == (MS + 3, MS + 5)


def test_a_repeated_offset_stays_in_its_run_and_counts_twice() -> None:
    [entry] = runs_of("f.parquet", 0, 10, columns([0, 0, 0], [1, 1, 2]), [0])
    assert (entry.min_offset, entry.max_offset, entry.num_records) == (1, 2, 3)


def _actions(rows: list[dict]) -> pa.Table:
    names = ["path", "size_bytes", "modification_time", "num_records", "min.offset", "max.offset", "min.partition",
             "max.partition", "null_count.timestamp_type", "min.timestamp_type"]
    return pa.Table.from_pylist([{name: row.get(name) for name in names} for row in rows])


def test_files_whose_statistics_cannot_say_where_a_partition_starts_need_their_slices_or_content() -> None:
    ours = {"size_bytes": 1, "modification_time": 2, "num_records": 3}
    foreign = {**ours, "null_count.timestamp_type": 0, "min.timestamp_type": 0}
    actions = _actions([
        {**ours, "path": "lakelog-compacted", "min.offset": 0, "max.offset": 9, "min.partition": 1, "max.partition": 1},
        {**ours, "path": "lakelog-shared", "min.offset": 0, "max.offset": 2, "min.partition": 0, "max.partition": 2},
        {**foreign, "path": "optimized-dense", "min.offset": 5, "max.offset": 7, "min.partition": 1, "max.partition": 1},
        {**foreign, "path": "optimized-holes", "min.offset": 0, "max.offset": 9, "min.partition": 1,
         "max.partition": 1},
        {**foreign, "path": "optimized-several", "min.offset": 0, "max.offset": 9, "min.partition": 0,
         "max.partition": 1},
        {**ours, "path": "no-stats"},
    ])
    assert [(f.path, f.several) for f in files_needing_slices(actions)] == [
        ("lakelog-shared", True), ("optimized-holes", False), ("optimized-several", True), ("no-stats", False)]


def _entry(path: str, partition: int, lo: int, hi: int, by_content: bool, count: int | None = None) -> SegmentFile:
    return SegmentFile(path, partition, 10, hi - lo + 1 if count is None else count, lo, hi, 0, 0,
                       row_groups=(lo,) if by_content else None, by_content=by_content)


def test_runs_of_one_file_next_to_each_other_are_joined_and_holes_next_to_them_closed() -> None:
    entries = [
        _entry("own", 0, 0, 9, False),
        _entry("opt", 0, 12, 19, True),  # compaction had emptied 10..11: the rewrite kept no record there
        _entry("opt", 0, 20, 29, True),
        _entry("own2", 0, 30, 39, False),
        _entry("opt", 0, 40, 44, True),  # the same file again, after another: a run of its own
        _entry("own3", 0, 50, 59, False),  # the hole 45..49 is closed by the entry before it
        _entry("own4", 0, 61, 70, False),  # a hole between lakelog's own files stays: the index's problem
    ]
    joined = joined_runs(entries)
    assert [(e.path, e.min_offset, e.max_offset, e.num_records) for e in joined] == [
        ("own", 0, 9, 10), ("opt", 10, 29, 18), ("own2", 30, 39, 10), ("opt", 40, 49, 5), ("own3", 50, 59, 10),
        ("own4", 61, 70, 10)]
    assert joined[1].row_groups == (12, 20)


def test_the_index_takes_entries_by_content_for_their_paths() -> None:
    stats = {"path": ["own", "opt"], "size_bytes": [5, 6], "modification_time": [1, 2], "num_records": [3, 4],
             "min.offset": [0, 3], "max.offset": [2, 9], "min.partition": [0, 0], "max.partition": [0, 1],
             "min.timestamp": [None, None], "max.timestamp": [None, None]}
    shared = {"opt": [_entry("opt", 0, 3, 4, True), _entry("opt", 1, 0, 1, True)]}
    index = SegmentIndex.from_add_actions(pa.table(stats), shared)
    assert [(s.path, s.min_offset, s.max_offset) for s in index.partition(0).files] == [("own", 0, 2), ("opt", 3, 4)]
    assert [(s.path, s.min_offset) for s in index.partition(1).files] == [("opt", 0)]


def _foreign_file(path, rows: list[tuple[int, int]], row_group_size: int) -> None:  # type: ignore[no-untyped-def]
    table = pa.table({"partition": pa.array([p for p, _ in rows], pa.int32()),
                      "offset": pa.array([o for _, o in rows], pa.int64()),
                      "timestamp": pa.array([datetime.fromtimestamp(MS / 1000 + o, timezone.utc) for _, o in rows],
                                            pa.timestamp("us", tz="UTC")),
                      "timestamp_type": pa.array([0] * len(rows), pa.int8()),
                      "key": pa.array([None] * len(rows), pa.binary()),
                      "value": pa.array([f"{p}-{o}".encode() for p, o in rows], pa.binary()),
                      "headers": pa.array([[]] * len(rows), TOPIC_FILE_SCHEMA.field("headers").type),
                      "producer_id": pa.array([None] * len(rows), pa.int64()),
                      "producer_epoch": pa.array([None] * len(rows), pa.int16()),
                      "sequence": pa.array([None] * len(rows), pa.int32())})
    pq.write_table(table.cast(INTAKE_FILE_SCHEMA), path, row_group_size=row_group_size)


def test_a_file_of_interleaved_row_groups_is_read_by_content_and_each_entry_in_offset_order(tmp_path) -> None:
    # Z-ORDER-like: partitions interleaved in each row group, offsets out of order, partition 0's offsets in
    # two runs (2..3 is in another file).
    rows = [(1, 2), (0, 5), (0, 1), (1, 0), (0, 4), (0, 0), (1, 1), (0, 6)]
    _foreign_file(tmp_path / "z.parquet", rows, row_group_size=3)
    footer = pq.read_metadata(tmp_path / "z.parquet")
    assert slices_of("z.parquet", 0, footer) is None  # its row-group statistics say nothing of partitions
    storage = Storage.open(str(tmp_path))
    file = DataFile("z.parquet", 7, (tmp_path / "z.parquet").stat().st_size, None, True)
    entries, _ = index_by_content(storage, storage.uri(), file)
    assert [(e.partition, e.min_offset, e.max_offset) for e in entries] == [(0, 0, 1), (0, 4, 6), (1, 0, 2)]
    later = entries[1]
    with open(tmp_path / "z.parquet", "rb") as source:
        table, _ = read_offsets(source, 4, later.max_offset + 1, row_groups=later.row_groups, partition=0)
    assert table.column("offset").to_pylist() == [4, 5, 6]
    assert table.column("value").to_pylist() == [b"0-4", b"0-5", b"0-6"]
    with open(tmp_path / "z.parquet", "rb") as source:
        first = read_file(source, ["value"], entries[0].row_groups, 0, (entries[0].min_offset, entries[0].max_offset))
    assert first.column_names == ["value"] and first.column("value").to_pylist() == [b"0-0", b"0-1"]


def test_row_groups_of_one_partition_each_and_dense_are_still_sliced_by_their_statistics(tmp_path) -> None:
    # lakelog's intake files written before the slices were in the footer
    rows = [(0, 0), (0, 1), (1, 0), (1, 1), (2, 5), (2, 6)]
    _foreign_file(tmp_path / "old.parquet", rows, row_group_size=2)
    slices = slices_of("old.parquet", 0, pq.read_metadata(tmp_path / "old.parquet"))
    assert slices is not None and [(s.partition, s.min_offset, s.row_groups) for s in slices] == [
        (0, 0, (0,)), (1, 0, (1,)), (2, 5, (2,))]


def test_the_slices_cache_carries_entries_by_content() -> None:
    from lakelog.platform.segments.index import slices_from_table, slices_table

    entries = [_entry("opt", 0, 3, 4, True), SegmentFile("own", 1, 10, 2, 0, 1, 0, 0, row_groups=(0,))]
    assert [s for ss in slices_from_table(slices_table(entries)).values() for s in ss] == entries
    assert json.loads(json.dumps(slices_table(entries).column("by_content").to_pylist())) == [True, False]
