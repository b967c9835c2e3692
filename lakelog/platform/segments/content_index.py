"""Index entries of data files lakelog cannot index by their statistics: files other writers wrote.

lakelog's own files are indexed by their Delta statistics (one partition's dense or compacted run) or by
their slices (files holding several partitions, see segment.py). A file written by another Delta tool
(delta-rs or Spark OPTIMIZE, Z-ORDER, compaction) may hold several partitions interleaved in one row group,
a partition's offsets in several runs, out of order: a min/max over such a file or row group says nothing
about where one partition starts. Such a file is indexed once by its content: its `partition`, `offset`,
`timestamp` and `producer_id` columns (never keys or values), one entry per contiguous run of a
partition's offsets, naming the row groups the run's rows are in. Files never change, so the entries are
cached by path (and saved in the slices cache beside the log, see file_slices.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakelog.platform.clock import to_ms
from lakelog.platform.segments.index import SegmentFile
from lakelog.platform.storage import Storage

CONTENT_COLUMNS = ("partition", "offset", "timestamp", "producer_id")  # what an entry's bounds are made of
# Delta statistics lakelog writes (file_stats.py) never cover `timestamp_type`; delta-rs and Spark write
# them for every column. A file with them was written by another tool.
FOREIGN_STATS_MARK = ("null_count.timestamp_type", "min.timestamp_type")
_NO_PRODUCER_LOW, _NO_PRODUCER_HIGH = 2**63 - 1, -(2**63)


@dataclass(frozen=True, slots=True)
class DataFile:
    """A data file of the snapshot whose index entries do not come from its statistics alone."""

    path: str
    modification_time_ms: int
    size_bytes: int
    partition: int | None  # layout 1: the file's partition value; layout 2: None (the column says)
    several: bool  # its statistics span several partitions: its footer may hold lakelog's slices


def files_needing_slices(actions: pa.Table) -> list[DataFile]:
    """Files of `DeltaTable.get_add_actions(flatten=True)` that are not indexed by their statistics: those
    holding several partitions (slices from the commit, the footer or the content), and those whose
    statistics cannot be trusted to describe one partition's run (none at all, or written by another tool
    and not dense: offsets with holes, which another file may fill)."""
    if actions.num_rows == 0:
        return []
    col = _columns(actions)
    values = col("partition.partition")
    foreign = [any(v is not None for v in marks) for marks in zip(*(col(name) for name in FOREIGN_STATS_MARK))]
    found = []
    for path, size, mtime, count, low, high, first, last, value, other in zip(
            col("path"), col("size_bytes"), col("modification_time"), col("num_records"), col("min.offset"),
            col("max.offset"), col("min.partition"), col("max.partition"), values, foreign):
        several = value is None and first is not None and last is not None and first != last
        no_stats = low is None or high is None or count is None or (value is None and first is None)
        dense = not no_stats and high - low + 1 == count
        if several or no_stats or (other and not dense):
            found.append(DataFile(path, to_ms(mtime), int(size), None if value is None else int(value), several))
    return found


def index_by_content(storage: Storage, table_uri: str, file: DataFile,
                     metadata: pq.FileMetaData | None = None) -> tuple[list[SegmentFile], pq.FileMetaData]:
    """Read the file's partition, offset, timestamp and producer columns (one read; nothing else) and answer
    its entries, and its footer (to cache for the reads that follow)."""
    with storage.open_input(f"{table_uri}/{file.path}") as source:
        parquet = pq.ParquetFile(source, metadata=metadata)
        names = set(parquet.schema_arrow.names)
        table = parquet.read(columns=[c for c in CONTENT_COLUMNS if c in names], use_threads=False)
        footer = parquet.metadata
    if "partition" not in table.column_names:
        table = table.append_column("partition", pa.array(np.full(table.num_rows, file.partition or 0, np.int32)))
    first_rows = list(itertools.accumulate((footer.row_group(i).num_rows for i in range(footer.num_row_groups)),
                                           initial=0))[:-1]
    return runs_of(file.path, file.modification_time_ms, file.size_bytes, table, first_rows), footer


def runs_of(path: str, modification_time_ms: int, size_bytes: int, table: pa.Table,
            first_rows: list[int]) -> list[SegmentFile]:
    """One entry per contiguous run of a partition's offsets in a file's rows (`table`: partition, offset,
    timestamp, producer_id, in file order; `first_rows`: each row group's first row). A run ends where the
    next offset of the partition is more than one higher: another file may hold the offsets between.
    Repeated offsets stay in their run, which then counts more records than its offsets span (a duplicate,
    which the index refuses). Each entry counts the file's bytes in proportion to its records."""
    n = table.num_rows
    if n == 0:
        return []
    partitions = table.column("partition").to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = table.column("offset").to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.lexsort((offsets, partitions))  # by partition, then offset (rows of another tool may be in any order)
    partitions, offsets = partitions[order], offsets[order]
    millis = _millis(table.column("timestamp"))[order] if "timestamp" in table.column_names else np.zeros(n, np.int64)
    producers = table.column("producer_id") if "producer_id" in table.column_names else pa.nulls(n, pa.int64())
    low = pc.fill_null(producers, _NO_PRODUCER_LOW).to_numpy(zero_copy_only=False)[order]
    high = pc.fill_null(producers, _NO_PRODUCER_HIGH).to_numpy(zero_copy_only=False)[order]
    groups = np.searchsorted(np.asarray(first_rows, dtype=np.int64), order, side="right") - 1
    ends = np.flatnonzero((np.diff(partitions) != 0) | (np.diff(offsets) > 1)) + 1
    starts = np.concatenate(([0], ends))
    stops = np.concatenate((ends, [n]))
    sizes = _shares(size_bytes, stops - starts)
    entries = []
    for start, stop, size in zip(starts.tolist(), stops.tolist(), sizes):
        min_pid, max_pid = int(low[start:stop].min()), int(high[start:stop].max())
        entries.append(SegmentFile(
            path=path, partition=int(partitions[start]), size_bytes=size, num_records=stop - start,
            min_offset=int(offsets[start]), max_offset=int(offsets[stop - 1]),
            min_timestamp_ms=int(millis[start:stop].min()), max_timestamp_ms=int(millis[start:stop].max()),
            min_producer_id=None if min_pid == _NO_PRODUCER_LOW else min_pid,
            max_producer_id=None if max_pid == _NO_PRODUCER_HIGH else max_pid,
            modification_time_ms=modification_time_ms,
            row_groups=tuple(np.unique(groups[start:stop]).tolist()), by_content=True))
    return entries


def _millis(column: Any) -> np.ndarray:
    """Timestamps in ms whatever unit the writer stored (lakelog and delta-rs: microseconds)."""
    unit = column.type.unit if pa.types.is_timestamp(column.type) else "ms"
    times, per = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}[unit]
    return column.cast(pa.int64()).to_numpy(zero_copy_only=False).astype(np.int64) * times // per


def _shares(total: int, counts: np.ndarray) -> list[int]:
    """`total` bytes split in proportion to `counts`, summing exactly to `total` (a remove names the size)."""
    cumulative = np.cumsum(counts)
    bounds = [round(total * int(c) / int(cumulative[-1])) for c in cumulative]
    return [b - a for a, b in zip([0, *bounds[:-1]], bounds)]


def _columns(actions: pa.Table):
    names = set(actions.column_names)

    def col(name: str) -> list:
        return actions.column(name).to_pylist() if name in names else [None] * actions.num_rows

    return col
