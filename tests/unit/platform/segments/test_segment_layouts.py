"""segment.py's layout 2: one file for a flush of several partitions, whose row groups may hold several; its
slices (the index entries per partition) are the same whether the writer derives them or a reader finds them
in the stored footer, and a read of one partition's slice returns that partition's records only. Files
written before the slices were in the footer (a row group per partition) are still sliced and read."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.transaction import Transaction

from lakelog.platform.delta.delta_log import commit_uri, encode_commit
from lakelog.platform.segments.index import SegmentIndex, shared_files
from lakelog.platform.segments.segment import (
    INTAKE_FILE_SCHEMA,
    ROW_GROUP_ROWS,
    TableLayout,
    read_file,
    read_offsets,
    slices_of,
    write_segments,
)
from lakelog.platform.storage import Storage
from lakelog.schemas import TOPIC_SCHEMA

COUNTS = {0: 5, 1: 4, 2: ROW_GROUP_ROWS + 100, 4: 3, 5: 2}  # partition 2 spans two row groups of its own


def flush(counts: dict[int, int] = COUNTS, value_bytes: int = 0) -> tuple[pa.Table, list[tuple[int, int, int]]]:
    """A flush sorted by partition, offsets from 10 in each partition, timestamps 1000 + offset; partition 4's
    records are an idempotent producer's (id 70 + offset), the others have no producer id."""
    partitions = np.concatenate([np.full(n, p, dtype=np.int32) for p, n in counts.items()])
    offsets = np.concatenate([np.arange(10, 10 + n, dtype=np.int64) for n in counts.values()])
    n = len(offsets)
    table = pa.table({
        "partition": partitions, "offset": offsets,
        "timestamp": pa.array(1000 + offsets, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
        "timestamp_type": pa.array(np.zeros(n, dtype=np.int8)),
        "key": pa.array([None] * n, pa.binary()),
        "value": pa.array([f"{p}:{o}".encode().ljust(value_bytes, b".") for p, o in zip(partitions, offsets)]),
        "headers": pa.array([[]] * n, TOPIC_SCHEMA.field("headers").type),
        "producer_id": pa.array([70 + o if p == 4 else None for p, o in zip(partitions, offsets)], pa.int64()),
        "producer_epoch": pa.array([None] * n, pa.int16()),
        "sequence": pa.array([None] * n, pa.int32()),
    }, schema=TOPIC_SCHEMA)
    starts = np.cumsum([0, *counts.values()])
    return table, [(p, int(starts[i]), int(starts[i + 1])) for i, p in enumerate(counts)]


def test_one_file_for_a_flush_of_several_partitions_and_its_slices(tmp_path) -> None:
    storage = Storage.open(str(tmp_path))
    uri = str(tmp_path / "t")
    DeltaTable.create(uri, schema=TOPIC_SCHEMA)
    table, runs = flush()
    written = write_segments(storage, uri, table, runs, TableLayout.INTAKE)

    assert len(written.adds) == 1 and written.adds[0].partition_values == {}
    slices = {s.partition: s for s in written.segments}
    assert sorted(slices) == sorted(COUNTS)
    assert all(s.shared and s.path == written.adds[0].path for s in slices.values())
    for p, n in COUNTS.items():
        assert (slices[p].min_offset, slices[p].max_offset, slices[p].num_records) == (10, 9 + n, n)
        assert (slices[p].min_timestamp_ms, slices[p].max_timestamp_ms) == (1010, 1009 + n)
    assert (slices[4].min_producer_id, slices[4].max_producer_id) == (80, 82)
    assert slices[0].min_producer_id is None and slices[2].max_producer_id is None
    # Small partitions share a row group; a large one has its own (as many as ROW_GROUP_ROWS makes).
    assert [slices[p].row_groups for p in COUNTS] == [(0,), (0,), (1, 2), (3,), (3,)]
    assert sum(s.size_bytes for s in slices.values()) <= written.adds[0].size

    # A reader that did not write the file (another node, a restart) finds the same slices in its footer.
    footer = pq.read_metadata(f"{uri}/{written.adds[0].path}")
    assert footer.num_row_groups == 4
    assert slices_of(written.adds[0].path, written.adds[0].modification_time, footer) == written.segments

    with open(f"{uri}/{written.adds[0].path}", "rb") as source:
        records, _ = read_offsets(source, 12, row_groups=slices[4].row_groups, partition=4)
        assert "partition" not in records.column_names
        assert records.column("value").to_pylist() == [b"4:12"]
        whole = read_file(source, ["offset", "value"], slices[0].row_groups, 0)
        assert whole.column("value").to_pylist() == [f"0:{o}".encode() for o in range(10, 15)]
        with pytest.raises(ValueError, match="with its partition"):  # its row group holds partition 1 too
            read_offsets(source, 10, row_groups=slices[0].row_groups)


def test_small_partitions_share_row_groups_up_to_a_size(tmp_path) -> None:
    """64 partitions of one 4 KiB record: sixteen of them pass SHARED_ROW_GROUP_BYTES (64 KiB), fifteen do not."""
    storage = Storage.open(str(tmp_path))
    uri = str(tmp_path / "t")
    DeltaTable.create(uri, schema=TOPIC_SCHEMA)
    table, runs = flush({p: 1 for p in range(64)}, value_bytes=4096)
    written = write_segments(storage, uri, table, runs, TableLayout.INTAKE)

    assert pq.read_metadata(f"{uri}/{written.adds[0].path}").num_row_groups == 4
    assert [s.row_groups for s in written.segments] == [(p // 16,) for p in range(64)]
    with open(f"{uri}/{written.adds[0].path}", "rb") as source:
        for p in (0, 17, 63):
            records, _ = read_offsets(source, 10, row_groups=written.segments[p].row_groups, partition=p)
            assert [v.rstrip(b".") for v in records.column("value").to_pylist()] == [f"{p}:10".encode()]


def test_a_file_written_with_a_row_group_per_partition_is_sliced_by_its_statistics(tmp_path) -> None:
    table, runs = flush()
    path = tmp_path / "old.parquet"
    with pq.ParquetWriter(path, INTAKE_FILE_SCHEMA) as writer:  # as intake files were written before
        for _, start, end in runs:
            writer.write_table(table.slice(start, end - start).cast(INTAKE_FILE_SCHEMA), row_group_size=ROW_GROUP_ROWS)
    slices = {s.partition: s for s in slices_of("old.parquet", 7, pq.read_metadata(path))}

    assert {p: (s.min_offset, s.max_offset, s.num_records) for p, s in slices.items()} == \
        {p: (10, 9 + n, n) for p, n in COUNTS.items()}
    assert [slices[p].row_groups for p in COUNTS] == [(0,), (1,), (2, 3), (4,), (5,)]
    assert (slices[4].min_producer_id, slices[4].max_producer_id) == (80, 82)
    with open(path, "rb") as source:
        records, _ = read_offsets(source, 11, row_groups=slices[4].row_groups, partition=4)
    assert records.column("value").to_pylist() == [b"4:11", b"4:12"]


def test_delta_readers_find_a_partition_through_the_file_statistics(tmp_path) -> None:
    storage = Storage.open(str(tmp_path))
    uri = str(tmp_path / "t")
    DeltaTable.create(uri, schema=TOPIC_SCHEMA)
    table, runs = flush()
    written = write_segments(storage, uri, table, runs, TableLayout.INTAKE)
    single = write_segments(storage, uri, table.slice(0, 5), runs[:1], TableLayout.INTAKE)  # one partition only
    txns = [Transaction(f"lakelog.partition.{p}", 10 + n) for p, n in COUNTS.items()]
    assert storage.put_if_absent(commit_uri(uri, 1), encode_commit(written.adds + single.adds, txns, {}, None))

    delta = DeltaTable(uri)
    assert delta.to_pyarrow_table(filters=[("partition", "=", 4)]).num_rows == COUNTS[4]
    actions = pa.table(delta.get_add_actions(flatten=True))
    assert shared_files(actions) == [(written.adds[0].path, written.adds[0].modification_time)]
    assert not single.segments[0].shared  # a flush of one partition is a plain file of that partition
    index = SegmentIndex.from_add_actions(actions, {written.adds[0].path: written.segments})
    assert [(s.path, s.min_offset) for s in index.partition(0).files] == [(written.adds[0].path, 10),
                                                                           (single.adds[0].path, 10)]
    assert index.partition(1).files == [s for s in written.segments if s.partition == 1]
