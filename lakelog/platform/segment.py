"""Segments: the data files of one partition, sorted by offset.

Writing: the log writes one segment per partition of a flush (`write_segments`), as Delta
stores it, and knows its add action (size, statistics) without reading it back.
Reading: only the row groups that may hold the offsets asked for, chosen by their offset
statistics, then cut to exactly those offsets. The log's fetch path and the Spark scan both
read through here.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake.transaction import AddAction

from lakelog.platform.clock import now_ms
from lakelog.platform.file_stats import file_stats
from lakelog.platform.storage import UPLOAD_CONNECTIONS, Storage
from lakelog.schemas import TOPIC_FILE_SCHEMA

ROW_GROUP_ROWS = 16_384
# As Delta stores the records: timestamps in microseconds (Delta's timestamp type), the rest as given.
SEGMENT_FILE_SCHEMA = pa.schema([pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False)
                                 if f.name == "timestamp" else f for f in TOPIC_FILE_SCHEMA])
# Object stores take the segments of one flush in parallel: one round trip for all of them.
_UPLOADS = ThreadPoolExecutor(max_workers=UPLOAD_CONNECTIONS, thread_name_prefix="lakelog-segment-put")


def write_segments(storage: Storage, table_uri: str, table: pa.Table,
                   runs: list[tuple[int, int, int]]) -> list[AddAction]:
    """One new segment per (partition, start, end) run of `table` (TOPIC_SCHEMA, sorted by partition),
    and their add actions; on object storage the uploads run in parallel."""
    files = table.drop_columns(["partition"])
    slices = [(p, files.slice(start, end - start)) for p, start, end in runs]
    if storage.is_local or len(slices) == 1:
        return [write_segment(storage, table_uri, p, records) for p, records in slices]
    return list(_UPLOADS.map(lambda job: write_segment(storage, table_uri, *job), slices))


def write_segment(storage: Storage, table_uri: str, partition: int, records: pa.Table) -> AddAction:
    """A new data file of `partition` holding `records` (TOPIC_FILE_SCHEMA), named as delta-rs names its
    files; in one write, so its size is known without asking the store."""
    relative = f"partition={partition}/part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    sink = pa.BufferOutputStream()
    pq.write_table(records.cast(SEGMENT_FILE_SCHEMA), sink, compression="snappy", row_group_size=ROW_GROUP_ROWS)
    data = sink.getvalue()
    storage.write_bytes(f"{table_uri}/{relative}", data)
    return AddAction(relative, data.size, {"partition": str(partition)}, now_ms(), True, file_stats(records))


def row_groups_between(metadata: pq.FileMetaData, start: int, end: int | None = None) -> list[int]:
    """Row groups whose offsets may fall in [start, end) (end None: no upper bound)."""
    column = metadata.schema.names.index("offset")
    groups = []
    for i in range(metadata.num_row_groups):
        stats = metadata.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max or (stats.max >= start and (end is None or stats.min < end)):
            groups.append(i)
    return groups


def read_offsets(source: Any, start: int, end: int | None = None, columns: list[str] | None = None,
                 metadata: pq.FileMetaData | None = None) -> tuple[pa.Table, pq.FileMetaData]:
    """The records of [start, end) in an open segment file, and its footer (to cache for the next read)."""
    parquet = pq.ParquetFile(source, metadata=metadata)
    groups = row_groups_between(parquet.metadata, start, end)
    if not groups:
        empty = TOPIC_FILE_SCHEMA.empty_table()
        return (empty.select(columns) if columns else empty), parquet.metadata
    table = parquet.read_row_groups(groups, columns=columns)
    offsets = table.column("offset")
    if table.num_rows and (offsets[0].as_py() < start or (end is not None and offsets[-1].as_py() >= end)):
        keep = pc.greater_equal(offsets, start)
        if end is not None:
            keep = pc.and_(keep, pc.less(offsets, end))
        table = table.filter(keep)
    return table, parquet.metadata
